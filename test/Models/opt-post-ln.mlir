// hybridgen-compile's model mode on facebook/opt-350m's shape: post-LayerNorm layers (q/k/v read
// the residual stream without a norm; each block's norm follows its residual add, so the MLP block
// is its own function, layer_mlp), no decoder final_layer_norm, and word_embed_proj_dim 512 !=
// hidden 1024: project_in after the embedding, project_out before the (tied, 512-wide) head.
// RUN: rm -rf %t && mkdir -p %t/m && cp %S/Inputs/opt-350m.json %t/m/config.json
// RUN: hybridgen-compile %t/m -o %t/a --kv-dtypes=f16 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s < %t/a/model.mlir
// RUN: FileCheck %s --check-prefix=META < %t/a/metadata.json
// RUN: test -f %t/a/model.so && test -f %t/a/model.so.sig

// TOOL: hybridgen-compile: {{.*}}/m -> {{.*}}/a in {{[0-9.]+}} s

// The 512-wide embedding, projected to 1024 (vector matmul), then the learned position added.
// CHECK-LABEL: func.func @embed(
// CHECK-SAME: memref<50272x512xf32>
// CHECK-SAME: memref<2050x1024xf32>
// CHECK-SAME: memref<1024x512xf32>
// CHECK: memref.load {{.*}} : memref<50272x512xf32>
// CHECK: vector.load {{.*}} : memref<1024x512xf32>, vector<16xf32>
// CHECK: memref.load {{.*}} : memref<2050x1024xf32>
// Post-LN: no norm before the projections.
// CHECK-LABEL: func.func @layer_pre(
// CHECK-NOT: math.rsqrt
// CHECK-LABEL: func.func @layer_decode_f16(
// CHECK-SAME: memref<?x16x16x64xf16>
// CHECK: hg.attention
// CHECK-NOT: math.rsqrt
// CHECK-LABEL: func.func @layer_prefill_f16(
// CHECK: hg.prefill_attention
// CHECK-NOT: math.rsqrt
// Both LayerNorms and the MLP, after the attention's residual.
// CHECK-LABEL: func.func @layer_mlp(
// CHECK: math.rsqrt
// CHECK: arith.maximumf
// CHECK: math.rsqrt
// No final norm: project_out, then the head over 512 columns.
// CHECK-LABEL: func.func @final(
// CHECK-SAME: %arg1: memref<512x1024xf32>, %arg2: memref<50272x512xf32>
// CHECK-NOT: math.rsqrt
// CHECK: vector.load {{.*}} : memref<512x1024xf32>
// CHECK: vector.load {{.*}} : memref<50272x512xf32>

// META: "embed": [
// META-NEXT: "ids",
// META-NEXT: "tensor:model.decoder.embed_tokens.weight",
// META-NEXT: "positions",
// META-NEXT: "tensor:model.decoder.embed_positions.weight",
// META-NEXT: "tensor:model.decoder.project_in.weight",
// META-NEXT: "x"
// META: "final": [
// META-NEXT: "x",
// META-NEXT: "tensor:model.decoder.project_out.weight",
// META-NEXT: "tensor:model.decoder.embed_tokens.weight",
// META-NEXT: "logits"
// META: "layer_mlp": [
// META-NEXT: "x",
// META-NEXT: "layer:self_attn_layer_norm.weight",
// META-NEXT: "layer:self_attn_layer_norm.bias",
// META-NEXT: "layer:final_layer_norm.weight",
// META-NEXT: "layer:final_layer_norm.bias",
// META-NEXT: "layer:fc1.weight",
// META-NOT: final_layer_norm
// META: "kv_dtypes": [
// META-NEXT: "f16"

// An OPT option that stays unsupported still names its field.
// RUN: mkdir -p %t/noaffine
// RUN: sed 's/"do_layer_norm_before": false/"layer_norm_elementwise_affine": false/' %S/Inputs/opt-350m.json > %t/noaffine/config.json
// RUN: not hybridgen-compile %t/noaffine -o %t/b 2>&1 | FileCheck %s --check-prefix=AFFINE
// AFFINE: config.json: field 'layer_norm_elementwise_affine' false (LayerNorms without weights) is not supported
