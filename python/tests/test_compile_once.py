# Compile once, call many times: dynamic batches and lengths, repeated and concurrent calls.
import sys
import threading
import time

import numpy as np

import hybridgen as hg
from conftest import make_case, requires_jit, tolerance

pytestmark = requires_jit


def test_one_compilation_serves_many_shapes(rng):
    attn = hg.compile_attention(q_heads=4, kv_heads=2, head_dim=16, block_size=8, split=12)
    module = attn.module
    for lens in ([5], [40, 3, 17], [1, 1], [64, 63, 62, 61, 60]):
        q, k, v, table, lens = make_case(rng, lens=lens, q_heads=4, kv_heads=2, head_dim=16, block_size=8)
        out = attn(q, k, v, table, lens)
        np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))
    assert attn.module is module  # nothing recompiled


def test_repeated_calls_reuse_the_output_buffer(rng):
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=16)
    q, k, v, table, lens = make_case(rng, lens=[50, 20])
    out = np.empty_like(q)
    for _ in range(20):
        q[:] = rng.standard_normal(q.shape)
        assert attn(q, k, v, table, lens, out) is out
        np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))


def test_concurrent_calls_from_threads(rng):
    """The GIL is released while compiled code runs; concurrent calls on one module stay correct."""
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=32)
    cases = [make_case(np.random.default_rng(i), lens=[70, 33]) for i in range(4)]
    results, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(5):
                results[i] = attn(*cases[i])
        except Exception as e:  # surfaced below; a thread's exception is otherwise lost
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for case, out in zip(cases, results):
        np.testing.assert_allclose(out, hg.reference_attention(*case), **tolerance("f32"))


def test_submit_streams_results_in_order(rng):
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=16)
    cases = [make_case(np.random.default_rng(i), lens=[30 + i, 5]) for i in range(6)]
    futures = [attn.submit(*case) for case in cases]
    for case, fut in zip(cases, futures):
        np.testing.assert_allclose(fut.result(timeout=60), hg.reference_attention(*case), **tolerance("f32"))


def test_gil_is_released_while_compiled_code_runs():
    """With a long switch interval the main thread can only run during the call if the call released
    the GIL; it records when it first ran, the worker when its call returned."""
    attn = hg.compile_attention(q_heads=16, kv_heads=2, head_dim=128, block_size=64, split=0)
    batch, tokens = 4, 16384
    nblk = tokens // 64
    k = np.full((batch * nblk, 2, 64, 128), 0.01, np.float32)
    table = np.arange(batch * nblk, dtype=np.int32).reshape(batch, nblk)
    lens = np.full(batch, tokens, np.int32)
    q = np.ones((batch, 16, 128), np.float32)
    attn(q, k, k, table, lens)  # warm up (page faults, OpenMP threads)
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        overlapped = False
        for _ in range(3):  # a heavily loaded machine may delay the main thread's wake-up once
            started, times = threading.Event(), {}

            def work():
                started.set()
                attn(q, k, k, table, lens)
                times["end"] = time.perf_counter()

            t = threading.Thread(target=work)
            t.start()
            started.wait()
            first = time.perf_counter()
            t.join()
            if first < times["end"]:
                overlapped = True
                break
    finally:
        sys.setswitchinterval(old)
    assert overlapped
