//===- HGOps.h - hg operations ----------------------------------*- C++ -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGOPS_H
#define HYBRIDGEN_DIALECT_HG_HGOPS_H

#include "hybridgen/Dialect/HG/HGAttrs.h"
#include "hybridgen/Dialect/HG/HGDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "hybridgen/Dialect/HG/HGOps.h.inc"

#endif // HYBRIDGEN_DIALECT_HG_HGOPS_H
