// Decode's matrix-vector products read 8 output rows side by side (4 without AVX-512) where the
// input row is wider than 4096 f32 (here down_proj's 4608), one input load per 16 columns for
// all of them; Intel targets (which prefetch the one-row loop instead) and
// --matmul-side-by-side-rows=0 keep one row after the other (docs/models.md, "Wide input rows").
// RUN: rm -rf %t && mkdir -p %t/m && cp %S/Inputs/wide-mlp-llama.json %t/m/config.json
// RUN: hybridgen-compile %t/m -o %t/zen4 --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=znver4
// RUN: FileCheck %s --check-prefix=EIGHT < %t/zen4/model.mlir
// RUN: FileCheck %s --check-prefix=META8 < %t/zen4/metadata.json
// RUN: hybridgen-compile %t/m -o %t/v3 --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=x86-64-v3
// RUN: FileCheck %s --check-prefix=FOUR < %t/v3/model.mlir
// RUN: hybridgen-compile %t/m -o %t/intel --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=emeraldrapids
// RUN: FileCheck %s --check-prefix=NONE < %t/intel/model.mlir
// RUN: hybridgen-compile %t/m -o %t/off --weight-dtype=bf16 --kv-dtypes=bf16 --target-cpu=znver4 --matmul-side-by-side-rows=0
// RUN: FileCheck %s --check-prefix=NONE < %t/off/model.mlir

// The narrow products (64-wide inputs) keep blocks of 4 rows and the one-row loop.
// EIGHT-LABEL: func.func @layer_decode_bf16(
// EIGHT: scf.parallel (%ob) = (%{{.*}}) to (%[[O:.*]]) step
// EIGHT: scf.for %oj =
// Gate and up: 2 x 4608 rows in blocks of 4, then down_proj's 64 rows in blocks of 8.
// EIGHT: arith.constant 8 : index
// EIGHT: scf.parallel (%ob) =
// EIGHT-NEXT: %o0 = arith.muli %ob, %{{.*}} : index
// EIGHT-NOT: scf.parallel
// EIGHT: %o7 = arith.addi %o0, %oc7 : index
// Batch rows go through two 4 x 4 token tiles per block.
// EIGHT: %bacc:16 = scf.for
// EIGHT: memref.store %yb3_3, %{{.*}}[%m3, %o3]
// EIGHT: %bacc:16 = scf.for
// EIGHT: memref.store %yb3_3, %{{.*}}[%m3, %o7]
// EIGHT: scf.for %m = %nb to
// EIGHT: %sbacc:8 = scf.for %k = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%sb0 = {{.*}}, %sb7 = {{.*}}) -> (vector<16xf32>, {{.*}}) {
// EIGHT-NEXT: %sbx = vector.load %{{.*}}[%m, %k] : memref<?x4608xf32>, vector<16xf32>
// EIGHT-NEXT: %sbw0 = vector.load %{{.*}}[%o0, %k] : memref<64x4608xbf16>, vector<16xbf16>
// EIGHT-NEXT: %sbw0f = arith.extf %sbw0
// EIGHT-NEXT: %sbr0 = vector.fma %sbx, %sbw0f, %sb0 : vector<16xf32>
// EIGHT-NOT: vector.load %{{.*}}[%m, %k]
// EIGHT: %sbr7 = vector.fma %sbx, %sbw7f, %sb7 : vector<16xf32>
// EIGHT-NEXT: scf.yield %sbr0, {{.*}}, %sbr7 :
// EIGHT: memref.store %sby7, %{{.*}}[%m, %o7] : memref<?x64xf32>
// EIGHT-NOT: scf.for %oj =
// EIGHT: func.func

// META8: "matmul_row_prefetch_bytes": 0,
// META8: "matmul_side_by_side_rows": 8,

// FOUR-LABEL: func.func @layer_decode_bf16(
// FOUR: %sbacc:4 = scf.for
// FOUR-NOT: %sbw4
// FOUR: memref.store %sby3

// NONE-NOT: %sbacc
