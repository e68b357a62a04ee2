"""Timing of GPU work: CUDA events around each run, warm-up first, L2 flushed before every run, medians.

The method of Triton's ``do_bench``: estimate one run's time, then repeat for a time budget. Before each timed
run a buffer twice the size of the L2 cache is overwritten outside the timed region, so every run reads its
inputs from device memory as a real call would. After the overwrite a kernel sleeps on the GPU (the lead) while
the host queues the start event and the call, so the events bracket GPU work only: without it, a call whose host
path outlasted the overwrite was timed with the host's delay in it, which spread a library's matmul timings widely.
In the CUDA simulator the same loop runs on the host clock and the result is flagged ``meaningful=False``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

from ..core.device import current_device
from ..core.timing import Timing, quantile


class L2Flusher:
    """Overwrites a buffer twice the device's L2 size, so what the next run reads comes from device memory, then
    queues the lead: a one-thread kernel that sleeps ``lead_us`` on the GPU while the host queues the timed call
    (``lead_us=0``: no lead)."""

    def __init__(self, lead_us: float = 200.0):
        from numba import cuda

        self.nbytes = 2 * current_device().l2_bytes
        self.buffer = cuda.device_array(self.nbytes, dtype="uint8")
        self._sleep = _sleep_kernel()[1, 1] if lead_us > 0 else None
        self._naps = _naps_for(self._sleep, lead_us) if self._sleep else 0

    def __call__(self) -> None:
        from numba.cuda.cudadrv.driver import device_memset

        device_memset(self.buffer, 0, self.nbytes)
        if self._sleep:
            self._sleep(self._naps)


_flushers: dict[int, L2Flusher] = {}


def l2_flusher() -> L2Flusher:
    """This process's flusher of the current device's L2 (one per device: its buffer is that device's memory)."""
    from numba import cuda

    device = cuda.get_current_device().id
    if device not in _flushers:
        _flushers[device] = L2Flusher()
    return _flushers[device]


def _sleep_kernel():
    from numba import cuda

    @cuda.jit("void(int32)")
    def sleep(naps):
        for _ in range(naps):
            cuda.nanosleep(1000)

    return sleep


def _naps_for(sleep, lead_us: float) -> int:
    """How many 1 us naps (``nanosleep`` is approximate) make the sleep last at least ``lead_us``, measured."""
    from numba import cuda

    start, end = cuda.event(), cuda.event()
    trial = 100
    start.record()
    sleep(trial)
    end.record()
    end.synchronize()
    per_nap_us = max(cuda.event_elapsed_time(start, end) * 1e3 / trial, 0.05)
    return max(1, int(lead_us / per_nap_us) + 1)


def bench(fn: Callable[[], None], *, flush: Callable[[], None] | None = None, warmup_ms: float = 25.0,
          rep_ms: float = 100.0, min_reps: int = 10, max_reps: int = 500, simulator: bool = False,
          give_up_ms: float | None = None) -> Timing:
    """Median time of ``fn()`` in milliseconds, each run timed alone between two CUDA events (in the simulator:
    one run on the host clock, flagged not meaningful).

    ``give_up_ms``: where the first two timed runs are both slower than this, they are the whole timing (two
    reps), the faster one its time. The caller sets it far above the best time known for the problem, so such a
    candidate cannot win, and its full timing (at least 13 runs) would cost seconds on a large problem for
    nothing: a row of slow candidates once held a coverage call for minutes. Two runs, not one, and the faster,
    so that a single stall of the machine neither gives up a fast candidate nor makes a slow one look slower (its
    time enters a coverage matrix, and the rules fitted on it). They come after an untimed run, which pays what a
    first call on these arrays costs once (a TMA kernel makes its tensor maps per operand, on the host, and copies
    them to the device)."""
    if simulator:
        return _host_bench(fn, reps=1)
    from numba import cuda

    start, end = cuda.event(), cuda.event()

    def timed() -> float:
        if flush:
            flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return cuda.event_elapsed_time(start, end)

    first: list[float] = []
    if give_up_ms is not None:
        fn()
        first = [timed()]
        if first[0] > give_up_ms:
            first.append(timed())
            if min(first) > give_up_ms:
                return Timing(min(first), quantile(first, 0.2), quantile(first, 0.8), 2)
    first += [timed() for _ in range(3 - len(first))]
    estimate = max(statistics.median(first), 1e-3)
    for _ in range(max(0, int(warmup_ms / estimate) - 3)):
        timed()
    reps = max(min_reps, min(max_reps, int(rep_ms / estimate)))
    times = [timed() for _ in range(reps)]
    return Timing(statistics.median(times), quantile(times, 0.2), quantile(times, 0.8), reps)


def _host_bench(fn: Callable[[], None], reps: int) -> Timing:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(times), quantile(times, 0.2), quantile(times, 0.8), reps, meaningful=False)
