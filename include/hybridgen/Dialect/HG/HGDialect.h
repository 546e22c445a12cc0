//===- HGDialect.h - the hg dialect -----------------------------*- C++ -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGDIALECT_H
#define HYBRIDGEN_DIALECT_HG_HGDIALECT_H

#include "mlir/IR/Dialect.h"

#include "hybridgen/Dialect/HG/HGDialect.h.inc"

#endif // HYBRIDGEN_DIALECT_HG_HGDIALECT_H
