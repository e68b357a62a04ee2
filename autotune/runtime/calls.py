"""Calling tuned kernels NumPy-style: what every NumPy-style function (``autotune.sum``, ``autotune.matmul``, a
family's own) does around its kernel, public for family authors.

- ``device_input``: an argument as a device array (NumPy copied, Numba, CuPy, PyTorch and DLPack read in place);
  ``input_dtype``/``same_dtype`` check its dtype against the family's, ``order_of``/``c_base``/``layout_of``
  read its layout (C-contiguous, or the transpose of a C-contiguous array).
- ``tuned_kernel``: the family's kernel tuned for a problem, kept per problem and database folders for the
  process (the lookup's warnings once per shape).
- ``result_array``: ``out=`` checked, or a new array from the result pool on the call's stream;
  ``returned`` gives the answer in the caller's library (``libraries.library_of`` of the arguments: NumPy in,
  NumPy out; PyTorch in, PyTorch out; ...), or ``out`` itself. ``staged``/``unstaged``: a call of several launches
  whose ``out=`` overlaps an input computes into a staging array, copied into ``out`` last.
- ``Replay``: repeated calls on the same device arrays replay the launches of the first call (see its
  docstring); ``zero_fill`` and ``copy_into`` are the empty cases' answers.
"""
from __future__ import annotations

import functools
import math
import operator
import threading
from typing import Any

import numpy as np

from ..core.dtypes import kernel_view
from . import arrays, result_pool, streams
from .launch import Plan, Written
from .libraries import NUMBA, Library, host_view, library_of
from .streams import stream_key

__all__ = ["Replay", "device_input", "input_dtype", "same_dtype", "order_of", "c_base", "layout_of", "tuned_kernel",
           "result_array", "staged", "unstaged", "returned", "zero_fill", "copy_into", "normalize_axis", "collapse",
           "axis_arg", "keepdims_arg", "library_of", "Library"]

MAX_REPLAYS = 256
_kernels: dict[tuple, Any] = {}
_replays: dict[tuple, tuple[Plan, Any]] = {}
_lock = threading.Lock()


class Replay:
    """Repeated calls on the same device arrays (same pointers, shapes, strides, dtypes, arguments and stream)
    replay the launches of the first call: no conversions, checks or lookups, only the launches (launch.Plan)
    and, where an array names a producer stream other than the launch stream, the wait for it. With ``out=`` the
    plan writes ``out`` again; without, each call gets a new array (callers keep their results) and the plan is
    moved onto it (``Plan.moved``), where its launches allow that (not in the simulator), and handed back in
    ``library``, the caller's (part of the key: the same memory passed as another library's array gets that
    library's result)."""

    def __init__(self, call: tuple, inputs: tuple, out, stream, library: Library = NUMBA):
        self.stream = stream
        self.out = out
        self.library = library
        self.producers: list[int | None] = []  # the streams the arrays' interfaces name
        self.key = self._key(call, (*inputs, out))

    def _key(self, call: tuple, arrays_given: tuple) -> tuple | None:
        """What identifies the call: its arguments, the result's library, the launch stream and each array's part
        (None for an argument not given). The key is None where one is a host array or no array: no replay."""
        key = [call, self.library.name, stream_key(self.stream)]
        replayable = True
        for v in arrays_given:
            part = None if v is None else arrays.replay_part(v)
            if v is not None and part is None:
                found = arrays.interface(v)
                if found:
                    part = arrays.interface_part(found)
                    self.producers.append(found.get("stream"))
                else:
                    replayable = False  # the other arrays' streams are still followed
            key.append(part)
        return tuple(key) if replayable else None

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
        made = self.library.new(written, self.stream) if self.library.new is not None else None
        if made is not None:
            return written.replay_onto(plan, *made)
        new = written.replay(plan, self.stream)
        return new if self.library.wrap is None else self.library.wrap(new)

    def follow(self) -> None:
        """Make the launch stream wait for the streams the arrays name (where any names one)."""
        if any(producer is not None for producer in self.producers):
            streams.follow(self.stream, self.producers)

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
                kept = (plan, None) if self.out is not None else (plan.detached(), Written.of(result))
                _replays[self.key] = kept


def axis_arg(axis):
    """``axis`` as NumPy takes it (None, an integer or a tuple of integers; NumPy refuses a list), in a hashable
    form that tells apart what NumPy tells apart: a bool is no axis (NumPy refuses ``axis=True``; as a key, True
    would be the same as 1). TypeError for anything else."""
    if axis is None or type(axis) is int:
        return axis
    if isinstance(axis, tuple):
        return tuple(_axis_index(a, axis) for a in axis)
    return _axis_index(axis, axis)


def _axis_index(a, axis) -> int:
    if not isinstance(a, (bool, np.bool_)):
        try:
            return operator.index(a)
        except TypeError:
            pass
    raise TypeError(f"axis must be None, an integer or a tuple of integers, got {axis!r}")


def keepdims_arg(keepdims) -> bool:
    """``keepdims`` as NumPy takes it: True or False (or an integer, which NumPy also takes); TypeError for
    anything else (NumPy refuses ``keepdims='no'``, which as a truth value would keep the dimensions)."""
    if type(keepdims) is bool:
        return keepdims
    try:
        return bool(operator.index(keepdims))
    except TypeError:
        raise TypeError(f"keepdims must be True or False, got {keepdims!r}") from None


def normalize_axis(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints, negative counting from the end) as sorted non-negative axes;
    NumPy's AxisError when one is out of range, ValueError for a repeated one, TypeError for a bool."""
    if axis is None:
        return tuple(range(ndim))
    if ndim == 0 and not isinstance(axis, (tuple, list)) and _axis_index(axis, axis) in (0, -1):
        return ()  # NumPy's reductions take axis 0 or -1 of a 0-d array (not (0,)) as no axis
    given = axis if isinstance(axis, (tuple, list)) else (axis,)
    given = [_axis_index(a, axis) for a in given]
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


def tuned_kernel(family: str, shape: tuple[int, ...], dtype: str, **args):
    """The tuned kernel for this problem, kept per problem and database folders for the process (the lookup's
    warnings once; a changed ``$AUTOTUNE_DB`` is read)."""
    from .lookup import get_best_kernel, lookup_folders

    key = (family, shape, dtype, tuple(sorted(args.items(), key=str)), tuple(map(str, lookup_folders())))
    kernel = _kernels.get(key)
    if kernel is None:

        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = _kernels[key] = get_best_kernel(family, shape, dtype, **args)
    return kernel


def device_input(x, name: str, stream=None):
    """``x`` as a device array (host arrays copied, device arrays viewed; a DLPack producer asked to have it ready
    on ``stream``, as returned by ``streams.as_stream``)."""
    return arrays.to_device(x, name, dlpack_stream=streams.dlpack_stream(stream))


def input_dtype(family: str, op: str, d) -> str:
    """The dtype of ``d``'s elements, one the family named ``family`` computes in (TypeError naming those
    otherwise)."""
    from ..core.registry import family as family_named

    name, supported = np.dtype(d.dtype).name, family_named(family).dtypes
    if name not in supported:
        raise TypeError(f"{op}: autotune's {family} takes {', '.join(supported)} arrays; got {name} (convert it, "
                        f"e.g. x.astype(np.{supported[0]}))")
    return name


def same_dtype(family: str, op: str, a, b) -> str:
    name = input_dtype(family, op, a)
    if np.dtype(b.dtype).name != name:
        raise TypeError(f"{op}: operands differ in dtype ({name} and {np.dtype(b.dtype).name}); autotune does not "
                        f"promote: convert one")
    return name


def order_of(d, name: str) -> str:
    if arrays.is_c_contiguous(d):
        return "C"
    if arrays.is_f_contiguous(d):
        return "F"
    raise ValueError(f"{name} is a strided view (shape {tuple(d.shape)}, strides {tuple(d.strides)}); autotune "
                     f"reads C- or F-contiguous arrays: copy it first (np.ascontiguousarray, cupy.ascontiguousarray, "
                     f"tensor.contiguous())")


def c_base(d):
    """The C-contiguous array of reversed shape whose transpose the F-contiguous ``d`` is (a view)."""
    return arrays.flat(d, order="F").reshape(tuple(d.shape)[::-1])


def layout_of(d, name: str) -> str:
    """'n' for a C-contiguous matrix, 't' for the transpose of one."""
    return "n" if order_of(d, name) == "C" else "t"


def result_array(out, shape: tuple[int, ...], dtype: str, order: str, stream):
    """``out`` checked (an array of the result's shape and dtype; on the device, of the result's layout), or a new
    device array for work on ``stream``. For a host ``out`` (NumPy, PyTorch CPU), a new device array too, which
    ``returned`` copies into it."""
    if out is None:
        return result_pool.empty(shape, dtype, order, stream)
    if library_of(out).host:
        view = host_view(out, "out", writable=True)
        if view is None:
            raise TypeError(f"out must be an array (NumPy, PyTorch, CuPy, Numba or another CUDA array); got "
                            f"{type(out).__name__}")
        _check_out(tuple(view.shape), np.dtype(view.dtype).name, shape, dtype)
        return result_pool.empty(shape, dtype, order, stream)
    d = arrays.to_device(out, "out", dlpack_stream=streams.dlpack_stream(stream))
    _check_out(tuple(d.shape), np.dtype(d.dtype).name, shape, dtype)
    contiguous = arrays.is_c_contiguous(d) if order == "C" else arrays.is_f_contiguous(d)
    if not contiguous:
        what = "C-contiguous" if order == "C" else "F-contiguous (the input is a transposed view)"
        raise ValueError(f"out must be {what}")
    return d


def staged(result, inputs, stream):
    """Where a call of several launches computes ``result``: itself, or a fresh C-contiguous array of its shape
    and dtype when it shares any byte with any input (``inputs``: the whole arrays, None entries ignored).

    The overlap is judged over the whole call, not launch by launch: in a stack of products, the first launch
    writing ``out[0]`` would otherwise overwrite ``X[1]`` (or the one matrix a broadcast operand repeats) before a
    later launch reads it. ``unstaged`` copies the staging array into ``result`` after the last launch."""
    if not arrays.overlaps(result, *inputs):
        return result
    return result_pool.empty(tuple(result.shape), np.dtype(result.dtype), "C", stream)


def unstaged(result, target, stream) -> Plan:
    """The step that copies the staging array ``target`` into ``result`` on ``stream`` (none where the call
    computed into ``result`` itself), as a plan to join after the call's launches; bfloat16 travels as its bits."""
    if target is result or not result.size:
        return Plan([], result)
    return Plan([functools.partial(kernel_view(result).copy_to_device, kernel_view(target), stream=stream)], result)


def _check_out(got_shape: tuple[int, ...], got_dtype: str, shape: tuple[int, ...], dtype: str) -> None:
    if got_shape != shape or got_dtype != dtype:
        raise ValueError(f"out must have shape {shape} and dtype {dtype}, got {got_shape} and {got_dtype}")


def zero_fill(d, stream) -> None:
    """d = 0 (all bits zero: +0.0 in every float dtype), copied as bits where d is bfloat16."""
    from numba import cuda

    if d.size:
        flat = kernel_view(arrays.flat(d, order="C" if arrays.is_c_contiguous(d) else "F"))
        flat.copy_to_device(cuda.to_device(np.zeros(flat.size, dtype=flat.dtype), stream=stream), stream=stream)


def copy_into(result, d, stream) -> None:
    """``result[...] = d`` for a reduction over no axis (same shape and layout)."""
    order = "C" if arrays.is_c_contiguous(d) else "F"
    if d.size:
        kernel_view(arrays.flat(result, order=order)).copy_to_device(kernel_view(arrays.flat(d, order=order)),
                                                                     stream=stream)


def returned(result, library: Library, out=None, scalar: bool = False):
    """The call's answer: ``out`` itself where given (a host ``out`` gets the result copied in), else the result in
    the caller's ``library`` (``libraries.Library.result``); ``scalar``: NumPy gives a scalar here."""
    if out is not None:
        if library_of(out).host:
            np.copyto(host_view(out, "out", writable=True), arrays.device_to_host(result))
        return out
    if library.host:
        return library.result(arrays.device_to_host(result), scalar)
    return result if library.wrap is None else library.wrap(result)
