"""JIT compilation from Python: MLIR text or an attention spec in, callables on numpy/DLPack arrays out."""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _hybridgen_jit as _native
from ._arrays import dtype_name, native_view
from .reference import Partial


def _options(options: Union[None, Mapping[str, Any], "_native.CompileOptions"]):
    if isinstance(options, _native.CompileOptions):
        return options
    if options is not None and not isinstance(options, Mapping):
        raise _native.ArgumentError(f"options must be a CompileOptions or a mapping, got {type(options).__name__}")
    opts = _native.CompileOptions()
    for key, value in dict(options or {}).items():
        if not isinstance(key, str) or key.startswith("_") or not hasattr(opts, key):
            raise _native.ArgumentError(f"unknown compile option {key!r}")
        setattr(opts, key, value)  # a value of the wrong type: ArgumentError (hybridgen._errors)
    return opts


_ARG_NAMES = ("q", "k_pool", "v_pool", "block_table", "seq_lens", "out")
_ARG_RE = re.compile(r"\bargument (\d+)\b")


def _name_argument(match) -> str:
    i = int(match.group(1))
    name = _ARG_NAMES[i] if i < len(_ARG_NAMES) else f"partial {(i - 6) // 3}"
    return f"argument {i} ({name})"


_executor: Optional[ThreadPoolExecutor] = None
_executor_lock = threading.Lock()


def _submit(fn, *args, **kwargs) -> Future:
    """Runs a call on the package's worker thread. One worker keeps submitted calls in order (a decode
    loop's steps depend on each other); the GIL is released inside, so the caller keeps running."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybridgen")
    return _executor.submit(fn, *args, **kwargs)


def _shape(a) -> tuple:
    """Shape of a numpy array or of any DLPack tensor (viewed, never copied)."""
    shape = getattr(a, "shape", None)
    if shape is not None:
        return tuple(shape)
    try:
        if hasattr(a, "__dlpack__"):
            return np.from_dlpack(a).shape
        return np.shape(a)  # not an array: the extension refuses it with a proper message
    except (TypeError, ValueError, RuntimeError, BufferError) as e:  # device tensors, ragged lists
        raise _native.ArgumentError(f"expected an array, got {type(a).__name__}: {e}") from None


class Function:
    """One public function of a compiled module; calling it never copies an array."""

    def __init__(self, module: "Module", name: str):
        self.module, self.name = module, name
        self.signature = module.signature(name)  # raises ArgumentError for unknown names

    def __call__(self, *arrays, readonly: Sequence[int] = ()):
        """Runs the function on |arrays| (memref arguments in order). Arrays are viewed in place, so
        results land in the arrays you pass. Indices in |readonly| may be read-only arrays; every
        other argument must be writable (a memref carries no const)."""
        self.module._call(self.name, arrays, readonly=readonly)

    def submit(self, *arrays, readonly: Sequence[int] = ()) -> Future:
        """Like calling, but returns at once with a Future; calls run in submission order."""
        return _submit(self, *arrays, readonly=readonly)

    def __repr__(self):
        return f"<hybridgen.Function {self.name} {self.signature}>"


class Module:
    """A JIT-compiled MLIR module. Compile once, call its functions many times (thread-safe: the GIL is
    released while compiled code runs)."""

    def __init__(self, mlir: str, options=None):
        if not isinstance(mlir, str):
            raise _native.ArgumentError(f"MLIR must be given as str, got {type(mlir).__name__}")
        self.mlir = mlir
        self._jit = _native.JitModule.compile(mlir, _options(options))

    def signature(self, name: str):
        """[(dtype, shape)] per memref argument of |name|; -1 marks a dynamic dimension."""
        return [(dt, tuple(shape)) for dt, shape in self._jit.signature(name)]

    def function(self, name: str) -> Function:
        return Function(self, name)

    __getitem__ = function

    def call(self, name: str, *arrays, readonly: Sequence[int] = ()):
        self._call(name, arrays, readonly=readonly)

    def _call(self, name, arrays, readonly=(), attention_block_size=0):
        views, tags = zip(*(native_view(a) for a in arrays)) if arrays else ((), ())
        ro = set(readonly)
        writable = [i not in ro for i in range(len(views))]
        self._jit.call(name, list(views), list(tags), writable, attention_block_size)


def compile(mlir: str, options=None) -> Module:  # noqa: A001 - mirrors the builtin's role
    """JIT-compiles MLIR text (hg dialect and upstream dialects); raises CompileError with the
    diagnostics if it does not parse, verify or lower."""
    return Module(mlir, options)


@dataclass
class AttentionResult:
    """The output and, when the attention was compiled with return_partials, each device's partial."""

    out: Any
    partials: Optional[list] = None


class Attention:
    """A compiled hybrid decode attention: `out = attn(q, k_pool, v_pool, block_table, seq_lens)`.

    Arguments follow docs/interfaces.md: q/out f32 [B, Hq, D]; k_pool/v_pool [N, Hkv, block, D] in the
    KV dtype; block_table int32 [B, max_blocks]; seq_lens int32 [B]."""

    FUNCTION = "hg_attention"

    def __init__(self, spec: "_native.AttentionSpec", options=None):
        self.spec = spec
        self.mlir = _native.build_attention_module(spec)
        self.module = Module(self.mlir, options)
        self.signature = self.module.signature(self.FUNCTION)

    @property
    def devices(self):
        return list(self.spec.devices)

    def __call__(self, q, k_pool, v_pool, block_table, seq_lens, out=None, partials=None):
        """Runs the attention. |out| (f32, shaped like q) is written in place when given, else
        allocated. With return_partials, returns AttentionResult(out, [Partial(o, m, l) per device]);
        |partials| may supply those buffers. Otherwise returns out."""
        shape = _shape(q)
        if len(shape) != 3:
            raise _native.ArgumentError(f"argument 0 (q): expected [batch, q_heads, head_dim], got shape {shape}")
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        arrays = [q, k_pool, v_pool, block_table, seq_lens, out]
        if self.spec.return_partials:
            if partials is None:
                b, h, d = shape
                partials = [Partial(np.empty((b, h, d), np.float32), np.empty((b, h), np.float32),
                                    np.empty((b, h), np.float32)) for _ in self.spec.devices]
            if not isinstance(partials, Sequence) or len(partials) != len(self.spec.devices):
                raise _native.ArgumentError(
                    f"partials: expected {len(self.spec.devices)} (o, m, l) triples, got "
                    f"{len(partials) if isinstance(partials, Sequence) else type(partials).__name__}")
            b, h, d = shape
            for i, p in enumerate(partials):
                # The driver cross-checks only the six attention buffers; a partial with a different
                # dynamic batch than q would otherwise be written out of bounds.
                want = ((b, h, d), (b, h), (b, h))
                if not isinstance(p, Sequence) or len(p) != 3 or any(_shape(x) != w for x, w in zip(p, want)):
                    got = tuple(_shape(x) for x in p) if isinstance(p, Sequence) else type(p).__name__
                    raise _native.ArgumentError(f"partial {i}: expected (o, m, l) shaped {want}, got {got}")
                arrays.extend(p)
        # q, the pool, the table and the lengths are only read: accept read-only views of them.
        try:
            self.module._call(self.FUNCTION, arrays, readonly=(0, 1, 2, 3, 4),
                              attention_block_size=self.spec.block_size)
        except _native.ArgumentError as e:
            # Name the buffers: "argument 1" alone makes the caller count positions.
            raise _native.ArgumentError(_ARG_RE.sub(_name_argument, str(e))) from None
        if self.spec.return_partials:
            return AttentionResult(out, [Partial(*p) for p in partials])
        return out

    def submit(self, *args, **kwargs) -> Future:
        """Like calling, but returns at once with a Future of the result (out or AttentionResult);
        calls run in submission order on one worker thread, so a loop can prepare step n+1 while
        step n runs. Keep the arrays alive and unmodified until the Future is done."""
        return _submit(self, *args, **kwargs)

    def __repr__(self):
        s = self.spec
        split = "runtime" if s.split_point is None else s.split_point
        return (f"<hybridgen.Attention q_heads={s.q_heads} kv_heads={s.kv_heads} head_dim={s.head_dim} "
                f"block_size={s.block_size} kv_dtype={s.kv_dtype} devices={list(s.devices)} "
                f"split={split} {'sparse top_k=%d' % s.top_k if s.sparse else 'dense'}>")


def attention_spec(*, q_heads: int, kv_heads: int, head_dim: int, block_size: int = 16,
                   kv_dtype="f32", batch: Optional[int] = None, num_blocks: Optional[int] = None,
                   max_blocks_per_seq: Optional[int] = None, scale: Optional[float] = None,
                   window: Optional[int] = None, softcap: Optional[float] = None,
                   devices: Sequence[str] = ("cpu", "gpu"), split: Union[str, int] = "runtime",
                   sparse: bool = False, top_k: int = 0, segment_id: int = 0,
                   return_partials: bool = False) -> "_native.AttentionSpec":
    """An AttentionSpec from keywords. None for batch/num_blocks/max_blocks_per_seq means dynamic;
    split is a token count (tokens of each sequence on the first device) or 'runtime' (read from the
    installed scheduler at every call)."""
    spec = _native.AttentionSpec()
    if isinstance(devices, str) or not isinstance(devices, Sequence):
        raise _native.ArgumentError(f"devices must be a sequence of device names, got {devices!r}")
    spec.q_heads, spec.kv_heads, spec.head_dim, spec.block_size = q_heads, kv_heads, head_dim, block_size
    spec.kv_dtype = dtype_name(kv_dtype)
    spec.batch = -1 if batch is None else batch
    spec.num_blocks = -1 if num_blocks is None else num_blocks
    spec.max_blocks_per_seq = -1 if max_blocks_per_seq is None else max_blocks_per_seq
    spec.scale, spec.window, spec.softcap = scale, window, softcap
    spec.devices = list(devices)
    if split == "runtime":
        spec.split_point = None
    elif isinstance(split, (int, np.integer)) and not isinstance(split, bool):
        spec.split_point = int(split)
    else:
        raise _native.ArgumentError(f"split must be a token count or 'runtime', got {split!r}")
    spec.sparse, spec.top_k, spec.segment_id = sparse, top_k, segment_id
    spec.return_partials = return_partials
    return spec


def compile_attention(*, options=None, **spec_kwargs) -> Attention:
    """Builds and JIT-compiles a hybrid decode attention; keywords as in attention_spec()."""
    return Attention(attention_spec(**spec_kwargs), options)
