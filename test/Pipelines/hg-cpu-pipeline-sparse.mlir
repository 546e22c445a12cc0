// End-to-end sparse (top-k) attention: lower with hg-cpu-pipeline, run on the CPU and compare
// with naive scalar references in the same program: a top-k at or above the token count must
// equal dense attention, and top_k = 5 must equal "k rounds of the largest logit not yet taken".
// RUN: hybridgen-opt %s -hg-cpu-pipeline \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN: | FileCheck %s

// Shapes as in hg-cpu-pipeline.mlir: batch 2, 8 query heads over 2 kv-heads, head_dim 64, blocks
// of 16 tokens, lengths 45 and 29, NaN in pool rows past each length.

// CHECK: f32 sparse top_k=64 point=21: 1
// CHECK-NEXT: partial top_k=5 [5, 37) o m l: ( 1, 1, 1 )

!q = memref<2x8x64xf32>
!pf = memref<8x2x16x64xf32>
!bt = memref<2x4xi32>
!ln = memref<2xi32>
!st = memref<2x8xf32>

// Sparse cpu side with top_k above any length: must equal dense attention.
func.func @f32_sparse_all(%q: !q, %k: !pf, %v: !pf, %bt: !bt, %lens: !ln, %o: !q) {
  hg.attention q(%q : !q) kv(%k, %v : !pf, !pf) table(%bt : !bt) lens(%lens : !ln) out(%o : !q)
      {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 21, merge = lse, sparse, top_k = 64>}
  return
}
func.func @partial_top5(%q: !q, %k: !pf, %v: !pf, %bt: !bt, %lens: !ln, %lo: index, %hi: index,
                        %o: !q, %m: !st, %l: !st) {
  hg.partial_attention q(%q : !q) kv(%k, %v : !pf, !pf) table(%bt : !bt) lens(%lens : !ln)
      range [%lo, %hi) on cpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32, top_k = 5}
  return
}

//===----------------------------------------------------------------------===//
// Inputs and the naive reference
//===----------------------------------------------------------------------===//

// Deterministic values in [-1, 1): ((sum of index * prime + seed) mod 61) / 30.5 - 1.
func.func @fill_pool(%p: !pf, %seed: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %c61 = arith.constant 61 : index
  %p0 = arith.constant 131 : index
  %p1 = arith.constant 71 : index
  %p2 = arith.constant 29 : index
  %p3 = arith.constant 17 : index
  %div = arith.constant 30.5 : f32
  %one = arith.constant 1.0 : f32
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      scf.for %r = %c0 to %c16 step %c1 {
        scf.for %d = %c0 to %c64 step %c1 {
          %a = arith.muli %i, %p0 : index
          %b = arith.muli %j, %p1 : index
          %c = arith.muli %r, %p2 : index
          %e = arith.muli %d, %p3 : index
          %s0 = arith.addi %a, %b : index
          %s1 = arith.addi %s0, %c : index
          %s2 = arith.addi %s1, %e : index
          %s3 = arith.addi %s2, %seed : index
          %mod = arith.remui %s3, %c61 : index
          %mi = arith.index_cast %mod : index to i32
          %mf = arith.sitofp %mi : i32 to f32
          %x = arith.divf %mf, %div : f32
          %y = arith.subf %x, %one : f32
          memref.store %y, %p[%i, %j, %r, %d] : !pf
        }
      }
    }
  }
  return
}

func.func @fill_q(%q: !q) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %c53 = arith.constant 53 : index
  %p0 = arith.constant 37 : index
  %p1 = arith.constant 11 : index
  %p2 = arith.constant 7 : index
  %div = arith.constant 26.5 : f32
  %one = arith.constant 1.0 : f32
  scf.for %b = %c0 to %c2 step %c1 {
    scf.for %h = %c0 to %c8 step %c1 {
      scf.for %d = %c0 to %c64 step %c1 {
        %x0 = arith.muli %b, %p0 : index
        %x1 = arith.muli %h, %p1 : index
        %x2 = arith.muli %d, %p2 : index
        %s0 = arith.addi %x0, %x1 : index
        %s1 = arith.addi %s0, %x2 : index
        %mod = arith.remui %s1, %c53 : index
        %mi = arith.index_cast %mod : index to i32
        %mf = arith.sitofp %mi : i32 to f32
        %x = arith.divf %mf, %div : f32
        %y = arith.subf %x, %one : f32
        memref.store %y, %q[%b, %h, %d] : !q
      }
    }
  }
  return
}

// Rows holding no token of any sequence get NaN: the kernels must never let them leak in.
func.func @poison(%p: !pf, %bt: !bt, %lens: !ln) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %nan = arith.constant 0x7FC00000 : f32
  scf.for %b = %c0 to %c2 step %c1 {
    %len32 = memref.load %lens[%b] : !ln
    %len = arith.index_cast %len32 : i32 to index
    scf.for %t = %len to %c64 step %c1 {
      %blk = arith.divui %t, %c16 : index
      %row = arith.remui %t, %c16 : index
      %pb32 = memref.load %bt[%b, %blk] : !bt
      %pb = arith.index_cast %pb32 : i32 to index
      scf.for %j = %c0 to %c2 step %c1 {
        scf.for %d = %c0 to %c64 step %c1 {
          memref.store %nan, %p[%pb, %j, %row, %d] : !pf
        }
      }
    }
  }
  return
}

// Three passes per (sequence, head) over tokens [lo, hi) clamped to [max(0, len - window), len):
// logits and max, then exp-sum and weighted V sum, then normalization.
func.func @reference(%q: !q, %k: !pf, %v: !pf, %bt: !bt, %lens: !ln, %lo: index, %hi: index,
                     %window: index, %cap: f32, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.125 : f32
  %logits = memref.alloca() : memref<64xf32>
  scf.for %b = %c0 to %c2 step %c1 {
    %len32 = memref.load %lens[%b] : !ln
    %len = arith.index_cast %len32 : i32 to index
    %hi1 = arith.minsi %hi, %len : index
    %lo1 = arith.minsi %lo, %len : index
    %wlo = arith.subi %len, %window : index
    %haswin = arith.cmpi sgt, %window, %c0 : index
    %wlo2 = arith.select %haswin, %wlo, %c0 : index
    %lo2 = arith.maxsi %lo1, %wlo2 : index
    scf.for %h = %c0 to %c8 step %c1 {
      %kvh = arith.divui %h, %c4 : index
      %mx = scf.for %t = %lo2 to %hi1 step %c1 iter_args(%acc = %ninf) -> f32 {
        %blk = arith.divui %t, %c16 : index
        %row = arith.remui %t, %c16 : index
        %pb32 = memref.load %bt[%b, %blk] : !bt
        %pb = arith.index_cast %pb32 : i32 to index
        %dot = scf.for %d = %c0 to %c64 step %c1 iter_args(%s = %zero) -> f32 {
          %qv = memref.load %q[%b, %h, %d] : !q
          %kv = memref.load %k[%pb, %kvh, %row, %d] : !pf
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
        memref.store %s, %logits[%t] : memref<64xf32>
        %mx2 = arith.maximumf %acc, %s : f32
        scf.yield %mx2 : f32
      }
      scf.for %d = %c0 to %c64 step %c1 {
        memref.store %zero, %o[%b, %h, %d] : !q
      }
      %sum = scf.for %t = %lo2 to %hi1 step %c1 iter_args(%acc = %zero) -> f32 {
        %s = memref.load %logits[%t] : memref<64xf32>
        %sm = arith.subf %s, %mx : f32
        %e = math.exp %sm : f32
        %blk = arith.divui %t, %c16 : index
        %row = arith.remui %t, %c16 : index
        %pb32 = memref.load %bt[%b, %blk] : !bt
        %pb = arith.index_cast %pb32 : i32 to index
        scf.for %d = %c0 to %c64 step %c1 {
          %ov = memref.load %o[%b, %h, %d] : !q
          %vv = memref.load %v[%pb, %kvh, %row, %d] : !pf
          %w = arith.mulf %e, %vv : f32
          %ov2 = arith.addf %ov, %w : f32
          memref.store %ov2, %o[%b, %h, %d] : !q
        }
        %acc2 = arith.addf %acc, %e : f32
        scf.yield %acc2 : f32
      }
      %nonempty = arith.cmpf ogt, %sum, %zero : f32
      scf.for %d = %c0 to %c64 step %c1 {
        %ov = memref.load %o[%b, %h, %d] : !q
        %n = arith.divf %ov, %sum : f32
        %n2 = arith.select %nonempty, %n, %zero : f32
        memref.store %n2, %o[%b, %h, %d] : !q
      }
      memref.store %mx, %m[%b, %h] : !st
      memref.store %sum, %l[%b, %h] : !st
    }
  }
  return
}

// Top-k by k rounds of "largest not yet taken, first in token order on ties", then softmax and
// V over the taken tokens only.
func.func @reference_topk(%q: !q, %k: !pf, %v: !pf, %bt: !bt, %lens: !ln, %lo: index,
                          %hi: index, %topk: index, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %cm1 = arith.constant -1 : index
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.125 : f32
  %false = arith.constant false
  %true = arith.constant true
  %logits = memref.alloca() : memref<64xf32>
  %taken = memref.alloca() : memref<64xi1>
  scf.for %b = %c0 to %c2 step %c1 {
    %len32 = memref.load %lens[%b] : !ln
    %len = arith.index_cast %len32 : i32 to index
    %hi1 = arith.minsi %hi, %len : index
    %lo1 = arith.minsi %lo, %len : index
    scf.for %h = %c0 to %c8 step %c1 {
      %kvh = arith.divui %h, %c4 : index
      scf.for %t = %c0 to %c64 step %c1 {
        memref.store %false, %taken[%t] : memref<64xi1>
      }
      scf.for %t = %lo1 to %hi1 step %c1 {
        %blk = arith.divui %t, %c16 : index
        %row = arith.remui %t, %c16 : index
        %pb32 = memref.load %bt[%b, %blk] : !bt
        %pb = arith.index_cast %pb32 : i32 to index
        %dot = scf.for %d = %c0 to %c64 step %c1 iter_args(%s = %zero) -> f32 {
          %qv = memref.load %q[%b, %h, %d] : !q
          %kv = memref.load %k[%pb, %kvh, %row, %d] : !pf
          %p = arith.mulf %qv, %kv : f32
          %s2 = arith.addf %s, %p : f32
          scf.yield %s2 : f32
        }
        %sc = arith.mulf %dot, %scale : f32
        memref.store %sc, %logits[%t] : memref<64xf32>
      }
      %n = arith.subi %hi1, %lo1 : index
      %nn = arith.maxsi %n, %c0 : index
      %kk = arith.minsi %topk, %nn : index
      scf.for %j = %c0 to %kk step %c1 {
        %best:2 = scf.for %t = %lo1 to %hi1 step %c1 iter_args(%bv = %ninf, %bi = %cm1) -> (f32, index) {
          %s = memref.load %logits[%t] : memref<64xf32>
          %was = memref.load %taken[%t] : memref<64xi1>
          %free = arith.xori %was, %true : i1
          %gt = arith.cmpf ogt, %s, %bv : f32
          %none = arith.cmpi eq, %bi, %cm1 : index
          %cand = arith.ori %gt, %none : i1
          %better = arith.andi %free, %cand : i1
          %nv = arith.select %better, %s, %bv : f32
          %ni = arith.select %better, %t, %bi : index
          scf.yield %nv, %ni : f32, index
        }
        memref.store %true, %taken[%best#1] : memref<64xi1>
      }
      %mx = scf.for %t = %lo1 to %hi1 step %c1 iter_args(%acc = %ninf) -> f32 {
        %s = memref.load %logits[%t] : memref<64xf32>
        %sel = memref.load %taken[%t] : memref<64xi1>
        %c = arith.select %sel, %s, %ninf : f32
        %mx2 = arith.maximumf %acc, %c : f32
        scf.yield %mx2 : f32
      }
      scf.for %d = %c0 to %c64 step %c1 {
        memref.store %zero, %o[%b, %h, %d] : !q
      }
      %sum = scf.for %t = %lo1 to %hi1 step %c1 iter_args(%acc = %zero) -> f32 {
        %sel = memref.load %taken[%t] : memref<64xi1>
        %next = scf.if %sel -> f32 {
          %s = memref.load %logits[%t] : memref<64xf32>
          %sm = arith.subf %s, %mx : f32
          %e = math.exp %sm : f32
          %blk = arith.divui %t, %c16 : index
          %row = arith.remui %t, %c16 : index
          %pb32 = memref.load %bt[%b, %blk] : !bt
          %pb = arith.index_cast %pb32 : i32 to index
          scf.for %d = %c0 to %c64 step %c1 {
            %ov = memref.load %o[%b, %h, %d] : !q
            %vv = memref.load %v[%pb, %kvh, %row, %d] : !pf
            %w = arith.mulf %e, %vv : f32
            %ov2 = arith.addf %ov, %w : f32
            memref.store %ov2, %o[%b, %h, %d] : !q
          }
          %acc2 = arith.addf %acc, %e : f32
          scf.yield %acc2 : f32
        } else {
          scf.yield %acc : f32
        }
        scf.yield %next : f32
      }
      %nonempty = arith.cmpf ogt, %sum, %zero : f32
      scf.for %d = %c0 to %c64 step %c1 {
        %ov = memref.load %o[%b, %h, %d] : !q
        %nrm = arith.divf %ov, %sum : f32
        %n2 = arith.select %nonempty, %nrm, %zero : f32
        memref.store %n2, %o[%b, %h, %d] : !q
      }
      memref.store %mx, %m[%b, %h] : !st
      memref.store %sum, %l[%b, %h] : !st
    }
  }
  return
}

// 1 when every |a - b| <= 1e-4 * (1 + |b|) (equal infinities pass; any NaN fails).
func.func @close_o(%a: !q, %b: !q) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %true = arith.constant true
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%ok0 = %true) -> i1 {
    %r1 = scf.for %h = %c0 to %c8 step %c1 iter_args(%ok1 = %ok0) -> i1 {
      %r2 = scf.for %d = %c0 to %c64 step %c1 iter_args(%ok2 = %ok1) -> i1 {
        %x = memref.load %a[%i, %h, %d] : !q
        %y = memref.load %b[%i, %h, %d] : !q
        %good = func.call @close(%x, %y) : (f32, f32) -> i1
        %ok3 = arith.andi %ok2, %good : i1
        scf.yield %ok3 : i1
      }
      scf.yield %r2 : i1
    }
    scf.yield %r1 : i1
  }
  return %r : i1
}

func.func @close_st(%a: !st, %b: !st) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %true = arith.constant true
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%ok0 = %true) -> i1 {
    %r1 = scf.for %h = %c0 to %c8 step %c1 iter_args(%ok1 = %ok0) -> i1 {
      %x = memref.load %a[%i, %h] : !st
      %y = memref.load %b[%i, %h] : !st
      %good = func.call @close(%x, %y) : (f32, f32) -> i1
      %ok2 = arith.andi %ok1, %good : i1
      scf.yield %ok2 : i1
    }
    scf.yield %r1 : i1
  }
  return %r : i1
}

func.func @close(%x: f32, %y: f32) -> i1 {
  %one = arith.constant 1.0 : f32
  %tol = arith.constant 1.0e-4 : f32
  %eq = arith.cmpf oeq, %x, %y : f32
  %diff = arith.subf %x, %y : f32
  %ad = math.absf %diff : f32
  %ay = math.absf %y : f32
  %lim0 = arith.addf %ay, %one : f32
  %lim = arith.mulf %lim0, %tol : f32
  %near = arith.cmpf ole, %ad, %lim : f32
  %ok = arith.ori %eq, %near : i1
  return %ok : i1
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c8 = arith.constant 8 : index
  %c37 = arith.constant 37 : index
  %cbig = arith.constant 1000 : index
  %nocap = arith.constant 0.0 : f32
  %q = memref.alloc() : !q
  %kf = memref.alloc() : !pf
  %vf = memref.alloc() : !pf
  %bt = memref.alloc() : !bt
  %lens = memref.alloc() : !ln
  %out = memref.alloc() : !q
  %ref = memref.alloc() : !q
  %m = memref.alloc() : !st
  %l = memref.alloc() : !st
  %mref = memref.alloc() : !st
  %lref = memref.alloc() : !st

  // Blocks are scattered: sequence b's block i is pool block (5 * (4b + i) + 3) mod 8.
  %c3 = arith.constant 3 : index
  scf.for %b = %c0 to %c2 step %c1 {
    scf.for %i = %c0 to %c4 step %c1 {
      %x0 = arith.muli %b, %c4 : index
      %x1 = arith.addi %x0, %i : index
      %x2 = arith.muli %x1, %c5 : index
      %x3 = arith.addi %x2, %c3 : index
      %x4 = arith.remui %x3, %c8 : index
      %x5 = arith.index_cast %x4 : index to i32
      memref.store %x5, %bt[%b, %i] : !bt
    }
  }
  %len0 = arith.constant 45 : i32
  %len1 = arith.constant 29 : i32
  memref.store %len0, %lens[%c0] : !ln
  memref.store %len1, %lens[%c1] : !ln
  func.call @fill_q(%q) : (!q) -> ()
  %seedk = arith.constant 3 : index
  %seedv = arith.constant 19 : index
  func.call @fill_pool(%kf, %seedk) : (!pf, index) -> ()
  func.call @fill_pool(%vf, %seedv) : (!pf, index) -> ()
  func.call @poison(%kf, %bt, %lens) : (!pf, !bt, !ln) -> ()
  func.call @poison(%vf, %bt, %lens) : (!pf, !bt, !ln) -> ()

  // Sparse: top_k above every length is dense; top_k = 5 against the naive top-k reference.
  func.call @reference(%q, %kf, %vf, %bt, %lens, %c0, %cbig, %c0, %nocap, %ref, %mref, %lref)
      : (!q, !pf, !pf, !bt, !ln, index, index, index, f32, !q, !st, !st) -> ()
  func.call @f32_sparse_all(%q, %kf, %vf, %bt, %lens, %out) : (!q, !pf, !pf, !bt, !ln, !q) -> ()
  %oks = func.call @close_o(%out, %ref) : (!q, !q) -> i1
  vector.print str "f32 sparse top_k=64 point=21: "
  vector.print %oks : i1
  %c5k = arith.constant 5 : index
  func.call @reference_topk(%q, %kf, %vf, %bt, %lens, %c5, %c37, %c5k, %ref, %mref, %lref)
      : (!q, !pf, !pf, !bt, !ln, index, index, index, !q, !st, !st) -> ()
  func.call @partial_top5(%q, %kf, %vf, %bt, %lens, %c5, %c37, %out, %m, %l)
      : (!q, !pf, !pf, !bt, !ln, index, index, !q, !st, !st) -> ()
  %okt0 = func.call @close_o(%out, %ref) : (!q, !q) -> i1
  %okt1 = func.call @close_st(%m, %mref) : (!st, !st) -> i1
  %okt2 = func.call @close_st(%l, %lref) : (!st, !st) -> i1
  %okt = vector.from_elements %okt0, %okt1, %okt2 : vector<3xi1>
  vector.print str "partial top_k=5 [5, 37) o m l: "
  vector.print %okt : vector<3xi1>
  return
}
