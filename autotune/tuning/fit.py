"""Fitting a rule (autotune/core/rule.py) from a cross-time matrix (tuning/matrix.py), and measuring how well it
chooses on shapes it was not fitted on.

The method follows Helion's ahead-of-time heuristics, sized for this project:

1. **Portfolio.** The loss of a candidate on a shape is log(its time / the shape's best time) (a cell that failed
   or was not measured counts as 1000x slower). Candidates are added greedily, each time the one that most lowers
   the summed loss of the portfolio's best member per shape, until every shape has a member within ``threshold``
   (1.02x) of its best, the portfolio holds ``max_portfolio`` (10) configurations or no candidate lowers it.
2. **Model.** A decision tree on the shape's dimensions and their product, grown greedily (at most ``max_depth``
   levels, leaves of at least ``min_leaf`` shapes) to minimise the summed loss of each leaf's one choice: the
   choice, not a class label, is what costs time. Thresholds are midway (in log2) between neighbouring coverage
   sizes. Splits whose two sides make the same first choice are merged again, so the tree says only what changes
   the choice. Or the ``neighbours`` (7) nearest coverage shapes (L1 distance in log2 over the family's features,
   ``KernelFamily.rule_features``: matmul adds M*N to M, N, K), each weighted by 1 / (distance + 0.5), vote with
   their losses: the configuration with the least weighted loss comes first (``neighbours=1``: the ranking of the
   nearest one alone). Several neighbours average out the noise of one shape's timings and the accidents of one
   neighbour; on the H200 matrices this lifted the cross-validated geometric mean from 0.89-0.98 to 0.92-0.99.
   Each of ``fill_alphas`` above 0 is a further nearest model: the vote with each neighbour's loss of a
   configuration corrected by alpha * log(its filled fraction there over the new shape's), the family's
   ``filled_fraction`` (matmul: tile padding times the last wave's filling) of the configuration as ``fit_config``
   fits it to each shape: a neighbour's timings do not show the time a configuration loses on a shape its tiles
   overhang or whose last wave it leaves half empty (the figures: benchmarks/NOTES.md item 73). A family without
   the notion (all fractions 1) has no such model.
3. **Quality.** K-fold cross-validation over the shapes (a seeded permutation): the portfolio and model are
   fitted on the other folds and choose for each shape of the fold; its efficiency is the best time known for
   it over the chosen candidate's time. The geometric mean and the worst are reported. Where several models are
   in play (``model="auto"``: the tree and the nearest ones; ``"nearest"`` with several ``fill_alphas``), the one
   with the better geometric mean is kept (the tree on a tie, as it reads better, then the smaller alpha); its
   held-out quality picks the model inside each fold by a cross-validation of the fold's training shapes alone
   (``selection="nested"``), so that no held-out shape has a say in the model that chooses for it (``"whole"``,
   what a rule recorded before this setting existed means, picked it by the quality over all shapes: slightly
   optimistic).

Everything is deterministic: the same matrix and settings give the same rule, byte for byte.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.device import DeviceInfo
from ..core.registry import family as family_named
from ..core.rule import MAX_FILL_ALPHA, MIN_FILL, SIZE, Rule, Split, nearest_items, rule_record
from ..core.space import load_space
from .matrix import CrossMatrix

PENALTY = math.log(1000.0)  # the loss of a failed or unmeasured cell: as if 1000 times slower
MODEL_CHOICES = ("auto", "tree", "nearest")


FEATURE_CHOICES = ("family", "dims")
SELECTION_CHOICES = ("nested", "whole")


def parse_alphas(text: str) -> list[float]:
    """'0,0.25,0.5' -> [0.0, 0.25, 0.5]; ValueError where an alpha is no number from 0 to MAX_FILL_ALPHA."""
    try:
        alphas = [float(a) for a in str(text).split(",")]
    except ValueError:
        alphas = []
    if not alphas or not all(0 <= a <= MAX_FILL_ALPHA for a in alphas):
        raise ValueError(f"fill alphas must be numbers from 0 to {MAX_FILL_ALPHA:g} separated by commas, got {text!r}")
    return alphas


@dataclass(frozen=True)
class FitSettings:
    max_portfolio: int = 10
    threshold: float = 1.02
    max_depth: int = 4
    min_leaf: int = 2
    folds: int = 5
    seed: int = 0
    ranking: int = 4  # portfolio indices kept per leaf: first-use tuning times the first few
    model: str = "auto"
    neighbours: int = 7  # nearest coverage shapes that vote (1: the nearest one's ranking)
    features: str = "family"  # what the nearest model measures: the family's rule_features, or the dimensions
    selection: str = "nested"  # how model="auto" picks the model whose held-out quality is reported
    fill_alphas: str = "0,0.25,0.5"  # the nearest model's fill corrections tried ("0": the vote uncorrected)

    def __post_init__(self):
        parse_alphas(self.fill_alphas)  # ValueError naming the setting where it is no list of alphas


#: the settings added after rules were first recorded, with the value a record without them was fitted with;
#: a record names them only where they differ, so that an earlier rule is fitted again to itself
LEGACY = {"neighbours": 1, "features": "dims", "selection": "whole", "fill_alphas": "0"}


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


def slowdown(loss: float) -> float:
    """exp(loss) as a rule stores it: 4 significant digits, at least 1, at most 1000 (a failed cell)."""
    return min(max(1.0, float(f"{math.exp(loss):.4g}")), 1000.0)


def rule_features(matrix: CrossMatrix, rank: int, settings: FitSettings) -> tuple:
    """The nearest model's features: () for the dimensions alone (as rules without ``features`` measure)."""
    if settings.features not in FEATURE_CHOICES:
        raise ValueError(f"features {settings.features!r} is not one of {', '.join(FEATURE_CHOICES)}")
    if settings.features == "dims":
        return ()
    features = tuple(family_named(matrix.family).rule_features(rank))
    return () if features == tuple(range(rank)) else features


# -- fitting and cross-validation ---------------------------------------------------------------------
@dataclass
class _Fitted:
    portfolio: list[int]
    rule: Rule
    tree: Any
    nearest: list  # (shape, ranking) where one neighbour chooses, else (shape, slowdown per portfolio member)
    features: tuple = ()
    neighbours: int = 1
    fills: list = field(default_factory=list)  # per nearest item, each member's filled fraction (fill_alpha > 0)


class Fills:
    """The family's filled fraction (``KernelFamily.filled_fraction``) of each candidate of a matrix on each of its
    shapes, on the matrix's GPU model, computed once each."""

    def __init__(self, matrix: CrossMatrix):
        self.matrix, self._cache = matrix, {}
        self.device, self.space = DeviceInfo.from_record(matrix.device), load_space(matrix.family)

    def __call__(self, candidate: int, shape: tuple[int, ...]) -> float:
        key = (candidate, shape)
        if key not in self._cache:
            problem = self.matrix.problem(shape)
            self._cache[key] = float(problem.impl.filled_fraction(self.matrix.candidates[candidate], problem,
                                                                  self.device, self.space))
        return self._cache[key]

    def noticed(self, rows: list[int]) -> bool:
        """Whether any candidate fills any of the rows' shapes less than wholly (else no fill model applies)."""
        return any(self(c, self.matrix.shapes[r]) < 1 for r in rows for c in range(len(self.matrix.candidates)))


def fill_text(x: float) -> float:
    """A filled fraction as a rule stores it: 4 significant digits, from MIN_FILL to 1."""
    return min(max(MIN_FILL, float(f"{x:.4g}")), 1.0)


def fill_alpha(model: str) -> float:
    """The fill correction of a model name ('nearest@0.25': 0.25; 'nearest', 'tree': 0)."""
    return float(model.split("@", 1)[1]) if "@" in model else 0.0


def _fit(matrix: CrossMatrix, rows: list[int], model: str, settings: FitSettings,
         fills: Fills | None = None) -> _Fitted:
    loss = losses(matrix, rows)
    portfolio = select_portfolio(loss, settings.max_portfolio, settings.threshold)
    sub = loss[:, portfolio]
    shapes = [matrix.shapes[r] for r in rows]
    rank = len(shapes[0])
    tree, nearest, feats, neighbours, items, stored, alpha = None, [], (), 1, (), [], fill_alpha(model)
    if model == "tree":
        X, names = features(shapes)
        tree = fit_tree(X, names, sub, settings)
    else:
        feats, neighbours = rule_features(matrix, rank, settings), settings.neighbours
        if neighbours > 1:  # the rule as its file will hold it: slowdowns (and fills) rounded as written
            nearest = [(tuple(s), [slowdown(x) for x in sub[i]]) for i, s in enumerate(shapes)]
            raw = [{"shape": list(s), "slowdown": r} for s, r in nearest]
            if alpha > 0:
                fills = fills or Fills(matrix)
                stored = [[fill_text(fills(c, s)) for c in portfolio] for s in shapes]
                for item, fill in zip(raw, stored):
                    item["fill"] = fill
        else:
            nearest = fit_nearest(shapes, sub, settings)
            raw = [{"shape": list(s), "use": list(r)} for s, r in nearest]
        items = nearest_items(raw, rank, len(portfolio), feats, neighbours, bool(stored))
    rule = Rule(family=matrix.family, dtype=matrix.dtype, args=dict(matrix.args), rank=rank,
                portfolio=tuple(matrix.candidates[c] for c in portfolio), tree=tree, nearest=items, features=feats,
                neighbours=neighbours, fill_alpha=alpha if stored else 0.0)
    return _Fitted(portfolio, rule, tree, nearest, feats, neighbours, stored)


def efficiency(matrix: CrossMatrix, row: int, candidate: int) -> float:
    """Best known time of the shape over the candidate's time there (1/1000 where it failed or is unknown)."""
    t, best = matrix.ms[row][candidate], matrix.best_ms(row)
    return best / t if t is not None and best is not None else math.exp(-PENALTY)


def chosen_candidate(fitted: _Fitted, shape: tuple[int, ...], fills: Fills | None = None) -> int:
    """The matrix candidate the fitted rule chooses for ``shape`` (with the portfolio's filled fractions of it,
    where its vote is corrected by them)."""
    portfolio_fills = tuple(fills(c, shape) for c in fitted.portfolio) if fills and fitted.rule.wants_fills else None
    return fitted.portfolio[fitted.rule.ranking(shape, portfolio_fills)[0]]


def folds_of(count: int, folds: int, seed: int) -> list[int]:
    """Each row's fold: a seeded permutation dealt round-robin (leave-one-out where there are fewer rows than
    folds)."""
    k = max(2, min(folds, count))
    order = np.random.default_rng(seed).permutation(count)
    fold = [0] * count
    for position, row in enumerate(order):
        fold[int(row)] = position % k
    return fold


def cross_validate(matrix: CrossMatrix, rows: list[int], model: str, settings: FitSettings,
                   fills: Fills | None = None, among: tuple[str, ...] = ("tree", "nearest"),
                   ) -> tuple[Quality, list[tuple[tuple[int, ...], int, float]]]:
    """Each shape's choice by the rule fitted on the other folds. ``model="auto"``: the model of each fold is the
    one of ``among`` whose cross-validation on the fold's training shapes alone is the better (nested)."""
    if len(rows) < 2:
        return Quality.of([]), []
    fills = fills or Fills(matrix)
    fold = folds_of(len(rows), settings.folds, settings.seed)
    per_shape = []
    for k in sorted(set(fold)):
        train = [r for r, f in zip(rows, fold) if f != k]
        test = [r for r, f in zip(rows, fold) if f == k]
        chosen = model if model != "auto" else _better_model(matrix, train, among, settings, fills)
        fitted = _fit(matrix, train, chosen, settings, fills)
        for r in test:
            c = chosen_candidate(fitted, matrix.shapes[r], fills)
            per_shape.append((matrix.shapes[r], c, efficiency(matrix, r, c)))
    per_shape.sort(key=lambda item: matrix.shapes.index(item[0]))
    return Quality.of([e for _, _, e in per_shape]), per_shape


def fit_rule(matrix: CrossMatrix, settings: FitSettings = FitSettings(), data: str | None = None,
             date: str | None = None) -> FitResult:
    """The rule for the matrix's family, dtype and arguments, with its cross-validated quality."""
    rows = matrix.ruled_rows()
    if not rows:
        raise ValueError(f"the matrix of {matrix.case} has no measured shape its rule would serve: nothing to fit")
    if settings.selection not in SELECTION_CHOICES:
        raise ValueError(f"selection {settings.selection!r} is not one of {', '.join(SELECTION_CHOICES)}")
    fills = Fills(matrix)
    models = model_names(settings, fills.noticed(rows))
    checked = {m: cross_validate(matrix, rows, m, settings, fills) for m in models}
    model = _preferred(models, {m: _score(checked[m][0]) for m in models})
    held_out, per_shape = checked[model]
    if len(models) > 1 and settings.selection == "nested":
        held_out, per_shape = cross_validate(matrix, rows, "auto", settings, fills, models)
    final = _fit(matrix, rows, model, settings, fills)
    fitted = Quality.of([efficiency(matrix, r, chosen_candidate(final, matrix.shapes[r], fills)) for r in rows])
    oracle = Quality.of([max(efficiency(matrix, r, c) for c in final.portfolio) for r in rows])
    quality = {"shapes": len(rows), "folds": max(2, min(settings.folds, len(rows))) if len(rows) >= 2 else 0}
    if held_out.shapes:
        quality.update(held_out_geomean=held_out.geomean, held_out_worst=held_out.worst)
    quality.update(fitted_geomean=fitted.geomean, fitted_worst=fitted.worst, portfolio_geomean=oracle.geomean,
                   portfolio_worst=oracle.worst)
    nearest = model != "tree"
    voting = nearest and final.neighbours > 1
    record = rule_record(matrix.family, matrix.dtype, matrix.args, len(matrix.shapes[rows[0]]),
                         [matrix.candidates[c] for c in final.portfolio], tree=final.tree,
                         nearest=final.nearest if nearest and not voting else None,
                         slowdowns=final.nearest if voting else None, features=final.features,
                         neighbours=final.neighbours, fills=final.fills, fill_alpha=final.rule.fill_alpha,
                         quality=quality, fit=settings_record(settings), data=data,
                         date=date or datetime.date.today().isoformat())
    return FitResult(record=record, model=model, portfolio=final.portfolio, held_out=held_out, fitted=fitted,
                     oracle=oracle, models={m: checked[m][0] for m in models}, per_shape=per_shape)


def settings_of(record: dict[str, Any]) -> FitSettings:
    """The settings a rule was fitted with (its ``fit`` field; for what it does not name, the value a record
    without it means: ``LEGACY`` for the settings added later, else the default)."""
    known = {f.name for f in dataclasses.fields(FitSettings)}
    given = {k: v for k, v in record.get("fit", {}).items() if k in known}
    return FitSettings(**{**LEGACY, **given})


def settings_record(settings: FitSettings) -> dict[str, Any]:
    """The ``fit`` field: every setting, less those added later that keep the value a record without them means."""
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in LEGACY or LEGACY[k] != v}


def model_names(settings: FitSettings, filled: bool = True) -> tuple[str, ...]:
    """The models a fit tries: the tree and/or the nearest vote, and the vote corrected by each of the settings'
    fill alphas above 0 ('nearest@0.25') where the vote has several neighbours and ``filled`` (some candidate
    fills some shape less than wholly)."""
    if settings.model not in MODEL_CHOICES:
        raise ValueError(f"model {settings.model!r} is not one of {', '.join(MODEL_CHOICES)}")
    names = ["tree"] if settings.model in ("auto", "tree") else []
    if settings.model in ("auto", "nearest"):
        names.append("nearest")
        if filled and settings.neighbours > 1:
            names += [f"nearest@{a:g}" for a in parse_alphas(settings.fill_alphas) if a > 0]
    return tuple(names)


def _better_model(matrix: CrossMatrix, rows: list[int], models: tuple[str, ...], settings: FitSettings,
                  fills: Fills | None = None) -> str:
    """The model with the better cross-validated geometric mean on ``rows`` alone (the tree on a tie, then the
    smaller fill alpha)."""
    return _preferred(models, {m: _score(cross_validate(matrix, rows, m, settings, fills)[0]) for m in models})


def _preferred(models: tuple[str, ...], scores: dict[str, float]) -> str:
    """The model of the best score; on a tie the tree (it reads better), then the smaller fill alpha."""
    return max(models, key=lambda m: (scores[m], m == "tree", -fill_alpha(m)))


def _score(q: Quality) -> float:
    return -math.inf if math.isnan(q.geomean) else round(q.geomean, 9)


__all__ = ["settings_of", "settings_record", "FitSettings", "FitResult", "Quality", "fit_rule", "cross_validate",
           "Fills", "model_names", "parse_alphas", "fill_alpha",
           "select_portfolio", "fit_tree", "losses", "features", "efficiency", "folds_of", "slowdown", "rule_features",
           "MODEL_CHOICES", "FEATURE_CHOICES", "SELECTION_CHOICES", "LEGACY"]
