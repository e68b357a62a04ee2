"""New result arrays from a cache of device blocks: what a call that returns a new array allocates.

Numba's ``cuda.device_array`` asks the driver for memory at every call and frees it in batches (``cuMemFree``,
which waits for the device): more host time per small array than the call's launches, so that a matmul without
``out=`` cost several times the host time of one with it. Here a result's block goes back, when the garbage collector
drops the last array or view on it, to a free list kept per (CUDA context, stream, size), and the next result of
that size on that stream takes it. Work on one stream runs in order, so whatever the block's last owner queued
on that stream finishes before the next writer starts: the rule of CuPy's and PyTorch's caching allocators, with
the same caveat: an array that work on another stream reads or writes (a result passed as ``out=`` of a call on
another stream, say) must be kept alive until that work is done.

Sizes are rounded up to 512 bytes. At most ``MAX_CACHED_BYTES`` of free blocks are kept; a block freed beyond
that goes back to Numba (which frees it), and ``free_all_blocks()`` gives every cached block back. Where an
allocation fails, the cache is given back and the allocation tried once more. In the CUDA simulator results are
plain ``cuda.device_array``s.

Numba's ``MemoryPointer`` (a buffer, the type its external-memory plugins return) and ``DeviceNDArray`` (an
array on given memory) are used only here, in two ways that take host time off every result: the block goes back to the cache from ``__del__`` of a ``MemoryPointer`` subclass (the class's
docstring leaves the buffer's lifetime to subclasses, as Numba's ``AutoFreePointer`` does) rather than a
``weakref.finalize``, and an array is a copy of the attributes Numba's constructor gave the first array of its
form, with its own memory.
"""
from __future__ import annotations

import functools
import math
import threading
from types import SimpleNamespace
from typing import Any, Callable, Hashable

import numpy as np

from ..core import backend
from .streams import stream_key

ALIGN = 512
MAX_CACHED_BYTES = 1 << 30


class BlockCache:
    """Free device blocks by key, each key's blocks of one size. ``take`` hands out a cached block or None; ``put``
    caches a block again, or drops it (the caller's allocator frees what it drops) beyond ``limit`` bytes."""

    def __init__(self, limit: int = MAX_CACHED_BYTES):
        self.limit = limit
        self._free: dict[Hashable, list[Any]] = {}
        self._bytes = 0
        self._lock = threading.RLock()  # re-entrant: a pointer collected in take() puts its block back

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def take(self, key: Hashable, nbytes: int):
        with self._lock:
            blocks = self._free.get(key)
            if not blocks:
                return None
            block = blocks.pop()
            self._bytes -= nbytes
            return block

    def put(self, key: Hashable, nbytes: int, block) -> None:
        with self._lock:
            if self._bytes + nbytes > self.limit:
                return
            self._free.setdefault(key, []).append(block)
            self._bytes += nbytes

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._bytes = 0


_cache = BlockCache()


def empty(shape: tuple[int, ...], dtype, order: str = "C", stream=0, context=None):
    """An uninitialised device array (a Numba ``DeviceNDArray``) of ``shape``, ``dtype`` and ``order``, its
    memory a cached block of an earlier result made for ``stream`` (as returned by ``streams.as_stream``) or a
    new one, in ``context`` (a Numba context; default the current one, which costs a driver call to find)."""
    shape, strides, dtype, nbytes = _form(shape if isinstance(shape, tuple) else tuple(shape), dtype, order)
    if backend.simulator() or nbytes == 0:
        from numba import cuda

        return cuda.device_array(shape, dtype=dtype, order=order)
    numba = _numba()
    context = numba.current_context() if context is None else context
    return _array((shape, strides, dtype), _memory(context, (id(context), stream_key(stream)), nbytes))


def context_of(d):
    """The Numba context of a device array made here or by Numba (None for other arrays and in the simulator):
    what ``empty`` takes to skip the lookup of the current one."""
    return getattr(getattr(d, "gpu_data", None), "context", None)


def free_all_blocks() -> None:
    """Give every cached free block back to Numba, which frees it (arrays still alive keep theirs)."""
    _cache.clear()


def cached_bytes() -> int:
    """Bytes held in free blocks for later results."""
    return _cache.cached_bytes


@functools.lru_cache(maxsize=1)
def _numba() -> SimpleNamespace:
    """The Numba pieces used per call, imported once."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.devices import get_context
    from numba.cuda.cudadrv.driver import MemoryPointer

    class CachedBlockPointer(MemoryPointer):
        """A MemoryPointer of ``nbytes`` on ``block`` that, once collected (with the last array or view on it: a
        view's pointer holds its owner), puts ``block`` back by ``returned`` = (put, key, size)."""

        def __init__(self, context, block, nbytes: int, returned: tuple):
            super().__init__(context, block.device_pointer, nbytes)
            self._block, self._returned = block, returned

        def __del__(self):
            put, key, size = self._returned
            put(key, size, self._block)

    return SimpleNamespace(DeviceNDArray=DeviceNDArray, MemoryPointer=MemoryPointer, Pointer=CachedBlockPointer,
                           current_context=get_context)


def _memory(context, owner_key: tuple, nbytes: int):
    """A Numba MemoryPointer of ``nbytes`` on a block of the cache (or a new block) that goes back to the cache
    when the pointer is collected."""
    size = -(-nbytes // ALIGN) * ALIGN
    key = owner_key + (size,)
    block = _cache.take(key, size)
    if block is None:
        block = _allocated(lambda: context.memalloc(size))
    return _numba().Pointer(context, block, nbytes, (_cache.put, key, size))


CONSTRUCTED = frozenset({"ndim", "_dummy", "shape", "strides", "dtype", "size", "alloc_size", "gpu_data", "stream"})


def _array(form: tuple, gpu_data):
    """``DeviceNDArray(shape, strides, dtype, gpu_data=gpu_data)`` for ``form`` = (shape, strides, dtype): a new
    array holding the attributes the constructor gave the first array of the form, ``gpu_data`` its own. Where
    the constructor sets other attributes than numba-cuda 0.30's (``CONSTRUCTED``, which depend on the form only),
    the constructor itself."""
    attributes = _constructed(form)
    if attributes is None:
        return _numba().DeviceNDArray(*form, gpu_data=gpu_data)
    array = object.__new__(_numba().DeviceNDArray)
    state = array.__dict__
    state.update(attributes)
    state["gpu_data"] = gpu_data
    return array


@functools.lru_cache(maxsize=1024)
def _constructed(form: tuple) -> dict | None:
    """The attributes Numba's constructor sets on an array of ``form`` (None where they are not ``CONSTRUCTED``),
    taken before anything reads the array (its cached properties, some of which hold its pointer)."""
    numba = _numba()
    attributes = dict(vars(numba.DeviceNDArray(*form, gpu_data=numba.MemoryPointer(None, 0, 0))))
    return attributes if attributes.keys() == CONSTRUCTED else None


def _allocated(allocate: Callable[[], Any]):
    """``allocate()``; where it fails and blocks are cached, the cache given back and ``allocate()`` once more."""
    try:
        return allocate()
    except Exception:
        if not _cache.cached_bytes:
            raise
    free_all_blocks()
    return allocate()


@functools.lru_cache(maxsize=1024)
def _form(shape: tuple, dtype, order: str) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, int]:
    """(shape, strides, dtype, bytes) of an array, worked out once per (shape, dtype, order) a process uses."""
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    return shape, _strides(shape, dtype.itemsize, order), dtype, math.prod(shape) * dtype.itemsize


def _strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    dims = shape[::-1] if order == "C" else shape
    strides, step = [], itemsize
    for n in dims:
        strides.append(step)
        step *= max(n, 1)
    return tuple(strides[::-1]) if order == "C" else tuple(strides)
