"""A fitted rule: how an untuned shape of one family, dtype and arguments gets a configuration on one GPU model.

A rule is plain data in the tuned database (a ``rules:`` section of ``tuned_db/<gpu-model>.yaml``, written by
``autotune rule fit`` from a cross-time matrix, see autotune/tuning/fit.py): a small **portfolio** of configurations
and a **model** that ranks them for any shape. Two models exist, both deterministic and cheap on the host:

- ``tree``: a shallow decision tree on the shape. Each inner node compares one feature with a threshold (``dim``:
  the index of a dimension, or ``size`` for the product of all of them; ``at``: a number) and goes ``below`` where
  the feature is at most ``at``, else ``above``; each leaf (``use``) lists portfolio indices, best first.
- ``nearest``: the coverage shapes the rule was fitted on. The distance between two shapes is the sum of |log2|
  ratios over the rule's ``features`` (each a dimension index, or a list of indices: the product of those
  dimensions, as matmul's M*N, the output's size; absent: the dimensions, as the nearest-entry lookup measures).
  With ``neighbours`` absent or 1, each coverage shape has its own ranking (``use``) and a new shape takes the
  nearest one's. With ``neighbours: k`` above 1, each coverage shape holds ``slowdown``: every portfolio
  configuration's time there over the best time known for the shape (1000 where it failed); a new shape ranks the
  configurations by the sum over its k nearest coverage shapes (the first in file order on equal distances) of
  log(slowdown) weighted by 1 / (distance + 0.5): the configuration expected to lose least time comes first.
  With ``fill_alpha`` above 0, each coverage shape also holds ``fill``: the fraction of the work each portfolio
  configuration, fitted to it, launches that is the shape's own (``KernelFamily.filled_fraction``: matmul's tile
  padding times its last wave's filling); each neighbour's log(slowdown) of a configuration is then corrected by
  fill_alpha * (log(its fill there) - log(its fill on the new shape)): a configuration whose tiles fit the
  neighbours but overhang the new shape, or leave its last wave half empty, is expected to lose that time too.

The first index of the ranking is the choice; first-use tuning (autotune/tuning/first_use.py) times the first
few. The family then fits the chosen configuration to the shape (``KernelFamily.fit_config``: matmul's split-K and
edge handling), as the cross-time matrix measured it. ``fit`` records the settings the rule was fitted with and
``data`` the matrix, so that anyone can fit it again and get the same rule. ``adopted_from`` is the device record
(name, cc, sm_count) of the GPU model whose coverage a rule was fitted on where that is another model of the same
compute capability and multiprocessor count (``autotune rule adopt``: a model without coverage of its own serves a
case with a sibling's rule where a bench showed that it wins over the nearest entry); a file serves such a rule
only while its own model still matches. Nothing here runs code from the file:
the tree is walked, never evaluated, and every field is checked (portfolio entries against the family's search
space) before use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Union

import numpy as np

from .device import SIBLING_FIELDS, checked_device_record
from .problem import MAX_DIMENSION
from .fields import args_fields, dtype_field, family_field, short, short_text, unknown_field
from .registry import family as family_named
from .space import load_space

MODELS = ("tree", "nearest")
MAX_PORTFOLIO = 32
MAX_DEPTH = 8
MAX_NODES = 511
MAX_NEAREST = 4096
MAX_RANK = 8
MAX_NEIGHBOURS = 64
MAX_FEATURES = 16
MAX_SLOWDOWN = 1e6
FIELDS = ("family", "dtype", "rank", "portfolio", "tree", "nearest", "features", "neighbours", "fill_alpha", "quality",
          "fit", "data", "date", "adopted_from")
MAX_FILL_ALPHA = 4.0
NEAREST_OFFSET = 0.5  # the weight of a neighbour at distance d (in log2 units) is 1 / (d + NEAREST_OFFSET)
MIN_FILL = 1e-4  # a filled fraction is at least this (a file's at least 0.0001: 4 significant digits)
SIZE = "size"  # the feature that is the product of all dimensions


class RuleError(ValueError):
    """A rule is malformed; the message names the field."""


#: a feature of the nearest model: a dimension index, or the indices of the dimensions whose product it is
Feature = Union[int, tuple]


class Neighbour(NamedTuple):
    """A coverage shape of a nearest model: its features (log2), its ranking (portfolio indices, best first) and,
    where the rule votes among several neighbours, log(slowdown) per portfolio configuration, and where the rule
    corrects the vote by the configurations' fill, log(fill) of each there."""

    point: tuple
    ranking: tuple
    losses: Union[tuple, None] = None
    fills: Union[tuple, None] = None


class Split(NamedTuple):
    """An inner node of a rule's tree: ``below`` where the feature is at most ``at``, else ``above``."""

    feature: Union[int, str]
    at: float
    below: Any
    above: Any


#: a tree: a leaf (portfolio indices, best first) or a Split
Node = Union[tuple, Split]


@dataclass(frozen=True)
class Rule:
    """A parsed, checked rule. ``tree`` is a leaf (a tuple of portfolio indices) or a ``Split``; ``nearest`` is a
    tuple of ``Neighbour`` (or of (log2 features, ranking) pairs), ``features`` what they measure (empty: the
    dimensions) and ``neighbours`` how many of the nearest vote."""

    family: str
    dtype: str
    args: dict[str, Any]
    rank: int
    portfolio: tuple[dict[str, Any], ...]
    tree: Any = None
    nearest: tuple = ()
    features: tuple = ()
    neighbours: int = 1
    fill_alpha: float = 0.0
    quality: dict[str, Any] = field(default_factory=dict)
    adopted_from: Union[dict, None] = None  # the device record of the model whose coverage it was fitted on, where
    # that is not its file's own (name, cc, sm_count: its file checks them against its own)
    record: dict[str, Any] = field(default_factory=dict)
    _table: Any = field(default=None, compare=False, repr=False)  # the nearest items as arrays, for speed

    def __post_init__(self):
        if self.nearest:
            points = np.array([item[0] for item in self.nearest], dtype=float)
            losses = np.array([item[2] for item in self.nearest], dtype=float) if self.neighbours > 1 else None
            corrected = None
            if self.fill_alpha > 0:  # each neighbour's losses with its fills' part of the correction folded in
                corrected = losses + self.fill_alpha * np.array([item[3] for item in self.nearest], dtype=float)
            object.__setattr__(self, "_table", (points, losses, corrected))

    @property
    def model(self) -> str:
        return "tree" if self.tree is not None else "nearest"

    @property
    def key(self) -> str:
        """'matmul/float32/nn': the problem key of the shapes this rule serves, without the shape."""
        return f"{self.family}/{self.dtype}/{family_named(self.family).key_tag(self.args)}"

    def serves(self, family: str, dtype: str, args: Mapping[str, Any], shape: tuple[int, ...]) -> bool:
        return (family, dtype, dict(args), len(shape)) == (self.family, self.dtype, self.args, self.rank)

    def ranking(self, shape: tuple[int, ...], fills: Union[tuple, None] = None) -> tuple[int, ...]:
        """Portfolio indices for ``shape``, best first (the model's leaf or nearest shape). ``fills``: each portfolio
        configuration's filled fraction of ``shape`` (``KernelFamily.filled_fraction``), which a rule with
        ``fill_alpha`` needs (``runtime.rules.ranking`` gives it); without it such a rule votes uncorrected."""
        if self.tree is not None:
            node = self.tree
            while isinstance(node, Split):
                node = node.below if feature_value(shape, node.feature) <= node.at else node.above
            return node
        points, losses, corrected = self._table
        distances = np.abs(points - np.array(feature_point(shape, self.features))).sum(axis=1)
        if self.neighbours <= 1:
            return self.nearest[int(np.argmin(distances))][1]  # the first of equally near ones
        if corrected is not None and fills is not None:
            query = self.fill_alpha * np.log(np.maximum(np.array(fills, dtype=float), MIN_FILL))
            return vote(distances, corrected, self.neighbours, query)
        return vote(distances, losses, self.neighbours)

    @property
    def wants_fills(self) -> bool:
        """Whether ``ranking`` takes the portfolio's filled fractions of the shape (a vote corrected by them)."""
        return self.tree is None and self.neighbours > 1 and self.fill_alpha > 0

    def choice(self, shape: tuple[int, ...], fills: Union[tuple, None] = None) -> dict[str, Any]:
        """The portfolio configuration the rule picks for ``shape`` (before the family fits it to the shape)."""
        return self.portfolio[self.ranking(shape, fills)[0]]

    def summary(self) -> str:
        """One line on what the rule is, whose coverage it was fitted on where not its file's model, and how well
        it did on shapes it was not fitted on."""
        q = self.quality
        fill = f", its vote corrected by the configurations' fill (alpha {self.fill_alpha:g})" if self.wants_fills \
            else ""
        adopted = f", fitted on the coverage of {self.adopted_from['name']} (adopted)" if self.adopted_from else ""
        held = ""
        if "held_out_geomean" in q:
            held = (f", on {'its ' if self.adopted_from else ''}held-out shapes {q['held_out_geomean']:.3f} of the "
                    f"best time in geometric mean and {q.get('held_out_worst', float('nan')):.3f} at worst")
        return f"a {self.model} over a portfolio of {len(self.portfolio)} configurations{fill}{adopted}{held}"


def feature_value(shape: tuple[int, ...], feature: int | str) -> float:
    return float(math.prod(shape)) if feature == SIZE else float(shape[feature])


def feature_point(shape: tuple[int, ...], features: tuple = ()) -> tuple[float, ...]:
    """log2 of each feature of ``shape`` (``features`` empty: of each dimension)."""
    if not features:
        return tuple(math.log2(d) for d in shape)
    return tuple(math.log2(shape[f]) if type(f) is int else sum(math.log2(shape[i]) for i in f) for f in features)


def vote(distances: np.ndarray, losses: np.ndarray, k: int,
         query: Union[np.ndarray, None] = None) -> tuple[int, ...]:
    """Portfolio indices, best first, by the sum over the ``k`` nearest items (``distances`` to each; the earlier
    item on a tie) of their log(slowdown) (``losses``: items x portfolio), each weighted by 1 / (distance +
    NEAREST_OFFSET), less ``query`` (one number per configuration) times the weights' sum; the lower index on a
    tie."""
    closest = np.argsort(distances, kind="stable")[:k]
    weights = 1.0 / (distances[closest] + NEAREST_OFFSET)
    scores = weights @ losses[closest]
    if query is not None:
        scores = scores - weights.sum() * query
    return tuple(int(j) for j in np.argsort(np.round(scores, 9), kind="stable"))


# -- reading ------------------------------------------------------------------------------------------
def parse_rule(raw: Any) -> Rule:
    """A rule from its file form, every field checked; RuleError names the field."""
    if not isinstance(raw, dict):
        raise RuleError("a rule must be a mapping")
    impl = family_field(raw, RuleError)
    family = impl.name
    unknown = unknown_field(raw, impl, FIELDS)
    if unknown is not None:
        raise RuleError(f"unknown field {unknown!r} (a rule has {', '.join(FIELDS)} and the family's arguments)")
    dtype = dtype_field(raw, impl, RuleError)
    args = args_fields(raw, impl, RuleError)
    rank = raw.get("rank")
    if type(rank) is not int or not 1 <= rank <= MAX_RANK:
        raise RuleError(f"field 'rank' must be the number of dimensions of the shapes served (1 to {MAX_RANK}), "
                        f"got {short(rank)}")
    portfolio = _portfolio(raw.get("portfolio"), family, dtype, args)
    has_tree, has_nearest = raw.get("tree") is not None, raw.get("nearest") is not None
    if has_tree == has_nearest:
        raise RuleError("a rule has exactly one model: 'tree' or 'nearest'")
    tree = _node(raw["tree"], rank, len(portfolio), 0, [0]) if has_tree else None
    features, neighbours = (), 1
    if raw.get("features") is not None or raw.get("neighbours") is not None:
        if not has_nearest:
            raise RuleError("fields 'features' and 'neighbours' belong to a nearest model; this rule has a tree")
        features = _features(raw.get("features"), rank)
        neighbours = raw.get("neighbours", 1)
        if type(neighbours) is not int or not 1 <= neighbours <= MAX_NEIGHBOURS:
            raise RuleError(f"field 'neighbours' must be how many nearest coverage shapes vote (1 to "
                            f"{MAX_NEIGHBOURS}), got {short(neighbours)}")
    fill_alpha = raw.get("fill_alpha", 0.0)
    if not _finite(fill_alpha) or not 0 <= fill_alpha <= MAX_FILL_ALPHA:
        raise RuleError(f"field 'fill_alpha' must be a number from 0 to {MAX_FILL_ALPHA:g}, got {short(fill_alpha)}")
    if fill_alpha and (not has_nearest or neighbours <= 1):
        raise RuleError("field 'fill_alpha' belongs to a nearest model whose neighbours vote ('neighbours' above 1)")
    nearest = _nearest(raw["nearest"], rank, len(portfolio), features, neighbours, fill_alpha > 0) \
        if has_nearest else ()
    quality = raw.get("quality", {})
    if not isinstance(quality, dict) or not all(isinstance(k, str) and _finite(v) for k, v in quality.items()):
        raise RuleError("field 'quality' must map names to finite numbers")
    fit = raw.get("fit", {})
    if not isinstance(fit, dict) or len(fit) > 20 or not all(
            isinstance(k, str) and (_finite(v) or isinstance(v, str) and len(v) <= 40) for k, v in fit.items()):
        raise RuleError("field 'fit' must map the fitting's settings to numbers or short words")
    for name in ("data", "date"):
        if name in raw and not isinstance(raw[name], str):
            raise RuleError(f"field {name!r} must be text, got {short(raw[name])}")
    adopted_from = None
    if "adopted_from" in raw:
        adopted_from = checked_device_record(raw["adopted_from"], RuleError, "adopted_from")
        if any(key not in adopted_from for key in SIBLING_FIELDS):
            raise RuleError(f"field 'adopted_from' must hold the {' and '.join(SIBLING_FIELDS)} of the GPU model the "
                            f"rule was fitted on")
    return Rule(family=family, dtype=dtype, args=args, rank=rank, portfolio=portfolio, tree=tree, nearest=nearest,
                features=features, neighbours=neighbours, fill_alpha=float(fill_alpha), quality=dict(quality),
                adopted_from=adopted_from, record=dict(raw))


def _portfolio(value: Any, family: str, dtype: str, args: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_PORTFOLIO:
        raise RuleError(f"field 'portfolio' must be a list of 1 to {MAX_PORTFOLIO} configurations")
    space = load_space(family)
    checked = []
    for i, params in enumerate(value):
        if not isinstance(params, dict):
            raise RuleError(f"field 'portfolio': configuration #{i + 1} must be a mapping of parameters")
        try:
            checked.append(space.validate(params, dtype=dtype, args=args))
        except ValueError as exc:
            raise RuleError(f"field 'portfolio': configuration #{i + 1}: {short_text(exc, 300)}") from None
    return tuple(checked)


def _ranking(value: Any, size: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= size or \
            not all(type(i) is int and 0 <= i < size for i in value) or len(set(value)) != len(value):
        raise RuleError(f"{where}: 'use' must list distinct portfolio indices (0 to {size - 1}), best first, got "
                        f"{short(value)}")
    return tuple(value)


def _node(value: Any, rank: int, size: int, depth: int, count: list[int]):
    where = f"field 'tree' at depth {depth}"
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise RuleError(f"field 'tree' is deeper than {MAX_DEPTH} levels or has more than {MAX_NODES} nodes")
    if not isinstance(value, dict):
        raise RuleError(f"{where}: a node must be a mapping ({{use: [...]}} or {{dim, at, below, above}})")
    if "use" in value:
        if set(value) != {"use"}:
            raise RuleError(f"{where}: a leaf holds only 'use'")
        return _ranking(value["use"], size, where)
    if set(value) != {"dim", "at", "below", "above"}:
        raise RuleError(f"{where}: an inner node holds dim, at, below and above, got {sorted(map(str, value))}")
    feature = value["dim"]
    if not (feature == SIZE or type(feature) is int and 0 <= feature < rank):
        raise RuleError(f"{where}: 'dim' must be a dimension index (0 to {rank - 1}) or '{SIZE}', got "
                        f"{short(feature)}")
    at = value["at"]
    if not _finite(at) or at < 0:
        raise RuleError(f"{where}: 'at' must be a finite non-negative number, got {short(at)}")
    return Split(feature, float(at), _node(value["below"], rank, size, depth + 1, count),
                 _node(value["above"], rank, size, depth + 1, count))


def _features(value: Any, rank: int) -> tuple:
    if value is None:
        return ()
    where = "field 'features'"
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_FEATURES:
        raise RuleError(f"{where} must list 1 to {MAX_FEATURES} features (a dimension index, or a list of indices: "
                        f"the product of those dimensions), got {short(value)}")
    out: list = []
    for f in value:
        if type(f) is int and 0 <= f < rank:
            out.append(f)
        elif isinstance(f, list) and 2 <= len(f) <= rank and all(type(i) is int and 0 <= i < rank for i in f) \
                and f == sorted(set(f)):
            out.append(tuple(f))
        else:
            raise RuleError(f"{where}: {short(f)} is neither a dimension index (0 to {rank - 1}) nor a list of at "
                            f"least two distinct ones, ascending")
    if len(set(out)) != len(out):
        raise RuleError(f"{where} lists a feature twice: {short(value)}")
    return tuple(out)


def _nearest(value: Any, rank: int, size: int, features: tuple = (), neighbours: int = 1,
             filled: bool = False) -> tuple:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_NEAREST:
        raise RuleError(f"field 'nearest' must be a list of 1 to {MAX_NEAREST} {{shape, use}} or {{shape, slowdown}} "
                        f"items")
    items = []
    keys = ({"shape", "slowdown", "fill"},) if filled else ({"shape", "use"}, {"shape", "slowdown"})
    for i, item in enumerate(value):
        where = f"field 'nearest' item #{i + 1}"
        if not isinstance(item, dict) or set(item) not in keys:
            raise RuleError(f"{where}: must be a mapping with 'shape' and 'use' (or 'slowdown'" +
                            (", and 'fill', as 'fill_alpha' is above 0)" if filled else ")"))
        shape = item["shape"]
        if not isinstance(shape, list) or len(shape) != rank or not all(type(d) is int and 1 <= d <= MAX_DIMENSION
                                                                        for d in shape):
            raise RuleError(f"{where}: 'shape' must be {rank} positive integers, got {short(shape)}")
        point = feature_point(tuple(shape), features)
        if "use" in item:
            if neighbours > 1:
                raise RuleError(f"{where}: with 'neighbours' above 1 each item holds 'slowdown', not 'use'")
            items.append(Neighbour(point, _ranking(item["use"], size, where)))
            continue
        slowdown = item["slowdown"]
        if not isinstance(slowdown, list) or len(slowdown) != size or \
                not all(_finite(x) and 1 <= x <= MAX_SLOWDOWN for x in slowdown):
            raise RuleError(f"{where}: 'slowdown' must give each of the {size} portfolio configurations its time "
                            f"over the shape's best (1 to {MAX_SLOWDOWN:g}), got {short(slowdown)}")
        losses = tuple(math.log(x) for x in slowdown)
        fills = None
        if filled:
            fill = item["fill"]
            if not isinstance(fill, list) or len(fill) != size or \
                    not all(_finite(x) and MIN_FILL <= x <= 1 for x in fill):
                raise RuleError(f"{where}: 'fill' must give each of the {size} portfolio configurations the fraction "
                                f"of its work that is the shape's ({MIN_FILL:g} to 1), got {short(fill)}")
            fills = tuple(math.log(x) for x in fill)
        items.append(Neighbour(point, tuple(sorted(range(size), key=lambda j: (slowdown[j], j))), losses, fills))
    return tuple(items)


def nearest_items(value: Any, rank: int, size: int, features: tuple = (), neighbours: int = 1,
                  filled: bool = False) -> tuple:
    """The ``nearest`` items of a rule from their file form (``{shape, use}`` or ``{shape, slowdown}`` mappings,
    ``{shape, slowdown, fill}`` where ``filled``), checked: what a rule read from its file holds."""
    return _nearest(value, rank, size, features, neighbours, filled)


# -- writing ------------------------------------------------------------------------------------------
def rule_record(family: str, dtype: str, args: Mapping[str, Any], rank: int, portfolio: list[dict[str, Any]],
                *, tree: Any = None, nearest: list[tuple[tuple[int, ...], list[int]]] | None = None,
                slowdowns: list[tuple[tuple[int, ...], list[float]]] | None = None, features: tuple = (),
                neighbours: int = 1, fills: list[list[float]] | None = None, fill_alpha: float = 0.0,
                quality: Mapping[str, float] | None = None, fit: Mapping[str, Any] | None = None,
                data: str | None = None, date: str | None = None) -> dict[str, Any]:
    """A rule in file form, keys in a fixed order. ``tree``: a leaf (indices, best first) or a ``Split``;
    ``nearest``: (shape, ranking) pairs; or ``slowdowns``: (shape, slowdown per portfolio configuration) pairs, with
    the ``features`` (empty: the dimensions), the number of ``neighbours`` that vote and, where ``fill_alpha`` is
    above 0, ``fills``: each slowdowns item's filled fraction per portfolio configuration."""
    impl = family_named(family)
    record: dict[str, Any] = {"family": family, "dtype": dtype}
    text = impl.args_text(args)
    record.update({a.name: text[a.name] for a in impl.args if a.written(args[a.name])})
    record["rank"] = rank
    record["portfolio"] = [dict(p) for p in portfolio]
    if tree is not None:
        record["tree"] = tree_record(tree)
    elif slowdowns is not None:
        record["nearest"] = [{"shape": list(s), "slowdown": list(r)} for s, r in slowdowns]
        if fill_alpha > 0:
            for item, fill in zip(record["nearest"], fills or []):
                item["fill"] = list(fill)
    else:
        record["nearest"] = [{"shape": list(s), "use": list(r)} for s, r in nearest or []]
    if tree is None and features:
        record["features"] = [f if type(f) is int else list(f) for f in features]
    if tree is None and neighbours != 1:
        record["neighbours"] = int(neighbours)
    if tree is None and fill_alpha > 0:
        record["fill_alpha"] = float(fill_alpha)
    if quality:
        record["quality"] = {k: v if type(v) is int else round(float(v), 4) for k, v in quality.items()}
    if fit:
        record["fit"] = dict(fit)
    for name, value in (("data", data), ("date", date)):
        if value:
            record[name] = value
    return record


def tree_record(node: Node) -> dict[str, Any]:
    """A tree in file form: nested mappings, ``{use: [...]}`` at the leaves."""
    if isinstance(node, Split):
        return {"dim": node.feature, "at": float(node.at), "below": tree_record(node.below),
                "above": tree_record(node.above)}
    return {"use": [int(i) for i in node]}


def tree_lines(rule: Rule, names: tuple[str, ...] | None = None) -> list[str]:
    """The rule's model as indented text: 'if K <= 724.1:' ... 'use #3 (then #1, #0)'."""
    def name(feature) -> str:
        if feature == SIZE:
            return "size"
        return names[feature] if names and feature < len(names) else f"dim{feature}"

    lines: list[str] = []

    def walk(node, indent: str) -> None:
        if isinstance(node, Split):
            lines.append(f"{indent}if {name(node.feature)} <= {node.at:g}:")
            walk(node.below, indent + "    ")
            lines.append(f"{indent}else:")
            walk(node.above, indent + "    ")
        else:
            rest = f" (then {', '.join(f'#{i}' for i in node[1:])})" if len(node) > 1 else ""
            lines.append(f"{indent}use #{node[0]}{rest}")

    if rule.tree is not None:
        walk(rule.tree, "")
    elif rule.neighbours > 1:
        lines.append(f"the configuration losing least time over the {rule.neighbours} nearest of "
                     f"{len(rule.nearest)} coverage shapes (weighted by closeness)")
    else:
        lines.append(f"the ranking of the nearest of {len(rule.nearest)} coverage shapes")
    return lines


def _finite(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


__all__ = ["Rule", "RuleError", "Split", "Node", "Neighbour", "parse_rule", "rule_record", "tree_lines",
           "feature_value", "feature_point", "vote", "nearest_items", "MODELS", "SIZE"]
