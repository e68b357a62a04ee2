"""The simulator's ``__syncthreads`` as a waiting barrier (autotune/_patches/simulator_barrier.py): installed over the
source it mirrors only, CUDA's rule that threads which have exited no longer count, a block's first exception
raised with its thread and block, and no thread left waiting."""
import hashlib
import threading
import time

import numpy as np
import pytest
from numba import cuda

from autotune._patches import guard as numba_guard
from autotune._patches import simulator_barrier

THREADS = 64


def installed_barrier():
    """Load a generated kernel, which installs the barrier; skip where numba-cuda's source is another."""
    from numba.cuda.simulator import kernel

    from autotune.runtime.build import build_kernel

    build_kernel("reduce", {}, op="sum", axis=None).entry
    if not simulator_barrier.original_source_matches():
        pytest.skip("another numba-cuda: its simulator stays as it is")
    assert kernel.BlockManager.run is simulator_barrier.run
    assert kernel.BlockThread.syncthreads is simulator_barrier.syncthreads


def launched_within(seconds, launch) -> list:
    """Run `launch` in a thread; fail if it has not returned in `seconds` (a block left waiting); what it raised."""
    raised = []

    def run():
        try:
            launch()
        except Exception as e:  # noqa: BLE001 - the caller inspects whatever the launch raised
            raised.append(e)

    launcher = threading.Thread(target=run, daemon=True)
    launcher.start()
    launcher.join(timeout=seconds)
    assert not launcher.is_alive(), "a block waited forever at its barrier"
    return raised


@cuda.jit
def tree_sum_of_live_threads(x, live, sums, above_half):
    """Threads at or past `live` exit first; the rest sum their block's values by halving rounds, each ending
    at a barrier, and count values above 0.5 with syncthreads_count."""
    s = cuda.shared.array(64, np.float64)
    t = cuda.threadIdx.x
    if t >= live:
        return
    s[t] = x[cuda.blockIdx.x * 64 + t]
    count = cuda.syncthreads_count(s[t] > 0.5)
    w = 32
    while w > 0:
        if t < w and t + w < live:
            s[t] += s[t + w]
        cuda.syncthreads()
        w //= 2
    if t == 0:
        sums[cuda.blockIdx.x] = s[0]
        above_half[cuda.blockIdx.x] = count


@pytest.mark.parametrize("live", [1, 37, 64])
def test_threads_that_exited_do_not_hold_the_barrier(live):
    installed_barrier()
    rng = np.random.default_rng()
    blocks = 3
    x = rng.random(blocks * THREADS)
    sums, above = np.full(blocks, np.nan), np.full(blocks, -1, np.int64)
    assert launched_within(120, lambda: tree_sum_of_live_threads[blocks, THREADS](x, live, sums, above)) == []
    kept = x.reshape(blocks, THREADS)[:, :live]
    np.testing.assert_allclose(sums, kept.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(above, (kept > 0.5).sum(axis=1))


@cuda.jit
def one_thread_fails(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    if cuda.blockIdx.x == 1 and t == 5:
        out[out.size + 100] = 1.0
    cuda.syncthreads()
    out[cuda.blockIdx.x * 64 + t] = 1.0


def test_a_failing_thread_is_named_and_its_block_does_not_hang():
    installed_barrier()
    out, threads_before = np.full(3 * THREADS, np.nan), threading.active_count()
    raised = launched_within(120, lambda: one_thread_fails[3, THREADS](out))
    assert len(raised) == 1 and isinstance(raised[0], IndexError), raised
    assert "tid=[5, 0, 0] ctaid=[1, 0, 0]" in str(raised[0])
    deadline = time.monotonic() + 60
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads_before, "threads of the failed block were left waiting"


def test_installed_only_over_the_source_it_mirrors(monkeypatch):
    monkeypatch.setattr(numba_guard.inspect, "getsource", lambda obj: "def run(self): changed\n")
    assert not simulator_barrier.original_source_matches()
    monkeypatch.setattr(simulator_barrier, "KNOWN_RUN_SHA256", hashlib.sha256(b"def run(self): changed\n").hexdigest())
    assert not simulator_barrier.original_source_matches()  # syncthreads' hash is still the one written against
    monkeypatch.setattr(simulator_barrier, "KNOWN_SYNCTHREADS_SHA256", simulator_barrier.KNOWN_RUN_SHA256)
    assert simulator_barrier.original_source_matches()
