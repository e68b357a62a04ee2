"""NumPy-style functions: ``autotune.sum/max/min/nanmax/nanmin/dot/matmul``, tuned for each call's own shape.

Each call brings its arrays to one of the families' problem forms, takes the kernel tuned for that shape (the
database entry for the exact shape, else the nearest, else the family's default, announced once per shape and
process by a ``TunedKernelWarning``) and keeps it for the next call of the same shape.

Semantics are NumPy's: result shapes and dtypes, ``axis`` (negative, a tuple), ``keepdims``, NaN in max and min,
the empty cases; ``matmul`` of 1-D operands and of stacks of matrices with broadcasting. What is not supported
raises a clear error instead of computing something else. NumPy inputs give NumPy results (a NumPy scalar
where NumPy returns one); device inputs (Numba, CuPy, PyTorch CUDA) give Numba device arrays, 0-d where NumPy
returns a scalar, and nothing waits for the GPU.

Layouts: C-contiguous arrays and F-contiguous ones (transposed views: ``x.T`` of a NumPy or CuPy array, a
PyTorch ``t.t()``) are read in place; a reduction of an F-contiguous array reduces the matching axis of its
C-contiguous base, a matmul operand picks the transposed layout. Other strided views are refused, naming the
copy to make. Work is queued on ``stream`` (see autotune/streams.py).
"""
from __future__ import annotations

import math
import operator
import threading
from typing import Any

import numpy as np

from .. import arrays, result_pool, streams
from ..dtypes import HALF, kernel_view
from ..launch import Plan, Written
from ..streams import as_stream, stream_key
from . import matmul_batch as batching
from .matmul_kernel import INT32_MAX
from .matmul import family as matmul_family
from .reduce import result_dtype, result_shape

__all__ = ["sum", "max", "min", "nanmax", "nanmin", "dot", "matmul"]

MAX_REPLAYS = 256
_kernels: dict[tuple, Any] = {}
_replays: dict[tuple, tuple[Plan, Any]] = {}
_lock = threading.Lock()


# -- public functions -----------------------------------------------------------------------------
def sum(x, axis=None, *, keepdims: bool = False, dtype=None, out=None, stream=None):
    """``np.sum(x, axis, keepdims=keepdims)``: float32, float64, float16, bfloat16, int32 or int64 arrays; the
    result's dtype is NumPy's (int64 for int32), and ``dtype=`` may name it (``np.int64``, ``"i8"``), nothing else.
    float16 and bfloat16 are accumulated in float32 and rounded once; integers wrap as NumPy's do."""
    return _reduce("sum", x, axis, keepdims, dtype, out, stream)


def max(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.max``: NaN anywhere in a reduced line makes its result NaN; no identity, so an empty line raises."""
    return _reduce("max", x, axis, keepdims, None, out, stream)


def min(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.min``, with NaN and empty lines as ``max``."""
    return _reduce("min", x, axis, keepdims, None, out, stream)


def nanmax(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.nanmax``: NaN skipped; a line of only NaN gives NaN (without NumPy's warning)."""
    return _reduce("nanmax", x, axis, keepdims, None, out, stream)


def nanmin(x, axis=None, *, keepdims: bool = False, out=None, stream=None):
    """``np.nanmin``, as ``nanmax``."""
    return _reduce("nanmin", x, axis, keepdims, None, out, stream)


def dot(a, b, *, out=None, stream=None):
    """``np.dot`` of two 1-D arrays (their inner product) or two 2-D arrays (``matmul``)."""
    host = arrays.is_host(a) and arrays.is_host(b)
    da, db = _device(a, "a"), _device(b, "b")
    if da.ndim == 1 and db.ndim == 1:
        if da.shape != db.shape:
            raise ValueError(f"shapes {tuple(da.shape)} and {tuple(db.shape)} not aligned for dot")
        return _reduce("dot", da, None, False, None, out, stream, y=db, host=host)
    if da.ndim == 2 and db.ndim == 2:
        return _matmul(da, db, out, stream, host)
    raise ValueError(f"autotune.dot takes two 1-D or two 2-D arrays, got {da.ndim}-D and {db.ndim}-D (use "
                     f"autotune.matmul for stacks of matrices)")


def matmul(A, B, *, out=None, dtype=None, stream=None, precision: str = "ieee"):
    """``A @ B`` as ``np.matmul``: 2-D products, 1-D operands (a vector is a 1 x K row on the left, a K x 1
    column on the right, and that 1 is dropped from the result) and stacks of matrices, whose leading dimensions
    broadcast. Each 2-D operand (each matrix of a stack) is C-contiguous or the transpose of one. ``dtype``: the
    operands' (default) or, for float16 and bfloat16 operands, float32 (the float32 sums, not rounded, as
    ``np.matmul(A, B, dtype=np.float32)``). ``precision`` (float32 only): "ieee" fp32 products, "3xtf32"
    fp32-level error on the TF32 tensor cores, "tf32" TF32-rounded operands (see the matmul family)."""
    return _matmul(A, B, out, stream, arrays.is_host(A) and arrays.is_host(B), precision, dtype)


def _matmul(A, B, out, stream, host: bool, precision: str = "ieee", requested=None):
    launch_stream = as_stream(stream)
    replay = _Replay(("matmul", precision, requested), (A, B), out, launch_stream)
    if (replayed := replay.result()) is not None:
        return replayed
    dA, dB = _device(A, "A"), _device(B, "B")
    dtype = _same_dtype("matmul", "matmul", dA, dB)
    out_dtype = _matmul_out_dtype(dtype, requested)
    args = matmul_family.family_args(precision=precision, out_dtype=None if out_dtype == dtype else out_dtype)
    matmul_family.check_dtype(dtype, args)  # even where no kernel runs
    if dA.ndim == 0 or dB.ndim == 0:
        raise ValueError("matmul: an operand is 0-d (a scalar); use multiplication")
    a2 = dA.reshape(1, dA.shape[0]) if dA.ndim == 1 else dA
    b2 = dB.reshape(dB.shape[0], 1) if dB.ndim == 1 else dB
    (M, K), (K2, N) = a2.shape[-2:], b2.shape[-2:]
    if K != K2:
        raise ValueError(f"matmul: shapes {tuple(dA.shape)} and {tuple(dB.shape)} do not align (K {K} != {K2})")
    try:
        batch = np.broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: the stack shapes of {tuple(dA.shape)} and {tuple(dB.shape)} do not "
                         f"broadcast") from None
    shape = batch + ((M,) if dA.ndim > 1 else ()) + ((N,) if dB.ndim > 1 else ())
    result = _result(out, shape, out_dtype, "C", launch_stream)
    c3 = result.reshape(batch + (M, N))
    replay.follow()
    if math.prod(batch) and M and N and not K:
        _zero(c3, launch_stream)
    elif math.prod(batch) and M and N:
        kernel_args = {"precision": precision, "out_dtype": args["out_dtype"]}
        plans = _stack_plans(a2, b2, c3, batch, dtype, kernel_args, launch_stream)
        replay.run(Plan.joined(plans, result), result)
    return _returned(result, host, out, scalar=shape == ())


def _stack_plans(a2, b2, c3, batch: tuple[int, ...], dtype: str, kernel_args: dict, stream) -> list[Plan]:
    """The launches of ``c3 = a2 @ b2`` over the stack ``batch`` (NumPy's broadcasting), fewest first:

    - one matrix: the kernel tuned for it;
    - a C-contiguous stack times one matrix: one product of all the stack's rows ((B*M, K) @ (K, N), a single
      problem whose tiles span the matrices), where its indices stay 32-bit;
    - else one batched launch (problem B x M x N x K, matmul_batch.py) for every index of the leading batch
      dimensions whose trailing ones collapse to two levels of strides: one launch for stacks of one batch
      dimension each, broadcast or not, and for any stack that collapses so;
    - where an operand's matrices are in neither layout or a stride is negative, the matrices one by one (the
      unbatched kernel, as NumPy's semantics ask: each matrix checked on its own)."""
    M, K = tuple(a2.shape)[-2:]
    N = tuple(b2.shape)[-1]
    if not batch:
        return [_kernel("matmul", (M, N, K), dtype, layout=_layout(a2, "A") + _layout(b2, "B"),
                        **kernel_args).bind(a2, b2, out=c3, stream=stream)]
    rows = math.prod(batch) * M
    if math.prod(tuple(b2.shape)[:-2]) == 1 and tuple(a2.shape[:-2]) == batch and arrays.is_c_contiguous(a2) and \
            rows * K <= INT32_MAX and rows * N <= INT32_MAX:
        b = b2 if b2.ndim == 2 else b2[(0,) * (b2.ndim - 2)]
        return _stack_plans(a2.reshape(rows, K), b, c3.reshape(rows, N), (), dtype, kernel_args, stream)
    split = _stack_split(a2, b2, batch)
    if split is None:
        return [_stack_plans(_stacked(a2, index, batch), _stacked(b2, index, batch), c3[index], (), dtype,
                             kernel_args, stream)[0] for index in np.ndindex(*batch)]
    layout = "".join(batching.matrix_order(tuple(x.shape)[-2:], batching.element_strides(x)[-2:])
                     for x in (a2, b2))
    kernel = _kernel("matmul", (math.prod(batch[split:]), M, N, K), dtype, layout=layout, **kernel_args)
    return [kernel.bind(_leading(a2, index, batch), _leading(b2, index, batch), c3[index] if index else c3,
                        stream=stream) for index in np.ndindex(*batch[:split])]


def _stack_split(a2, b2, batch: tuple[int, ...]) -> int | None:
    """How many leading batch dimensions to launch one by one so that the rest collapse to two levels of strides
    (matmul_batch.collapse), the fewest; None where a batched kernel cannot read the operands (a matrix in
    neither layout, a negative stride) or only single matrices remain."""
    strides = []
    for x in (a2, b2):
        steps = batching.element_strides(x)
        if batching.matrix_order(tuple(x.shape)[-2:], steps[-2:]) is None or any(s < 0 for s in steps):
            return None
        lead = len(batch) - (x.ndim - 2)
        strides.append((0,) * lead + tuple(0 if n == 1 else s for n, s in zip(tuple(x.shape)[:-2], steps[:-2])))
    M, N = tuple(a2.shape)[-2], tuple(b2.shape)[-1]
    c_steps = tuple(math.prod(batch[i + 1:]) * M * N for i in range(len(batch)))
    for split in range(len(batch)):
        rest = [tuple(s[split:]) for s in (*strides, c_steps)]
        if len(batching.collapse(batch[split:], rest)) <= 2:
            return split
    return None


def _leading(d, index: tuple[int, ...], batch: tuple[int, ...]):
    """The sub-stack of ``d`` at the leading batch ``index`` (its own leading dimensions aligned to the end of
    ``batch``; those it lacks or has of one are broadcast)."""
    lead = d.ndim - 2 - (len(batch) - len(index))
    if lead <= 0:
        return d
    own = tuple(0 if n == 1 else i for i, n in zip(index[len(index) - lead:], tuple(d.shape)[:lead]))
    return d[own]


# -- reductions -----------------------------------------------------------------------------------
def _reduce(op: str, x, axis, keepdims: bool, dtype, out, stream, y=None, host: bool | None = None):
    launch_stream = as_stream(stream)
    replay = _Replay(("reduce", op, _hashable(axis), keepdims, dtype), (x, y), out, launch_stream)
    if (replayed := replay.result()) is not None:
        return replayed
    if host is None:
        host = arrays.is_host(x) and (y is None or arrays.is_host(y))
    d = _device(x, "x")
    dy = _device(y, "y") if y is not None else None
    dtype_name = _same_dtype("reduce", op, d, dy) if dy is not None else _input_dtype("reduce", op, d)
    answer_dtype = _answer_dtype(op, dtype_name, dtype)
    axes = normalize_axis(axis, d.ndim)
    shape = tuple(d.shape)
    answer_shape = tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)
    order = _order(d, "x")
    base, base_axes = (d, axes) if order == "C" else (_c_base(d), tuple(sorted(d.ndim - 1 - a for a in axes)))
    y_base = None if dy is None else (dy if order == "C" else _c_base(dy))
    if dy is not None and _order(dy, "y") != order:
        raise ValueError("dot: both operands must have the same layout (both C- or both F-contiguous)")
    outer, extent, inner = collapse(tuple(base.shape), base_axes)
    if not axes and answer_dtype != dtype_name:
        raise TypeError(f"{op} over no axis of {dtype_name} would only convert it to {answer_dtype}: use astype")
    result = _result(out, answer_shape, answer_dtype, order, launch_stream)
    replay.follow()
    if not axes:
        _copy(result, d, launch_stream)
    elif extent == 0 and op not in ("sum", "dot"):
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    elif outer * inner and extent:
        problem_shape, family_axis = problem_form(outer, extent, inner)
        kernel = _kernel("reduce", problem_shape, dtype_name, op=op, axis=family_axis)
        inputs = [base.reshape(problem_shape)] + ([y_base.reshape(problem_shape)] if y_base is not None else [])
        target = arrays.flat(result, order=order).reshape(result_shape(problem_shape, family_axis))
        replay.run(kernel.bind(*inputs, out=target, stream=launch_stream), result)
    elif outer * inner:
        _zero(result, launch_stream)
    return _returned(result, host, out, scalar=not keepdims and len(answer_shape) == 0)


class _Replay:
    """Repeated calls on the same device arrays (same pointers, shapes, strides, dtypes, arguments and stream)
    replay the launches of the first call: no conversions, checks or lookups, only the launches (launch.Plan)
    and, where an array names a producer stream other than the launch stream, the wait for it. With ``out=`` the
    plan writes ``out`` again; without, each call gets a new array (callers keep their results) and the plan is
    moved onto it (``Plan.moved``), where its launches allow that (not in the simulator)."""

    def __init__(self, call: tuple, inputs: tuple, out, stream):
        self.stream = stream
        self.out = out
        self.interfaces = [None if v is None else (arrays.interface(v) or False)
                           for v in (*inputs, out)]
        found = arrays.interfaces_key(self.interfaces)
        self.key = None if found is None else (call, found, stream_key(stream))

    def result(self):
        """The call's output, replayed, if the call was kept (written as far as the stream goes); else None."""
        kept = _replays.get(self.key) if self.key is not None else None
        if kept is None:
            return None
        plan, written = kept
        self.follow()
        if self.out is not None:
            plan()
            return self.out
        return written.replay(plan, self.stream)

    def follow(self) -> None:
        streams.follow(self.stream, map(arrays.stream_of, filter(None, self.interfaces)))

    def run(self, plan: Plan, result) -> None:
        """Run the first call's plan, which writes ``result``, and keep it for the next (a plan for a new output
        only where it can be moved)."""
        plan()
        if self.key is None:
            return
        if self.out is not None or plan.movable:
            with _lock:
                if len(_replays) >= MAX_REPLAYS:
                    _replays.clear()
                _replays[self.key] = (plan, None if self.out is not None else Written.of(result))


def _hashable(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def normalize_axis(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints, negative counting from the end) as sorted non-negative axes;
    NumPy's AxisError when one is out of range, ValueError for a repeated one."""
    if axis is None:
        return tuple(range(ndim))
    given = axis if isinstance(axis, (tuple, list)) else (axis,)
    try:
        given = [operator.index(a) for a in given]
    except TypeError:
        raise TypeError(f"axis must be None, an integer or a tuple of integers, got {axis!r}") from None
    axes = []
    for a in given:
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axis': {axis!r}")
    return tuple(sorted(axes))


def collapse(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, R, inner): the extents before, of and after the reduced axes of a C-contiguous array, which must
    be adjacent (then the array is an (outer, R, inner) array reduced along its middle, without a copy)."""
    if not axes:
        return math.prod(shape), 1, 1
    if list(axes) != list(range(axes[0], axes[-1] + 1)):
        raise ValueError(f"axes {axes} of a C-contiguous {len(shape)}-D array are not adjacent; autotune reduces "
                         f"one axis or adjacent axes in one call: reduce in two calls (e.g. axis={axes[-1]}, then "
                         f"axis={axes[0]})")
    return (math.prod(shape[:axes[0]]), math.prod(shape[axes[0]:axes[-1] + 1]), math.prod(shape[axes[-1] + 1:]))


def problem_form(outer: int, extent: int, inner: int) -> tuple[tuple[int, ...], Any]:
    """The reduce family's problem (shape, axis) for an (outer, R, inner) reduction along R."""
    if inner == 1:
        return ((extent,), None) if outer == 1 else ((outer, extent), 1)
    return ((extent, inner), 0) if outer == 1 else ((outer, extent, inner), -2)


# -- pieces ---------------------------------------------------------------------------------------
def _kernel(kind: str, shape: tuple[int, ...], dtype: str, **args):
    """The tuned kernel for this problem, kept per problem and database folders for the process (the lookup's
    warnings once; a changed ``$AUTOTUNE_DB`` is read)."""
    from ..lookup import get_best_kernel, lookup_folders

    key = (kind, shape, dtype, tuple(sorted(args.items(), key=str)), tuple(map(str, lookup_folders())))
    kernel = _kernels.get(key)
    if kernel is None:

        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = _kernels[key] = get_best_kernel(kind, shape, dtype, **args)
    return kernel


def _device(x, name: str):
    return arrays.to_device(x, name)


def _input_dtype(kind: str, op: str, d) -> str:
    """The dtype of ``d``'s elements, one the family ``kind`` computes in (TypeError naming those otherwise)."""
    from ..registry import family

    name, supported = np.dtype(d.dtype).name, family(kind).dtypes
    if name not in supported:
        raise TypeError(f"{op}: autotune's {kind} takes {', '.join(supported)} arrays; got {name} (convert it, "
                        f"e.g. x.astype(np.{supported[0]}))")
    return name


def _answer_dtype(op: str, dtype: str, requested) -> str:
    """NumPy's result dtype of ``op`` on ``dtype``; a ``dtype=`` argument may only name that one."""
    answer = result_dtype(op, dtype)
    if requested is not None:
        from ..problem import dtype_name

        if dtype_name(requested) != answer:
            raise TypeError(f"{op}: dtype={dtype_name(requested)} is not supported; a {op} of {dtype} gives "
                            f"{answer} (convert the input or the result)")
    return answer


def _matmul_out_dtype(dtype: str, requested) -> str:
    """The result dtype of a matmul of ``dtype`` operands: theirs, or float32 where ``dtype=float32`` asks for
    it of float16 or bfloat16 operands (TypeError for any other request: autotune does not compute in a converted
    dtype)."""
    if requested is None:
        return dtype
    from ..problem import dtype_name

    name = dtype_name(requested)
    if name != dtype and not (dtype in HALF and name == "float32"):
        raise TypeError(f"matmul: dtype={name} is not supported for {dtype} operands (only {dtype}, and float32 "
                        f"for float16 and bfloat16 operands); convert the operands")
    return name


def _same_dtype(kind: str, op: str, a, b) -> str:
    name = _input_dtype(kind, op, a)
    if np.dtype(b.dtype).name != name:
        raise TypeError(f"{op}: operands differ in dtype ({name} and {np.dtype(b.dtype).name}); autotune does not "
                        f"promote: convert one")
    return name


def _order(d, name: str) -> str:
    if arrays.is_c_contiguous(d):
        return "C"
    if arrays.is_f_contiguous(d):
        return "F"
    raise ValueError(f"{name} is a strided view (shape {tuple(d.shape)}, strides {tuple(d.strides)}); autotune "
                     f"reads C- or F-contiguous arrays: copy it first (np.ascontiguousarray, cupy.ascontiguousarray, "
                     f"tensor.contiguous())")


def _c_base(d):
    """The C-contiguous array of reversed shape whose transpose the F-contiguous ``d`` is (a view)."""
    return arrays.flat(d, order="F").reshape(tuple(d.shape)[::-1])


def _layout(d, name: str) -> str:
    """'n' for a C-contiguous matrix, 't' for the transpose of one."""
    return "n" if _order(d, name) == "C" else "t"


def _stacked(d, index: tuple[int, ...], batch: tuple[int, ...]):
    """Matrix ``index`` of the stack ``batch`` from ``d``, whose leading dimensions broadcast to it."""
    lead = d.ndim - 2
    if lead == 0:
        return d
    own = tuple(0 if n == 1 else i for i, n in zip(index[len(batch) - lead:], d.shape[:lead]))
    return d[own]


def _result(out, shape: tuple[int, ...], dtype: str, order: str, stream):
    """``out`` checked (a device array of the result's shape, dtype and layout), or a new device array for work
    on ``stream``."""
    if out is None:
        return result_pool.empty(shape, dtype, order, stream)
    if arrays.is_host(out):
        raise TypeError("out must be a device array (CuPy, PyTorch CUDA or Numba), not a NumPy array")
    d = arrays.to_device(out, "out")
    if tuple(d.shape) != shape or np.dtype(d.dtype).name != dtype:
        raise ValueError(f"out must have shape {shape} and dtype {dtype}, got {tuple(d.shape)} and "
                         f"{np.dtype(d.dtype).name}")
    contiguous = arrays.is_c_contiguous(d) if order == "C" else arrays.is_f_contiguous(d)
    if not contiguous:
        what = "C-contiguous" if order == "C" else "F-contiguous (the input is a transposed view)"
        raise ValueError(f"out must be {what}")
    return d


def _zero(d, stream) -> None:
    """d = 0 (all bits zero: +0.0 in every float dtype), copied as bits where d is bfloat16."""
    from numba import cuda

    if d.size:
        flat = kernel_view(arrays.flat(d, order="C" if arrays.is_c_contiguous(d) else "F"))
        flat.copy_to_device(cuda.to_device(np.zeros(flat.size, dtype=flat.dtype), stream=stream), stream=stream)


def _copy(result, d, stream) -> None:
    """``result[...] = d`` for a reduction over no axis (same shape and layout)."""
    order = "C" if arrays.is_c_contiguous(d) else "F"
    if d.size:
        kernel_view(arrays.flat(result, order=order)).copy_to_device(kernel_view(arrays.flat(d, order=order)),
                                                                     stream=stream)


def _returned(result, host: bool, out=None, scalar: bool = False):
    """NumPy's answer: for NumPy inputs a NumPy array (a scalar where NumPy gives one); for device inputs ``out``
    itself where given, else the new device array."""
    if not host:
        return out if out is not None else result
    value = arrays.device_to_host(result)
    return value[()] if scalar else value
