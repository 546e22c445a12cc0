//===- HGOps.cpp - hg op verifiers ------------------------------*- C++ -*-===//
#include "hybridgen/Dialect/HG/HGOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::hybridgen;

/// `3` or `dynamic(%id)`: the id of an hg.segment (declarative optional groups cannot tell a
/// missing integer from the region's opening brace).
static ParseResult parseSegmentId(OpAsmParser &parser, IntegerAttr &id,
                                  std::optional<OpAsmParser::UnresolvedOperand> &dynamicId) {
  if (succeeded(parser.parseOptionalKeyword("dynamic"))) {
    OpAsmParser::UnresolvedOperand operand;
    if (parser.parseLParen() || parser.parseOperand(operand) || parser.parseRParen())
      return failure();
    dynamicId = operand;
    return success();
  }
  int64_t value;
  if (parser.parseInteger(value))
    return failure();
  id = parser.getBuilder().getI64IntegerAttr(value);
  return success();
}

static void printSegmentId(OpAsmPrinter &printer, Operation *, IntegerAttr id, Value dynamicId) {
  if (dynamicId)
    printer << "dynamic(" << dynamicId << ")";
  else if (id)
    printer << id.getInt();
}

#define GET_OP_CLASSES
#include "hybridgen/Dialect/HG/HGOps.cpp.inc"

namespace {

bool dimsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

bool shapesAgree(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.size() != b.size())
    return false;
  for (auto [x, y] : llvm::zip(a, b))
    if (!dimsAgree(x, y))
      return false;
  return true;
}

std::string dimStr(int64_t d) { return ShapedType::isDynamic(d) ? "?" : std::to_string(d); }

/// The largest token count a sequence can hold given the block table and the pool, or nullopt when
/// a dimension is dynamic. Saturates at INT64_MAX (the verifier refuses tables that large).
std::optional<int64_t> tokenCapacity(Value blockTable, Value kPool) {
  int64_t maxBlocks = cast<MemRefType>(blockTable.getType()).getDimSize(1);
  int64_t blockSize = cast<MemRefType>(kPool.getType()).getDimSize(2);
  if (ShapedType::isDynamic(maxBlocks) || ShapedType::isDynamic(blockSize))
    return std::nullopt;
  return llvm::checkedMul(maxBlocks, blockSize).value_or(std::numeric_limits<int64_t>::max());
}

/// A static dimension of 0 (a buffer with no elements along an axis that every computation
/// divides by or iterates over) is refused by name; dynamic dimensions are checked at run time.
LogicalResult verifyNonZeroDims(Operation *op, StringRef name, Value buffer,
                                ArrayRef<StringRef> dimNames) {
  auto type = cast<MemRefType>(buffer.getType());
  for (auto [i, dimName] : llvm::enumerate(dimNames))
    if (type.getDimSize(i) == 0)
      return op->emitOpError() << name << " has " << dimName << " = 0 in " << type
                               << "; every dimension must be positive";
  return success();
}

/// Checks shared by hg.attention and hg.partial_attention: the buffers of docs/interfaces.md agree
/// with each other and the scalar attributes make sense.
LogicalResult verifyAttentionInputs(Operation *op, Value q, Value kPool, Value vPool,
                                    Value blockTable, Value seqLens, float scale,
                                    std::optional<int64_t> window, std::optional<float> softcap) {
  auto qType = cast<MemRefType>(q.getType());
  auto kType = cast<MemRefType>(kPool.getType());
  auto vType = cast<MemRefType>(vPool.getType());
  int64_t batch = qType.getDimSize(0), qHeads = qType.getDimSize(1),
          headDim = qType.getDimSize(2);
  int64_t kvHeads = kType.getDimSize(1), blockSize = kType.getDimSize(2);

  // Zero dimensions first: the checks below divide by kv_heads and block size.
  if (failed(verifyNonZeroDims(op, "q", q, {"batch", "q_heads", "head_dim"})) ||
      failed(verifyNonZeroDims(op, "the K pool", kPool,
                               {"num_blocks", "kv_heads", "block_size", "head_dim"})) ||
      failed(verifyNonZeroDims(op, "the V pool", vPool,
                               {"num_blocks", "kv_heads", "block_size", "head_dim"})) ||
      failed(verifyNonZeroDims(op, "the block table", blockTable, {"batch", "max_blocks"})) ||
      failed(verifyNonZeroDims(op, "seq_lens", seqLens, {"batch"})))
    return failure();
  if (kType.getElementType() != vType.getElementType())
    return op->emitOpError("K and V pools must have the same element type, got ")
           << kType.getElementType() << " and " << vType.getElementType();
  if (!dimsAgree(blockSize, vType.getDimSize(2)))
    return op->emitOpError("block size of the V pool (")
           << dimStr(vType.getDimSize(2)) << ") does not match the K pool (" << dimStr(blockSize)
           << ")";
  if (!shapesAgree(kType.getShape(), vType.getShape()))
    return op->emitOpError("K and V pools must have the same shape, got ")
           << kType << " and " << vType;
  if (ShapedType::isDynamic(blockSize) || ShapedType::isDynamic(kType.getDimSize(3)) ||
      ShapedType::isDynamic(kvHeads))
    return op->emitOpError("the KV pool's kv_heads, block size and head_dim must be static");
  if (blockSize <= 0)
    return op->emitOpError("block size must be positive, got ") << blockSize;
  if (!dimsAgree(headDim, kType.getDimSize(3)))
    return op->emitOpError("head_dim of q (")
           << dimStr(headDim) << ") does not match the KV pool (" << kType.getDimSize(3) << ")";
  if (ShapedType::isDynamic(qHeads))
    return op->emitOpError("q_heads must be static");
  if (kvHeads <= 0 || qHeads % kvHeads != 0)
    return op->emitOpError("q_heads (")
           << qHeads << ") is not a whole multiple of kv_heads (" << kvHeads << ")";
  int64_t tableBatch = cast<MemRefType>(blockTable.getType()).getDimSize(0);
  if (!dimsAgree(batch, tableBatch))
    return op->emitOpError("block table has ")
           << dimStr(tableBatch) << " rows but the batch is " << dimStr(batch);
  int64_t lensBatch = cast<MemRefType>(seqLens.getType()).getDimSize(0);
  if (!dimsAgree(batch, lensBatch))
    return op->emitOpError("seq_lens has ")
           << dimStr(lensBatch) << " entries but the batch is " << dimStr(batch);
  int64_t maxBlocks = cast<MemRefType>(blockTable.getType()).getDimSize(1);
  // Token positions are index values: a table whose capacity overflows int64 has no meaning.
  if (!ShapedType::isDynamic(maxBlocks) && !llvm::checkedMul(maxBlocks, blockSize))
    return op->emitOpError("block table capacity ")
           << maxBlocks << " blocks x " << blockSize << " tokens overflows a 64-bit index";
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return op->emitOpError("scale must be positive and finite, got ") << scale;
  if (window && *window <= 0)
    return op->emitOpError("sliding window must be positive, got ") << *window;
  if (softcap && (!(*softcap > 0.0f) || !std::isfinite(*softcap)))
    return op->emitOpError("softcap must be positive and finite, got ") << *softcap;
  return success();
}

/// Checks that |out| has the shape of |ref| (q, or a merge's output), called |refName|.
LogicalResult verifySameShape(Operation *op, StringRef name, Value out, StringRef refName,
                              Value ref) {
  auto outShape = cast<MemRefType>(out.getType()).getShape();
  auto refShape = cast<MemRefType>(ref.getType()).getShape();
  if (!shapesAgree(outShape, refShape))
    return op->emitOpError() << name << " must have the shape of " << refName << ", got "
                             << out.getType() << " for " << ref.getType();
  return success();
}

LogicalResult verifyRowStat(Operation *op, StringRef name, Value stat, Value o) {
  auto statShape = cast<MemRefType>(stat.getType()).getShape();
  auto oShape = cast<MemRefType>(o.getType()).getShape();
  if (!shapesAgree(statShape, oShape.take_front(2)))
    return op->emitOpError() << name << " must be [batch, q_heads] of the output, got "
                             << stat.getType();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionInputs(*this, getQ(), getKPool(), getVPool(), getBlockTable(),
                                   getSeqLens(), getScale().convertToFloat(), getWindow(),
                                   getSoftcap() ? std::optional<float>(getSoftcap()->convertToFloat())
                                                : std::nullopt)))
    return failure();
  if (failed(verifySameShape(*this, "out", getOut(), "q", getQ())))
    return failure();
  SplitAttr split = getSplitAttr();
  if (!split)
    return success();
  if (split.isRuntimePoint() && !(*this)->getParentOfType<SegmentOp>())
    return emitOpError("split point = runtime needs an enclosing hg.segment");
  std::optional<int64_t> capacity = tokenCapacity(getBlockTable(), getKPool());
  if (split.getPoint() && capacity && *split.getPoint() > *capacity)
    return emitOpError("split point ")
           << *split.getPoint() << " is outside [0, len]: no sequence holds more than "
           << *capacity << " tokens";
  return success();
}

//===----------------------------------------------------------------------===//
// PartialAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult PartialAttentionOp::verify() {
  if (failed(verifyAttentionInputs(*this, getQ(), getKPool(), getVPool(), getBlockTable(),
                                   getSeqLens(), getScale().convertToFloat(), getWindow(),
                                   getSoftcap() ? std::optional<float>(getSoftcap()->convertToFloat())
                                                : std::nullopt)))
    return failure();
  if (failed(verifySameShape(*this, "o", getO(), "q", getQ())) ||
      failed(verifyRowStat(*this, "m", getM(), getO())) ||
      failed(verifyRowStat(*this, "l", getL(), getO())))
    return failure();
  if (std::optional<int64_t> topK = getTopK()) {
    if (*topK <= 0)
      return emitOpError("top_k must be positive, got ") << *topK;
    if (getDevice() != Device::cpu)
      return emitOpError("top_k (sparse mode) is only supported on the cpu");
  }
  std::optional<int64_t> begin = getConstantIntValue(getBegin());
  std::optional<int64_t> end = getEnd() ? getConstantIntValue(getEnd()) : std::nullopt;
  std::optional<int64_t> capacity = tokenCapacity(getBlockTable(), getKPool());
  if (begin && *begin < 0)
    return emitOpError("token range begins at ") << *begin << ", outside [0, len]";
  if (begin && end && *begin > *end)
    return emitOpError("token range [") << *begin << ", " << *end << ") is reversed";
  if (capacity && ((begin && *begin > *capacity) || (end && *end > *capacity)))
    return emitOpError("token range is outside [0, len]: no sequence holds more than ")
           << *capacity << " tokens";
  return success();
}

//===----------------------------------------------------------------------===//
// MergeOp
//===----------------------------------------------------------------------===//

LogicalResult MergeOp::verify() {
  size_t n = getPartialO().size();
  if (n == 0)
    return emitOpError("needs at least one partial");
  if (failed(verifyNonZeroDims(*this, "the merged output", getOut(),
                               {"batch", "q_heads", "head_dim"})))
    return failure();
  if (getPartialM().size() != n || getPartialL().size() != n)
    return emitOpError("needs as many m and l buffers as outputs, got ")
           << n << " outputs, " << getPartialM().size() << " maxima and " << getPartialL().size()
           << " sums";
  for (size_t i = 0; i < n; ++i) {
    if (failed(verifyNonZeroDims(*this, "partial output #" + std::to_string(i), getPartialO()[i],
                                 {"batch", "q_heads", "head_dim"})) ||
        failed(verifySameShape(*this, "partial output #" + std::to_string(i), getPartialO()[i],
                               "the merged output", getOut())) ||
        failed(verifyRowStat(*this, "partial max #" + std::to_string(i), getPartialM()[i],
                             getOut())) ||
        failed(verifyRowStat(*this, "partial sum #" + std::to_string(i), getPartialL()[i],
                             getOut())))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// SegmentOp and SplitPointOp
//===----------------------------------------------------------------------===//

LogicalResult SegmentOp::verify() {
  if (getIdAttr() && getDynamicId())
    return emitOpError("takes either a constant id or dynamic(%id), not both");
  if (!getIdAttr() && !getDynamicId())
    return emitOpError("needs a segment id: a constant or dynamic(%id)");
  if (getIdAttr() && getIdAttr().getInt() < 0)
    return emitOpError("segment id must be non-negative, got ") << getIdAttr().getInt();
  if ((*this)->getParentOfType<SegmentOp>())
    return emitOpError("segments do not nest");
  return success();
}

Value SegmentOp::buildIdValue(OpBuilder &b, Location loc) {
  if (Value dynamicId = getDynamicId())
    return arith::IndexCastOp::create(b, loc, b.getI64Type(), dynamicId);
  return arith::ConstantIntOp::create(b, loc, getIdAttr().getInt(), 64);
}

LogicalResult SplitPointOp::verify() {
  if (!(*this)->getParentOfType<SegmentOp>())
    return emitOpError("must be inside an hg.segment (the runtime decides per segment)");
  return success();
}

SegmentOp SplitPointOp::getSegment() { return (*this)->getParentOfType<SegmentOp>(); }
