// Decode's matrix-vector rows prefetch their weights 4 KiB ahead into L2 on Intel targets, one
// prefetch per cache line in memory order, clamped to the matrix's last element; AMD targets
// and --matmul-row-prefetch-bytes=0 get none (docs/models.md, "Matmul prefetch").
// RUN: rm -rf %t && mkdir -p %t/m && cp %S/Inputs/tiny-llama.json %t/m/config.json
// RUN: hybridgen-compile %t/m -o %t/intel --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=emeraldrapids
// RUN: FileCheck %s --check-prefix=INTEL < %t/intel/model.mlir
// RUN: hybridgen-compile %t/m -o %t/amd --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=znver4
// RUN: FileCheck %s --check-prefix=NONE < %t/amd/model.mlir
// RUN: hybridgen-compile %t/m -o %t/off --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=emeraldrapids --matmul-row-prefetch-bytes=0
// RUN: FileCheck %s --check-prefix=NONE < %t/off/model.mlir
// Wide input rows (down_proj's 2048 here) take 4 x 4 token tiles at any batch; on Intel their
// first group of token rows asks for each weight row 4 KiB ahead too, the later groups do not.
// RUN: mkdir -p %t/w && sed 's/"intermediate_size": 128/"intermediate_size": 2048/' %S/Inputs/tiny-llama.json > %t/w/config.json
// RUN: hybridgen-compile %t/w -o %t/wide-intel --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=emeraldrapids
// RUN: FileCheck %s --check-prefix=WIDE < %t/wide-intel/model.mlir
// RUN: hybridgen-compile %t/w -o %t/wide-amd --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=znver4
// RUN: FileCheck %s --check-prefix=WIDE-NONE < %t/wide-amd/model.mlir
// RUN: not hybridgen-compile %t/m -o %t/bad --weight-dtype=bf16 --matmul-row-prefetch-bytes=-2 2>&1 | FileCheck %s --check-prefix=BAD

// INTEL-LABEL: func.func @layer_pre(
// INTEL: %[[FLAT:.*]] = memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<64x64xbf16> into memref<4096xbf16>
// INTEL: %[[LAST:.*]] = arith.constant 4095 : index
// INTEL: %[[AHEAD:.*]] = arith.constant 2048 : index
// INTEL: %rpa = arith.muli %o, %{{.*}} : index
// INTEL-NEXT: %rpb = arith.addi %rpa, %k : index
// INTEL-NEXT: %rpc = arith.addi %rpb, %[[AHEAD]] : index
// INTEL-NEXT: %rpo0 = arith.constant 0 : index
// INTEL-NEXT: %rpe0 = arith.addi %rpc, %rpo0 : index
// INTEL-NEXT: %rpf0 = arith.minui %rpe0, %[[LAST]] : index
// INTEL-NEXT: memref.prefetch %[[FLAT]][%rpf0], read, locality<2>, data : memref<4096xbf16>
// INTEL-NEXT: %rpo64 = arith.constant 32 : index
// INTEL: memref.prefetch %[[FLAT]][%rpf64], read, locality<2>, data : memref<4096xbf16>
// INTEL-NOT: %rpo128
// INTEL: vector.fma
// INTEL-LABEL: func.func @final(
// INTEL: memref.prefetch %{{.*}}[%rpf0]

// NONE-LABEL: func.func @layer_pre(
// NONE-NOT: %rpf
// NONE-LABEL: func.func @final(
// NONE-NOT: %rpf

// BAD: matmul row prefetch must be -1 (the target's), 0 (off) or up to 1048576 bytes, got -2

// WIDE-LABEL: func.func @layer_decode_bf16(
// WIDE: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<64x2048xbf16> into memref<131072xbf16>
// WIDE: scf.for %m0 =
// WIDE: %tfirst = arith.cmpi eq, %m0, %{{.*}} : index
// WIDE-NEXT: %bacc:16 = scf.for %k =
// WIDE-NEXT: scf.if %tfirst {
// WIDE-NEXT: %tpa0 = arith.muli %o0, %{{.*}} : index
// WIDE-NEXT: %tpb0 = arith.addi %tpa0, %k : index
// WIDE-NEXT: %tpc0 = arith.addi %tpb0, %{{.*}} : index
// WIDE-NEXT: %tpd0 = arith.minui %tpc0, %{{.*}} : index
// WIDE-NEXT: memref.prefetch %{{.*}}[%tpd0], read, locality<2>, data : memref<131072xbf16>
// WIDE-NEXT: }
// WIDE-NEXT: %wb0 = vector.load
// WIDE: %tpd3 = arith.minui
// WIDE: vector.fma

// WIDE-NONE-NOT: %tfirst
// WIDE-NONE-NOT: %tpd
