//===- SplitAttention.cpp - hg-split-attention --------------------------===//
//
// Turns an annotated hg.attention into per-device hg.partial_attention ops over disjoint token
// ranges and an exact hg.merge (attention logit parallelism).
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Dialect/HG/HGOps.h"
#include "hybridgen/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGSPLITATTENTION
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;
using namespace mlir::hybridgen;

namespace {

/// Allocates a buffer shaped like |like| but keeping only its first |rank| dimensions.
Value allocLike(OpBuilder &b, Location loc, Value like, unsigned rank) {
  auto likeType = cast<MemRefType>(like.getType());
  auto type = MemRefType::get(likeType.getShape().take_front(rank), b.getF32Type());
  SmallVector<Value> dynSizes;
  for (unsigned d = 0; d < rank; ++d)
    if (type.isDynamicDim(d))
      dynSizes.push_back(memref::DimOp::create(b, loc, like, d));
  return memref::AllocOp::create(b, loc, type, dynSizes);
}

struct Partial {
  Value o, m, l;
};

void splitAttention(AttentionOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  SplitAttr split = op.getSplitAttr();
  SmallVector<Device> devices =
      split ? SmallVector<Device>(split.getDevices()) : SmallVector<Device>{Device::cpu};

  // Token ranges: the first device takes [0, s), the second [s, len); one device takes [0, len).
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value point;
  if (devices.size() == 2)
    point = split.isRuntimePoint()
                ? Value(SplitPointOp::create(b, loc, b.getIndexType()))
                : Value(arith::ConstantIndexOp::create(b, loc, *split.getPoint()));

  IntegerAttr topK = split && split.isSparse() ? b.getI64IntegerAttr(split.getTopK()) : nullptr;
  SmallVector<Partial> partials;
  for (auto [i, device] : llvm::enumerate(devices)) {
    Partial p{allocLike(b, loc, op.getOut(), 3), allocLike(b, loc, op.getOut(), 2),
              allocLike(b, loc, op.getOut(), 2)};
    Value begin = i == 0 ? zero : point;
    Value end = (i == 0 && devices.size() == 2) ? point : Value();
    PartialAttentionOp::create(
        b, loc, op.getQ(), op.getKPool(), op.getVPool(), op.getBlockTable(), op.getSeqLens(),
        begin, end, p.o, p.m, p.l, DeviceAttr::get(b.getContext(), device), op.getScaleAttr(),
        op.getWindowAttr(), op.getSoftcapAttr(), device == Device::cpu ? topK : nullptr);
    partials.push_back(p);
  }

  SmallVector<Value> os, ms, ls;
  for (const Partial &p : partials) {
    os.push_back(p.o);
    ms.push_back(p.m);
    ls.push_back(p.l);
  }
  MergeOp::create(b, loc, os, ms, ls, op.getOut());
  for (const Partial &p : partials)
    for (Value buffer : {p.o, p.m, p.l})
      memref::DeallocOp::create(b, loc, buffer);
  op.erase();
}

struct SplitAttentionPass : hybridgen::impl::HGSplitAttentionBase<SplitAttentionPass> {
  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation()->walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops)
      splitAttention(op);
  }
};

} // namespace
