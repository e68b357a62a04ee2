"""The one place that touches numba-cuda's private simulator block loop: a block's threads as greenlets.

In Numba's CUDA simulator every thread of a block is a Python thread. numba-cuda 0.30.4's ``BlockManager.run``
starts one per thread of every block (about 175 microseconds each on this project's machines, more than most
simulated threads run) and spins until all live threads wait at the barrier, and each barrier round hands the
interpreter lock from thread to thread through the operating system. Simulated kernels spent most of their time
there, not in the kernel's code.

Here a block's threads are greenlets (the ``greenlet`` package) that the launching thread runs in turn: each live
thread runs to its next ``__syncthreads`` or its end, round after round, so the barrier opens once every thread
that has not exited waits at it (CUDA's rule, and numba-cuda's). A thread's exception is raised in the launching
thread named with its thread and block as numba-cuda names it, and the block's other threads are dropped. The
simulated ``cuda`` module finds the calling thread through ``threading.current_thread()``; its module's
``threading`` is pointed at an object whose ``current_thread`` is the running greenlet (everything else is
``threading``'s).

Between barriers the threads run one after another in thread order, not interleaved by the operating system: a
simulated thread that waits for another without a barrier (a spin on a flag) waits forever, as it may on a GPU
without independent thread scheduling. Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's
``kernel.py`` and ``kernelapi.py`` only (every use of ``threading`` there is mirrored), whenever a generated kernel
is loaded in the simulator; it changes nothing on a GPU.
"""
from __future__ import annotations

import contextlib
import threading
import types

import greenlet
import numpy as np

from .guard import install_once, replace_in, source_matches

KNOWN_KERNEL_SHA256 = "2202a5fb0922cb217547976ae2afcfb36917c71492f64f81fae32d149b670175"
KNOWN_KERNELAPI_SHA256 = "09d9a88aba1a12ff4594a9b00d2a47972319e96cdc830227d553f789d89d057a"

_state = {"installed": False}
_AT_BARRIER = object()  # what a thread hands the block loop when it waits at the barrier


def _modules():
    from numba.cuda.simulator import kernel, kernelapi

    return kernel, kernelapi


class SimulatedThread(greenlet.greenlet):
    """One GPU thread of a block: what numba-cuda's ``BlockThread`` gives the simulated ``cuda`` module (its
    indices, its manager, ``syncthreads`` and the counting barriers), run as a greenlet of the launching thread."""

    def __init__(self, run, manager, block_idx, thread_index: tuple[int, ...], dim3: type) -> None:
        super().__init__(run)
        self._manager, self.blockIdx, self.threadIdx = manager, block_idx, dim3(*thread_index)
        bx, by, _ = manager._block_dim
        self.thread_id = thread_index[0] + bx * (thread_index[1] + by * thread_index[2])

    def syncthreads(self) -> None:
        """Wait at the block's barrier: back to the block loop, which resumes this thread in the next round."""
        self.parent.switch(_AT_BARRIER)

    def failure(self, exc: BaseException) -> BaseException:
        """``exc`` named with this thread and its block, as numba-cuda's ``BlockThread.run`` names it."""
        text = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
        if str(exc):
            text = f"{text}: {exc}"
        try:
            return type(exc)(text).with_traceback(exc.__traceback__)
        except Exception:  # noqa: BLE001 - an exception type that does not take one message: raised as it is
            return exc


def _counting_barriers() -> None:
    """numba-cuda's syncthreads_count / _and / _or (they use only the manager's block state and ``syncthreads``)."""
    block_thread = _modules()[0].BlockThread
    for name in ("syncthreads_count", "syncthreads_and", "syncthreads_or"):
        setattr(SimulatedThread, name, getattr(block_thread, name))


def run(self, grid_point, *args):
    """numba-cuda's ``BlockManager.run``: run one block's threads to their end, each round taking every live
    thread to its next barrier or its end."""
    f = self._f

    def body():
        f(*args)

    dim3 = _modules()[1].Dim3
    block_idx = dim3(*grid_point)  # one for the block's threads (read only), as the types are looked up once
    live = [SimulatedThread(body, self, block_idx, point, dim3) for point in np.ndindex(*self._block_dim)]
    debug = np.errstate(divide="raise") if self._debug else contextlib.nullcontext()  # numba-cuda's debug wrapper
    with debug:
        while live:
            waiting = []
            for thread in live:
                try:
                    thread.switch()
                except Exception as exc:  # noqa: BLE001 - whatever the kernel raised, named with its thread
                    raise thread.failure(exc) from None
                if not thread.dead:
                    waiting.append(thread)
            live = waiting


class ThreadingOfGreenlets(types.ModuleType):
    """``threading`` as the simulated ``cuda`` module sees it: the current thread is the running greenlet."""

    current_thread = staticmethod(greenlet.getcurrent)

    def __getattr__(self, name: str):
        return getattr(threading, name)


def original_source_matches() -> bool:
    kernel, kernelapi = _modules()
    return source_matches(kernel, KNOWN_KERNEL_SHA256) and source_matches(kernelapi, KNOWN_KERNELAPI_SHA256)


def install() -> bool:
    """Run blocks as greenlets (once per process); False where the guard says no."""
    def put():
        kernel, kernelapi = _modules()
        _counting_barriers()
        replace_in((kernel.BlockManager,), "run", run)
        kernelapi.threading = ThreadingOfGreenlets("threading")

    return install_once(_state, original_source_matches, put)
