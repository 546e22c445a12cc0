// End-to-end on unusual shapes: MQA with 16 query heads on one kv-head (the kernel splits the
// group into sub-groups), head_dim 20 (no 16-lane slicing), blocks of 8 tokens, f16 KV, and a
// sparse cpu side. Checked against a naive scalar reference written over dynamic shapes.
// RUN: hybridgen-opt %s -hg-cpu-pipeline="chunk-tokens=8" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN: | FileCheck %s
// The same program with head_dim 32: 16-lane dot slices and the 8-head shuffle reduction.
// RUN: sed -e 's/x20x/x32x/g' -e 's/%c20 = arith.constant 20/%c20 = arith.constant 32/' \
// RUN:     -e 's/output_shape \[2, 16, 20, 1\]/output_shape [2, 16, 32, 1]/' %s \
// RUN: | hybridgen-opt -hg-cpu-pipeline="chunk-tokens=8" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN: | FileCheck %s

// CHECK: f16 mqa point=13: 1
// CHECK-NEXT: f16 mqa sparse top_k=40 point=5: 1
// CHECK-NEXT: f16 mqa softcap+window point=0: 1

!q = memref<2x16x20xf32>
!ph = memref<8x1x8x20xf16>
!pf = memref<8x1x8x20xf32>
!bt = memref<2x4xi32>
!ln = memref<2xi32>

func.func @mqa_p13(%q: !q, %k: !ph, %v: !ph, %bt: !bt, %lens: !ln, %o: !q) {
  hg.attention q(%q : !q) kv(%k, %v : !ph, !ph) table(%bt : !bt) lens(%lens : !ln) out(%o : !q)
      {scale = 0.25 : f32, split = #hg.split<[cpu, gpu], point = 13, merge = lse, dense>}
  return
}
func.func @mqa_sparse(%q: !q, %k: !ph, %v: !ph, %bt: !bt, %lens: !ln, %o: !q) {
  hg.attention q(%q : !q) kv(%k, %v : !ph, !ph) table(%bt : !bt) lens(%lens : !ln) out(%o : !q)
      {scale = 0.25 : f32, split = #hg.split<[cpu, gpu], point = 5, merge = lse, sparse, top_k = 40>}
  return
}
func.func @mqa_cap_window(%q: !q, %k: !ph, %v: !ph, %bt: !bt, %lens: !ln, %o: !q) {
  hg.attention q(%q : !q) kv(%k, %v : !ph, !ph) table(%bt : !bt) lens(%lens : !ln) out(%o : !q)
      {scale = 0.25 : f32, window = 9, softcap = 1.5 : f32,
       split = #hg.split<[cpu, gpu], point = 0, merge = lse, dense>}
  return
}

// Fills every element of a 4-D f32 buffer with ((linear index * 37 + seed) mod 41) / 20.5 - 1.
func.func @fill4(%p: memref<?x?x?x?xf32>, %seed: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c37 = arith.constant 37 : index
  %c41 = arith.constant 41 : index
  %div = arith.constant 20.5 : f32
  %one = arith.constant 1.0 : f32
  %d0 = memref.dim %p, %c0 : memref<?x?x?x?xf32>
  %d1 = memref.dim %p, %c1 : memref<?x?x?x?xf32>
  %d2 = memref.dim %p, %c2 : memref<?x?x?x?xf32>
  %d3 = memref.dim %p, %c3 : memref<?x?x?x?xf32>
  scf.for %i = %c0 to %d0 step %c1 {
    scf.for %j = %c0 to %d1 step %c1 {
      scf.for %r = %c0 to %d2 step %c1 {
        scf.for %d = %c0 to %d3 step %c1 {
          %a0 = arith.muli %i, %d1 : index
          %a1 = arith.addi %a0, %j : index
          %a2 = arith.muli %a1, %d2 : index
          %a3 = arith.addi %a2, %r : index
          %a4 = arith.muli %a3, %d3 : index
          %a5 = arith.addi %a4, %d : index
          %a6 = arith.muli %a5, %c37 : index
          %a7 = arith.addi %a6, %seed : index
          %mod = arith.remui %a7, %c41 : index
          %mi = arith.index_cast %mod : index to i32
          %mf = arith.sitofp %mi : i32 to f32
          %x = arith.divf %mf, %div : f32
          %y = arith.subf %x, %one : f32
          memref.store %y, %p[%i, %j, %r, %d] : memref<?x?x?x?xf32>
        }
      }
    }
  }
  return
}

// Rounds |src| to f16 into |dst| and writes the rounded values back into |src|.
func.func @round_f16(%src: !pf, %dst: !ph) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c20 = arith.constant 20 : index
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %r = %c0 to %c8 step %c1 {
      scf.for %d = %c0 to %c20 step %c1 {
        %x = memref.load %src[%i, %c0, %r, %d] : !pf
        %y = arith.truncf %x : f32 to f16
        memref.store %y, %dst[%i, %c0, %r, %d] : !ph
        %z = arith.extf %y : f16 to f32
        memref.store %z, %src[%i, %c0, %r, %d] : !pf
      }
    }
  }
  return
}

// Dense attention over [max(0, len - window), len) (window 0 = none), all shapes from the buffers.
func.func @reference(%q: memref<?x?x?xf32>, %k: memref<?x?x?x?xf32>, %v: memref<?x?x?x?xf32>,
                     %bt: memref<?x?xi32>, %lens: memref<?xi32>, %scale: f32, %window: index,
                     %cap: f32, %o: memref<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %batch = memref.dim %q, %c0 : memref<?x?x?xf32>
  %heads = memref.dim %q, %c1 : memref<?x?x?xf32>
  %dim = memref.dim %q, %c2 : memref<?x?x?xf32>
  %kvh = memref.dim %k, %c1 : memref<?x?x?x?xf32>
  %bs = memref.dim %k, %c2 : memref<?x?x?x?xf32>
  %group = arith.divui %heads, %kvh : index
  %maxb = memref.dim %bt, %c1 : memref<?x?xi32>
  %cap_tokens = arith.muli %maxb, %bs : index
  %logits = memref.alloc(%cap_tokens) : memref<?xf32>
  scf.for %b = %c0 to %batch step %c1 {
    %len32 = memref.load %lens[%b] : memref<?xi32>
    %len = arith.index_cast %len32 : i32 to index
    %wlo = arith.subi %len, %window : index
    %haswin = arith.cmpi sgt, %window, %c0 : index
    %wlo2 = arith.select %haswin, %wlo, %c0 : index
    %lo = arith.maxsi %wlo2, %c0 : index
    scf.for %h = %c0 to %heads step %c1 {
      %g = arith.divui %h, %group : index
      %mx = scf.for %t = %lo to %len step %c1 iter_args(%acc = %ninf) -> f32 {
        %blk = arith.divui %t, %bs : index
        %row = arith.remui %t, %bs : index
        %pb32 = memref.load %bt[%b, %blk] : memref<?x?xi32>
        %pb = arith.index_cast %pb32 : i32 to index
        %dot = scf.for %d = %c0 to %dim step %c1 iter_args(%s = %zero) -> f32 {
          %qv = memref.load %q[%b, %h, %d] : memref<?x?x?xf32>
          %kv = memref.load %k[%pb, %g, %row, %d] : memref<?x?x?x?xf32>
          %p = arith.mulf %qv, %kv : f32
          %s2 = arith.addf %s, %p : f32
          scf.yield %s2 : f32
        }
        %sc = arith.mulf %dot, %scale : f32
        %hascap = arith.cmpf ogt, %cap, %zero : f32
        %div = arith.divf %sc, %cap : f32
        %th = math.tanh %div : f32
        %capped = arith.mulf %cap, %th : f32
        %s = arith.select %hascap, %capped, %sc : f32
        memref.store %s, %logits[%t] : memref<?xf32>
        %mx2 = arith.maximumf %acc, %s : f32
        scf.yield %mx2 : f32
      }
      scf.for %d = %c0 to %dim step %c1 {
        memref.store %zero, %o[%b, %h, %d] : memref<?x?x?xf32>
      }
      %sum = scf.for %t = %lo to %len step %c1 iter_args(%acc = %zero) -> f32 {
        %s = memref.load %logits[%t] : memref<?xf32>
        %sm = arith.subf %s, %mx : f32
        %e = math.exp %sm : f32
        %blk = arith.divui %t, %bs : index
        %row = arith.remui %t, %bs : index
        %pb32 = memref.load %bt[%b, %blk] : memref<?x?xi32>
        %pb = arith.index_cast %pb32 : i32 to index
        scf.for %d = %c0 to %dim step %c1 {
          %ov = memref.load %o[%b, %h, %d] : memref<?x?x?xf32>
          %vv = memref.load %v[%pb, %g, %row, %d] : memref<?x?x?x?xf32>
          %w = arith.mulf %e, %vv : f32
          %ov2 = arith.addf %ov, %w : f32
          memref.store %ov2, %o[%b, %h, %d] : memref<?x?x?xf32>
        }
        %acc2 = arith.addf %acc, %e : f32
        scf.yield %acc2 : f32
      }
      scf.for %d = %c0 to %dim step %c1 {
        %ov = memref.load %o[%b, %h, %d] : memref<?x?x?xf32>
        %n = arith.divf %ov, %sum : f32
        memref.store %n, %o[%b, %h, %d] : memref<?x?x?xf32>
      }
    }
  }
  memref.dealloc %logits : memref<?xf32>
  return
}

// 1 when every |a - b| <= 1e-4 * (1 + |b|) (any NaN fails).
func.func @close(%a: memref<?x?x?xf32>, %b: memref<?x?x?xf32>) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %one = arith.constant 1.0 : f32
  %tol = arith.constant 1.0e-4 : f32
  %true = arith.constant true
  %d0 = memref.dim %a, %c0 : memref<?x?x?xf32>
  %d1 = memref.dim %a, %c1 : memref<?x?x?xf32>
  %d2 = memref.dim %a, %c2 : memref<?x?x?xf32>
  %r = scf.for %i = %c0 to %d0 step %c1 iter_args(%ok0 = %true) -> i1 {
    %r1 = scf.for %h = %c0 to %d1 step %c1 iter_args(%ok1 = %ok0) -> i1 {
      %r2 = scf.for %d = %c0 to %d2 step %c1 iter_args(%ok2 = %ok1) -> i1 {
        %x = memref.load %a[%i, %h, %d] : memref<?x?x?xf32>
        %y = memref.load %b[%i, %h, %d] : memref<?x?x?xf32>
        %diff = arith.subf %x, %y : f32
        %ad = math.absf %diff : f32
        %ay = math.absf %y : f32
        %lim0 = arith.addf %ay, %one : f32
        %lim = arith.mulf %lim0, %tol : f32
        %near = arith.cmpf ole, %ad, %lim : f32
        %ok3 = arith.andi %ok2, %near : i1
        scf.yield %ok3 : i1
      }
      scf.yield %r2 : i1
    }
    scf.yield %r1 : i1
  }
  return %r : i1
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c9 = arith.constant 9 : index
  %c7 = arith.constant 7 : index
  %nocap = arith.constant 0.0 : f32
  %cap = arith.constant 1.5 : f32
  %scale = arith.constant 0.25 : f32
  %q = memref.alloc() : !q
  %kf = memref.alloc() : !pf
  %vf = memref.alloc() : !pf
  %kh = memref.alloc() : !ph
  %vh = memref.alloc() : !ph
  %bt = memref.alloc() : !bt
  %lens = memref.alloc() : !ln
  %out = memref.alloc() : !q
  %ref = memref.alloc() : !q
  // Sequence b's block i is pool block (3 * (4b + i) + 7) mod 8.
  scf.for %b = %c0 to %c2 step %c1 {
    scf.for %i = %c0 to %c4 step %c1 {
      %x0 = arith.muli %b, %c4 : index
      %x1 = arith.addi %x0, %i : index
      %x2 = arith.muli %x1, %c3 : index
      %x3 = arith.addi %x2, %c7 : index
      %x4 = arith.remui %x3, %c8 : index
      %x8 = arith.index_cast %x4 : index to i32
      memref.store %x8, %bt[%b, %i] : !bt
    }
  }
  %len0 = arith.constant 29 : i32
  %len1 = arith.constant 13 : i32
  memref.store %len0, %lens[%c0] : !ln
  memref.store %len1, %lens[%c1] : !ln
  %q4 = memref.expand_shape %q [[0], [1], [2, 3]] output_shape [2, 16, 20, 1] : !q into memref<2x16x20x1xf32>
  %q4d = memref.cast %q4 : memref<2x16x20x1xf32> to memref<?x?x?x?xf32>
  %kfd = memref.cast %kf : !pf to memref<?x?x?x?xf32>
  %vfd = memref.cast %vf : !pf to memref<?x?x?x?xf32>
  %s1 = arith.constant 1 : index
  %s2 = arith.constant 5 : index
  %s3 = arith.constant 11 : index
  func.call @fill4(%q4d, %s1) : (memref<?x?x?x?xf32>, index) -> ()
  func.call @fill4(%kfd, %s2) : (memref<?x?x?x?xf32>, index) -> ()
  func.call @fill4(%vfd, %s3) : (memref<?x?x?x?xf32>, index) -> ()
  func.call @round_f16(%kf, %kh) : (!pf, !ph) -> ()
  func.call @round_f16(%vf, %vh) : (!pf, !ph) -> ()
  %qd = memref.cast %q : !q to memref<?x?x?xf32>
  %outd = memref.cast %out : !q to memref<?x?x?xf32>
  %refd = memref.cast %ref : !q to memref<?x?x?xf32>
  %btd = memref.cast %bt : !bt to memref<?x?xi32>
  %lensd = memref.cast %lens : !ln to memref<?xi32>

  func.call @reference(%qd, %kfd, %vfd, %btd, %lensd, %scale, %c0, %nocap, %refd)
      : (memref<?x?x?xf32>, memref<?x?x?x?xf32>, memref<?x?x?x?xf32>, memref<?x?xi32>, memref<?xi32>, f32, index, f32, memref<?x?x?xf32>) -> ()
  func.call @mqa_p13(%q, %kh, %vh, %bt, %lens, %out) : (!q, !ph, !ph, !bt, !ln, !q) -> ()
  %ok0 = func.call @close(%outd, %refd) : (memref<?x?x?xf32>, memref<?x?x?xf32>) -> i1
  vector.print str "f16 mqa point=13: "
  vector.print %ok0 : i1
  func.call @mqa_sparse(%q, %kh, %vh, %bt, %lens, %out) : (!q, !ph, !ph, !bt, !ln, !q) -> ()
  %ok1 = func.call @close(%outd, %refd) : (memref<?x?x?xf32>, memref<?x?x?xf32>) -> i1
  vector.print str "f16 mqa sparse top_k=40 point=5: "
  vector.print %ok1 : i1
  func.call @reference(%qd, %kfd, %vfd, %btd, %lensd, %scale, %c9, %cap, %refd)
      : (memref<?x?x?xf32>, memref<?x?x?x?xf32>, memref<?x?x?x?xf32>, memref<?x?xi32>, memref<?xi32>, f32, index, f32, memref<?x?x?xf32>) -> ()
  func.call @mqa_cap_window(%q, %kh, %vh, %bt, %lens, %out) : (!q, !ph, !ph, !bt, !ln, !q) -> ()
  %ok2 = func.call @close(%outd, %refd) : (memref<?x?x?xf32>, memref<?x?x?xf32>) -> i1
  vector.print str "f16 mqa softcap+window point=0: "
  vector.print %ok2 : i1
  return
}
