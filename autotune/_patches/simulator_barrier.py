"""The one place that touches numba-cuda's private simulator block loop: ``__syncthreads`` as a waiting barrier.

In Numba's CUDA simulator every thread of a block is a Python thread. numba-cuda 0.30.4's ``BlockManager.run``
starts them and then spins, re-reading every thread's "blocked" flag until all live threads wait at the barrier
or have ended, and ``BlockThread.syncthreads`` waits on an event the spinning loop sets. The spinning thread
holds the interpreter lock that the threads it waits for need, so a kernel with barriers in a loop (a tree
reduction, a tiled matmul's K loop) spends most of its simulated time spinning. Here a block's threads meet at
a barrier that wakes no one early: the last live thread to arrive releases the others, a thread that ends
counts itself out (CUDA's barrier counts the threads that have not exited), and the launching thread sleeps
until every thread has ended or one has raised. The semantics are numba-cuda's: the same release rule, the
first exception raised in the launching thread with its thread and block in the message, the other threads
aborted at their barrier.

Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's two methods only, whenever a generated
kernel is loaded in the simulator; it changes nothing on a GPU.
"""
from __future__ import annotations

import threading

import numpy as np

from .guard import install_once, replace_in, source_matches

KNOWN_RUN_SHA256 = "54626c6819f55d514a598517b1467ed1cc2e7c3bf1f3b9814e13ef2a4ba3541f"
KNOWN_SYNCTHREADS_SHA256 = "a5ed4d032654d0ee4e61ad1d4db99b0104cd8329ca7d3c1ab603d16c812ba507"

_state = {"installed": False}


class BlockBarrier:
    """``__syncthreads`` for one block: released when every thread still running waits at it.

    Each round of the barrier has a gate, a lock held closed until the round is released; the threads of the
    round queue on it and each one, let through, lets the next through, so a release wakes one thread at a time
    (the interpreter runs one at a time anyway) rather than all of them at once onto one lock."""

    def __init__(self, parties: int) -> None:
        self._lock = threading.Lock()
        self._running = parties
        self._waiting = 0
        self._gate = self._closed_gate()
        self.failed: threading.Thread | None = None
        self._ended = self._closed_gate()

    @staticmethod
    def _closed_gate() -> threading.Lock:
        gate = threading.Lock()
        gate.acquire()
        return gate

    def wait(self) -> bool:
        """Wait for the rest of the block; False when a thread of the block failed (the caller must abort)."""
        with self._lock:
            if self.failed is not None:
                return False
            self._waiting += 1
            gate = self._gate
            if self._waiting == self._running:
                self._open()
                return True
        gate.acquire()
        gate.release()
        return self.failed is None

    def leave(self, failed: bool) -> None:
        """The calling thread has ended (``failed``: by an exception)."""
        with self._lock:
            self._running -= 1
            if failed and self.failed is None:
                self.failed = threading.current_thread()
                self._gate.release()
                self._ended.release()
            elif self.failed is None and self._running == 0:
                self._ended.release()
            elif self.failed is None and self._waiting and self._waiting == self._running:
                self._open()

    def wait_for_end(self) -> threading.Thread | None:
        """Sleep until every thread has ended or one has failed; the failed thread, if any."""
        self._ended.acquire()
        return self.failed

    def _open(self) -> None:
        """Let this round's waiting threads through, and close a new gate for the next round."""
        gate = self._gate
        self._waiting = 0
        self._gate = self._closed_gate()
        gate.release()


def _kernel_module():
    from numba.cuda.simulator import kernel

    return kernel


def original_source_matches() -> bool:
    kernel = _kernel_module()
    return (source_matches(kernel.BlockManager.run, KNOWN_RUN_SHA256)
            and source_matches(kernel.BlockThread.syncthreads, KNOWN_SYNCTHREADS_SHA256))


def run(self, grid_point, *args):
    """numba-cuda's ``BlockManager.run``: run one block's threads to their end, meeting at ``BlockBarrier``."""
    barrier = self._barrier = BlockBarrier(int(np.prod(self._block_dim)))

    def target():
        try:
            self._f(*args)
        except BaseException:
            barrier.leave(failed=True)
            raise
        barrier.leave(failed=False)

    block_thread = _kernel_module().BlockThread
    threads = [block_thread(target, self, grid_point, block_point, self._debug)
               for block_point in np.ndindex(*self._block_dim)]
    for thread in threads:
        thread.start()
    failed = barrier.wait_for_end()
    if failed is not None:
        for thread in threads:
            thread.abort = True
        failed.join()
        raise failed.exception[0].with_traceback(failed.exception[1])


def syncthreads(self):
    """numba-cuda's ``BlockThread.syncthreads``, waiting at the block's ``BlockBarrier``."""
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    if not self._manager._barrier.wait() or self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def install() -> bool:
    """Put the barrier in place (once per process); False where the guard says no."""
    def put():
        kernel = _kernel_module()
        replace_in((kernel.BlockManager,), "run", run)
        replace_in((kernel.BlockThread,), "syncthreads", syncthreads)

    return install_once(_state, original_source_matches, put)
