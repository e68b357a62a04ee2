"""The one place that touches numba-cuda's private simulator: shared arrays allocated under a lock.

In Numba's CUDA simulator every thread of a block is a Python thread, and ``cuda.shared.array`` returns the block's
array for the calling source line, creating it on first use. The lookup and the creation are two steps with no
lock, so two threads that reach the line together can each create an array: one of them then reads and writes a
private copy of "shared" memory, and the kernel computes from uninitialised values. It is rare (a thread switch
between the two steps), and made a simulated matmul fail in CI once in many runs. The replacement is the same
method with the two steps under one lock, and the calling line read from the caller's frame (numba-cuda formats the
whole stack, source lines included, on every call: half of a simulated tree reduction's time).

Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's method only, whenever a generated kernel
is loaded in the simulator; it changes nothing on a GPU.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "46c69699220dd500ba43cd23a5eedb48ea3f2ea602876838c887e592d4055d75"

_lock = threading.Lock()
_state = {"installed": False}


def _fake_shared():
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    return FakeCUDAShared


def original_source_matches() -> bool:
    return source_matches(_fake_shared().array, KNOWN_SOURCE_SHA256)


def array(self, shape, dtype, alignment=None):
    """numba-cuda's ``FakeCUDAShared.array``, with the lookup and creation of a line's array made one step."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)  # the caller: what traceback.extract_stack(...)[-2][0:2] is, without formatting the stack
    caller = (frame.f_code.co_filename, frame.f_lineno)
    with _lock:
        res = self._allocations.get(caller)
        if res is None:
            res = self._allocations[caller] = np.empty(shape, dtype)
    return res


def install() -> bool:
    """Put the locked version in place (once per process); False where the guard says no."""
    return install_once(_state, original_source_matches, lambda: replace_in((_fake_shared(),), "array", array))
