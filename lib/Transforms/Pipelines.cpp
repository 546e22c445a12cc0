//===- Pipelines.cpp - named pipelines (skeleton) -----------------------===//
#include "hybridgen/Transforms/Passes.h"

void mlir::hybridgen::registerPipelines() {}
