//===- HGDialect.td - the hg dialect definition ------------*- tablegen -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGDIALECT_TD
#define HYBRIDGEN_DIALECT_HG_HGDIALECT_TD

include "mlir/IR/OpBase.td"

def HG_Dialect : Dialect {
  let name = "hg";
  let cppNamespace = "::mlir::hybridgen";
  let summary = "Hybrid CPU+GPU decode attention with logit parallelism";
  let description = [{
    The `hg` dialect describes decode attention over a paged KV cache whose tokens are split between
    devices (attention logit parallelism). `hg.attention` carries the split annotation; the split pass
    turns it into `hg.partial_attention` ops over disjoint token ranges and an exact log-sum-exp
    `hg.merge`. `hg.prefill_attention` is the chunked-prefill counterpart (a chunk of new tokens,
    causal among themselves, over the cached prefix; one device). Buffers follow the layouts of
    docs/interfaces.md.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Defined next to the attribute storage classes (HGAttrs.cpp).
    void registerAttributes();
  }];
}

class HG_Op<string mnemonic, list<Trait> traits = []> : Op<HG_Dialect, mnemonic, traits>;

#endif // HYBRIDGEN_DIALECT_HG_HGDIALECT_TD
