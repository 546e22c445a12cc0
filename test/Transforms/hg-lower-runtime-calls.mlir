// RUN: hybridgen-opt %s -split-input-file -hg-lower-runtime-calls -verify-diagnostics | FileCheck %s

// A segment is inlined between hgrt_segment_begin/end; its split point becomes a runtime call
// clamped at 0 and cast to index.
// CHECK-DAG: func.func private @hgrt_split_point(i64) -> i64
// CHECK-DAG: func.func private @hgrt_segment_begin(i64)
// CHECK-DAG: func.func private @hgrt_segment_end(i64)
// CHECK-LABEL: func.func @one_segment
// CHECK: %[[ID0:.*]] = arith.constant 3 : i64
// CHECK: call @hgrt_segment_begin(%[[ID0]]) : (i64) -> ()
// CHECK: %[[ID:.*]] = arith.constant 3 : i64
// CHECK: %[[RAW:.*]] = call @hgrt_split_point(%[[ID]]) : (i64) -> i64
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: %[[CLAMPED:.*]] = arith.maxsi %[[RAW]], %[[ZERO]] : i64
// CHECK: %[[S:.*]] = arith.index_cast %[[CLAMPED]] : i64 to index
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[S]]]
// CHECK: call @hgrt_segment_end(%[[ID0]]) : (i64) -> ()
// CHECK-NEXT: return
// CHECK-NOT: hg.segment
func.func @one_segment(%buf: memref<?xf32>) {
  hg.segment 3 {
    %s = hg.split_point : index
    %x = arith.constant 1.0 : f32
    memref.store %x, %buf[%s] : memref<?xf32>
  }
  return
}

// -----

// Two segments in one function keep their own ids and order; the callees are declared once.
// CHECK: func.func private @hgrt_split_point
// CHECK-NOT: func.func private @hgrt_split_point
// CHECK-LABEL: func.func @two_segments
// CHECK: %[[A:.*]] = arith.constant 1 : i64
// CHECK: call @hgrt_segment_begin(%[[A]])
// CHECK: call @hgrt_split_point
// CHECK: call @hgrt_segment_end(%[[A]])
// CHECK: %[[B:.*]] = arith.constant 2 : i64
// CHECK: call @hgrt_segment_begin(%[[B]])
// CHECK: call @hgrt_split_point
// CHECK: call @hgrt_segment_end(%[[B]])
func.func @two_segments(%buf: memref<?xindex>) {
  %c0 = arith.constant 0 : index
  hg.segment 1 {
    %s = hg.split_point : index
    memref.store %s, %buf[%c0] : memref<?xindex>
  }
  hg.segment 2 {
    %s = hg.split_point : index
    memref.store %s, %buf[%s] : memref<?xindex>
  }
  return
}

// -----

// A module that already declares the runtime functions reuses the declarations.
// CHECK: func.func private @hgrt_segment_begin(i64)
// CHECK-NOT: func.func private @hgrt_segment_begin
// CHECK-LABEL: func.func @predeclared
// CHECK: call @hgrt_segment_begin
func.func private @hgrt_segment_begin(i64)
func.func @predeclared() {
  hg.segment 9 {
  }
  return
}

// -----

// Negative: a split point outside any segment has no id to ask the runtime with.
func.func @orphan_split_point() -> index {
  // expected-error @+1 {{must be inside an hg.segment}}
  %s = hg.split_point : index
  return %s : index
}

// -----

// Negative: segments do not nest (each one is a single scheduler decision).
func.func @nested_segments() {
  hg.segment 1 {
    // expected-error @+1 {{segments do not nest}}
    hg.segment 2 {
    }
  }
  return
}

// -----

// A dynamic segment id: begin, end and the split point all pass the run-time value, cast once
// per use from index to i64, so one function called with different layer numbers runs as
// different segments.
// CHECK-LABEL: func.func @dynamic_segment
// CHECK-SAME: (%[[LAYER:.*]]: index,
// CHECK: %[[BEGIN_ID:.*]] = arith.index_cast %[[LAYER]] : index to i64
// CHECK: call @hgrt_segment_begin(%[[BEGIN_ID]]) : (i64) -> ()
// CHECK: %[[SPLIT_ID:.*]] = arith.index_cast %[[LAYER]] : index to i64
// CHECK: call @hgrt_split_point(%[[SPLIT_ID]]) : (i64) -> i64
// CHECK: memref.store
// CHECK: call @hgrt_segment_end(%[[BEGIN_ID]]) : (i64) -> ()
// CHECK-NOT: arith.constant {{.*}} : i64
// CHECK: return
func.func @dynamic_segment(%layer: index, %buf: memref<?xindex>) {
  %c0 = arith.constant 0 : index
  hg.segment dynamic(%layer) {
    %s = hg.split_point : index
    memref.store %s, %buf[%c0] : memref<?xindex>
  }
  return
}
