"""Compare search settings on recorded sweeps: the tuner's search replayed against each sweep, many seeds each.

    python lab/replay_compare.py [SWEEP ...] [--seeds 30] [--trials 100] [--out benchmarks/search-quality.md]

Per sweep, a table with one row per setting: the median and 10th-percentile fraction of the optimum reached at
20 and 50 trials, and the score at 50 (see autotune/tuning/replay.py). Runs on the CPU. Settings: the default (TPE,
10 random start-up trials, the search space's start list, then two in three trials refining the fastest so far),
the same without refinement, TPE with 5, 10 and 20 start-up trials and without the start list, random search and
CMA-ES (both without refinement, as baselines; CMA-ES where the cmaes package is installed), and TPE from the H100
database's nearest other shapes instead of the start list.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

from autotune.tuning.replay import Settings, fraction_at, neighbours_from, random_fraction, replay
from autotune.tuning.sweep import load_sweep

ROOT = Path(__file__).resolve().parent.parent
DB = ROOT / "tuned_db" / "nvidia-h100-80gb-hbm3.yaml"


def settings_for(sweep) -> list[tuple[str, Settings]]:
    out = [("tpe, start list, refinement (default)", Settings("tpe")),
           ("tpe, start list, no refinement", Settings("tpe", refine=False)),
           ("tpe, no start list", Settings("tpe", starts=False)),
           ("tpe 5 start-up, no start list", Settings("tpe", startup_trials=5, starts=False)),
           ("tpe 20 start-up, no start list", Settings("tpe", startup_trials=20, starts=False)),
           ("random, no start list, no refinement", Settings("random", starts=False, refine=False))]
    if importlib.util.find_spec("cmaes"):
        out.append(("cmaes, no start list, no refinement", Settings("cmaes", starts=False, refine=False)))
    neighbours = neighbours_from([DB], sweep)
    if neighbours:
        out.append((f"tpe, {len(neighbours)} database neighbours, no start list",
                    Settings("tpe", starts=False, neighbours=neighbours)))
    return out


def quantiles(values: list[float]) -> tuple[float, float]:
    from autotune.core.timing import quantile

    return quantile(values, 0.5), quantile(values, 0.1)


def compare(path: Path, seeds: int, trials: int) -> list[str]:
    sweep = load_sweep(path)
    optimum = sweep.best.timing.median_ms
    lines = [f"### {sweep.problem.key} ({len(sweep.rows)} configurations, `{path.relative_to(ROOT)}`)", "",
             f"Random sampling's expected fraction: {random_fraction(sweep, 20):.3f} at 20 trials, "
             f"{random_fraction(sweep, 50):.3f} at 50.", "",
             "| setting | median @20 | p10 @20 | median @50 | p10 @50 | score @50 | simulated min for 50 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    base50 = random_fraction(sweep, 50)
    for label, settings in settings_for(sweep):
        t0 = time.perf_counter()
        runs = replay(sweep, dataclasses.replace(settings, trials=trials), range(seeds))
        at20 = quantiles([fraction_at(r, optimum, trials=20)[0] for r in runs])
        at50 = quantiles([fraction_at(r, optimum, trials=50)[0] for r in runs])
        clock50 = sorted(r[min(49, len(r) - 1)].clock_s / 60 for r in runs if r)
        score = (at50[0] - base50) / (1 - base50)
        lines.append(f"| {label} | {at20[0]:.3f} | {at20[1]:.3f} | {at50[0]:.3f} | {at50[1]:.3f} | {score:.2f} | "
                     f"{clock50[len(clock50) // 2]:.1f} |")
        print(f"{path.name}: {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return lines + [""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    recorded = [f for f in sorted((ROOT / "benchmarks" / "sweeps").glob("*.yaml")) if not f.name.endswith(".space.yaml")]
    p.add_argument("sweeps", nargs="*", type=Path, default=recorded)
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    lines = []
    for path in args.sweeps:
        lines += compare(path.resolve(), args.seeds, args.trials)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
