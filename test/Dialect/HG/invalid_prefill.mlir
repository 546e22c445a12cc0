// Verifier errors of hg.prefill_attention and of hg.segment's ids, one case per error.
// RUN: hybridgen-opt %s -split-input-file -verify-diagnostics

// A query of rank 3 (the decode layout) where prefill needs [batch, chunk, q_heads, head_dim].
func.func @query_rank(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{operand #0 must be 4D memref of 32-bit float values}}
  hg.prefill_attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An f16 query: queries and outputs are f32.
func.func @query_dtype(%q: memref<1x4x8x64xf16>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{operand #0 must be 4D memref of 32-bit float values}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf16>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An output whose chunk differs from the query's.
func.func @chunk_mismatch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x5x8x64xf32>) {
  // expected-error @+1 {{out must have the shape of q: chunk is 5 in out but 4 in q}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x5x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An output with fewer heads than the query.
func.func @out_heads_mismatch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x4x64xf32>) {
  // expected-error @+1 {{out must have the shape of q: q_heads is 4 in out but 8 in q}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x4x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An empty chunk.
func.func @zero_chunk(%q: memref<1x0x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x0x8x64xf32>) {
  // expected-error @+1 {{q has chunk = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x0x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x0x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An empty batch.
func.func @zero_batch(%q: memref<0x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<0x8xi32>, %n: memref<0xi32>, %o: memref<0x4x8x64xf32>) {
  // expected-error @+1 {{q has batch = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<0x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<0x8xi32>) lens(%n : memref<0xi32>) out(%o : memref<0x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// No query heads.
func.func @zero_q_heads(%q: memref<1x4x0x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x0x64xf32>) {
  // expected-error @+1 {{q has q_heads = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x0x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x0x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A zero head_dim.
func.func @zero_head_dim(%q: memref<1x4x8x0xf32>, %k: memref<8x2x16x0xf32>, %v: memref<8x2x16x0xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x0xf32>) {
  // expected-error @+1 {{q has head_dim = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x8x0xf32>) kv(%k, %v : memref<8x2x16x0xf32>, memref<8x2x16x0xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x0xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A pool without kv heads (q_heads % kv_heads would divide by zero).
func.func @zero_kv_heads(%q: memref<1x4x8x64xf32>, %k: memref<8x0x16x64xf32>, %v: memref<8x0x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{the K pool has kv_heads = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x0x16x64xf32>, memref<8x0x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A pool with empty blocks.
func.func @zero_block_size(%q: memref<1x4x8x64xf32>, %k: memref<8x2x0x64xf32>, %v: memref<8x2x0x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{the K pool has block_size = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x0x64xf32>, memref<8x2x0x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A pool without blocks.
func.func @zero_blocks(%q: memref<1x4x8x64xf32>, %k: memref<0x2x16x64xf32>, %v: memref<0x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{the K pool has num_blocks = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<0x2x16x64xf32>, memref<0x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A block table without columns.
func.func @zero_table_width(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x0xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{the block table has max_blocks = 0, which must be positive}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x0xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// q_heads that are not a whole multiple of kv_heads.
func.func @gqa_ratio_not_whole(%q: memref<1x4x6x64xf32>, %k: memref<8x4x16x64xf32>, %v: memref<8x4x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x6x64xf32>) {
  // expected-error @+1 {{q_heads (6) is not a whole multiple of kv_heads (4)}}
  hg.prefill_attention q(%q : memref<1x4x6x64xf32>) kv(%k, %v : memref<8x4x16x64xf32>, memref<8x4x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x6x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// head_dim of the query and of the pool differ.
func.func @head_dim_mismatch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x128xf32>, %v: memref<8x2x16x128xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{head_dim of q (64) does not match the KV pool (128)}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x128xf32>, memref<8x2x16x128xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// K and V pools with different element types.
func.func @kv_dtype_mismatch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xbf16>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{K and V pools must have the same element type, got 'f32' and 'bf16'}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xbf16>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// K and V pools with different block sizes.
func.func @kv_shape_mismatch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x32x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{K and V pools must have the same shape: block_size is 16 in K but 32 in V}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x32x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An unsupported KV element type (i8).
func.func @kv_dtype_i8(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xi8>, %v: memref<8x2x16x64xi8>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{operand #1 must be 4D memref of 32-bit float or 16-bit float or bfloat16 type values}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xi8>, memref<8x2x16x64xi8>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A pool whose kv_heads is dynamic: the kernel is specialized for it.
func.func @dynamic_kv_heads(%q: memref<1x4x8x64xf32>, %k: memref<8x?x16x64xf32>, %v: memref<8x?x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{the KV pool's kv_heads, block size and head_dim must be static}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x?x16x64xf32>, memref<8x?x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Dynamic query heads.
func.func @dynamic_q_heads(%q: memref<1x4x?x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x?x64xf32>) {
  // expected-error @+1 {{q_heads and head_dim of q must be static}}
  hg.prefill_attention q(%q : memref<1x4x?x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x?x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A block table whose batch differs from the query's.
func.func @table_batch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<2x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{block table has 2 rows but the batch is 1}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<2x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// seq_lens whose batch differs from the query's.
func.func @lens_batch(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<3xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{seq_lens has 3 entries but the batch is 1}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<3xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A chunk longer than the block table can hold.
func.func @chunk_beyond_table(%q: memref<1x200x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x200x8x64xf32>) {
  // expected-error @+1 {{a chunk of 200 tokens does not fit in a block table of 8 blocks of 16 tokens}}
  hg.prefill_attention q(%q : memref<1x200x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x200x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// A split annotation: prefill runs on one device.
func.func @split_given(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{takes no split: prefill runs on one device}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime>}
  return
}

// -----

// A zero scale.
func.func @zero_scale(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{scale must be positive and finite, got 0}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.0 : f32}
  return
}

// -----

// A negative sliding window.
func.func @negative_window(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{sliding window must be positive, got -4}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32, window = -4}
  return
}

// -----

// A negative softcap.
func.func @negative_softcap(%q: memref<1x4x8x64xf32>, %k: memref<8x2x16x64xf32>, %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x4x8x64xf32>) {
  // expected-error @+1 {{softcap must be positive and finite, got -1}}
  hg.prefill_attention q(%q : memref<1x4x8x64xf32>) kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>) table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x4x8x64xf32>) {scale = 0.125 : f32, softcap = -1.0 : f32}
  return
}

// -----

// A constant segment id below zero.
func.func @negative_segment_id() {
  // expected-error @+1 {{segment id must be non-negative, got -1}}
  hg.segment -1 {
  }
  return
}

// -----

// A segment with both a constant and a dynamic id (generic form; the custom form cannot say it).
func.func @segment_both_ids(%layer: index) {
  // expected-error @+1 {{takes either a constant id or dynamic(%id), not both}}
  "hg.segment"(%layer) <{id = 3 : i64}> ({
  ^bb0:
  }) : (index) -> ()
  return
}

// -----

// A segment without any id (generic form).
func.func @segment_without_id() {
  // expected-error @+1 {{needs a segment id: a constant or dynamic(%id)}}
  "hg.segment"() ({
  ^bb0:
  }) : () -> ()
  return
}

// -----

// A dynamic segment id that is not an index.
func.func @segment_id_not_index(%layer: i64) {
  // expected-note @-1 {{prior use here}}
  // expected-error @+1 {{use of value '%layer' expects different type than prior uses: 'index' vs 'i64'}}
  hg.segment dynamic(%layer) {
  }
  return
}

// -----

// A dynamic segment inside a dynamic segment.
func.func @nested_dynamic_segments(%a: index, %b: index) {
  hg.segment dynamic(%a) {
    // expected-error @+1 {{segments do not nest}}
    hg.segment dynamic(%b) {
    }
  }
  return
}

// -----

// A dynamic id without its parentheses.
func.func @segment_dynamic_without_parens(%layer: index) {
  // expected-error @+1 {{expected '('}}
  hg.segment dynamic %layer {
  }
  return
}

// -----

// A segment without any id in the custom form.
func.func @segment_missing_id() {
  // expected-error @+1 {{expected integer value}}
  hg.segment {
  }
  return
}
