// The partial kernel's tuning options (docs/gpu-path.md "Kernel tuning"): a cp.async ring in
// shared memory instead of the register pipeline, more 16-byte pieces per lane, the resident
// blocks the kernel is built and the grid sized for; bad values are errors naming the option.
// RUN: hybridgen-opt %s -hg-lower-attention-to-gpu="async-stages=3 unroll=2 resident-blocks=4" | FileCheck %s --check-prefix=RING
// RUN: hybridgen-opt %s -hg-lower-attention-to-gpu="pieces-per-lane=2" | FileCheck %s --check-prefix=PIECES
// RUN: not hybridgen-opt %s -hg-lower-attention-to-gpu="async-stages=1" 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not hybridgen-opt %s -hg-lower-attention-to-gpu="pieces-per-lane=3" 2>&1 | FileCheck %s --check-prefix=POW2
// RUN: not hybridgen-opt %s -hg-lower-attention-to-gpu="async-stages=8 unroll=4" 2>&1 | FileCheck %s --check-prefix=SHARED
// RUN: not hybridgen-opt %s -hg-lower-attention-to-gpu="resident-blocks=9" 2>&1 | FileCheck %s --check-prefix=RESIDENT

// Llama-3-8B's shape in bf16: 16 lanes of one 16-byte piece per row, 2 rows per warp group.
// The grid fills 132 x 4 slots; the kernel asks ptxas for 4 blocks per SM.
// RING: arith.divui %c528, %{{.*}} : index
// RING: gpu.func @__hg_gpu_partial_bf16_{{.*}}workgroup({{.*}}, %[[RING:.*]] : memref<1536xvector<4xi32>, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>, nvvm.minctasm = 4 : i32}
// 4 warps x 3 stages x (K, V) x 2 row groups x 32 lanes of 16 bytes = 1536 slots. The first two
// steps' copies, one group each, before the loop; in the loop the step two ahead is copied, then
// the thread waits until at most 2 groups are pending and reads its own slots.
// RING: memref.extract_aligned_pointer_as_index %[[RING]]
// RING: scf.if
// RING-COUNT-4: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg : !llvm.ptr<3>, !llvm.ptr<1>
// RING: nvvm.cp.async.commit.group
// RING: } else {
// RING-NEXT: nvvm.cp.async.commit.group
// RING-NEXT: nvvm.cp.async.commit.group
// RING: scf.for
// RING-COUNT-4: nvvm.cp.async.shared.global
// RING-NEXT: nvvm.cp.async.commit.group
// RING-NEXT: nvvm.cp.async.wait.group 2
// RING-COUNT-4: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<3> -> vector<4xi32>
// RING: gpu.shuffle  xor %{{.*}}, %c8_i32
// RING: nvvm.cp.async.wait.group 0
// RING: gpu.barrier

// Two pieces per lane: 8 lanes a row (shuffles 4, 2, 1), 2 row groups a step (auto unroll keeps 4
// pieces of K and of V per lane), 2 adjacent 16-byte loads per row and tensor.
// PIECES: gpu.func @__hg_gpu_partial_bf16_{{.*}}nvvm.minctasm = 2 : i32
// PIECES: scf.for
// PIECES-COUNT-8: llvm.load %{{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// PIECES-NOT: gpu.shuffle  xor %{{.*}}, %c8_i32
// PIECES: gpu.shuffle  xor %{{.*}}, %c4_i32
// PIECES: gpu.shuffle  xor %{{.*}}, %c2_i32
// PIECES: gpu.shuffle  xor %{{.*}}, %c1_i32
// PIECES: scf.yield

// STAGES: error: 'hg.partial_attention' op GPU kernel option async-stages=1 is out of range (0 = off, 2..8)
// POW2: error: 'hg.partial_attention' op GPU kernel option pieces-per-lane=3 must be a power of two in 1..32
// SHARED: error: 'hg.partial_attention' op the GPU kernel would need 139392 bytes of shared memory (async-stages=8, unroll=4, pieces-per-lane=1, group 4, head_dim 128); at most 49152 fit
// RESIDENT: error: 'hg.partial_attention' op GPU kernel option resident-blocks=9 is out of range (0 = auto, 1..8)
func.func @llama_bf16(%q: memref<?x32x128xf32>, %k: memref<?x8x16x128xbf16>,
                      %v: memref<?x8x16x128xbf16>, %bt: memref<?x?xi32>, %lens: memref<?xi32>,
                      %o: memref<?x32x128xf32>, %m: memref<?x32xf32>, %l: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<?x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xbf16>, memref<?x8x16x128xbf16>)
      table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) range [%c0, len) on gpu
      -> o(%o : memref<?x32x128xf32>) m(%m : memref<?x32xf32>) l(%l : memref<?x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}
