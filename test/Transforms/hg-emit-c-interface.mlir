// RUN: hybridgen-opt %s -hg-emit-c-interface | FileCheck %s

// Public definitions get llvm.emit_c_interface; private functions and declarations do not.
// CHECK-LABEL: func.func @entry
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func private @kernel
// CHECK-NOT: llvm.emit_c_interface
// CHECK-LABEL: func.func private @hgrt_segment_begin(i64)
// CHECK-NOT: llvm.emit_c_interface
func.func @entry(%m: memref<4xf32>) {
  func.call @kernel(%m) : (memref<4xf32>) -> ()
  return
}
func.func private @kernel(%m: memref<4xf32>) {
  return
}
func.func private @hgrt_segment_begin(i64)
