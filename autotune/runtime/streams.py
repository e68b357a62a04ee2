"""The caller's CUDA stream, in whatever form it comes, as the Numba stream that kernels launch on.

Accepted: None or 0 (the legacy default stream, which CuPy and PyTorch also use unless told otherwise, and
which orders work against every blocking stream), a Numba stream, any object with the ``__cuda_stream__``
protocol (cuda.core, recent CuPy and PyTorch streams), a PyTorch stream (``cuda_stream``) or CuPy stream
(``ptr``) of releases without the protocol, or a raw ``CUstream`` handle as an int. A stream a library created
non-blocking is ordered only against work on that same stream: pass the stream that produced the inputs and
will consume the result.

Kernel objects keep launch configurations and workspaces (partial results, split-K tiles, counters) per
stream (``stream_key``), so calls on different streams never share one. The CUDA simulator runs everything at
once on the host, so there every stream is the default one.
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

from ..core import backend

DEFAULT = 0
_external: dict[int, Any] = {}
_lock = threading.Lock()


def as_stream(stream: Any = None):
    """``stream`` as a Numba stream, or 0 for the legacy default stream; TypeError for what is no stream."""
    if stream is None:
        return DEFAULT
    if _is_numba_stream(stream):
        return DEFAULT if backend.simulator() else stream
    handle = stream_handle(stream)
    if handle == 0 or backend.simulator():
        return DEFAULT
    with _lock:
        if handle not in _external:
            from numba import cuda

            _external[handle] = cuda.external_stream(handle)
        return _external[handle]


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` handle of a stream object or int (0: the legacy default stream)."""
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUDA stream or a stream handle, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle {stream} is negative")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        version, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for name in ("cuda_stream", "ptr"):  # PyTorch, CuPy
        value = getattr(stream, name, None)
        if isinstance(value, int):
            return value
    if _is_numba_stream(stream):
        return int(getattr(stream, "handle", 0) or 0)
    raise TypeError(f"stream must be a Numba, CuPy, PyTorch or cuda.core stream, an object with __cuda_stream__, "
                    f"or a CUstream handle; got {type(stream).__name__}")


def follow(stream, producers: Iterable[int | None]) -> None:
    """Make ``stream`` (as returned by ``as_stream``) wait on the GPU for the ``producers`` (streams named by the
    CUDA Array Interface of the arguments, ``arrays.producer_stream``; None: none named) that differ from it: an
    event recorded on the producer, waited for by ``stream``; the host does not block."""
    if backend.simulator():
        return
    own = stream_key(stream)
    for producer in producers:
        if producer is None or _same_stream(producer, own):
            continue
        from numba import cuda

        event = cuda.event(timing=False)
        event.record(stream=as_stream(0 if producer == LEGACY else producer))
        event.wait(stream=stream)


LEGACY = 1  # the CUDA Array Interface's name of the legacy default stream (2 is the per-thread one)


def _same_stream(producer: int, own: int) -> bool:
    return producer == own or (producer == LEGACY and own == 0)


def dlpack_stream(stream: Any) -> int:
    """The DLPack protocol's number of a stream returned by ``as_stream`` (or None: the default): 1 for the legacy
    default stream, else its handle; what a DLPack producer is asked to have its data ready on."""
    key = 0 if stream is None else stream_key(stream)
    return LEGACY if key == 0 else key


def stream_key(stream: Any) -> int:
    """What identifies a stream returned by ``as_stream`` in per-stream caches: its handle (0 for the default)."""
    if stream is DEFAULT or backend.simulator():
        return 0
    return int(stream)


def _is_numba_stream(stream: Any) -> bool:
    from numba import cuda

    kind = cuda.stream if backend.simulator() else type(cuda.default_stream())
    return isinstance(stream, kind)
