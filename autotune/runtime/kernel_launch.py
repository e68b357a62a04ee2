"""Replayed kernel launches with their parameter buffer built once.

numba-cuda launches through cuda.core's ``launch(stream, config, kernel, *args)``, which converts every argument
into a C parameter buffer (its ``ParamHolder``) at each call before the driver launches: a good part of a
launch's host time (``lab/host_time_ab.py`` measures it). A kept plan
(autotune/runtime/launch.py) replays the same arguments every time, so here the buffer is built once, by that same
``ParamHolder`` (cuda.core's conversions, not a copy of them), and each replay hands it to the driver's
``cuLaunchKernel`` (cuda.bindings, public).

``ParamHolder`` lives in a private module of cuda.core (1.2). Each buffer is read back once against the values it
was given; where that module is missing or a buffer does not hold them (another cuda.core), a replay goes
through ``cuda.core.launch`` as numba-cuda's own launches do.
"""
from __future__ import annotations

import ctypes
import functools
import struct
from types import SimpleNamespace
from typing import Callable


class LaunchError(RuntimeError):
    """The driver refused a replayed launch."""


class BufferedLaunch:
    """One kernel launch on ``stream`` with ``config`` (cuda.core's LaunchConfig: grid, block, dynamic shared
    bytes) whose parameter buffer was built once; calling it launches."""

    __slots__ = ("_launch", "_success", "_function", "_dims", "_stream", "_params", "_holder")

    def __init__(self, bindings, function, config, stream: int, holder):
        self._launch = bindings.cuLaunchKernel
        self._success = bindings.CUresult.CUDA_SUCCESS
        self._function = function
        self._dims = (*config.grid, *config.block, config.shmem_size)
        self._stream = bindings.CUstream(stream)
        self._holder = holder  # owns the buffer at self._params
        self._params = holder.ptr

    def __call__(self) -> None:
        err, = self._launch(self._function, *self._dims, self._stream, self._params, 0)
        if err != self._success:
            raise LaunchError(f"cuLaunchKernel failed: {err!r}")


def prepared(stream, config, kernel, packed: tuple) -> Callable[[], None]:
    """A call that launches cuda.core ``kernel`` with ``config`` on ``stream`` (a Numba stream or 0) with the
    packed arguments ``packed`` (numba-cuda's ``_prepare_args`` output): a ``BufferedLaunch`` where the buffer
    could be built and checked, else ``cuda.core.launch`` bound to the arguments."""
    pieces = _pieces()
    holder = None if pieces is None else _checked_buffer(pieces.ParamHolder, packed)
    if holder is None or getattr(config, "is_cooperative", False) or getattr(config, "cluster", None):
        from cuda.core import launch

        return functools.partial(launch, stream, config, kernel, *packed)
    return BufferedLaunch(pieces.bindings, pieces.function_of(kernel), config, stream_handle(stream), holder)


def _checked_buffer(ParamHolder, packed: tuple):
    """``ParamHolder(packed)`` where its buffer (an array of pointers to each value's bytes) holds ``packed`` as
    the kernel receives them; None otherwise."""
    expected = [_bytes(value) for value in packed]
    if None in expected:
        return None
    try:
        holder = ParamHolder(packed)
        slots = (ctypes.c_void_p * len(packed)).from_address(holder.ptr) if packed else ()
        found = [ctypes.string_at(slot, len(want)) for slot, want in zip(slots, expected)]
    except Exception:
        return None
    return holder if found == expected else None


def _bytes(value) -> bytes | None:
    """What a kernel parameter of this packed value holds: a Python bool as one byte, an int as a 64-bit integer
    (numba-cuda's array sizes, shapes, strides and pointers), a ctypes or NumPy scalar as itself; None for
    anything else."""
    if isinstance(value, bool):
        return bytes([value])
    if isinstance(value, int):
        return struct.pack("<q" if value < 1 << 63 else "<Q", value)
    if isinstance(value, ctypes._SimpleCData):
        return bytes(value)
    tobytes = getattr(value, "tobytes", None)
    return tobytes() if tobytes is not None and getattr(value, "ndim", None) == 0 else None


def memset_d32() -> Callable[[int, int, int, int], None]:
    """``memset(pointer, value, words, stream)``: the driver's cuMemsetD32Async of ``words`` 32-bit ``value``s
    from ``pointer`` on the stream with that handle, through cuda.bindings with its result checked (less host time
    per call than Numba's wrapper of it); Numba's wrapper where the pieces above are missing."""
    pieces = _pieces()
    if pieces is None:
        from numba.cuda.cudadrv.driver import driver

        return driver.cuMemsetD32Async
    call, success = pieces.bindings.cuMemsetD32Async, pieces.bindings.CUresult.CUDA_SUCCESS

    def memset(pointer: int, value: int, words: int, stream: int) -> None:
        err, = call(pointer, value, words, stream)
        if err != success:
            raise LaunchError(f"cuMemsetD32Async failed: {err!r}")

    return memset


def stream_handle(stream) -> int:
    """The CUstream handle of a Numba stream (0 for the legacy default stream)."""
    handle = getattr(stream, "handle", stream) if stream else 0
    return (handle.value or 0) if isinstance(handle, ctypes.c_void_p) else int(handle)


@functools.lru_cache(maxsize=1)
def _pieces() -> SimpleNamespace | None:
    """cuda.core's ParamHolder and the cuda.bindings driver calls, or None where the former is missing."""
    try:
        from cuda.bindings import driver as bindings
        from cuda.core._kernel_arg_handler import ParamHolder
    except ImportError:
        return None

    def function_of(kernel):
        err, function = bindings.cuKernelGetFunction(kernel.handle)
        if err != bindings.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"cuKernelGetFunction failed: {err!r}")
        return function

    return SimpleNamespace(ParamHolder=ParamHolder, bindings=bindings, function_of=function_of)
