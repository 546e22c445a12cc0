//===- PrefillAttentionOp.cpp - verifier of hg.prefill_attention -*- C++ -*-===//
//
// Every shape the CPU lowering would divide by, index with or silently misread is checked here,
// so a degenerate or mismatched buffer is a diagnostic at the op rather than a crash or garbage
// at run time.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Dialect/HG/HGOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace mlir::hybridgen;

namespace {

std::string dimText(int64_t d) { return ShapedType::isDynamic(d) ? "?" : std::to_string(d); }

bool agree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Names of the dimensions of each buffer, for the messages.
constexpr const char *kQueryDims[] = {"batch", "chunk", "q_heads", "head_dim"};
constexpr const char *kPoolDims[] = {"num_blocks", "kv_heads", "block_size", "head_dim"};

/// A static dimension of zero (or less) is degenerate: every loop over it would be empty, and
/// kv_heads = 0 would be a division by zero.
LogicalResult checkNonZero(Operation *op, StringRef buffer, MemRefType type,
                           ArrayRef<const char *> names) {
  for (auto [i, d] : llvm::enumerate(type.getShape()))
    if (!ShapedType::isDynamic(d) && d <= 0)
      return op->emitOpError() << buffer << " has " << names[i] << " = " << d
                               << ", which must be positive";
  return success();
}

} // namespace

LogicalResult PrefillAttentionOp::verify() {
  auto qType = cast<MemRefType>(getQ().getType());
  auto outType = cast<MemRefType>(getOut().getType());
  auto kType = cast<MemRefType>(getKPool().getType());
  auto vType = cast<MemRefType>(getVPool().getType());
  auto tableType = cast<MemRefType>(getBlockTable().getType());
  auto lensType = cast<MemRefType>(getSeqLens().getType());

  // A split annotation would be accepted as a discardable attribute and silently ignored.
  if ((*this)->hasAttr("split"))
    return emitOpError("takes no split: prefill runs on one device");

  const char *tableDims[] = {"batch", "max_blocks"};
  const char *lensDims[] = {"batch"};
  if (failed(checkNonZero(*this, "q", qType, kQueryDims)) ||
      failed(checkNonZero(*this, "out", outType, kQueryDims)) ||
      failed(checkNonZero(*this, "the K pool", kType, kPoolDims)) ||
      failed(checkNonZero(*this, "the V pool", vType, kPoolDims)) ||
      failed(checkNonZero(*this, "the block table", tableType, tableDims)) ||
      failed(checkNonZero(*this, "seq_lens", lensType, lensDims)))
    return failure();

  for (unsigned i = 0; i < 4; ++i)
    if (!agree(qType.getDimSize(i), outType.getDimSize(i)))
      return emitOpError("out must have the shape of q: ")
             << kQueryDims[i] << " is " << dimText(outType.getDimSize(i)) << " in out but "
             << dimText(qType.getDimSize(i)) << " in q";

  if (kType.getElementType() != vType.getElementType())
    return emitOpError("K and V pools must have the same element type, got ")
           << kType.getElementType() << " and " << vType.getElementType();
  for (unsigned i = 0; i < 4; ++i)
    if (!agree(kType.getDimSize(i), vType.getDimSize(i)))
      return emitOpError("K and V pools must have the same shape: ")
             << kPoolDims[i] << " is " << dimText(kType.getDimSize(i)) << " in K but "
             << dimText(vType.getDimSize(i)) << " in V";

  int64_t kvHeads = kType.getDimSize(1), blockSize = kType.getDimSize(2),
          poolHeadDim = kType.getDimSize(3);
  if (ShapedType::isDynamic(kvHeads) || ShapedType::isDynamic(blockSize) ||
      ShapedType::isDynamic(poolHeadDim))
    return emitOpError("the KV pool's kv_heads, block size and head_dim must be static");
  int64_t qHeads = qType.getDimSize(2), headDim = qType.getDimSize(3);
  if (ShapedType::isDynamic(qHeads) || ShapedType::isDynamic(headDim))
    return emitOpError("q_heads and head_dim of q must be static");
  if (headDim != poolHeadDim)
    return emitOpError("head_dim of q (")
           << headDim << ") does not match the KV pool (" << poolHeadDim << ")";
  if (qHeads % kvHeads != 0)
    return emitOpError("q_heads (")
           << qHeads << ") is not a whole multiple of kv_heads (" << kvHeads << ")";

  int64_t batch = qType.getDimSize(0);
  if (!agree(batch, tableType.getDimSize(0)))
    return emitOpError("block table has ")
           << dimText(tableType.getDimSize(0)) << " rows but the batch is " << dimText(batch);
  if (!agree(batch, lensType.getDimSize(0)))
    return emitOpError("seq_lens has ")
           << dimText(lensType.getDimSize(0)) << " entries but the batch is " << dimText(batch);

  // Every sequence holds its chunk, so a chunk longer than a block table can address never fits.
  int64_t chunk = qType.getDimSize(1), maxBlocks = tableType.getDimSize(1);
  if (!ShapedType::isDynamic(chunk) && !ShapedType::isDynamic(maxBlocks) &&
      chunk > maxBlocks * blockSize)
    return emitOpError("a chunk of ")
           << chunk << " tokens does not fit in a block table of " << maxBlocks
           << " blocks of " << blockSize << " tokens";

  float scale = getScale().convertToFloat();
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return emitOpError("scale must be positive and finite, got ") << scale;
  if (std::optional<int64_t> window = getWindow(); window && *window <= 0)
    return emitOpError("sliding window must be positive, got ") << *window;
  if (std::optional<APFloat> softcap = getSoftcap()) {
    float c = softcap->convertToFloat();
    if (!(c > 0.0f) || !std::isfinite(c))
      return emitOpError("softcap must be positive and finite, got ") << c;
  }
  return success();
}
