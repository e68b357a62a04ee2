"""``autotune.sum``, ``max``, ``min``, ``nanmax``, ``nanmin``: NumPy's reductions, tuned for each call's own
shape (see autotune/runtime/calls.py for what every NumPy-style function does around its kernel).

Semantics are NumPy's: result shapes and dtypes, ``axis`` (negative, a tuple), ``keepdims``, NaN in max and min,
the empty cases. A reduction of an F-contiguous array reduces the matching axis of its C-contiguous base; the
reduced axes must be adjacent (an (outer, R, inner) array reduced along R, without a copy).
"""
from __future__ import annotations

from typing import Any

from ...runtime import arrays
from ...runtime.calls import (
    Library,
    Replay,
    axis_arg,
    c_base,
    collapse,
    copy_into,
    device_input,
    input_dtype,
    keepdims_arg,
    library_of,
    normalize_axis,
    order_of,
    result_array,
    returned,
    same_dtype,
    tuned_kernel,
    zero_fill,
)
from ...runtime.streams import as_stream
from .config import result_dtype, result_shape

__all__ = ["sum", "max", "min", "nanmax", "nanmin", "reduce_call", "problem_form"]


def sum(x, axis=None, *, keepdims: bool = False, dtype=None, out=None, stream=None):
    """``np.sum(x, axis, keepdims=keepdims)``: float32, float64, float16, bfloat16, int32 or int64 arrays; the
    result's dtype is NumPy's (int64 for int32), and ``dtype=`` may name it (``np.int64``, ``"i8"``), nothing else.
    float16 and bfloat16 are accumulated in float32 and rounded once; integers wrap as NumPy's do."""
    return reduce_call("sum", x, axis, keepdims, dtype, out, stream)


def max(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.max``: NaN anywhere in a reduced line makes its result NaN; no identity, so an empty line raises."""
    return reduce_call("max", x, axis, keepdims, None, out, stream)


def min(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.min``, with NaN and empty lines as ``max``."""
    return reduce_call("min", x, axis, keepdims, None, out, stream)


def nanmax(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.nanmax``: NaN skipped; a line of only NaN gives NaN (without NumPy's warning)."""
    return reduce_call("nanmax", x, axis, keepdims, None, out, stream)


def nanmin(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.nanmin``, as ``nanmax``."""
    return reduce_call("nanmin", x, axis, keepdims, None, out, stream)


def reduce_call(op: str, x, axis, keepdims: bool, dtype, out, stream, y=None, library: Library | None = None):
    """The reduction ``op`` of ``x`` (and ``y``, for dot) as NumPy has it, the result in ``library`` (default: the
    arguments', see autotune/runtime/libraries.py)."""
    launch_stream = as_stream(stream)
    axis, keepdims = axis_arg(axis), keepdims_arg(keepdims)  # checked first: a replay's key holds them
    if library is None:
        library = library_of(x, y)
    replay = Replay(("reduce", op, axis, keepdims, dtype), (x, y), out, launch_stream, library)
    if (replayed := replay.result()) is not None:
        return replayed
    d = device_input(x, "x", launch_stream)
    dy = device_input(y, "y", launch_stream) if y is not None else None
    dtype_name = same_dtype("reduce", op, d, dy) if dy is not None else input_dtype("reduce", op, d)
    answer_dtype = _answer_dtype(op, dtype_name, dtype)
    axes = normalize_axis(axis, d.ndim)
    shape = tuple(d.shape)
    answer_shape = tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)
    order = order_of(d, "x")
    base, base_axes = (d, axes) if order == "C" else (c_base(d), tuple(sorted(d.ndim - 1 - a for a in axes)))
    y_base = None if dy is None else (dy if order == "C" else c_base(dy))
    if dy is not None and order_of(dy, "y") != order:
        raise ValueError("dot: both operands must have the same layout (both C- or both F-contiguous)")
    outer, extent, inner = collapse(tuple(base.shape), base_axes)  # no axis: (size, 1, 1)
    result = result_array(out, answer_shape, answer_dtype, order, launch_stream)
    replay.follow()
    if not axes and answer_dtype == dtype_name:  # over no axis (0-d, axis=()): the array itself; where NumPy
        copy_into(result, d, launch_stream)       # converts it (an int32 sum: int64), the kernel over a unit axis
    elif extent == 0 and op not in ("sum", "dot"):
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    elif outer * inner and extent:
        problem_shape, family_axis = problem_form(outer, extent, inner)
        kernel = tuned_kernel("reduce", problem_shape, dtype_name, op=op, axis=family_axis)
        inputs = [base.reshape(problem_shape)] + ([y_base.reshape(problem_shape)] if y_base is not None else [])
        target = arrays.flat(result, order=order).reshape(result_shape(problem_shape, family_axis))
        replay.run(kernel.bind(*inputs, out=target, stream=launch_stream), result)
    elif outer * inner:
        zero_fill(result, launch_stream)
    return returned(result, library, out, scalar=len(answer_shape) == 0)  # a 0-d input with keepdims too


def problem_form(outer: int, extent: int, inner: int) -> tuple[tuple[int, ...], Any]:
    """The reduce family's problem (shape, axis) for an (outer, R, inner) reduction along R."""
    if inner == 1:
        return ((extent,), None) if outer == 1 else ((outer, extent), 1)
    return ((extent, inner), 0) if outer == 1 else ((outer, extent, inner), -2)


def _answer_dtype(op: str, dtype: str, requested) -> str:
    """NumPy's result dtype of ``op`` on ``dtype``; a ``dtype=`` argument may only name that one."""
    answer = result_dtype(op, dtype)
    if requested is not None:
        from ...core.problem import dtype_name

        if dtype_name(requested) != answer:
            raise TypeError(f"{op}: dtype={dtype_name(requested)} is not supported; a {op} of {dtype} gives "
                            f"{answer} (convert the input or the result)")
    return answer
