"""Fitting a rule (autotune/core/rule.py) from a cross-time matrix (tuning/matrix.py), and measuring how well it
chooses on shapes it was not fitted on.

The method follows Helion's ahead-of-time heuristics, sized for this project:

1. **Portfolio.** The loss of a candidate on a shape is log(its time / the shape's best time) (a cell that failed
   or was not measured counts as 1000x slower). Candidates are added greedily, each time the one that most lowers
   the summed loss of the portfolio's best member per shape, until every shape has a member within ``threshold``
   (1.1x) of its best or the portfolio holds ``max_portfolio`` configurations.
2. **Model.** A decision tree on the shape's dimensions and their product, grown greedily (at most ``max_depth``
   levels, leaves of at least ``min_leaf`` shapes) to minimise the summed loss of each leaf's one choice: the
   choice, not a class label, is what costs time; or the ranking of the nearest coverage shape. Thresholds are
   midway (in log2) between neighbouring coverage sizes. Splits whose two sides make the same first choice are
   merged again, so the tree says only what changes the choice.
3. **Quality.** K-fold cross-validation over the shapes (a seeded permutation): the portfolio and model are
   fitted on the other folds and choose for each shape of the fold; its efficiency is the best time known for
   it over the chosen candidate's time. The geometric mean and the worst are reported; ``model="auto"`` keeps the
   model with the better geometric mean (the tree on a tie, as it reads better).

Everything is deterministic: the same matrix and settings give the same rule, byte for byte.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.rule import SIZE, Rule, Split, rule_record
from .matrix import CrossMatrix

PENALTY = math.log(1000.0)  # the loss of a failed or unmeasured cell: as if 1000 times slower
MODEL_CHOICES = ("auto", "tree", "nearest")


@dataclass(frozen=True)
class FitSettings:
    max_portfolio: int = 8
    threshold: float = 1.1
    max_depth: int = 4
    min_leaf: int = 2
    folds: int = 5
    seed: int = 0
    ranking: int = 4  # portfolio indices kept per leaf: first-use tuning times the first few
    model: str = "auto"


@dataclass(frozen=True)
class Quality:
    """Efficiencies (best known time / chosen time, at most 1) over a set of shapes."""

    geomean: float
    worst: float
    shapes: int

    @classmethod
    def of(cls, efficiencies: list[float]) -> "Quality":
        if not efficiencies:
            return cls(math.nan, math.nan, 0)
        logs = [math.log(max(e, 1e-9)) for e in efficiencies]
        return cls(math.exp(sum(logs) / len(logs)), min(efficiencies), len(efficiencies))

    def text(self) -> str:
        return f"{self.geomean:.3f} geometric mean, {self.worst:.3f} worst over {self.shapes} shapes"


@dataclass
class FitResult:
    record: dict[str, Any]
    model: str
    portfolio: list[int]  # candidate indices of the matrix
    held_out: Quality  # cross-validated, the chosen model
    fitted: Quality  # on the shapes it was fitted on
    oracle: Quality  # the portfolio's best member per shape: what a perfect model would reach
    models: dict[str, Quality] = field(default_factory=dict)  # every model's cross-validated quality
    per_shape: list[tuple[tuple[int, ...], int, float]] = field(default_factory=list)  # CV: shape, candidate, eff.

    def report(self) -> str:
        lines = [f"portfolio: {len(self.portfolio)} configurations (candidates {self.portfolio}); model: "
                 f"{self.model}",
                 f"on held-out shapes (cross-validated): {self.held_out.text()}",
                 f"on the shapes fitted: {self.fitted.text()}; the portfolio's best member per shape: "
                 f"{self.oracle.text()}"]
        for name, q in self.models.items():
            lines.append(f"  cross-validated, model {name}: {q.text()}")
        worst = sorted(self.per_shape, key=lambda item: item[2])[:5]
        if worst:
            lines.append("  worst held-out shapes: " + ", ".join(f"{'x'.join(map(str, s))} {e:.3f}"
                                                                 for s, _, e in worst))
        return "\n".join(lines)


# -- losses and the portfolio -------------------------------------------------------------------------
def losses(matrix: CrossMatrix, rows: list[int]) -> np.ndarray:
    """log(time / best time of the shape) per row and candidate; PENALTY where not measured."""
    out = np.full((len(rows), len(matrix.candidates)), PENALTY)
    for i, row in enumerate(rows):
        best = matrix.best_ms(row)
        for c, t in enumerate(matrix.ms[row]):
            if t is not None and best is not None:
                out[i, c] = math.log(t / best)
    return out


def select_portfolio(loss: np.ndarray, max_size: int, threshold: float) -> list[int]:
    """Candidates added greedily, each lowering the summed loss of the best member per shape the most (ties: the
    most shapes within ``threshold``, then the lowest index), until every shape is within ``threshold`` of its
    best, the portfolio is full, or no candidate helps."""
    limit = math.log(threshold) + 1e-12
    current = np.full(loss.shape[0], 2 * PENALTY)
    chosen: list[int] = []
    while len(chosen) < max_size:
        if chosen and bool(np.all(current <= limit)):
            break
        best = None
        for c in range(loss.shape[1]):
            if c in chosen:
                continue
            new = np.minimum(current, loss[:, c])
            score = (round(float(new.sum()), 9), -int(np.sum(new <= limit)), c)
            if best is None or score < best[0]:
                best = (score, c, new)
        if best is None or (chosen and best[0][0] >= round(float(current.sum()), 9)):
            break
        chosen.append(best[1])
        current = best[2]
    return chosen


# -- models -------------------------------------------------------------------------------------------
def features(shapes: list[tuple[int, ...]]) -> tuple[np.ndarray, list[int | str]]:
    """log2 of each dimension and, for shapes of more than one dimension, of their product."""
    rank = len(shapes[0])
    names: list[int | str] = list(range(rank)) + ([SIZE] if rank > 1 else [])
    X = np.array([[math.log2(d) for d in s] + ([math.log2(math.prod(s))] if rank > 1 else []) for s in shapes])
    return X.reshape(len(shapes), len(names)), names


def _ranking(sums: np.ndarray, keep: int) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(sums, kind="stable")[:keep])


def fit_tree(X: np.ndarray, names: list[int | str], loss: np.ndarray, settings: FitSettings):
    """A tree over portfolio positions (``loss``: rows x portfolio members)."""
    keep = min(settings.ranking, loss.shape[1])

    def grow(idx: np.ndarray, depth: int):
        sums = loss[idx].sum(axis=0)
        leaf = _ranking(sums, keep)
        cost = float(sums.min())
        if depth >= settings.max_depth or len(idx) < 2 * settings.min_leaf or cost <= 1e-12:
            return leaf, sums
        best = None
        for f in range(X.shape[1]):
            order = idx[np.argsort(X[idx, f], kind="stable")]
            xs = X[order, f]
            cum = np.cumsum(loss[order], axis=0)
            total = cum[-1]
            for i in range(settings.min_leaf, len(order) - settings.min_leaf + 1):
                if xs[i - 1] == xs[i]:
                    continue
                split_cost = float(cum[i - 1].min() + (total - cum[i - 1]).min())
                if best is None or split_cost < best[0] - 1e-12:
                    best = (split_cost, f, order[:i], order[i:], xs[i - 1], xs[i])
        if best is None or best[0] >= cost - 1e-9:
            return leaf, sums
        _, f, below_idx, above_idx, low, high = best
        below, below_sums = grow(below_idx, depth + 1)
        above, above_sums = grow(above_idx, depth + 1)
        if _first(below) == _first(above):  # the split changes no choice: one leaf
            return leaf, sums
        return Split(names[f], _threshold(low, high), below, above), sums

    return grow(np.arange(X.shape[0]), 0)[0]


def _first(node) -> int | None:
    return node[0] if not isinstance(node, Split) else None


def _threshold(low: float, high: float) -> float:
    """A number strictly between 2**low and 2**high (their geometric mean, shortened where that stays between)."""
    a, b, mid = 2.0 ** low, 2.0 ** high, 2.0 ** ((low + high) / 2)
    short = float(f"{mid:.6g}")
    return short if a < short < b else mid


def fit_nearest(shapes: list[tuple[int, ...]], loss: np.ndarray, settings: FitSettings) -> list:
    keep = min(settings.ranking, loss.shape[1])
    return [(tuple(s), _ranking(loss[i], keep)) for i, s in enumerate(shapes)]


# -- fitting and cross-validation ---------------------------------------------------------------------
@dataclass
class _Fitted:
    portfolio: list[int]
    rule: Rule
    tree: Any
    nearest: list


def _fit(matrix: CrossMatrix, rows: list[int], model: str, settings: FitSettings) -> _Fitted:
    loss = losses(matrix, rows)
    portfolio = select_portfolio(loss, settings.max_portfolio, settings.threshold)
    sub = loss[:, portfolio]
    shapes = [matrix.shapes[r] for r in rows]
    tree, nearest = None, []
    if model == "tree":
        X, names = features(shapes)
        tree = fit_tree(X, names, sub, settings)
    else:
        nearest = fit_nearest(shapes, sub, settings)
    rule = Rule(family=matrix.family, dtype=matrix.dtype, args=dict(matrix.args), rank=len(shapes[0]),
                portfolio=tuple(matrix.candidates[c] for c in portfolio), tree=tree,
                nearest=tuple((tuple(math.log2(d) for d in s), r) for s, r in nearest))
    return _Fitted(portfolio, rule, tree, nearest)


def efficiency(matrix: CrossMatrix, row: int, candidate: int) -> float:
    """Best known time of the shape over the candidate's time there (1/1000 where it failed or is unknown)."""
    t, best = matrix.ms[row][candidate], matrix.best_ms(row)
    return best / t if t is not None and best is not None else math.exp(-PENALTY)


def chosen_candidate(fitted: _Fitted, shape: tuple[int, ...]) -> int:
    return fitted.portfolio[fitted.rule.ranking(shape)[0]]


def folds_of(count: int, folds: int, seed: int) -> list[int]:
    """Each row's fold: a seeded permutation dealt round-robin (leave-one-out where there are fewer rows than
    folds)."""
    k = max(2, min(folds, count))
    order = np.random.default_rng(seed).permutation(count)
    fold = [0] * count
    for position, row in enumerate(order):
        fold[int(row)] = position % k
    return fold


def cross_validate(matrix: CrossMatrix, rows: list[int], model: str,
                   settings: FitSettings) -> tuple[Quality, list[tuple[tuple[int, ...], int, float]]]:
    if len(rows) < 2:
        return Quality.of([]), []
    fold = folds_of(len(rows), settings.folds, settings.seed)
    per_shape = []
    for k in sorted(set(fold)):
        train = [r for r, f in zip(rows, fold) if f != k]
        test = [r for r, f in zip(rows, fold) if f == k]
        fitted = _fit(matrix, train, model, settings)
        for r in test:
            c = chosen_candidate(fitted, matrix.shapes[r])
            per_shape.append((matrix.shapes[r], c, efficiency(matrix, r, c)))
    per_shape.sort(key=lambda item: matrix.shapes.index(item[0]))
    return Quality.of([e for _, _, e in per_shape]), per_shape


def fit_rule(matrix: CrossMatrix, settings: FitSettings = FitSettings(), data: str | None = None,
             date: str | None = None) -> FitResult:
    """The rule for the matrix's family, dtype and arguments, with its cross-validated quality."""
    if settings.model not in MODEL_CHOICES:
        raise ValueError(f"model {settings.model!r} is not one of {', '.join(MODEL_CHOICES)}")
    rows = matrix.ruled_rows()
    if not rows:
        raise ValueError(f"the matrix of {matrix.case} has no measured shape its rule would serve: nothing to fit")
    models = ("tree", "nearest") if settings.model == "auto" else (settings.model,)
    checked = {m: cross_validate(matrix, rows, m, settings) for m in models}
    model = max(models, key=lambda m: (_score(checked[m][0]), m == "tree"))
    held_out, per_shape = checked[model]
    final = _fit(matrix, rows, model, settings)
    fitted = Quality.of([efficiency(matrix, r, chosen_candidate(final, matrix.shapes[r])) for r in rows])
    oracle = Quality.of([max(efficiency(matrix, r, c) for c in final.portfolio) for r in rows])
    quality = {"shapes": len(rows), "folds": max(2, min(settings.folds, len(rows))) if len(rows) >= 2 else 0}
    if held_out.shapes:
        quality.update(held_out_geomean=held_out.geomean, held_out_worst=held_out.worst)
    quality.update(fitted_geomean=fitted.geomean, fitted_worst=fitted.worst, portfolio_geomean=oracle.geomean,
                   portfolio_worst=oracle.worst)
    record = rule_record(matrix.family, matrix.dtype, matrix.args, len(matrix.shapes[rows[0]]),
                         [matrix.candidates[c] for c in final.portfolio], tree=final.tree,
                         nearest=final.nearest if model == "nearest" else None, quality=quality,
                         fit=dataclasses.asdict(settings), data=data, date=date or datetime.date.today().isoformat())
    return FitResult(record=record, model=model, portfolio=final.portfolio, held_out=held_out, fitted=fitted,
                     oracle=oracle, models={m: checked[m][0] for m in models}, per_shape=per_shape)


def settings_of(record: dict[str, Any]) -> FitSettings:
    """The settings a rule was fitted with (its ``fit`` field; the defaults for what it does not name)."""
    known = {f.name for f in dataclasses.fields(FitSettings)}
    return FitSettings(**{k: v for k, v in record.get("fit", {}).items() if k in known})


def _score(q: Quality) -> float:
    return -math.inf if math.isnan(q.geomean) else round(q.geomean, 9)


__all__ = ["settings_of", "FitSettings", "FitResult", "Quality", "fit_rule", "cross_validate", "select_portfolio",
           "fit_tree", "losses", "features", "efficiency", "folds_of", "MODEL_CHOICES"]
