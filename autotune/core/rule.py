"""A fitted rule: how an untuned shape of one family, dtype and arguments gets a configuration on one GPU model.

A rule is plain data in the tuned database (a ``rules:`` section of ``tuned_db/<gpu-model>.yaml``, written by
``autotune rule fit`` from a cross-time matrix, see autotune/tuning/fit.py): a small **portfolio** of configurations
and a **model** that ranks them for any shape. Two models exist, both deterministic and cheap on the host:

- ``tree``: a shallow decision tree on the shape. Each inner node compares one feature with a threshold (``dim``:
  the index of a dimension, or ``size`` for the product of all of them; ``at``: a number) and goes ``below`` where
  the feature is at most ``at``, else ``above``; each leaf (``use``) lists portfolio indices, best first.
- ``nearest``: the coverage shapes the rule was fitted on, each with its own ranking; a new shape takes the
  ranking of the nearest one (the sum of |log2| ratios over dimensions, as the nearest-entry lookup measures).

The first index of the ranking is the choice; first-use tuning (autotune/tuning/first_use.py) times the first
few. The family then fits the chosen configuration to the shape (``KernelFamily.fit_config``: matmul's split-K and
edge handling), as the cross-time matrix measured it. ``fit`` records the settings the rule was fitted with and
``data`` the matrix, so that anyone can fit it again and get the same rule. Nothing here runs code from the file:
the tree is walked, never evaluated, and every field is checked (portfolio entries against the family's search
space) before use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Union

from .problem import MAX_DIMENSION
from .registry import FamilyError
from .registry import family as family_named
from .space import load_space

MODELS = ("tree", "nearest")
MAX_PORTFOLIO = 32
MAX_DEPTH = 8
MAX_NODES = 511
MAX_NEAREST = 4096
MAX_RANK = 8
FIELDS = ("family", "dtype", "rank", "portfolio", "tree", "nearest", "quality", "fit", "data", "date")
SIZE = "size"  # the feature that is the product of all dimensions


class RuleError(ValueError):
    """A rule is malformed; the message names the field."""


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
    tuple of (log2 shape, ranking) pairs."""

    family: str
    dtype: str
    args: dict[str, Any]
    rank: int
    portfolio: tuple[dict[str, Any], ...]
    tree: Any = None
    nearest: tuple = ()
    quality: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return "tree" if self.tree is not None else "nearest"

    @property
    def key(self) -> str:
        """'matmul/float32/nn': the problem key of the shapes this rule serves, without the shape."""
        return f"{self.family}/{self.dtype}/{family_named(self.family).key_tag(self.args)}"

    def serves(self, family: str, dtype: str, args: Mapping[str, Any], shape: tuple[int, ...]) -> bool:
        return (family, dtype, dict(args), len(shape)) == (self.family, self.dtype, self.args, self.rank)

    def ranking(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Portfolio indices for ``shape``, best first (the model's leaf or nearest shape)."""
        if self.tree is not None:
            node = self.tree
            while isinstance(node, Split):
                node = node.below if feature_value(shape, node.feature) <= node.at else node.above
            return node
        logs = [math.log2(d) for d in shape]
        best = min(self.nearest, key=lambda item: sum(abs(a - b) for a, b in zip(logs, item[0])))
        return best[1]

    def choice(self, shape: tuple[int, ...]) -> dict[str, Any]:
        """The portfolio configuration the rule picks for ``shape`` (before the family fits it to the shape)."""
        return self.portfolio[self.ranking(shape)[0]]

    def summary(self) -> str:
        """One line on what the rule is and how well it did on shapes it was not fitted on."""
        q = self.quality
        held = ""
        if "held_out_geomean" in q:
            held = (f", on held-out shapes {q['held_out_geomean']:.3f} of the best time in geometric mean and "
                    f"{q.get('held_out_worst', float('nan')):.3f} at worst")
        return f"a {self.model} over a portfolio of {len(self.portfolio)} configurations{held}"


def feature_value(shape: tuple[int, ...], feature: int | str) -> float:
    return float(math.prod(shape)) if feature == SIZE else float(shape[feature])


# -- reading ------------------------------------------------------------------------------------------
def parse_rule(raw: Any) -> Rule:
    """A rule from its file form, every field checked; RuleError names the field."""
    if not isinstance(raw, dict):
        raise RuleError("a rule must be a mapping")
    family = raw.get("family")
    if not isinstance(family, str):
        raise RuleError(f"field 'family' must name a kernel family, got {_short(family)}")
    try:
        impl = family_named(family)
    except FamilyError as exc:
        raise RuleError(f"field 'family': {exc}") from None
    arg_names = [a.name for a in impl.args]
    unknown = sorted(str(k) for k in raw if k not in FIELDS and k not in arg_names)
    if unknown:
        raise RuleError(f"unknown field {unknown[0]!r} (a rule has {', '.join(FIELDS)} and the family's arguments)")
    dtype = raw.get("dtype")
    if dtype not in impl.dtypes:
        raise RuleError(f"field 'dtype' is {_short(dtype)}; allowed: {', '.join(impl.dtypes)}")
    args = {}
    for arg in impl.args:
        try:
            args[arg.name] = arg.parse(raw.get(arg.name, arg.text(arg.default)))
        except ValueError as exc:
            raise RuleError(f"field {arg.name}: {exc}") from None
    rank = raw.get("rank")
    if type(rank) is not int or not 1 <= rank <= MAX_RANK:
        raise RuleError(f"field 'rank' must be the number of dimensions of the shapes served (1 to {MAX_RANK}), "
                        f"got {_short(rank)}")
    portfolio = _portfolio(raw.get("portfolio"), family, dtype, args)
    has_tree, has_nearest = raw.get("tree") is not None, raw.get("nearest") is not None
    if has_tree == has_nearest:
        raise RuleError("a rule has exactly one model: 'tree' or 'nearest'")
    tree = _node(raw["tree"], rank, len(portfolio), 0, [0]) if has_tree else None
    nearest = _nearest(raw["nearest"], rank, len(portfolio)) if has_nearest else ()
    quality = raw.get("quality", {})
    if not isinstance(quality, dict) or not all(isinstance(k, str) and _finite(v) for k, v in quality.items()):
        raise RuleError("field 'quality' must map names to finite numbers")
    fit = raw.get("fit", {})
    if not isinstance(fit, dict) or len(fit) > 20 or not all(
            isinstance(k, str) and (_finite(v) or isinstance(v, str) and len(v) <= 40) for k, v in fit.items()):
        raise RuleError("field 'fit' must map the fitting's settings to numbers or short words")
    for name in ("data", "date"):
        if name in raw and not isinstance(raw[name], str):
            raise RuleError(f"field {name!r} must be text, got {_short(raw[name])}")
    return Rule(family=family, dtype=dtype, args=args, rank=rank, portfolio=portfolio, tree=tree, nearest=nearest,
                quality=dict(quality), record=dict(raw))


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
            raise RuleError(f"field 'portfolio': configuration #{i + 1}: {_short_text(exc)}") from None
    return tuple(checked)


def _ranking(value: Any, size: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= size or \
            not all(type(i) is int and 0 <= i < size for i in value) or len(set(value)) != len(value):
        raise RuleError(f"{where}: 'use' must list distinct portfolio indices (0 to {size - 1}), best first, got "
                        f"{_short(value)}")
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
                        f"{_short(feature)}")
    at = value["at"]
    if not _finite(at) or at < 0:
        raise RuleError(f"{where}: 'at' must be a finite non-negative number, got {_short(at)}")
    return Split(feature, float(at), _node(value["below"], rank, size, depth + 1, count),
                 _node(value["above"], rank, size, depth + 1, count))


def _nearest(value: Any, rank: int, size: int) -> tuple:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_NEAREST:
        raise RuleError(f"field 'nearest' must be a list of 1 to {MAX_NEAREST} {{shape, use}} items")
    items = []
    for i, item in enumerate(value):
        where = f"field 'nearest' item #{i + 1}"
        if not isinstance(item, dict) or set(item) != {"shape", "use"}:
            raise RuleError(f"{where}: must be a mapping with 'shape' and 'use'")
        shape = item["shape"]
        if not isinstance(shape, list) or len(shape) != rank or not all(type(d) is int and 1 <= d <= MAX_DIMENSION
                                                                        for d in shape):
            raise RuleError(f"{where}: 'shape' must be {rank} positive integers, got {_short(shape)}")
        items.append((tuple(math.log2(d) for d in shape), _ranking(item["use"], size, where)))
    return tuple(items)


# -- writing ------------------------------------------------------------------------------------------
def rule_record(family: str, dtype: str, args: Mapping[str, Any], rank: int, portfolio: list[dict[str, Any]],
                *, tree: Any = None, nearest: list[tuple[tuple[int, ...], list[int]]] | None = None,
                quality: Mapping[str, float] | None = None, fit: Mapping[str, Any] | None = None,
                data: str | None = None, date: str | None = None) -> dict[str, Any]:
    """A rule in file form, keys in a fixed order. ``tree``: a leaf (indices, best first) or a ``Split``;
    ``nearest``: (shape, ranking) pairs."""
    impl = family_named(family)
    record: dict[str, Any] = {"family": family, "dtype": dtype}
    text = impl.args_text(args)
    record.update({a.name: text[a.name] for a in impl.args if a.written(args[a.name])})
    record["rank"] = rank
    record["portfolio"] = [dict(p) for p in portfolio]
    if tree is not None:
        record["tree"] = tree_record(tree)
    else:
        record["nearest"] = [{"shape": list(s), "use": list(r)} for s, r in nearest or []]
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
    else:
        lines.append(f"the ranking of the nearest of {len(rule.nearest)} coverage shapes")
    return lines


def _finite(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short_text(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."


__all__ = ["Rule", "RuleError", "Split", "Node", "parse_rule", "rule_record", "tree_lines", "feature_value", "MODELS",
           "SIZE"]
