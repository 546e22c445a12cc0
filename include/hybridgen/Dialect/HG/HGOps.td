//===- HGOps.td - hg operations -----------------------------*- tablegen -*-===//
#ifndef HYBRIDGEN_DIALECT_HG_HGOPS_TD
#define HYBRIDGEN_DIALECT_HG_HGOPS_TD

include "hybridgen/Dialect/HG/HGDialect.td"
include "hybridgen/Dialect/HG/HGAttrs.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Buffers follow docs/interfaces.md; every op works on memrefs in destination-passing style.
def HG_QueryBuffer : MemRefRankOf<[F32], [3]>;
def HG_KVPool : MemRefRankOf<[F32, F16, BF16], [4]>;
def HG_BlockTable : MemRefRankOf<[I32], [2]>;
def HG_SeqLens : MemRefRankOf<[I32], [1]>;
def HG_RowStat : MemRefRankOf<[F32], [2]>;
def HG_ChunkQueryBuffer : MemRefRankOf<[F32], [4]>;

//===----------------------------------------------------------------------===//
// hg.attention
//===----------------------------------------------------------------------===//

def HG_AttentionOp : HG_Op<"attention"> {
  let summary = "decode attention over a paged KV cache, optionally split between devices";
  let description = [{
    One query token per sequence attends to the sequence's cached tokens:
    `out[b, h] = softmax_j(s_j) . V[b, j]` with `s_j = scale * q[b, h] . K[b, j]` (optionally soft-capped
    and restricted to the last `window` tokens). Query head `h` reads kv-head `h / (q_heads / kv_heads)`.
    The optional `split` annotation divides the token axis between devices (see `#hg.split`).

    ```mlir
    hg.attention q(%q : memref<2x32x128xf32>)
        kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
        table(%bt : memref<2x32xi32>) lens(%lens : memref<2xi32>)
        out(%o : memref<2x32x128xf32>)
        {scale = 0.0883883 : f32, split = #hg.split<[cpu, gpu], point = 256, merge = lse, dense>}
    ```
  }];
  let arguments = (ins
    Arg<HG_QueryBuffer, "queries", [MemRead]>:$q,
    Arg<HG_KVPool, "key pool", [MemRead]>:$k_pool,
    Arg<HG_KVPool, "value pool", [MemRead]>:$v_pool,
    Arg<HG_BlockTable, "block table", [MemRead]>:$block_table,
    Arg<HG_SeqLens, "sequence lengths", [MemRead]>:$seq_lens,
    Arg<HG_QueryBuffer, "output", [MemWrite]>:$out,
    F32Attr:$scale,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<HG_SplitAttr>:$split
  );
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)`
    `kv` `(` $k_pool `,` $v_pool `:` type($k_pool) `,` type($v_pool) `)`
    `table` `(` $block_table `:` type($block_table) `)`
    `lens` `(` $seq_lens `:` type($seq_lens) `)`
    `out` `(` $out `:` type($out) `)` attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// hg.partial_attention
//===----------------------------------------------------------------------===//

def HG_PartialAttentionOp : HG_Op<"partial_attention"> {
  let summary = "attention over a token range, yielding the (o, m, l) partial";
  let description = [{
    Computes the partial of docs/interfaces.md over tokens `[begin, end)` of every sequence, both
    clamped to `[0, len]` (no `end` means `len`). An empty range yields `m = -inf, l = 0, o = 0`.
    `top_k` (CPU only) keeps the largest `top_k` logits per query head and reads only their V rows.

    ```mlir
    hg.partial_attention q(%q : memref<1x8x64xf32>)
        kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
        table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>)
        range [%s, len) on cpu
        -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%l : memref<1x8xf32>)
        {scale = 0.125 : f32}
    ```
  }];
  let arguments = (ins
    Arg<HG_QueryBuffer, "queries", [MemRead]>:$q,
    Arg<HG_KVPool, "key pool", [MemRead]>:$k_pool,
    Arg<HG_KVPool, "value pool", [MemRead]>:$v_pool,
    Arg<HG_BlockTable, "block table", [MemRead]>:$block_table,
    Arg<HG_SeqLens, "sequence lengths", [MemRead]>:$seq_lens,
    Index:$begin,
    Optional<Index>:$end,
    Arg<HG_QueryBuffer, "normalized partial output", [MemWrite]>:$o,
    Arg<HG_RowStat, "running max", [MemWrite]>:$m,
    Arg<HG_RowStat, "running sum", [MemWrite]>:$l,
    HG_DeviceAttr:$device,
    F32Attr:$scale,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<I64Attr>:$top_k
  );
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)`
    `kv` `(` $k_pool `,` $v_pool `:` type($k_pool) `,` type($v_pool) `)`
    `table` `(` $block_table `:` type($block_table) `)`
    `lens` `(` $seq_lens `:` type($seq_lens) `)`
    `range` ` ` `[` $begin `,` ($end^) : (`len`)? `)` `on` $device
    `->` `o` `(` $o `:` type($o) `)` `m` `(` $m `:` type($m) `)` `l` `(` $l `:` type($l) `)`
    attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// hg.merge
//===----------------------------------------------------------------------===//

def HG_MergeOp : HG_Op<"merge", [AttrSizedOperandSegments]> {
  let summary = "exact log-sum-exp merge of partials over disjoint token sets";
  let description = [{
    `out = sum_i w_i o_i / sum_i w_i` with `w_i = l_i exp(m_i - max_i m_i)` (and `w_i = 0` where
    `l_i = 0`, so empty partials contribute nothing). Writes zeros where every partial is empty.

    ```mlir
    hg.merge o(%oa, %ob : memref<1x8x64xf32>, memref<1x8x64xf32>)
             m(%ma, %mb : memref<1x8xf32>, memref<1x8xf32>)
             l(%la, %lb : memref<1x8xf32>, memref<1x8xf32>)
             into(%out : memref<1x8x64xf32>)
    ```
  }];
  let arguments = (ins
    Arg<Variadic<HG_QueryBuffer>, "partial outputs", [MemRead]>:$partial_o,
    Arg<Variadic<HG_RowStat>, "partial maxima", [MemRead]>:$partial_m,
    Arg<Variadic<HG_RowStat>, "partial sums", [MemRead]>:$partial_l,
    Arg<HG_QueryBuffer, "merged output", [MemWrite]>:$out
  );
  let assemblyFormat = [{
    `o` `(` $partial_o `:` type($partial_o) `)`
    `m` `(` $partial_m `:` type($partial_m) `)`
    `l` `(` $partial_l `:` type($partial_l) `)`
    `into` `(` $out `:` type($out) `)` attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// hg.prefill_attention
//===----------------------------------------------------------------------===//

def HG_PrefillAttentionOp : HG_Op<"prefill_attention"> {
  let summary = "causal attention of a chunk of new tokens over the cached prefix";
  let description = [{
    Chunked prefill: each sequence adds `chunk` new tokens whose K and V rows are already in the
    pool. With `L = seq_lens[b]` (the length *including* the chunk), query row `t` of sequence `b`
    sits at position `p = L - chunk + t` and attends the tokens `j <= p` (and `j > p - window` with
    a window): `out[b, t, h] = softmax_j(s_j) . V[b, j]`, `s_j = scale * q[b, t, h] . K[b, j]`,
    soft-capped like hg.attention. Query head `h` reads kv-head `h / (q_heads / kv_heads)`.
    `L < chunk` is an argument error at run time. Prefill runs on one device: there is no split.

    ```mlir
    hg.prefill_attention q(%q : memref<1x64x32x128xf32>)
        kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
        table(%bt : memref<1x32xi32>) lens(%lens : memref<1xi32>)
        out(%o : memref<1x64x32x128xf32>)
        {scale = 0.0883883 : f32, window = 4096}
    ```
  }];
  let arguments = (ins
    Arg<HG_ChunkQueryBuffer, "queries of the chunk", [MemRead]>:$q,
    Arg<HG_KVPool, "key pool", [MemRead]>:$k_pool,
    Arg<HG_KVPool, "value pool", [MemRead]>:$v_pool,
    Arg<HG_BlockTable, "block table", [MemRead]>:$block_table,
    Arg<HG_SeqLens, "sequence lengths, chunk included", [MemRead]>:$seq_lens,
    Arg<HG_ChunkQueryBuffer, "output", [MemWrite]>:$out,
    F32Attr:$scale,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<F32Attr>:$softcap
  );
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)`
    `kv` `(` $k_pool `,` $v_pool `:` type($k_pool) `,` type($v_pool) `)`
    `table` `(` $block_table `:` type($block_table) `)`
    `lens` `(` $seq_lens `:` type($seq_lens) `)`
    `out` `(` $out `:` type($out) `)` attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compiled segments and the runtime's split point
//===----------------------------------------------------------------------===//

def HG_SegmentOp : HG_Op<"segment", [SingleBlock, NoTerminator]> {
  let summary = "code between two scheduler decision points";
  let description = [{
    The region runs as one compiled segment: the runtime is told when it begins and ends (so the
    feedback scheduler sees its CPU and GPU times) and `hg.split_point` ops inside read the split
    point the scheduler chose for segment `id`.

    The id is either a constant attribute or, with `dynamic(%id)`, an `index` value known only at
    run time: one function shared by every layer of a model then runs as a different segment per
    layer (the caller passes the layer number), and the scheduler tunes each layer apart.

    ```mlir
    hg.segment 3 {
      %s = hg.split_point : index
      ...
    }
    hg.segment dynamic(%layer) {
      ...
    }
    ```
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$id, Optional<Index>:$dynamic_id);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    custom<SegmentId>($id, $dynamic_id) attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "int64_t":$id), [{
      build($_builder, $_state, $_builder.getI64IntegerAttr(id), ::mlir::Value());
    }]>,
    OpBuilder<(ins "::mlir::Value":$dynamicId), [{
      build($_builder, $_state, ::mlir::IntegerAttr(), dynamicId);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The segment id as an i64 value at |b|'s insertion point: the constant id materialized, or
    /// the dynamic id cast from index (what the runtime's C ABI takes).
    ::mlir::Value buildIdValue(::mlir::OpBuilder &b, ::mlir::Location loc);
  }];
}

def HG_SplitPointOp : HG_Op<"split_point"> {
  let summary = "the split point the runtime's scheduler chose for the enclosing segment";
  let description = [{
    Number of tokens of each sequence given to the first device of the split, read from the runtime
    (`hgrt_split_point`) each time the enclosing segment runs.
  }];
  let results = (outs Index:$point);
  let assemblyFormat = "attr-dict `:` type($point)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The enclosing segment (the verifier guarantees there is one).
    SegmentOp getSegment();
  }];
}

#endif // HYBRIDGEN_DIALECT_HG_HGOPS_TD
