//===- HGDialect.cpp - hg dialect registration ------------------*- C++ -*-===//
#include "hybridgen/Dialect/HG/HGDialect.h"
#include "hybridgen/Dialect/HG/HGOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::hybridgen;

#include "hybridgen/Dialect/HG/HGDialect.cpp.inc"

void HGDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "hybridgen/Dialect/HG/HGOps.cpp.inc"
      >();
  registerAttributes();
}
