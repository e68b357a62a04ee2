"""Cross-validated quality of rule models on committed cross-time matrices, beside the shipped vote.

    python3 lab/rule_models.py benchmarks/coverage/nvidia-h200-matmul-*.json [--seeds 5] [--alpha 1.0] [--slots 1]
    python3 lab/rule_models.py benchmarks/coverage/nvidia-h200-*.json --vote 1,99 2,99 2,0.69 3,0.26

For each matrix and fold seed: the portfolio and the 7-neighbour vote fitted on the other folds (autotune/tuning/
fit.py, as shipped), and the same vote with each configuration's expected loss corrected by how its tiles fill
the query shape against how they filled each neighbour (padding of the last tile row and column, and the last
wave of blocks over the SMs; ``waves``). A neighbour's slowdown of a configuration whose 128-wide tiles filled it
says little about a shape they overhang by one row. Prints the geometric mean and worst of best known time over
chosen time per matrix, averaged over the seeds, and the mean over matrices. ``--nested`` adds alpha chosen per
fold by its training shapes alone; ``--held-out H.json`` fits on all of the one matrix and judges on H. The product
holds the correction since (``KernelFamily.filled_fraction``, one block per SM; ``FitSettings.fill_alphas``); this
script keeps the experiment that chose it, slots and all. ``--vote P,C`` instead weighs the
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
from autotune.core.space import config_key, load_space  # noqa: E402
from autotune.families.matmul.config import dims, is_tiled, is_wgmma, schedule  # noqa: E402
from autotune.tuning.fit import FitSettings, Quality, _fit, cross_validate, efficiency, folds_of  # noqa: E402
from autotune.tuning.matrix import read_matrix  # noqa: E402


def fill(params: dict, shape: tuple, sm_count: int, slots: int, wgmma: bool = True) -> float:
    """The fraction of the work a configuration's blocks do that is the problem's: tile padding times the last
    wave's filling (1 for forms without tiles over C, and for wgmma forms unless ``wgmma``)."""
    if not is_tiled(params) or params.get("GEMV") or "BM" not in params or (is_wgmma(params) and not wgmma):
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


class Filled:
    """log(fill) of each candidate on each shape of a matrix, as ``fit_config`` fits the candidate there (cached)."""

    def __init__(self, matrix, slots: int, wgmma: bool = True):
        self.matrix, self.slots, self.wgmma, self.cache = matrix, slots, wgmma, {}
        self.impl = matrix.problem(matrix.shapes[0]).impl
        self.space, self.device = load_space(matrix.family), DeviceInfo.from_record(matrix.device)

    def __call__(self, c: int, shape: tuple) -> float:
        key = (c, shape)
        if key not in self.cache:
            fitted = self.impl.fit_config(self.matrix.candidates[c], self.matrix.problem(shape), self.device,
                                          self.space)
            self.cache[key] = math.log(max(fill(fitted, shape, self.device.sm_count, self.slots, self.wgmma), 1e-6))
        return self.cache[key]


def corrected_choice(fitted, shapes: list, q: tuple, alpha: float, log_fill: Filled) -> int:
    """The candidate the vote ``fitted`` on ``shapes`` chooses for ``q``, each neighbour's loss of a configuration
    corrected by ``alpha`` times the change of its log(fill) from the neighbour to ``q``."""
    rule = fitted.rule
    points, losses = np.array([n.point for n in rule.nearest]), np.array([n.losses for n in rule.nearest])
    d = np.abs(points - np.array(feature_point(q, rule.features))).sum(axis=1)
    near = np.argsort(d, kind="stable")[:rule.neighbours]
    w = 1.0 / (d[near] + 0.5)
    score = [float((w * losses[near, j]).sum() / w.sum()) + alpha * float(
        sum(wi * (log_fill(c, shapes[n]) - log_fill(c, q)) for wi, n in zip(w, near)) / w.sum())
        for j, c in enumerate(fitted.portfolio)]
    return fitted.portfolio[int(np.argmin(score))]


def corrected_choices(matrix, train, test, settings, alpha: float, log_fill: Filled) -> list[float]:
    """Efficiencies on the ``test`` rows of the corrected vote fitted on ``train``."""
    fitted, shapes = _fit(matrix, train, "nearest", settings), [matrix.shapes[r] for r in train]
    return [efficiency(matrix, r, corrected_choice(fitted, shapes, matrix.shapes[r], alpha, log_fill)) for r in test]


def corrected_quality(matrix, rows, settings, seed, alpha, slots, wgmma=True) -> Quality:
    log_fill, fold, effs = Filled(matrix, slots, wgmma), folds_of(len(rows), settings.folds, seed), []
    for k in sorted(set(fold)):
        train, test = [r for r, f in zip(rows, fold) if f != k], [r for r, f in zip(rows, fold) if f == k]
        effs += corrected_choices(matrix, train, test, settings, alpha, log_fill)
    return Quality.of(effs)


def nested_quality(alphas: list[float], slots: int):
    """Each outer fold's alpha chosen among ``alphas`` (0 included: the shipped vote) by a cross-validation of its
    training shapes alone, then judged on the fold: no held-out shape has a say in the alpha that chooses for it."""
    def quality(matrix, rows, seed: int) -> Quality:
        settings = FitSettings(seed=seed, model="nearest")
        log_fill, fold, effs = Filled(matrix, slots), folds_of(len(rows), settings.folds, seed), []
        for k in sorted(set(fold)):
            train, test = [r for r, f in zip(rows, fold) if f != k], [r for r, f in zip(rows, fold) if f == k]
            inner = folds_of(len(train), settings.folds, seed + 1)

            def inner_score(alpha: float) -> float:
                got = []
                for i in sorted(set(inner)):
                    fit_rows = [r for r, f in zip(train, inner) if f != i]
                    got += corrected_choices(matrix, fit_rows, [r for r, f in zip(train, inner) if f == i], settings,
                                             alpha, log_fill)
                return Quality.of(got).geomean

            best = max([0.0, *alphas], key=lambda x: (round(inner_score(x), 9), -x))
            effs += corrected_choices(matrix, train, test, settings, best, log_fill)
        return Quality.of(effs)
    return quality


def held_out_quality(coverage, held, alpha: float, slots: int) -> tuple[Quality, int]:
    """The vote fitted on every coverage shape, corrected by ``alpha``, choosing for each shape of the held-out
    matrix (never fitted on), judged by that matrix's cells: its best time over the chosen one's (matched by the
    fitted form, as ``autotune rule score`` does); with how many shapes the held-out matrix lacks the choice."""
    rows = coverage.ruled_rows()
    fitted, log_fill = _fit(coverage, rows, "nearest", FitSettings(model="nearest")), Filled(coverage, slots)
    shapes, impl = [coverage.shapes[r] for r in rows], log_fill.impl
    effs, unknown = [], 0
    for r in held.ruled_rows():
        q = held.shapes[r]
        problem = held.problem(q)
        form = lambda config: config_key(impl.fit_config(config, problem, log_fill.device, log_fill.space))  # noqa
        chosen = form(coverage.candidates[corrected_choice(fitted, shapes, q, alpha, log_fill)])
        column = {form(c): i for i, c in enumerate(held.candidates)}.get(chosen)
        t = held.ms[r][column] if column is not None else None
        if t is None:
            unknown += 1
        else:
            effs.append(held.best_ms(r) / t)
    return Quality.of(effs), unknown


def vote_with(power: float, clip: float):
    """core.rule.vote with neighbours weighted by 1 / (distance + 0.5) ** power and losses clipped at ``clip``."""
    def vote(distances, losses, k):
        closest = np.argsort(distances, kind="stable")[:k]
        weights = 1.0 / (distances[closest] + 0.5) ** power
        scores = np.round(weights @ np.minimum(losses[closest], clip), 9)
        return tuple(int(j) for j in np.argsort(scores, kind="stable"))
    return vote


def shipped_quality(matrix, rows, seed: int) -> Quality:
    return cross_validate(matrix, rows, "nearest", FitSettings(seed=seed, model="nearest"))[0]


def fill_quality(alpha: float, slots: int, wgmma: bool = True):
    return lambda matrix, rows, seed: corrected_quality(matrix, rows, FitSettings(seed=seed, model="nearest"), seed,
                                                        alpha, slots, wgmma)


def vote_quality(power: float, clip: float):
    """The shipped cross-validation with core.rule.vote replaced by ``vote_with(power, clip)`` while it runs."""
    import autotune.core.rule as rule_module

    def quality(matrix, rows, seed: int) -> Quality:
        shipped, rule_module.vote = rule_module.vote, vote_with(power, clip)
        try:
            return shipped_quality(matrix, rows, seed)
        finally:
            rule_module.vote = shipped
    return quality


def compare(paths: list[Path], seeds: int, models: dict) -> int:
    """Per matrix, each model's geometric mean / worst averaged over the fold seeds; then the mean over matrices."""
    totals: dict[str, list[float]] = {}
    for path in paths:
        matrix = read_matrix(path)
        rows, line = matrix.ruled_rows(), [f"{matrix.case:32s}"]
        for name, quality in models.items():
            qs = [quality(matrix, rows, seed) for seed in range(seeds)]
            geo, worst = (sum(getattr(q, k) for q in qs) / len(qs) for k in ("geomean", "worst"))
            totals.setdefault(name, []).append(geo)
            line.append(f"{name} {geo:.3f}/{worst:.3f}")
        print("  ".join(line), flush=True)
    print("mean over matrices: " + "  ".join(f"{k} {sum(v) / len(v):.4f}" for k, v in totals.items()))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("matrices", nargs="+", type=Path)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--alpha", type=float, nargs="+", default=[1.0])
    ap.add_argument("--slots", type=int, default=1, help="blocks per SM in a wave")
    ap.add_argument("--vote", nargs="+", default=None, help="P,C: the vote's weight power and loss clip")
    ap.add_argument("--no-wgmma", action="store_true", help="no correction for wgmma configurations")
    ap.add_argument("--nested", action="store_true", help="also: alpha chosen per fold among --alpha (and 0)")
    ap.add_argument("--held-out", type=Path, default=None,
                    help="a held-out matrix of the one matrix given: the vote fitted on all of it, judged there")
    a = ap.parse_args(argv)
    if a.held_out:
        coverage, held = read_matrix(a.matrices[0]), read_matrix(a.held_out)
        for alpha in [0.0, *a.alpha]:
            q, unknown = held_out_quality(coverage, held, alpha, a.slots)
            print(f"{held.case} held out, alpha {alpha:g}: {q.text()}; {unknown} choices not in the matrix")
        return 0
    models = {"shipped": shipped_quality}
    if a.vote:
        for power, clip in (tuple(map(float, v.split(","))) for v in a.vote):
            models[f"p{power:g} c{clip:g}"] = vote_quality(power, clip)
    else:
        models.update({f"fill a={x:g}": fill_quality(x, a.slots, not a.no_wgmma) for x in a.alpha})
        if a.nested:
            models["nested"] = nested_quality(a.alpha, a.slots)
    return compare(a.matrices, a.seeds, models)


if __name__ == "__main__":
    sys.exit(main())
