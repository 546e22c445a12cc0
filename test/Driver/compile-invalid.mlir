// Invalid IR: hybridgen-compile exits non-zero and prints the diagnostic with file:line:col.
// RUN: not hybridgen-compile %s -o %t.so 2>&1 | FileCheck %s

// CHECK: parsing failed
// CHECK: compile-invalid.mlir:[[@LINE+2]]:{{[0-9]+}}: error: use of undeclared SSA value name
func.func @f() {
  %0 = arith.addi %x, %x : i32
  return
}
