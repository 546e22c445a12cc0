"""The runtime from Python: tiered KV cache, feedback scheduler with its per-step trace, decode steps."""

from __future__ import annotations

import atexit
from typing import Dict, Iterable, Mapping, Optional, Sequence

import numpy as np

from . import _hybridgen as _native
from ._arrays import dtype_name, from_native, native_view, numpy_dtype
from ._errors import INT32, INT64, MissingKeyError, check_float, check_int

Topology = _native.Topology

# The installed context is a process-global shared_ptr that keeps its Python object alive; drop it
# before the interpreter finalizes, or its release would run after Python is gone.
atexit.register(_native.uninstall_context)


class KvCache:
    """A paged KV pool over memory tiers. k(layer)/v(layer) are zero-copy numpy views of the pool's
    [num_blocks, kv_heads, block_size, head_dim] arrays (bf16 as ml_dtypes.bfloat16)."""

    def __init__(self, *, kv_heads: int, block_size: int, head_dim: int, dtype="f32",
                 num_layers: int = 1, topology: Optional[Topology] = None,
                 max_blocks_per_tier: Sequence[int] = (), huge_pages: bool = True, spill: bool = True):
        if topology is None:
            # HYBRIDGEN_TIERS / HYBRIDGEN_TIERS_FILE, else libnuma discovery (no bandwidth probe:
            # it costs time and figures only matter to the placement policy).
            topology = Topology.from_environment()
        elif not isinstance(topology, Topology):
            raise _native.ArgumentError(f"topology must be a hybridgen.Topology, got {type(topology).__name__}")
        self.dtype = dtype_name(dtype)
        self.native = _native.KvPool.create(topology, kv_heads, block_size, head_dim, self.dtype,
                                            num_layers, list(max_blocks_per_tier), huge_pages, spill)

    # Shape and tiers -------------------------------------------------------------------------
    kv_heads = property(lambda self: self.native.kv_heads)
    block_size = property(lambda self: self.native.block_size)
    head_dim = property(lambda self: self.native.head_dim)
    num_layers = property(lambda self: self.native.num_layers)
    num_blocks = property(lambda self: self.native.num_blocks)
    topology = property(lambda self: self.native.topology)

    def k(self, layer: int = 0) -> np.ndarray:
        return from_native(self.native.k_array(layer), self.dtype)

    def v(self, layer: int = 0) -> np.ndarray:
        return from_native(self.native.v_array(layer), self.dtype)

    def tier_usage(self) -> Dict[str, tuple]:
        """{tier name: (used_blocks, capacity_blocks)}."""
        return {t["name"]: self.native.tier_usage(i) for i, t in enumerate(self.topology.tiers)}

    # Sequences -------------------------------------------------------------------------------
    def create_sequence(self) -> int:
        return self.native.create_sequence()

    def free_sequence(self, seq: int) -> None:
        self.native.free_sequence(seq)

    def sequences(self):
        return self.native.sequences()

    def seq_len(self, seq: int) -> int:
        return self.native.seq_len(seq)

    def block_table(self, seq: int) -> np.ndarray:
        return np.asarray(self.native.block_table(seq), dtype=np.int32)

    def _tokens(self, x, leading: int):
        try:
            a = np.asarray(x)
            if a.dtype != numpy_dtype(self.dtype):
                a = a.astype(numpy_dtype(self.dtype))  # appends copy into the pool anyway
        except (TypeError, ValueError, OverflowError) as e:  # ragged lists, strings, objects
            raise _native.ArgumentError(f"K/V tokens do not convert to a {self.dtype} array: {e}") from None
        if a.ndim == 3 and leading == 1 and self.num_layers == 1:
            a = a[None]
        return native_view(np.ascontiguousarray(a))[0]

    def append(self, seq: int, k, v) -> int:
        """Appends tokens: k, v are [n, kv_heads, head_dim] (one layer) or [num_layers, n, kv_heads,
        head_dim]; values are converted to the pool dtype. Returns the first new position."""
        kk, vv = self._tokens(k, 1), self._tokens(v, 1)
        pos = self.seq_len(seq)
        self.native.append(seq, kk, vv)
        return pos

    def write(self, seq: int, layer: int, pos: int, k, v) -> None:
        """Overwrites already appended positions [pos, pos+n) of one layer."""
        self.native.write_tokens(seq, layer, pos, self._tokens(k, 0), self._tokens(v, 0))

    def read(self, seq: int, layer: int = 0, pos: int = 0, n: Optional[int] = None):
        """(k, v) copies of tokens [pos, pos+n) of one layer, [n, kv_heads, head_dim] each.
        Raises ArgumentError for positions outside the sequence, NotFoundError for an unknown one."""
        length = self.seq_len(seq)
        pos = check_int(pos, "pos", *INT64)
        n = length - pos if n is None else check_int(n, "n", *INT64)
        # Checked before the output is allocated: a hostile n must not become a huge np.empty.
        if not (0 <= pos <= length and 0 <= n <= length - pos):
            raise _native.ArgumentError(f"tokens [{pos}, {pos} + {n}) are outside sequence length {length}")
        shape = (n, self.kv_heads, self.head_dim)
        k = np.empty(shape, numpy_dtype(self.dtype))
        v = np.empty(shape, numpy_dtype(self.dtype))
        self.native.read_tokens(seq, layer, pos, n, native_view(k)[0], native_view(v)[0])
        return k, v

    def batch(self, seqs: Sequence[int], max_blocks: Optional[int] = None):
        """(block_table int32 [len(seqs), max_blocks], seq_lens int32 [len(seqs)]) for a decode step;
        unused table entries are -1."""
        seqs = [check_int(s, "sequence id", *INT64) for s in seqs]
        if max_blocks is None:
            max_blocks = max(1, self.native.max_blocks_in_use(seqs))
        # No sequence can own more blocks than the pool has: a wider table would only hold -1s, and
        # bounding it here keeps a hostile width from becoming a huge allocation.
        max_blocks = check_int(max_blocks, "max_blocks", 0, min(INT32[1], max(1, self.num_blocks)))
        table = np.empty((len(seqs), max_blocks), np.int32)
        lens = np.empty(len(seqs), np.int32)
        self.native.fill_batch(seqs, max_blocks, table, lens)
        return table, lens

    def migrate_block(self, seq: int, logical: int, tier) -> None:
        """Moves logical block |logical| of |seq| to |tier| (index or name) for every layer."""
        if isinstance(tier, str):
            idx = self.topology.find_tier(tier)
            if idx < 0:
                raise _native.NotFoundError(f"unknown tier {tier!r}")
            tier = idx
        self.native.migrate_block(seq, logical, tier)


class Trace(Mapping):
    """The scheduler's per-step trace as numpy columns, named as the runtime names them: step,
    segment, context_tokens, split, cpu_s, gpu_s, transfer_s, segment_s (seconds), migrations,
    blocks_<tier>... (used blocks per tier)."""

    _INT_COLUMNS = ("step", "segment", "context_tokens", "split", "migrations")

    def __init__(self, columns: Mapping[str, Iterable[float]], csv: str = ""):
        self._cols = {}
        if not isinstance(columns, Mapping):
            raise _native.ArgumentError(f"columns must be a mapping of name -> values, got {type(columns).__name__}")
        for name, values in columns.items():
            integral = str(name) in self._INT_COLUMNS or str(name).startswith("blocks_")
            try:
                self._cols[name] = np.asarray(list(values), dtype=np.int64 if integral else np.float64)
            except (TypeError, ValueError, OverflowError) as e:
                raise _native.ArgumentError(f"trace column {name!r}: {e}") from None
        self._csv = csv

    def __getitem__(self, name):
        try:
            return self._cols[name]
        except KeyError:
            raise MissingKeyError(f"no trace column {name!r}; columns: {', '.join(self._cols)}") from None

    def __iter__(self):
        return iter(self._cols)

    def __len__(self):
        return len(self._cols)

    @property
    def rows(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    @property
    def tier_columns(self):
        return [c for c in self._cols if c.startswith("blocks_")]

    def to_csv(self) -> str:
        return self._csv

    def plot(self, path: Optional[str] = None):
        return plot_trace(self, path)


def plot_trace(trace: Trace, path: Optional[str] = None):
    """Plots split vs context, per-side times and tier occupancy per step; saves to |path| if given.
    Returns the matplotlib Figure. Raises ImportError when matplotlib is not installed."""
    try:
        import matplotlib

        if path is not None:
            matplotlib.use("Agg", force=False)  # headless machines: render straight to a file
        import matplotlib.pyplot as plt
    except ImportError as e:  # matplotlib is optional
        raise ImportError("plot_trace needs matplotlib (pip install matplotlib)") from e
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    step = trace["step"] if trace.rows else np.zeros(0)
    axes[0].plot(step, trace["context_tokens"], label="context tokens")
    axes[0].plot(step, trace["split"], label="split (tokens on first device)")
    axes[0].set_ylabel("tokens")
    axes[0].legend()
    for col in ("cpu_s", "gpu_s", "transfer_s"):
        if col in trace:
            axes[1].plot(step, trace[col] * 1e3, label=col[:-2])
    axes[1].set_ylabel("ms")
    axes[1].legend()
    for col in trace.tier_columns:
        axes[2].plot(step, trace[col], label=col[len("blocks_"):])
    axes[2].set_ylabel("blocks")
    axes[2].set_xlabel("step")
    if trace.tier_columns:
        axes[2].legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig


_TUNING = ("smoothing", "damping", "initial_fraction")
_COST_FIELDS = ("cpu_fixed", "cpu_per_token", "gpu_fixed", "gpu_per_token", "transfer")
_PLACEMENT_FIELDS = ("sink_tokens", "recent_tokens", "use_hits", "max_migrations_per_step")


def _fill(what: str, target, values, fields):
    """Sets |values| (a mapping of field -> value) on the native config |target|; unknown fields and
    non-mappings are ArgumentError (bad value types are, through the translated setters)."""
    if not isinstance(values, Mapping):
        raise _native.ArgumentError(f"{what} must be a mapping, got {type(values).__name__}")
    for key, value in values.items():
        if key not in fields:
            raise _native.ArgumentError(f"unknown {what} field {key!r}; expected one of {fields}")
        setattr(target, key, value)
    return target


def _linear_model(spec) -> tuple:
    """(fixed_seconds, per_token_seconds) of a `modelled_gpu` mapping, both finite and >= 0."""
    if not isinstance(spec, Mapping):
        raise _native.ArgumentError(f"modelled_gpu must be a mapping, got {type(spec).__name__}")
    unknown = set(spec) - {"fixed_seconds", "per_token_seconds"}
    if unknown:
        raise _native.ArgumentError(f"modelled_gpu: unknown keys {sorted(map(str, unknown))}")
    if "per_token_seconds" not in spec:
        raise _native.ArgumentError("modelled_gpu needs 'per_token_seconds' (and optionally 'fixed_seconds')")
    return (check_float(spec.get("fixed_seconds", 0.0), "modelled_gpu fixed_seconds"),
            check_float(spec["per_token_seconds"], "modelled_gpu per_token_seconds"))


class Scheduler:
    """The feedback scheduler (or static / oracle) plus its trace. While installed (install() or a
    `with` block) compiled code with a runtime split point reads its split from it and feeds it timings."""

    def __init__(self, policy: str = "feedback", *, cache: Optional[KvCache] = None,
                 static_split: int = 0, quantum: Optional[int] = None, prior: Optional[Mapping] = None,
                 placement: Optional[Mapping] = None, gpu_capacity_tokens: int = 0,
                 modelled_gpu: Optional[Mapping] = None, **tuning):
        """`gpu_capacity_tokens`: the most tokens per sequence the GPU side may hold (its HBM
        budget; 0 = unlimited): the rest always stays on the CPU side. `modelled_gpu`:
        {"fixed_seconds": ..., "per_token_seconds": ...} replaces the GPU side's measured time by
        that cost model (for machines without a GPU); the trace marks such rows.

        Raises ArgumentError for an unknown policy or option, a value of the wrong type or out of
        range (quantum <= 0, smoothing/damping outside (0, 1], initial_fraction outside [0, 1],
        negative splits, budgets or costs, NaN or infinity), and an incomplete `modelled_gpu`."""
        cfg = _native.SchedulerConfig()
        if policy not in ("static", "feedback", "oracle"):
            raise _native.ArgumentError(f"policy must be 'static', 'feedback' or 'oracle', got {policy!r}")
        if cache is not None and not isinstance(cache, KvCache):
            raise _native.ArgumentError(f"cache must be a hybridgen.KvCache, got {type(cache).__name__}")
        cfg.policy = getattr(_native.SchedulerPolicy, policy)
        cfg.static_split = check_int(static_split, "static_split", 0, INT64[1])
        cfg.quantum = check_int(quantum if quantum is not None else (cache.block_size if cache else 16),
                                "quantum", *INT64)
        for key, value in tuning.items():
            if key not in _TUNING:
                raise _native.ArgumentError(f"unknown scheduler option {key!r}; expected one of {_TUNING}")
            setattr(cfg, key, value)
        if prior:
            cfg.prior = _fill("prior", _native.CostModel(), prior, _COST_FIELDS)
        pc = _fill("placement", _native.PlacementConfig(), placement or {}, _PLACEMENT_FIELDS)
        cfg.second_device_capacity_tokens = check_int(gpu_capacity_tokens, "gpu_capacity_tokens", 0, INT64[1])
        model = _linear_model(modelled_gpu) if modelled_gpu is not None else None
        self.cache = cache
        # The native constructor validates the whole config (SchedulerConfig::validate).
        self.native = _native.SchedulerContext(cfg, cache.native if cache else None, pc)
        if model is not None:
            self.native.set_linear_device_model(1, *model)
        self._previous = []

    def install(self):
        self._previous.append(_native.installed_context())
        _native.install_context(self.native)
        return self

    def uninstall(self):
        prev = self._previous.pop() if self._previous else None
        if prev is None:
            _native.uninstall_context()
        else:
            _native.install_context(prev)

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()

    @property
    def installed(self) -> bool:
        current = _native.installed_context()
        return current is not None and current is self.native

    def begin_step(self, context_tokens: int):
        self.native.begin_step(context_tokens)

    def end_step(self) -> int:
        return self.native.end_step()

    def split_point(self, segment: int = 0) -> int:
        return self.native.split_point(segment)

    def record(self, segment: int, *, cpu_seconds: float, gpu_seconds: float,
               transfer_seconds: float = 0.0, context_tokens: int, split_used: int):
        """Feeds one measured run directly (simulations, external kernels)."""
        self.native.record_segment(segment, cpu_seconds, gpu_seconds, transfer_seconds,
                                   context_tokens, split_used)

    def estimate(self, segment: int = 0):
        return self.native.estimate(segment)

    def trace(self) -> Trace:
        return Trace(self.native.trace_columns(), self.native.trace_csv())


class DecodeSession:
    """Compiled attention over a KvCache driven by a Scheduler: each step() reads the pool's arrays,
    block table and lengths in place, with the split point chosen by the scheduler."""

    def __init__(self, cache: KvCache, *, q_heads: int, scheduler: Optional[Scheduler] = None,
                 attention=None, segment_id: int = 0, options=None, **attention_kwargs):
        from .jit import compile_attention  # the JIT is optional at import time

        if not isinstance(cache, KvCache):
            raise _native.ArgumentError(f"cache must be a hybridgen.KvCache, got {type(cache).__name__}")
        if scheduler is not None and not isinstance(scheduler, Scheduler):
            raise _native.ArgumentError(f"scheduler must be a hybridgen.Scheduler, got {type(scheduler).__name__}")
        self.cache = cache
        self.scheduler = scheduler or Scheduler(cache=cache)
        self.attention = attention or compile_attention(
            q_heads=q_heads, kv_heads=cache.kv_heads, head_dim=cache.head_dim,
            block_size=cache.block_size, kv_dtype=cache.dtype, split="runtime",
            segment_id=segment_id, options=options, **attention_kwargs)

    def step(self, seqs: Sequence[int], q, layer: int = 0, out=None):
        """Attention of q [len(seqs), q_heads, head_dim] over the cached tokens of |seqs|; returns out
        (written in place when given)."""
        table, lens = self.cache.batch(seqs)
        self.scheduler.begin_step(int(lens.max()) if len(lens) else 0)
        with self.scheduler:
            out = self.attention(q, self.cache.k(layer), self.cache.v(layer), table, lens, out)
        self.scheduler.end_step()
        return out

    def trace(self) -> Trace:
        return self.scheduler.trace()
