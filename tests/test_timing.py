"""The tie rule between two measurements: faster only by more than the noise."""
from autotune.core.timing import Timing


def t(median, p20, p80):
    return Timing(median_ms=median, p20_ms=p20, p80_ms=p80, reps=100)


def test_a_difference_within_the_noise_is_a_tie_either_way():
    a, b = t(1.00, 0.98, 1.02), t(1.01, 0.99, 1.03)
    assert not a.faster_than(b) and not b.faster_than(a)


def test_a_difference_beyond_half_the_larger_range_is_faster():
    a, b = t(1.00, 0.98, 1.02), t(1.05, 1.03, 1.07)
    assert a.faster_than(b) and not b.faster_than(a)


def test_a_steady_measurement_whose_range_lies_below_a_noisy_ones_is_faster():
    """The 127x3000x511 sweep's case: half the noisy range (0.016 ms) exceeds the 0.0145 ms between medians."""
    steady, noisy = t(0.022016, 0.021792, 0.02224), t(0.036512, 0.030272, 0.062451)
    assert steady.faster_than(noisy) and not noisy.faster_than(steady)


def test_overlapping_ranges_with_close_medians_stay_a_tie():
    steady, noisy = t(0.0300, 0.0298, 0.0302), t(0.0310, 0.0290, 0.0600)
    assert not steady.faster_than(noisy) and not noisy.faster_than(steady)


class _Clock:
    """CUDA events on a fake clock: each call of the timed function advances it by the next of ``runs_ms``."""

    def __init__(self, runs_ms):
        self.now, self.runs, self.calls = 0.0, iter(runs_ms), 0

    def event(self):
        clock = self

        class Event:
            def record(self):
                self.at = clock.now

            def synchronize(self):
                pass
        return Event()

    def elapsed(self, start, end):
        return end.at - start.at

    def run(self):
        self.calls += 1
        self.now += next(self.runs)


def _bench_on(monkeypatch, runs_ms, **kw):
    from numba import cuda

    from autotune.tuning.measure import bench

    clock = _Clock(runs_ms)
    monkeypatch.setattr(cuda, "event", clock.event, raising=False)
    monkeypatch.setattr(cuda, "event_elapsed_time", clock.elapsed, raising=False)
    return bench(clock.run, **kw), clock


def test_two_first_runs_slower_than_the_give_up_time_are_the_whole_timing(monkeypatch):
    """An untimed run, then the first two timed runs: both over the give-up time, they are the timing, the faster
    one its time."""
    timing, clock = _bench_on(monkeypatch, [50.0, 60.0, 50.0] + [1.0] * 100, give_up_ms=5.0)
    assert clock.calls == 3 and timing.reps == 2 and timing.median_ms == 50.0 and timing.meaningful
    assert timing.p20_ms == 52.0 and timing.p80_ms == 58.0


def test_one_stalled_run_does_not_give_a_candidate_up(monkeypatch):
    """A first timed run over the give-up time and a second within it: the candidate is timed in full."""
    timing, clock = _bench_on(monkeypatch, [1.0, 50.0] + [1.0] * 200, give_up_ms=5.0, warmup_ms=0.0, rep_ms=10.0)
    assert timing.reps == 10 and clock.calls == 14 and timing.median_ms == 1.0


def test_a_candidate_within_the_give_up_time_is_timed_in_full(monkeypatch):
    """A slow first call (one-off costs: a TMA kernel's tensor maps) is not timed; a run at the give-up time is
    within it."""
    runs = [90.0, 5.0, 3.0, 2.0] + [1.0] * 200
    timing, clock = _bench_on(monkeypatch, runs, give_up_ms=5.0, warmup_ms=0.0, rep_ms=10.0)
    assert timing.reps == 10 and clock.calls == 14 and timing.median_ms == 1.0
    timing, clock = _bench_on(monkeypatch, [50.0] * 20, warmup_ms=0.0, rep_ms=10.0)  # no give-up time: all runs
    assert timing.reps == 10 and clock.calls == 13 and timing.median_ms == 50.0


def test_a_coverage_row_times_candidates_far_behind_its_fastest_with_a_give_up_time():
    """The give-up time of each cell is ten times the row's fastest so far, none for the first."""
    from types import SimpleNamespace

    from autotune.core.problem import Problem
    from autotune.tuning.coverage import CoverageRun
    from autotune.tuning.records import GIVE_UP_FACTOR, Measurement

    times = iter([2.0, 30.0, 1.0, 0.5])
    asked = []

    class Worker:
        def run(self, job):
            asked.append(job.give_up_ms)
            ms = next(times)
            return Measurement(ok=True, stage="measured", timing={"median_ms": ms, "p20_ms": ms, "p80_ms": ms,
                                                                   "reps": 1})

    forms = [{"BLOCK": b} for b in (32, 64, 128, 256)]
    row = SimpleNamespace(_forms=lambda problem: forms, _compiled=lambda future: None,
                          config=SimpleNamespace(rep_ms=20.0))
    cells, best = CoverageRun._measure_row(row, Worker(), Problem("reduce", (33,), "float32"), {})
    assert cells == [2.0, 30.0, 1.0, 0.5] and best[0] == 3
    assert asked == [None, GIVE_UP_FACTOR * 2.0, GIVE_UP_FACTOR * 2.0, GIVE_UP_FACTOR * 1.0]
