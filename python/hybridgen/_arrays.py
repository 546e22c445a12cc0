"""Array plumbing shared by the JIT and runtime wrappers: dtype names and bf16 views without copies."""

from __future__ import annotations

import numpy as np

from ._hybridgen import ArgumentError

try:  # ml_dtypes provides numpy's bfloat16; without it bf16 data travels only through DLPack.
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is in python/requirements.txt
    ml_dtypes = None
    bfloat16 = None

_NUMPY_OF = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "i32": np.dtype(np.int32),
             "i64": np.dtype(np.int64)}


def dtype_name(dtype) -> str:
    """'f32' | 'f16' | 'bf16' for a name or a numpy dtype (ml_dtypes.bfloat16 included)."""
    if isinstance(dtype, str) and dtype in ("f32", "f16", "bf16", "i32", "i64"):
        return dtype
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise ArgumentError(f"unsupported dtype {dtype!r}; expected f32, f16 or bf16") from None
    if bfloat16 is not None and dt == bfloat16:
        return "bf16"
    for name, np_dt in _NUMPY_OF.items():
        if dt == np_dt:
            return name
    raise ArgumentError(f"unsupported dtype {dtype!r}; expected f32, f16 or bf16")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds elements of |name| ('bf16' needs ml_dtypes)."""
    if name == "bf16":
        if bfloat16 is None:
            raise ImportError("bf16 arrays need the ml_dtypes package")
        return bfloat16
    if name not in _NUMPY_OF:
        raise ArgumentError(f"unsupported dtype name {name!r}; expected f32, f16, bf16, i32 or i64")
    return _NUMPY_OF[name]


def native_view(a):
    """(array, tag) to hand to the extension: ml_dtypes bf16 numpy arrays become uint16 views tagged
    'bf16' (numpy cannot export bf16 through DLPack); everything else passes unchanged."""
    if bfloat16 is not None and isinstance(a, np.ndarray) and a.dtype == bfloat16:
        return a.view(np.uint16), "bf16"
    return a, ""


def from_native(a: np.ndarray, name: str) -> np.ndarray:
    """Re-views raw uint16 words of a bf16 pool array as ml_dtypes.bfloat16 (no copy)."""
    if name == "bf16" and bfloat16 is not None:
        return a.view(bfloat16)
    return a
