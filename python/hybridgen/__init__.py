"""hybridgen: JIT-compile hybrid CPU+GPU decode attention and drive the tiered KV runtime from Python.

Two native extensions: _hybridgen (the runtime: KV pool, scheduler, model runner; no LLVM/MLIR) and
_hybridgen_jit (the compiler; optional, `has_jit`)."""

from . import _hybridgen as _native
from ._errors import translate_module as _translate_module

# First, before any name is imported from the extension: its argument mismatches raise ArgumentError.
_translate_module(_native)
from ._hybridgen import (
    ArgumentError,
    CompileError,
    ExhaustedError,
    HybridgenError,
    NotFoundError,
    SystemFailure,
)
from .reference import Partial, merge_partials, reference_attention, reference_partial, transpose_k_pieces

# The compiler half (LLVM/MLIR) is a second extension: without it (a deployment that only runs
# compiled artifacts), the runtime, Model on an artifact dir and the references still work.
try:
    from . import _hybridgen_jit as _jit_native
except ImportError:
    _jit_native = None
has_jit = _jit_native is not None
if has_jit:
    _translate_module(_jit_native)
    from ._hybridgen_jit import AttentionSpec, CompileOptions, build_attention_module
    from .jit import (Attention, AttentionResult, Function, Module, attention_spec, compile,  # noqa: A004
                      compile_attention)
from .runtime import KvCache, Scheduler, Topology, DecodeSession, Trace, plot_trace  # noqa: E402
from .model import Model, compile_model  # noqa: E402

__all__ = [
    "ArgumentError", "CompileError", "ExhaustedError", "HybridgenError", "NotFoundError",
    "SystemFailure", "has_jit", "reference_attention", "reference_partial", "merge_partials", "Partial",
    "transpose_k_pieces",
    "AttentionSpec", "CompileOptions", "build_attention_module", "Attention", "AttentionResult", "attention_spec", "Function", "Module", "compile", "compile_attention",
    "KvCache", "Scheduler", "Topology", "DecodeSession", "Trace", "plot_trace",
    "Model", "compile_model",
]
