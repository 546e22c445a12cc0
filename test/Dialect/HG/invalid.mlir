// Verifier and parser errors of the hg dialect, one case per error.
// RUN: hybridgen-opt %s -split-input-file -verify-diagnostics

// q_heads that are not a whole multiple of kv_heads.
func.func @gqa_ratio_not_whole(%q: memref<1x6x64xf32>, %k: memref<4x4x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{q_heads (6) is not a whole multiple of kv_heads (4)}}
  hg.attention q(%q : memref<1x6x64xf32>) kv(%k, %k : memref<4x4x16x64xf32>, memref<4x4x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x6x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// head_dim of the query and of the pool differ.
func.func @head_dim_mismatch(%q: memref<1x8x64xf32>, %k: memref<4x2x16x128xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{head_dim of q (64) does not match the KV pool (128)}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x128xf32>, memref<4x2x16x128xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// K and V pools with different block sizes.
func.func @block_size_mismatch(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %v: memref<4x2x32x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{block size of the V pool (32) does not match the K pool (16)}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<4x2x16x64xf32>, memref<4x2x32x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// K and V pools with different element types.
func.func @kv_dtype_mismatch(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %v: memref<4x2x16x64xbf16>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{K and V pools must have the same element type, got 'f32' and 'bf16'}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<4x2x16x64xf32>, memref<4x2x16x64xbf16>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An unsupported KV element type (i8).
func.func @unsupported_kv_dtype(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xi8>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{operand #1 must be 4D memref of 32-bit float or 16-bit float or bfloat16 type values}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xi8>, memref<4x2x16x64xi8>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A query of the wrong rank.
func.func @query_rank(%q: memref<8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{operand #0 must be 3D memref of 32-bit float values}}
  hg.attention q(%q : memref<8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A block table whose batch differs from the query's.
func.func @table_batch(%q: memref<2x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<3x4xi32>, %n: memref<2xi32>) {
  // expected-error @+1 {{block table has 3 rows but the batch is 2}}
  hg.attention q(%q : memref<2x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<3x4xi32>) lens(%n : memref<2xi32>) out(%q : memref<2x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Sequence lengths whose batch differs from the query's.
func.func @lens_batch(%q: memref<2x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<2x4xi32>, %n: memref<5xi32>) {
  // expected-error @+1 {{seq_lens has 5 entries but the batch is 2}}
  hg.attention q(%q : memref<2x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<2x4xi32>) lens(%n : memref<5xi32>) out(%q : memref<2x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An output whose shape is not the query's.
func.func @out_shape(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x32xf32>) {
  // expected-error @+1 {{out must have the shape of q}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x32xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A non-positive scale.
func.func @bad_scale(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{scale must be positive and finite, got -1}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = -1.0 : f32}
  return
}

// -----

// A sliding window of zero tokens.
func.func @bad_window(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{sliding window must be positive, got 0}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, window = 0}
  return
}

// -----

// A negative softcap.
func.func @bad_softcap(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{softcap must be positive and finite}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, softcap = -3.0 : f32}
  return
}

// -----

// A static split point beyond what any sequence can hold (4 blocks of 16 tokens).
func.func @split_beyond_len(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{split point 65 is outside [0, len]: no sequence holds more than 64 tokens}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 65>}
  return
}

// -----

// A negative split point.
func.func @negative_split(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{split point must be non-negative, got -3}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = -3>}
  return
}

// -----

// top_k given in dense mode.
func.func @topk_in_dense(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{top_k is only allowed in sparse mode}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 8, dense, top_k = 4>}
  return
}

// -----

// Sparse mode without top_k.
func.func @sparse_without_topk(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{sparse mode needs a positive top_k}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 8, sparse>}
  return
}

// -----

// An unknown device name.
func.func @unknown_device(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{unknown device 'tpu' (expected cpu or gpu)}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, tpu], point = 8>}
  return
}

// -----

// The same device twice.
func.func @duplicate_device(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{device 'gpu' appears twice in the split}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[gpu, gpu], point = 8>}
  return
}

// -----

// A runtime split point outside any segment.
func.func @runtime_split_outside_segment(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  // expected-error @+1 {{split point = runtime needs an enclosing hg.segment}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime>}
  return
}

// -----

// A partial over a reversed token range.
func.func @reversed_range(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %m: memref<1x8xf32>) {
  %c9 = arith.constant 9 : index
  %c3 = arith.constant 3 : index
  // expected-error @+1 {{token range [9, 3) is reversed}}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) range [%c9, %c3) on cpu -> o(%q : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A partial range past the capacity of the block table.
func.func @range_beyond_capacity(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %m: memref<1x8xf32>) {
  %c100 = arith.constant 100 : index
  // expected-error @+1 {{token range is outside [0, len]: no sequence holds more than 64 tokens}}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) range [%c100, len) on gpu -> o(%q : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) {scale = 0.125 : f32}
  return
}

// -----

// top_k on a gpu partial.
func.func @topk_on_gpu(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %m: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{top_k (sparse mode) is only supported on the cpu}}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) range [%c0, len) on gpu -> o(%q : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) {scale = 0.125 : f32, top_k = 4}
  return
}

// -----

// Running statistics of the wrong shape.
func.func @stat_shape(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %m: memref<1x4xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{m must be [batch, q_heads] of the output}}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) range [%c0, len) on cpu -> o(%q : memref<1x8x64xf32>) m(%m : memref<1x4xf32>) l(%m : memref<1x4xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A merge with fewer maxima than outputs.
func.func @merge_counts(%o: memref<1x8x64xf32>, %m: memref<1x8xf32>) {
  // expected-error @+1 {{needs as many m and l buffers as outputs, got 2 outputs, 1 maxima and 2 sums}}
  hg.merge o(%o, %o : memref<1x8x64xf32>, memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m, %m : memref<1x8xf32>, memref<1x8xf32>) into(%o : memref<1x8x64xf32>)
  return
}

// -----

// A merge of partials shaped unlike the output.
func.func @merge_shapes(%o: memref<1x8x64xf32>, %p: memref<1x8x32xf32>, %m: memref<1x8xf32>) {
  // expected-error @+1 {{partial output #0 must have the shape of the merged output}}
  hg.merge o(%p : memref<1x8x32xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) into(%o : memref<1x8x64xf32>)
  return
}

// -----

// A split point outside any segment.
func.func @split_point_outside_segment() {
  // expected-error @+1 {{must be inside an hg.segment}}
  %s = hg.split_point : index
  return
}

// -----

// Segments inside segments.
func.func @nested_segments() {
  hg.segment 0 {
    // expected-error @+1 {{segments do not nest}}
    hg.segment 1 {
    }
  }
  return
}

// -----

// kv_heads = 0 (this divided by zero in the verifier: q_heads % kv_heads).
func.func @zero_kv_heads(%q: memref<1x8x64xf32>, %k: memref<8x0x16x64xf32>, %v: memref<8x0x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the K pool has kv_heads = 0 in 'memref<8x0x16x64xf32>'; every dimension must be positive}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x0x16x64xf32>, memref<8x0x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// q_heads = 0.
func.func @zero_q_heads(%q: memref<1x0x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x0x64xf32>) {
  // expected-error @+1 {{q has q_heads = 0}}
  hg.attention q(%q : memref<1x0x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x0x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// head_dim = 0 in both q and the pool.
func.func @zero_head_dim(%q: memref<1x8x0xf32>, %k: memref<8x2x16x0xf32>, %v: memref<8x2x16x0xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x0xf32>) {
  // expected-error @+1 {{q has head_dim = 0}}
  hg.attention q(%q : memref<1x8x0xf32>) kv(%k, %v : memref<8x2x16x0xf32>, memref<8x2x16x0xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x0xf32>) {scale = 0.125 : f32}
  return
}

// -----

// block_size = 0.
func.func @zero_block_size(%q: memref<1x8x64xf32>, %k: memref<8x2x0x64xf32>, %v: memref<8x2x0x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the K pool has block_size = 0}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x2x0x64xf32>, memref<8x2x0x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A pool without blocks.
func.func @zero_num_blocks(%q: memref<1x8x64xf32>, %k: memref<0x2x16x64xf32>, %v: memref<0x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the K pool has num_blocks = 0}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<0x2x16x64xf32>, memref<0x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// kv_heads = 0 in the V pool only (the K pool is dynamic there).
func.func @zero_v_kv_heads(%q: memref<1x8x64xf32>, %k: memref<8x?x16x64xf32>, %v: memref<8x0x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the V pool has kv_heads = 0}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x?x16x64xf32>, memref<8x0x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A static batch of 0.
func.func @zero_batch(%q: memref<0x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<0x4xi32>, %n: memref<0xi32>, %o: memref<0x8x64xf32>) {
  // expected-error @+1 {{q has batch = 0}}
  hg.attention q(%q : memref<0x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<0x4xi32>) lens(%n : memref<0xi32>) out(%o : memref<0x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A block table with no columns.
func.func @zero_max_blocks(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x0xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the block table has max_blocks = 0}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x0xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Dynamic kv_heads are refused before any division.
func.func @dynamic_kv_heads_zero_q(%q: memref<1x8x64xf32>, %k: memref<8x?x16x64xf32>, %v: memref<8x?x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{the KV pool's kv_heads, block size and head_dim must be static}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x?x16x64xf32>, memref<8x?x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A block table whose capacity overflows 64-bit token positions.
func.func @capacity_overflow(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x1152921504606846976xi32>, %n: memref<1xi32>, %o: memref<1x8x64xf32>) {
  // expected-error @+1 {{block table capacity 1152921504606846976 blocks x 16 tokens overflows a 64-bit index}}
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x1152921504606846976xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// kv_heads = 0 in hg.partial_attention (the same SIGFPE as hg.attention).
func.func @partial_zero_kv_heads(%q: memref<1x8x64xf32>, %k: memref<8x0x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>, %m: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{the K pool has kv_heads = 0}}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<8x0x16x64xf32>, memref<8x0x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) range [%c0, len) on cpu -> o(%q : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A merge into an output with head_dim = 0.
func.func @merge_zero_head_dim(%o: memref<1x8x0xf32>, %m: memref<1x8xf32>) {
  // expected-error @+1 {{the merged output has head_dim = 0}}
  hg.merge o(%o : memref<1x8x0xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) into(%o : memref<1x8x0xf32>)
  return
}

// -----

// A merge whose partial has q_heads = 0 against a dynamic output.
func.func @merge_zero_heads(%o: memref<1x0x64xf32>, %m: memref<1x0xf32>, %out: memref<1x?x64xf32>) {
  // expected-error @+1 {{partial output #0 has q_heads = 0}}
  hg.merge o(%o : memref<1x0x64xf32>) m(%m : memref<1x0xf32>) l(%m : memref<1x0xf32>) into(%out : memref<1x?x64xf32>)
  return
}
