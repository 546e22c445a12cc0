//===- HGAttrs.td - hg enums and the split annotation ------*- tablegen -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGATTRS_TD
#define HYBRIDGEN_DIALECT_HG_HGATTRS_TD

include "hybridgen/Dialect/HG/HGDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def HG_DeviceCPU : I32EnumAttrCase<"cpu", 0>;
def HG_DeviceGPU : I32EnumAttrCase<"gpu", 1>;
def HG_DeviceAttr : I32EnumAttr<"Device", "a device taking part in attention",
                                [HG_DeviceCPU, HG_DeviceGPU]> {
  let cppNamespace = "::mlir::hybridgen";
}

def HG_MergeLSE : I32EnumAttrCase<"lse", 0>;
def HG_MergeModeAttr : I32EnumAttr<"MergeMode", "how partial results are combined",
                                   [HG_MergeLSE]> {
  let cppNamespace = "::mlir::hybridgen";
}

def HG_ModeDense : I32EnumAttrCase<"dense", 0>;
def HG_ModeSparse : I32EnumAttrCase<"sparse", 1>;
def HG_AttnModeAttr : I32EnumAttr<"AttnMode", "exact attention or CPU-side top-k",
                                  [HG_ModeDense, HG_ModeSparse]> {
  let cppNamespace = "::mlir::hybridgen";
}

//===----------------------------------------------------------------------===//
// The logit-parallel split annotation
//===----------------------------------------------------------------------===//

def HG_SplitAttr : AttrDef<HG_Dialect, "Split"> {
  let mnemonic = "split";
  let summary = "logit-parallel split of the token axis between devices";
  let description = [{
    `#hg.split<[cpu, gpu], point = 4096, merge = lse, dense>` gives the first device tokens
    `[0, min(point, len))` of every sequence and the second device the rest. `point = runtime` reads
    the split point from the runtime's scheduler each time the enclosing `hg.segment` runs.
    `sparse, top_k = 64` makes the CPU side keep only its 64 largest logits per query head.
  }];
  let parameters = (ins
    ArrayRefParameter<"::mlir::hybridgen::Device", "devices in token order">:$devices,
    // nullopt means: read the split point from the runtime.
    "std::optional<int64_t>":$point,
    "::mlir::hybridgen::MergeMode":$merge,
    "::mlir::hybridgen::AttnMode":$mode,
    // 0 when absent (dense mode).
    "int64_t":$topK
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isRuntimePoint() const { return !getPoint().has_value(); }
    bool isSparse() const { return getMode() == ::mlir::hybridgen::AttnMode::sparse; }
  }];
}

#endif // HYBRIDGEN_DIALECT_HG_HGATTRS_TD
