"""Replay: the tuner's own search run against a sweep instead of a GPU, to score samplers and settings.

Each replay builds the tuner's real search policy (``policy.SearchPolicy``: the same sampler set-up, starts,
pruning, duplicate handling and tie rule) on an in-memory study, and answers each configuration it asks for from the sweep (``sweep.py``). A simulated
clock charges each trial what it cost when recorded: its compile seconds shared by the compile workers, or its
measure seconds, whichever is larger (the tuner compiles ahead on the CPUs while the GPU measures, so the slower
of the two stages sets the pace); repeated and invalid proposals cost nothing.

Scores follow the methodology of Willemsen et al. (FGCS 2024): at a budget, the fraction of the optimum a search
reached (optimum time / time of the configuration it would pick), and the score (fraction - random) /
(1 - random), where ``random`` is the expected fraction of random sampling without replacement at the same
number of trials, computed exactly from the sweep. 1 is the optimum every time; 0 is no better than random.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.space import load_space
from ..core.timing import quantile
from .policy import SearchPolicy, make_sampler
from .records import Outcome
from .settings import TuneConfig
from .sweep import Sweep, SweepError

TRIAL_BUDGETS = (10, 20, 50, 100)
ASKS_PER_TRIAL = 50  # as the tuner: a search that keeps proposing invalid or repeated points is exhausted


@dataclass(frozen=True)
class Settings:
    """What is compared: the sampler and its settings, and which starting configurations are measured first."""

    sampler: str = "tpe"
    trials: int = 100
    startup_trials: int = 10
    starts: bool = True
    refine: bool = True
    neighbours: tuple[dict[str, Any], ...] = ()
    compile_workers: int | None = None  # None: as the sweep was recorded


@dataclass(frozen=True)
class Step:
    """After a trial: trials counted so far (measured or failed), simulated seconds, the pick's median time."""

    trials: int
    clock_s: float
    picked_ms: float  # inf before the first measured trial


@dataclass(frozen=True)
class BudgetScore:
    trials: int | None
    minutes: float | None
    median_trials: float
    median_fraction: float
    p10_fraction: float
    random_fraction: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        out = {"trials": self.trials, "median_fraction": round(self.median_fraction, 4),
               "p10_fraction": round(self.p10_fraction, 4), "score": round(self.score, 4),
               "random_fraction": round(self.random_fraction, 4)}
        if self.minutes is not None:
            out = {"minutes": self.minutes, **out, "trials": round(self.median_trials, 1)}
        return out


def replay_once(sweep: Sweep, settings: Settings, seed: int) -> list[Step]:
    """One search against the sweep; a step per counted trial."""
    import optuna

    config = TuneConfig(trials=settings.trials, sampler=settings.sampler, seed=seed, baseline=False,
                        space_path=str(sweep.space_path) if sweep.space_path else None,
                        startup_trials=settings.startup_trials, starts=settings.starts, refine=settings.refine)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="minimize",
                                sampler=make_sampler(config.sampler, config.seed, config.startup_trials))
    space = load_space(sweep.problem.family, config.space_path).for_dtype(sweep.problem.dtype, sweep.problem.args)
    policy = SearchPolicy(sweep.problem, config, sweep.device, study, space, owner="replay",
                         neighbours=[dict(n) for n in settings.neighbours])
    policy.prepare()
    workers = settings.compile_workers or sweep.compile_workers
    steps: list[Step] = []
    counted, clock = 0, 0.0
    for _ in range(ASKS_PER_TRIAL * settings.trials):
        if counted >= settings.trials:
            break
        asked = policy.ask()
        if asked is None:
            break
        trial, chosen = asked
        row = sweep.row_of(chosen)
        if row is None:
            raise SweepError(f"the sweep has no row for {chosen}, which is valid in its search space: it was "
                             "recorded with another space or older code; record it again")
        outcome: Outcome = row.outcome(sweep.problem)
        policy.tell(trial, outcome)
        clock += max(row.compile_s / workers, row.measure_s)
        if row.stage == "pruned":
            continue
        counted += 1
        picked = policy.best_trial()  # the policy's own tie rule
        steps.append(Step(counted, clock, picked.user_attrs["timing"]["median_ms"] if picked else math.inf))
    return steps


def random_fraction(sweep: Sweep, trials: float) -> float:
    """The expected fraction of the optimum that random sampling without replacement reaches in ``trials``
    counted trials: the fastest of n distinct configurations drawn from the N the sweep holds (failed ones count
    as draws that find nothing; configurations pruned after compiling are not counted, as the policy counts)."""
    counted = [r for r in sweep.rows if r.stage != "pruned"]
    big_n = len(counted)
    n = max(0, min(big_n, int(trials)))
    if n == 0:
        return 0.0
    optimum = sweep.best.timing.median_ms
    fractions = sorted((optimum / r.timing.median_ms if r.ok else 0.0 for r in counted), reverse=True)
    expected, p_rest = 0.0, 1.0  # p_rest: the chance that none of the i best so far was drawn
    for i, f in enumerate(fractions):
        # given that none of the i better ones was drawn, the n draws are spread over the N - i others
        p_this = p_rest * min(1.0, n / (big_n - i))
        expected += f * p_this
        p_rest -= p_this
        if p_rest <= 1e-15:
            break
    return expected


def fraction_at(steps: Sequence[Step], optimum_ms: float, *, trials: int | None = None,
                clock_s: float | None = None) -> tuple[float, int]:
    """The fraction of the optimum picked by the last step within the budget, and the trials it took."""
    best, done = math.inf, 0
    for s in steps:
        if (trials is not None and s.trials > trials) or (clock_s is not None and s.clock_s > clock_s):
            break
        best, done = s.picked_ms, s.trials
    return (optimum_ms / best if math.isfinite(best) else 0.0), done


def score_replays(sweep: Sweep, runs: Sequence[Sequence[Step]], budgets: Sequence[int] = TRIAL_BUDGETS,
                  minutes: Sequence[float] | None = None) -> list[BudgetScore]:
    """Median and 10th percentile over the runs of the fraction reached, and the score, per budget."""
    optimum = sweep.best.timing.median_ms
    out = []
    for n in budgets:
        fractions = [fraction_at(r, optimum, trials=n)[0] for r in runs]
        out.append(_budget(sweep, n, None, fractions, n))
    if minutes is None:
        longest = max((r[-1].clock_s for r in runs if r), default=0.0)
        minutes = [m for m in (1, 2, 5, 10, 15, 30, 60) if m * 60 <= longest * 1.5] or [1]
    for m in minutes:
        reached = [fraction_at(r, optimum, clock_s=m * 60) for r in runs]
        done = statistics.median(t for _, t in reached)
        out.append(_budget(sweep, None, m, [f for f, _ in reached], done))
    return out


def _budget(sweep: Sweep, trials: int | None, minutes: float | None, fractions: list[float],
            done: float) -> BudgetScore:
    base = random_fraction(sweep, done)
    median = statistics.median(fractions)
    score = (median - base) / (1 - base) if base < 1 else 1.0
    return BudgetScore(trials, minutes, done, median, quantile(fractions, 0.1), base, score)


def replay(sweep: Sweep, settings: Settings, seeds: Sequence[int]) -> list[list[Step]]:
    """One search per seed."""
    return [replay_once(sweep, settings, seed) for seed in seeds]


def neighbours_from(files: Sequence, sweep: Sweep, count: int = 3) -> tuple[dict[str, Any], ...]:
    """The winners of the ``count`` nearest other shapes in the given database files, as the policy starts from
    its neighbours; the entry of the sweep's own shape is left out (it would give the answer away)."""
    from ..runtime.db import load_file
    from ..runtime.lookup import by_distance

    ranked = []
    for path in files:
        ranked += [(d, e.params) for d, e in by_distance(sweep.problem, load_file(path).like(sweep.problem)) if d > 0]
    found: list[dict[str, Any]] = []
    for _, params in sorted(ranked, key=lambda item: item[0]):
        if params not in found:
            found.append(dict(params))
    return tuple(found[:count])


def table(scores: Sequence[BudgetScore]) -> str:
    lines = ["| budget | trials | median fraction | p10 fraction | random | score |", "| --- | --- | --- | --- | --- | --- |"]
    for s in scores:
        budget = f"{s.trials} trials" if s.trials is not None else f"{s.minutes:g} min"
        lines.append(f"| {budget} | {s.median_trials:g} | {s.median_fraction:.3f} | {s.p10_fraction:.3f} | "
                     f"{s.random_fraction:.3f} | {s.score:.3f} |")
    return "\n".join(lines)

