"""The simulator's blocks as greenlets (autotune/_patches/simulator_blocks.py): installed over the source it mirrors
only, CUDA's rule that threads which have exited no longer count at the barrier, the counting barriers, a block's
first exception raised with its thread and block, and no thread left behind."""
import hashlib
import threading

import numpy as np
import pytest
from numba import cuda

from autotune._patches import guard as numba_guard
from autotune._patches import simulator_blocks

THREADS = 64


def installed_blocks():
    """Load a generated kernel, which installs the greenlet blocks; skip where numba-cuda's source is another."""
    from numba.cuda.simulator import kernel, kernelapi

    from autotune.runtime.build import build_kernel

    build_kernel("reduce", {}, op="sum", axis=None).entry
    if not simulator_blocks.original_source_matches():
        pytest.skip("another numba-cuda: its simulator stays as it is")
    assert kernel.BlockManager.run is simulator_blocks.run
    assert isinstance(kernelapi.threading, simulator_blocks.ThreadingOfGreenlets)
    assert kernelapi.threading.Lock is threading.Lock  # the rest of threading is threading's


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
    installed_blocks()
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


def test_a_failing_thread_is_named_and_its_launch_stops_there():
    """The failure is raised with its thread and block; the block before it finished, the failing block's other
    threads stopped at their barrier and later blocks never ran (numba-cuda's semantics); the next launch runs
    as if nothing had failed."""
    installed_blocks()
    d_out = cuda.to_device(np.full(3 * THREADS, np.nan))  # a host array would be copied back only on success
    raised = launched_within(120, lambda: one_thread_fails[3, THREADS](d_out))
    assert len(raised) == 1 and isinstance(raised[0], IndexError), raised
    assert "tid=[5, 0, 0] ctaid=[1, 0, 0]" in str(raised[0])
    out = d_out.copy_to_host()
    assert (out[:THREADS] == 1.0).all() and np.isnan(out[THREADS:]).all()
    test_threads_that_exited_do_not_hold_the_barrier(THREADS)


def test_installed_only_over_the_source_it_mirrors(monkeypatch):
    monkeypatch.setattr(numba_guard.inspect, "getsource", lambda obj: "def run(self): changed\n")
    assert not simulator_blocks.original_source_matches()
    changed = hashlib.sha256(b"def run(self): changed\n").hexdigest()
    monkeypatch.setattr(simulator_blocks, "KNOWN_KERNEL_SHA256", changed)
    assert not simulator_blocks.original_source_matches()  # kernelapi's hash is still the one written against
    monkeypatch.setattr(simulator_blocks, "KNOWN_KERNELAPI_SHA256", changed)
    assert simulator_blocks.original_source_matches()


@cuda.jit
def counting_barriers(x, counts, alls, anys):
    """Per block: how many values exceed 0.5, whether all do, whether any does (each through its own barrier)."""
    t = cuda.threadIdx.x
    v = x[cuda.blockIdx.x * 64 + t] > 0.5
    c = cuda.syncthreads_count(v)
    a = cuda.syncthreads_and(v)
    o = cuda.syncthreads_or(v)
    if t == 0:
        counts[cuda.blockIdx.x], alls[cuda.blockIdx.x], anys[cuda.blockIdx.x] = c, a, o


def test_counting_barriers_see_every_thread_of_their_block():
    installed_blocks()
    rng = np.random.default_rng()
    x = rng.random(4 * THREADS)
    x[THREADS:2 * THREADS] = 0.75  # a block where all exceed 0.5
    x[2 * THREADS:3 * THREADS] = 0.25  # and one where none does
    counts, alls, anys = (np.full(4, -1, np.int64) for _ in range(3))
    counting_barriers[4, THREADS](x, counts, alls, anys)
    above = x.reshape(4, THREADS) > 0.5
    np.testing.assert_array_equal(counts, above.sum(axis=1))
    np.testing.assert_array_equal(alls, above.all(axis=1))
    np.testing.assert_array_equal(anys, above.any(axis=1))


@cuda.jit
def neighbours_after_barrier(x, out):
    """Each thread writes its value to shared memory and, after the barrier, reads its right neighbour's: wrong
    unless the barrier holds every thread until all have written (in two dimensions of threads)."""
    s = cuda.shared.array((8, 8), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    s[ty, tx] = x[cuda.blockIdx.x, ty, tx]
    cuda.syncthreads()
    out[cuda.blockIdx.x, ty, tx] = s[ty, (tx + 1) % 8]


def test_a_barrier_holds_every_thread_until_all_have_written():
    installed_blocks()
    x = np.random.default_rng().random((3, 8, 8))
    out = np.full_like(x, np.nan)
    neighbours_after_barrier[3, (8, 8)](x, out)
    np.testing.assert_array_equal(out, np.roll(x, -1, axis=2))
