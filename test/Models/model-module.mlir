// hybridgen-compile's model mode on a 32-layer tiny Llama: one set of layer functions for every
// layer (weights as arguments), attention in a dynamic segment with a runtime split, prefill
// through hg.prefill_attention, bf16 weights widened in the vector matmul (whose token tiles
// prefetch them ahead), one decode/prefill pair
// per KV dtype (f32, bf16, f16); and the metadata that names each function's arguments.
// RUN: rm -rf %t && mkdir -p %t/m && cp %S/Inputs/tiny-llama.json %t/m/config.json
// RUN: hybridgen-compile %t/m -o %t/a --weight-dtype=bf16 --kv-dtypes=f32,bf16,f16 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s < %t/a/model.mlir
// RUN: FileCheck %s --check-prefix=META < %t/a/metadata.json
// RUN: test -f %t/a/model.so && test -f %t/a/model.so.sig

// TOOL: hybridgen-compile: {{.*}}/m -> {{.*}}/a in {{[0-9.]+}} s

// CHECK: memref.global "private" constant @rope_inv_freq : memref<8xf64> = dense<[1.0, 0.31622776601683794
// CHECK-LABEL: func.func @embed(
// CHECK-SAME: memref<256x64xbf16>
// CHECK-LABEL: func.func @layer_pre(
// CHECK: math.rsqrt
// The token tiles prefetch the weights 8 KiB (4096 bf16) ahead in memory order, clamped to the end.
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<64x64xbf16> into memref<4096xbf16>
// CHECK: %[[AHEAD:.*]] = arith.constant 4096 : index
// CHECK: %[[LAST:.*]] = arith.constant 4095 : index
// CHECK: %[[PC:.*]] = arith.addi %{{.*}}, %[[AHEAD]] : index
// CHECK: %[[PD:.*]] = arith.minui %[[PC]], %[[LAST]] : index
// CHECK: memref.prefetch %[[FLAT]][%[[PD]]], read, locality<2>, data : memref<4096xbf16>
// CHECK: vector.load {{.*}} : memref<64x64xbf16>, vector<16xbf16>
// CHECK: arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK: vector.fma
// CHECK: math.cos
// CHECK-LABEL: func.func @layer_decode_f32(
// CHECK-SAME: memref<?x2x16x16xf32>
// CHECK: hg.segment dynamic(
// CHECK: hg.attention
// CHECK-NEXT: split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>
// CHECK-LABEL: func.func @layer_prefill_f32(
// CHECK-NOT: hg.segment
// CHECK: hg.prefill_attention
// CHECK-LABEL: func.func @layer_decode_bf16(
// CHECK-SAME: memref<?x2x16x16xbf16>
// CHECK-LABEL: func.func @layer_prefill_bf16(
// CHECK-LABEL: func.func @layer_decode_f16(
// CHECK-SAME: memref<?x2x16x16xf16>
// CHECK: hg.attention
// CHECK-LABEL: func.func @layer_prefill_f16(
// CHECK: hg.prefill_attention
// CHECK-LABEL: func.func @final(
// CHECK-NOT: func.func @layer_

// META: "block_size": 16
// META: "layer_decode_f32": [
// META-NEXT: "x",
// META-NEXT: "q",
// META-NEXT: "k_pool",
// META: "layer:self_attn.o_proj.weight",
// META: "layer:mlp.down_proj.weight"
// META: "weight_dtype": "bf16"

// Unsupported options name their field.
// RUN: mkdir -p %t/yarn && cp %S/Inputs/yarn.json %t/yarn/config.json
// RUN: not hybridgen-compile %t/yarn -o %t/b 2>&1 | FileCheck %s --check-prefix=YARN
// YARN: config.json: field 'rope_scaling.rope_type' 'yarn' is not supported (llama3, linear)
