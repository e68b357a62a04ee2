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

Launches and memsets replayed again and again are captured once into a CUDA graph (``captured``, on a stream of
its own) and replayed with one ``cuGraphLaunch`` (``GraphLaunch``): the driver takes less host time for a graph's
launch than for one kernel launch with its parameter buffer, and a plan of several steps becomes one driver call
(benchmarks/NOTES.md item 68). ``AUTOTUNE_GRAPHS=0`` turns that off.
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import weakref
from types import SimpleNamespace
from typing import Any, Callable

GRAPHS_ENV = "AUTOTUNE_GRAPHS"


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

    def issue_on(self, stream) -> None:
        """The same launch on another stream (a ``CUstream``): how a graph captures it."""
        err, = self._launch(self._function, *self._dims, stream, self._params, 0)
        if err != self._success:
            raise LaunchError(f"cuLaunchKernel failed: {err!r}")

    @property
    def stream_handle(self) -> int:
        """The handle of the stream it launches on (0: the legacy default stream)."""
        return int(self._stream)


class GraphLaunch:
    """Work captured into a CUDA graph (``captured``), launched with one ``cuGraphLaunch`` on the stream it was
    made for; its executable is destroyed with this object. The driver refuses a graph's launch into a stream
    that is being captured, so on a stream other than the legacy default stream (which no capture can hold), while
    that stream is being captured into a graph of the caller's own, ``fallback`` runs instead: the same work
    launch by launch, which the caller's capture records as it did before graphs."""

    __slots__ = ("_launch", "_success", "_exec", "_stream", "_fallback", "_capturing", "_not_capturing",
                 "__weakref__")

    def __init__(self, bindings, graph_exec, stream: int, fallback: Callable[[], None]):
        self._launch = bindings.cuGraphLaunch
        self._success = bindings.CUresult.CUDA_SUCCESS
        self._exec = graph_exec
        self._stream = bindings.CUstream(stream)
        self._fallback = fallback
        self._capturing = bindings.cuStreamIsCapturing if stream else None
        self._not_capturing = bindings.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        # not at exit: the context may be gone by then, and the driver frees what a process leaves
        weakref.finalize(self, bindings.cuGraphExecDestroy, graph_exec).atexit = False

    def __call__(self) -> None:
        if self._capturing is not None:
            err, status = self._capturing(self._stream)
            if err != self._success or status != self._not_capturing:
                self._fallback()
                return
        err, = self._launch(self._exec, self._stream)
        if err != self._success:
            raise LaunchError(f"cuGraphLaunch failed: {err!r}")


def graphs_enabled() -> bool:
    """Whether replayed work may be captured into CUDA graphs: the driver calls are there (cuda.bindings and the
    buffered launches) and ``AUTOTUNE_GRAPHS`` is not 0."""
    return os.environ.get(GRAPHS_ENV, "1") != "0" and _pieces() is not None


def captured(issuers: list[Callable[[Any], None]], stream: int, fallback: Callable[[], None]) -> GraphLaunch:
    """A ``GraphLaunch`` on ``stream`` (a handle) of the work of ``issuers``, each of which issues its work on the
    stream it is given, and ``fallback`` (see GraphLaunch): called in order on a capture stream of their own
    (non-blocking, so that capturing waits on nothing; this thread's capture only) and instantiated; the graph
    itself is dropped then (the executable does not need it). The captured launches keep their arguments as they
    were at capture. LaunchError where the driver refuses a step of that; the capture is ended and what it made
    destroyed also where a step fails."""
    b = _pieces().bindings
    capture = _checked(b, b.cuStreamCreate(b.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    try:
        _checked(b, (*b.cuStreamBeginCapture(capture, b.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                     None), "cuStreamBeginCapture")
        try:
            for issue in issuers:
                issue(capture)
        except BaseException:
            err, partial = b.cuStreamEndCapture(capture)
            if err == b.CUresult.CUDA_SUCCESS and partial is not None:
                b.cuGraphDestroy(partial)
            raise
        graph = _checked(b, b.cuStreamEndCapture(capture), "cuStreamEndCapture")
        try:
            graph_exec = _checked(b, b.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            b.cuGraphDestroy(graph)
    finally:
        b.cuStreamDestroy(capture)
    return GraphLaunch(b, graph_exec, stream, fallback)


def _checked(bindings, result: tuple, name: str):
    """The value of a driver call's ``(error, value)`` result; LaunchError naming the call where it failed."""
    err, value = result
    if err != bindings.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{name} failed: {err!r}")
    return value


def prepared(stream, config, kernel, packed: tuple) -> Callable[[], None]:
    """A call that launches cuda.core ``kernel`` with ``config`` on ``stream`` (a Numba stream or 0) with the
    packed arguments ``packed`` (numba-cuda's ``_prepare_args`` output): a ``BufferedLaunch`` where the buffer
    could be built and checked, else ``cuda.core.launch`` bound to the arguments (and the stream as cuda.core's)."""
    pieces = _pieces()
    holder = None if pieces is None else _checked_buffer(pieces.ParamHolder, packed)
    if holder is None or getattr(config, "is_cooperative", False) or getattr(config, "cluster", None):
        from cuda.core import launch

        return functools.partial(launch, core_stream(stream), config, kernel, *packed)
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


def core_stream(stream):
    """A cuda.core stream for ``stream`` (a Numba or cuda.core stream, or 0), as ``cuda.core.launch`` takes it."""
    from cuda.core import Stream

    return stream if isinstance(stream, Stream) else Stream.from_handle(stream_handle(stream))


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
