"""hybridgen: JIT-compile hybrid CPU+GPU decode attention and drive the tiered KV runtime from Python."""

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

has_jit = bool(_native.has_jit)

if has_jit:
    from ._hybridgen import AttentionSpec, CompileOptions, build_attention_module
    from .jit import (Attention, AttentionResult, Function, Module, attention_spec, compile,  # noqa: A004
                      compile_attention)
from .runtime import KvCache, Scheduler, Topology, DecodeSession, Trace, plot_trace  # noqa: E402
if has_jit:
    from .model import Model, compile_model  # noqa: E402

__all__ = [
    "ArgumentError", "CompileError", "ExhaustedError", "HybridgenError", "NotFoundError",
    "SystemFailure", "has_jit", "reference_attention", "reference_partial", "merge_partials", "Partial",
    "transpose_k_pieces",
    "AttentionSpec", "CompileOptions", "build_attention_module", "Attention", "AttentionResult", "attention_spec", "Function", "Module", "compile", "compile_attention",
    "KvCache", "Scheduler", "Topology", "DecodeSession", "Trace", "plot_trace",
    "Model", "compile_model",
]
