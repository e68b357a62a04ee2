"""Cross-validated quality of rule models on committed cross-time matrices, beside the shipped vote.

    python3 lab/rule_models.py benchmarks/coverage/nvidia-h200-matmul-*.json [--seeds 5] [--alpha 1.0] [--slots 1]
    python3 lab/rule_models.py benchmarks/coverage/nvidia-h200-*.json --vote 1,99 2,99 2,0.69 3,0.26

For each matrix and fold seed: the portfolio and the 7-neighbour vote fitted on the other folds (autotune/tuning/
fit.py, as shipped), and the same vote with each configuration's expected loss corrected by how its tiles fill
the query shape against how they filled each neighbour (padding of the last tile row and column, and the last
wave of blocks over the SMs; ``waves``). A neighbour's slowdown of a configuration whose 128-wide tiles filled it
says little about a shape they overhang by one row. Prints the geometric mean and worst of best known time over
chosen time per matrix, averaged over the seeds, and the mean over matrices. ``--vote P,C`` instead weighs the
shipped vote's neighbours by 1 / (distance + 0.5) ** P and clips each log(slowdown) at C.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.core.device import DeviceInfo  # noqa: E402
from autotune.core.rule import feature_point  # noqa: E402
from autotune.core.space import load_space  # noqa: E402
from autotune.families.matmul.config import dims, is_tiled, schedule  # noqa: E402
from autotune.tuning.fit import FitSettings, Quality, _fit, cross_validate, efficiency, folds_of  # noqa: E402
from autotune.tuning.matrix import read_matrix  # noqa: E402


def fill(params: dict, shape: tuple, sm_count: int, slots: int) -> float:
    """The fraction of the work a configuration's blocks do that is the problem's: tile padding times the last
    wave's filling (1 for forms without tiles over C)."""
    if not is_tiled(params) or params.get("GEMV") or "BM" not in params:
        return 1.0
    B, M, N, _ = dims(shape)
    BM, BN = params["BM"], params["BN"] * (2 if params.get("PAIR") else 1)
    tm, tn = math.ceil(M / BM), math.ceil(N / BN)
    pad = (M * N) / (tm * BM * tn * BN)
    blocks = B * tm * tn * params.get("SPLIT_K", 1)
    if schedule(params) == "stream_k":
        return pad
    per_wave = sm_count * slots
    return pad * blocks / (math.ceil(blocks / per_wave) * per_wave)


def corrected_quality(matrix, rows, settings, seed, alpha, slots) -> Quality:
    impl = matrix.problem(matrix.shapes[rows[0]]).impl
    space = load_space(matrix.family)
    device = DeviceInfo.from_record(matrix.device)
    fold = folds_of(len(rows), settings.folds, seed)
    cache: dict = {}

    def log_fill(c: int, shape: tuple) -> float:
        key = (c, shape)
        if key not in cache:
            fitted = impl.fit_config(matrix.candidates[c], matrix.problem(shape), device, space)
            cache[key] = math.log(max(fill(fitted, shape, device.sm_count, slots), 1e-6))
        return cache[key]

    effs = []
    for k in sorted(set(fold)):
        train = [r for r, f in zip(rows, fold) if f != k]
        test = [r for r, f in zip(rows, fold) if f == k]
        fitted = _fit(matrix, train, "nearest", settings)
        rule = fitted.rule
        points = np.array([n.point for n in rule.nearest])
        losses = np.array([n.losses for n in rule.nearest])
        shapes = [matrix.shapes[r] for r in train]
        for r in test:
            q = matrix.shapes[r]
            d = np.abs(points - np.array(feature_point(q, rule.features))).sum(axis=1)
            near = np.argsort(d, kind="stable")[:rule.neighbours]
            w = 1.0 / (d[near] + 0.5)
            score = []
            for j, c in enumerate(fitted.portfolio):
                base = float((w * losses[near, j]).sum() / w.sum())
                shift = float(sum(wi * (log_fill(c, shapes[n]) - log_fill(c, q)) for wi, n in zip(w, near)) / w.sum())
                score.append(base + alpha * shift)
            c = fitted.portfolio[int(np.argmin(score))]
            effs.append(efficiency(matrix, r, c))
    return Quality.of(effs)


def vote_with(power: float, clip: float):
    """core.rule.vote with neighbours weighted by 1 / (distance + 0.5) ** power and losses clipped at ``clip``."""
    def vote(distances, losses, k):
        closest = np.argsort(distances, kind="stable")[:k]
        weights = 1.0 / (distances[closest] + 0.5) ** power
        scores = np.round(weights @ np.minimum(losses[closest], clip), 9)
        return tuple(int(j) for j in np.argsort(scores, kind="stable"))
    return vote


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("matrices", nargs="+", type=Path)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--alpha", type=float, nargs="+", default=[1.0])
    ap.add_argument("--slots", type=int, default=1, help="blocks per SM in a wave")
    ap.add_argument("--vote", nargs="+", default=None, help="P,C: the vote's weight power and loss clip")
    a = ap.parse_args(argv)
    if a.vote:
        return compare_votes(a.matrices, a.seeds, [tuple(map(float, v.split(","))) for v in a.vote])
    totals: dict[str, list[float]] = {}
    for path in a.matrices:
        matrix = read_matrix(path)
        rows = matrix.ruled_rows()
        line = [f"{matrix.case:32s}"]
        for name in ["vote", *[f"fill a={x:g}" for x in a.alpha]]:
            qs = []
            for seed in range(a.seeds):
                settings = FitSettings(seed=seed, model="nearest")
                if name == "vote":
                    qs.append(cross_validate(matrix, rows, "nearest", settings)[0])
                else:
                    qs.append(corrected_quality(matrix, rows, settings, seed, float(name.split("=")[1]), a.slots))
            geo = sum(q.geomean for q in qs) / len(qs)
            worst = sum(q.worst for q in qs) / len(qs)
            totals.setdefault(name, []).append(geo)
            line.append(f"{name} {geo:.3f}/{worst:.3f}")
        print("  ".join(line), flush=True)
    print("mean over matrices: " + "  ".join(f"{k} {sum(v) / len(v):.4f}" for k, v in totals.items()))
    return 0


def compare_votes(paths, seeds: int, variants) -> int:
    import autotune.core.rule as rule_module

    shipped, totals = rule_module.vote, {}
    for path in paths:
        matrix = read_matrix(path)
        rows, line = matrix.ruled_rows(), [f"{matrix.case:32s}"]
        for power, clip in [(None, None), *variants]:
            name = "shipped" if power is None else f"p{power:g} c{clip:g}"
            rule_module.vote = shipped if power is None else vote_with(power, clip)
            try:
                qs = [cross_validate(matrix, rows, "nearest", FitSettings(seed=s, model="nearest"))[0]
                      for s in range(seeds)]
            finally:
                rule_module.vote = shipped
            geo = sum(q.geomean for q in qs) / len(qs)
            totals.setdefault(name, []).append(geo)
            line.append(f"{name} {geo:.3f}")
        print("  ".join(line), flush=True)
    print("mean over matrices: " + "  ".join(f"{k} {sum(v) / len(v):.4f}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
