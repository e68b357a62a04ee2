"""Comparisons a family's ``verify`` uses: exact where the data make the answer exact, within a stated
tolerance otherwise, with NaN matching NaN and unwritten (still NaN-poisoned) outputs named as such."""
from __future__ import annotations

import numpy as np


def unwritten(got: np.ndarray, expected: np.ndarray | None = None) -> str | None:
    """The output elements still holding the NaN poison, where the reference is not NaN itself."""
    missing = np.isnan(got)
    if expected is not None:
        missing &= ~np.isnan(np.broadcast_to(expected, got.shape))
    count = int(missing.sum())
    return f"{count} of {got.size} output elements were not written (still NaN)" if count else None


def compare_exact(got: np.ndarray, expected: np.ndarray, what: str = "elements") -> str | None:
    """What differs from ``expected`` to the last bit of its value (NaN matches NaN; 0.0 matches -0.0)."""
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


def _describe(bad: np.ndarray, got: np.ndarray, expected: np.ndarray, what: str, verb: str) -> str | None:
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
    return (f"{int(bad.sum())} of {bad.size} {what} {verb}; first at {where}: {float(got[where])!r} instead of "
            f"{float(expected[where])!r}")


__all__ = ["unwritten", "compare_exact", "compare_close"]
