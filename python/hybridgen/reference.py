"""Float64 numpy reference of paged decode attention and of the exact partial merge (docs/interfaces.md)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ._hybridgen import ArgumentError


class Partial(NamedTuple):
    """One partial attention result: normalized o [B, H, D], running max m [B, H], sum l [B, H]."""

    o: np.ndarray
    m: np.ndarray
    l: np.ndarray  # noqa: E741 - the name used by the math everywhere


def _as_f64(a, name: str = "array") -> np.ndarray:
    # ml_dtypes.bfloat16 arrays convert exactly through astype; uint16 words are not guessed at.
    try:
        return np.asarray(a).astype(np.float64)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{name}: not a numeric array ({e})") from None


def _check_case(q, k_pool, v_pool, block_table, seq_lens):
    """ArgumentError unless the arrays have the shapes of docs/interfaces.md and every block a
    sequence's length needs is inside the table and the pool (so the gathers cannot fail)."""
    if q.ndim != 3 or k_pool.ndim != 4 or k_pool.shape != v_pool.shape:
        raise ArgumentError(f"expected q [B, Hq, D] and pools [N, Hkv, block, D] alike; got q {q.shape}, "
                            f"k_pool {k_pool.shape}, v_pool {v_pool.shape}")
    batch, qh, d = q.shape
    n, kvh, block, pd = k_pool.shape
    if pd != d or kvh == 0 or block == 0 or qh % kvh:
        raise ArgumentError(f"q {q.shape} does not fit pools {k_pool.shape} (head_dim, q_heads % kv_heads)")
    if block_table.ndim != 2 or block_table.shape[0] != batch or seq_lens.shape != (batch,):
        raise ArgumentError(f"expected block_table [B, max_blocks] and seq_lens [B] with B = {batch}; got "
                            f"{block_table.shape} and {seq_lens.shape}")
    for b in range(batch):
        length = int(seq_lens[b])
        need = -(-length // block)
        if length < 0 or need > block_table.shape[1]:
            raise ArgumentError(f"sequence {b}: length {length} does not fit {block_table.shape[1]} blocks")
        ids = block_table[b, :need]
        if need and (ids.min() < 0 or ids.max() >= n):
            raise ArgumentError(f"sequence {b}: block ids outside the pool of {n} blocks")


def _sequence_kv(pool: np.ndarray, table_row: np.ndarray, n: int, block_size: int) -> np.ndarray:
    """[kv_heads, n, head_dim] of one sequence gathered through its block table."""
    nblk = -(-n // block_size)
    blocks = np.asarray(table_row[:nblk], dtype=np.int64)
    x = pool[blocks]  # [nblk, kv_heads, block_size, head_dim]
    kvh, d = x.shape[1], x.shape[3]
    return x.transpose(1, 0, 2, 3).reshape(kvh, nblk * block_size, d)[:, :n]


def reference_partial(q, k_pool, v_pool, block_table, seq_lens, start=0, end=None, *, scale=None,
                      softcap=None, window=None, top_k=None) -> Partial:
    """(o, m, l) in float64 over tokens [start, end) of every sequence (clipped to its length).

    start/end are ints or per-sequence arrays; end=None means the sequence length. top_k keeps only
    the top_k logits per head inside the range (the sparse CPU side)."""
    q = _as_f64(q, "q")
    k_pool, v_pool = _as_f64(k_pool, "k_pool"), _as_f64(v_pool, "v_pool")
    try:
        block_table = np.asarray(block_table).astype(np.int64)
        seq_lens = np.asarray(seq_lens).astype(np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise ArgumentError(f"block_table / seq_lens: not integer arrays ({e})") from None
    _check_case(q, k_pool, v_pool, block_table, seq_lens)
    batch, qh, d = q.shape
    kvh, block_size = k_pool.shape[1], k_pool.shape[2]
    group = qh // kvh
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    starts = np.broadcast_to(np.asarray(start, dtype=np.int64), (batch,))
    ends = seq_lens if end is None else np.broadcast_to(np.asarray(end, dtype=np.int64), (batch,))
    o = np.zeros((batch, qh, d))
    m = np.full((batch, qh), -np.inf)
    l = np.zeros((batch, qh))  # noqa: E741
    for b in range(batch):
        n = int(seq_lens[b])
        lo = max(0, min(int(starts[b]), n))
        hi = max(lo, min(int(ends[b]), n))
        if window is not None:
            lo = max(lo, n - int(window))
        if hi <= lo:
            continue
        k = _sequence_kv(k_pool, block_table[b], n, block_size)[:, lo:hi]
        v = _sequence_kv(v_pool, block_table[b], n, block_size)[:, lo:hi]
        qg = q[b].reshape(kvh, group, d)
        s = np.einsum("hgd,htd->hgt", qg, k) * scale
        if softcap is not None:
            s = softcap * np.tanh(s / softcap)
        if top_k is not None and top_k < s.shape[-1]:
            # Keep the top_k logits per head: everything below the k-th largest is dropped.
            kth = np.sort(s, axis=-1)[..., -top_k][..., None]
            s = np.where(s >= kth, s, -np.inf)
        mb = s.max(axis=-1)
        p = np.exp(s - mb[..., None])
        lb = p.sum(axis=-1)
        ob = np.einsum("hgt,htd->hgd", p, v) / lb[..., None]
        o[b], m[b], l[b] = ob.reshape(qh, d), mb.reshape(qh), lb.reshape(qh)
    return Partial(o, m, l)


def merge_partials(parts: Sequence[Partial]) -> Partial:
    """Exact log-sum-exp merge of partials over disjoint token sets; empty partials weigh 0.
    ArgumentError for no partials, or partials that are not (o [B, H, D], m [B, H], l [B, H]) alike."""
    try:
        parts = [Partial(*(np.asarray(x, dtype=np.float64) for x in p)) for p in parts]
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"merge_partials: every partial must be (o, m, l) arrays ({e})") from None
    if not parts:
        raise ArgumentError("merge_partials: needs at least one partial")
    o_shape = parts[0].o.shape
    for i, p in enumerate(parts):
        if p.o.ndim != 3 or p.o.shape != o_shape or p.m.shape != o_shape[:2] or p.l.shape != o_shape[:2]:
            raise ArgumentError(f"merge_partials: partial {i} has shapes o {p.o.shape}, m {p.m.shape}, "
                                f"l {p.l.shape}; expected o {o_shape} and m, l {o_shape[:2]}")
    m = np.max(np.stack([p.m for p in parts]), axis=0)
    finite_m = np.where(np.isfinite(m), m, 0.0)
    o = np.zeros_like(parts[0].o, dtype=np.float64)
    total = np.zeros_like(m, dtype=np.float64)
    for p in parts:
        w = np.where(p.l > 0, p.l * np.exp(np.where(np.isfinite(p.m), p.m, 0.0) - finite_m), 0.0)
        o += w[..., None] * p.o
        total += w
    o = np.divide(o, total[..., None], out=np.zeros_like(o), where=total[..., None] > 0)
    return Partial(o, m, total)


def reference_attention(q, k_pool, v_pool, block_table, seq_lens, *, scale=None, softcap=None,
                        window=None) -> np.ndarray:
    """Dense decode attention output [B, H, D] in float64 (sequences of length 0 give zeros)."""
    return reference_partial(q, k_pool, v_pool, block_table, seq_lens, scale=scale,
                             softcap=softcap, window=window).o


def reference_prefill_attention(q, k_pool, v_pool, block_table, seq_lens, *, scale=None,
                                softcap=None, window=None) -> np.ndarray:
    """Chunked-prefill attention [B, C, H, D] in float64 (hg.prefill_attention).

    q is [batch, chunk, q_heads, head_dim]; seq_lens include the chunk, whose K/V rows are already
    in the pools. Row t of sequence b sits at position p = seq_lens[b] - chunk + t and attends the
    tokens j <= p (and j > p - window with a window). seq_lens[b] < chunk is an argument error;
    like the compiled kernel, the rows before position 0 then see no token and are zero."""
    q = _as_f64(q)
    k_pool, v_pool = _as_f64(k_pool), _as_f64(v_pool)
    block_table = np.asarray(block_table)
    seq_lens = np.asarray(seq_lens).astype(np.int64)
    batch, chunk, qh, d = q.shape
    kvh, block_size = k_pool.shape[1], k_pool.shape[2]
    group = qh // kvh
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    out = np.zeros((batch, chunk, qh, d))
    for b in range(batch):
        n = int(seq_lens[b])
        if n <= 0:
            continue
        k = np.repeat(_sequence_kv(k_pool, block_table[b], n, block_size), group, axis=0)
        v = np.repeat(_sequence_kv(v_pool, block_table[b], n, block_size), group, axis=0)
        s = np.einsum("thd,hjd->htj", q[b], k) * scale  # [q_heads, chunk, n]
        if softcap is not None:
            s = softcap * np.tanh(s / softcap)
        pos = n - chunk + np.arange(chunk)[:, None]  # [chunk, 1]
        j = np.arange(n)[None, :]
        visible = j <= pos
        if window is not None:
            visible &= j > pos - int(window)
        s = np.where(visible[None], s, -np.inf)
        mx = s.max(axis=-1, keepdims=True)
        seen = np.isfinite(mx)
        p = np.where(visible[None], np.exp(s - np.where(seen, mx, 0.0)), 0.0)
        total = p.sum(axis=-1, keepdims=True)
        o = np.einsum("htj,hjd->htd", p, v)
        o = np.divide(o, total, out=np.zeros_like(o), where=total > 0)
        out[b] = o.transpose(1, 0, 2)
    return out


def transpose_k_pieces(k_pool) -> np.ndarray:
    """A K pool [num_blocks, kv_heads, block_size, head_dim] as code compiled with
    ``{"k_transposed": True}`` reads it: each (block, kv head) piece stored [head_dim][block_size],
    in an array of the same shape and dtype (docs/cpu-runs.md, "K transposed per block")."""
    k_pool = np.asarray(k_pool)
    if k_pool.ndim != 4:
        raise ArgumentError(f"k_pool must be [num_blocks, kv_heads, block_size, head_dim], got shape {k_pool.shape}")
    return np.ascontiguousarray(k_pool.swapaxes(2, 3)).reshape(k_pool.shape)
