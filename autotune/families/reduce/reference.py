"""float64 (or exact integer) references of the reductions, and check data with special values planted."""
from __future__ import annotations

import warnings

import numpy as np

from .config import result_dtype


def with_values_planted(x: np.ndarray, axis, values, rng, also_last: bool) -> list[np.ndarray]:
    """Copies of ``x`` with ``values`` planted (see ReduceFamily.verification)."""
    if x.size == 0:
        return []
    if axis is None:
        copies = [x.copy()]
        count = min(x.size, len(values))
        copies[0].flat[rng.choice(x.size, count, replace=False)] = values[:count]
        if also_last:
            copies.append(x.copy())
            copies[1].flat[-1] = values[0]
        return copies
    moved = np.moveaxis(x, axis, -1).copy()  # a C-ordered copy whose rows are the lines reduced
    lines = moved.reshape(-1, moved.shape[-1])
    for value in values:
        rows = rng.random(lines.shape[0]) < 0.5
        lines[rows, rng.integers(lines.shape[1], size=int(rows.sum()))] = value
    return [np.ascontiguousarray(np.moveaxis(moved, -1, axis))]


def expected_result(op: str, inputs, axis) -> np.ndarray:
    """The exact result in the result's dtype where that is exact (integers; float16, which the float32
    accumulation of the check data reaches with one rounding), else in float64."""
    value = np.atleast_1d(reference(op, inputs[0], inputs[1] if len(inputs) > 1 else None, axis))
    out = np.dtype(result_dtype(op, inputs[0].dtype.name))
    return value.astype(out) if out.kind == "i" or out.itemsize < 4 else value


def reference(op: str, x: np.ndarray, y: np.ndarray | None = None, axis: int | None = None) -> np.ndarray:
    """NumPy's result of the reduction in float64, or for integers exactly in int64, wrapping modulo 2**64 as
    NumPy's own integer sums and products do (nanmax/nanmin of only NaN: NaN, without NumPy's warning)."""
    x64 = x.astype(np.int64 if x.dtype.kind == "i" else np.float64)
    if op == "dot":
        return (x64 * y.astype(x64.dtype)).sum(axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"sum": np.sum, "max": np.max, "min": np.min, "nanmax": np.nanmax, "nanmin": np.nanmin}[op](x64, axis=axis)
