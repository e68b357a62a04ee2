"""Comparisons a family's ``verify`` uses: exact where the data make the answer exact, within a stated
tolerance otherwise, with NaN matching NaN and unwritten (still poisoned) outputs named as such.

Outputs are poisoned before each check run: floating-point outputs with NaN, integer outputs with ``poison``'s
value, which no check data of the built-in families can produce."""
from __future__ import annotations

import numpy as np


def poison(dtype) -> float | int:
    """The value an output of ``dtype`` is filled with before a check run: NaN, or for integers a fixed odd pattern
    (-0x5A5A5A5B, or its 64-bit extension), far from any sum, product or extreme value the check data give."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return int(np.array(-0x5A5A5A5A5A5A5A5B, dtype=np.int64).astype(dtype))
    return float("nan")


def _is_integer(a) -> bool:
    return np.asarray(a).dtype.kind in "iub"


def unwritten(got: np.ndarray, expected: np.ndarray | None = None) -> str | None:
    """The output elements still holding the poison, where the reference is not the poison itself."""
    if _is_integer(got):
        value = poison(got.dtype)
        missing = got == value
        if expected is not None:
            missing &= np.broadcast_to(expected, got.shape) != value
        label = f"still {value}, the poison"
    else:
        missing = np.isnan(got)
        if expected is not None:
            missing &= ~np.isnan(np.broadcast_to(expected, got.shape))
        label = "still NaN"
    count = int(missing.sum())
    return f"{count} of {got.size} output elements were not written ({label})" if count else None


def compare_exact(got: np.ndarray, expected: np.ndarray, what: str = "elements") -> str | None:
    """What differs from ``expected`` to the last bit of its value (NaN matches NaN; 0.0 matches -0.0). Integers
    are compared as integers (every bit of an int64, which a float64 would round)."""
    if _is_integer(got) and _is_integer(expected):
        got = np.asarray(got).reshape(np.shape(expected))
        return _describe(got != expected, got, np.asarray(expected), what, "differ from the exact reference")
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(expected))
    bad = (got != expected) & ~(np.isnan(got) & np.isnan(expected))
    return _describe(bad, got, expected, what, "differ from the float64 reference")


def compare_close(got: np.ndarray, expected: np.ndarray, bound: np.ndarray | float,
                  what: str = "elements") -> str | None:
    """What lies further than ``bound`` (per element or one number) from ``expected``; NaN matches NaN only."""
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(expected))
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got - expected) <= bound) & ~(np.isnan(got) & np.isnan(expected))
    return _describe(bad, got, expected, what, "are off by more than the error bound from the float64 reference")


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """||got - expected|| / ||expected|| (Frobenius norms, in float64); infinite where got holds a NaN or inf."""
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(expected))
    if not np.isfinite(got).all():
        return float("inf")
    scale = float(np.linalg.norm(expected))
    return float(np.linalg.norm(got - expected)) / scale if scale else float(np.linalg.norm(got))


def compare_norm(got: np.ndarray, expected: np.ndarray, bound: float, what: str = "elements") -> str | None:
    """None where the relative error of ``got`` (see relative_error) is at most ``bound``; else how far over."""
    error = relative_error(got, expected)
    if error <= bound:
        return None
    return (f"the {what} have a relative error of {error:.3g} against the float64 reference, over the bound "
            f"{bound:.3g}")


def _describe(bad: np.ndarray, got: np.ndarray, expected: np.ndarray, what: str, verb: str) -> str | None:
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
    return (f"{int(bad.sum())} of {bad.size} {what} {verb}; first at {where}: {got[where].item()!r} instead of "
            f"{expected[where].item()!r}")


__all__ = ["poison", "unwritten", "compare_exact", "compare_close", "compare_norm", "relative_error"]
