//===- HGAttrs.h - hg enums and the split annotation ------------*- C++ -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGATTRS_H
#define HYBRIDGEN_DIALECT_HG_HGATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "hybridgen/Dialect/HG/HGEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "hybridgen/Dialect/HG/HGAttrs.h.inc"

#endif // HYBRIDGEN_DIALECT_HG_HGATTRS_H
