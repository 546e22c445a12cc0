"""The one place where native argument mismatches become the package's ArgumentError.

nanobind refuses a call whose arguments do not convert (a str for an int, an integer outside the
C++ type's range, a read-only array where a writable one is needed) with a plain TypeError. Every
function, method, constructor and property setter of the extension's classes is wrapped here once,
at import, so no public entry point lets that TypeError escape: it is re-raised as ArgumentError
(also a ValueError) with nanobind's message, which names the accepted signature and the types given.
Constructors reach the wrapped __init__ because the extensions turn off nanobind's fast construction
path, which would call the C++ constructor directly (constructThroughInit, python/src/errors.cpp).
"""

from __future__ import annotations

import operator
from typing import Optional

from ._hybridgen import ArgumentError, NotFoundError

# nanobind's wording for "no overload accepts these arguments" (functions, methods, setters, init).
_MISMATCH = "incompatible function arguments"

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class MissingKeyError(NotFoundError, KeyError):
    """NotFoundError that is also a KeyError: what a Mapping of the package raises for a missing
    key, so `in`, `.get()` and `except KeyError` keep working."""


def _translating(fn, qualname: str):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            if _MISMATCH not in str(e):
                raise
            raise ArgumentError(f"{qualname}: {e}") from None

    call.__name__ = getattr(fn, "__name__", qualname.rsplit(".", 1)[-1])
    call.__qualname__ = qualname
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def translate_native_errors(scope) -> None:
    """Wraps every nanobind callable of |scope| (an extension class, or the extension module for
    its free functions) in place. Idempotent."""
    if getattr(scope, "_hg_translated", False):
        return
    owner = scope.__name__
    for name, attr in list(vars(scope).items()):
        kind = type(attr).__name__
        if isinstance(scope, type) and type(attr) is property:
            fset = attr.fset and _translating(attr.fset, f"{owner}.{name} (setter)")
            setattr(scope, name, property(attr.fget, fset, attr.fdel, attr.__doc__))
        elif kind == "nb_method":  # instance methods and __init__
            setattr(scope, name, _translating(attr, f"{owner}.{name}"))
        elif kind == "nb_func":  # static methods of classes, free functions of the module
            fn = _translating(attr, f"{owner}.{name}")
            setattr(scope, name, staticmethod(fn) if isinstance(scope, type) else fn)
    if isinstance(scope, type):
        scope._hg_translated = True


def translate_module(module) -> None:
    """translate_native_errors for the extension module's free functions and each of its classes."""
    for attr in list(vars(module).values()):
        if type(attr).__name__ == "nb_type":
            translate_native_errors(attr)
    if not getattr(module, "_hg_translated", False):
        translate_native_errors(module)
        module._hg_translated = True


def check_int(value, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """|value| as a Python int (numpy integers included, bools and floats refused), within [lo, hi];
    ArgumentError otherwise. For checks the Python layer makes before it allocates or loops."""
    if isinstance(value, bool):
        raise ArgumentError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ArgumentError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ArgumentError(f"{name} = {v} is outside [{lo}, {hi}]")
    return v


def check_float(value, name: str, lo: float = 0.0) -> float:
    """|value| as a finite float >= lo; ArgumentError otherwise (NaN and infinity included)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"{name} must be a number, got {type(value).__name__} {value!r}") from None
    if not (v >= lo and v != float("inf")):
        raise ArgumentError(f"{name} = {v} must be finite and >= {lo}")
    return v
