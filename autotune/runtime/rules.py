"""Choosing through a fitted rule: for a problem without an exact database entry, the rule of its family, dtype and
arguments in the GPU model's files (yours first) ranks its portfolio for the shape, and the family fits the chosen
configuration to the shape (``KernelFamily.fit_config``), with the multiprocessor count the file declares. See
autotune/core/rule.py for what a rule is, autotune/tuning/fit.py for how one is fitted.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.device import DeviceInfo
from ..core.problem import Problem
from ..core.rule import Rule, parse_rule
from ..core.space import config_key, load_space
from .db import DatabaseError, DbFile, load_file, write_rules


def rule_for(problem: Problem, files: list[DbFile]) -> tuple[Rule, DbFile] | None:
    """The first rule serving ``problem`` in ``files``, in their order, with its file; None where none does."""
    for db_file in files:
        for rule in db_file.rules:
            if rule.serves(problem.family, problem.dtype, problem.args, problem.shape):
                return rule, db_file
    return None


def ranking(rule: Rule, problem: Problem, device: dict[str, Any]) -> tuple[int, ...]:
    """The rule's portfolio indices for the problem's shape, best first, on the GPU ``device`` records: where the
    rule's vote is corrected by fill, with each configuration's filled fraction of the shape (the family's)."""
    fills = None
    if rule.wants_fills:
        info, space = _device_info(device), load_space(problem.family)
        fills = tuple(problem.impl.filled_fraction(p, problem, info, space) for p in rule.portfolio)
    return rule.ranking(problem.shape, fills)


def ranked_configs(rule: Rule, problem: Problem, device: dict[str, Any], count: int = 1,
                   order: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """The first ``count`` configurations of the rule's ranking for the shape (``order``, where the caller has it),
    each fitted to it (duplicates after fitting dropped), best first."""
    info = _device_info(device)
    space = load_space(problem.family)
    found, keys = [], set()
    for index in (order or ranking(rule, problem, device))[:count]:
        params = problem.impl.fit_config(rule.portfolio[index], problem, info, space)
        if config_key(params) not in keys:
            keys.add(config_key(params))
            found.append(params)
    return found


#: what two GPU models must share for one to serve a case with the other's rule: a rule's portfolio is of the
#: compute capability's kernels and the family fits its splits to the multiprocessor count
SIBLING_FIELDS = ("cc", "sm_count")


def sibling_differences(source: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """'cc 9.0 and 8.0': each sibling field in which the two device records differ, or lacks; empty: siblings."""
    return [f"{key} {source.get(key)} and {target.get(key)}" for key in SIBLING_FIELDS
            if source.get(key) is None or str(source.get(key)) != str(target.get(key))]


def adopted(rule: Rule, source: DbFile) -> Rule:
    """``rule`` of ``source``'s model as another model's file holds it: marked with the model whose coverage it was
    fitted on (kept where the rule was itself adopted), so that its announcements and ``autotune rule show`` say so.
    The caller checks that the two models are siblings (``sibling_differences``)."""
    return parse_rule(dict(rule.record, adopted_from=rule.adopted_from or source.device["name"]))


def adopt_rules(source: DbFile, into: Path, keys: list[str], *, force: bool = False) -> list[str]:
    """Write ``source``'s rules for ``keys`` (``Rule.key``) into the database file ``into`` of a sibling model
    (``adopted``), other entries and rules kept; a rule that file fitted on its own coverage is replaced only with
    ``force``. DatabaseError, naming the files, where the models are not siblings or a key has no rule."""
    target = load_file(into, strict=True)
    differences = sibling_differences(source.device, target.device)
    if source.device["name"] == target.device["name"]:
        raise DatabaseError(f"{source.path} and {into} are both of {target.device['name']}: nothing to adopt")
    if differences:
        raise DatabaseError(f"{source.path} ({source.device['name']}) and {into} ({target.device['name']}) differ "
                            f"in {'; '.join(differences)}: a rule serves only a model of the same compute capability "
                            f"and multiprocessor count")
    rules = {rule.key: rule for rule in source.rules}
    missing = [key for key in keys if key not in rules]
    if missing:
        raise DatabaseError(f"{source.path} has no rule for {', '.join(missing)} (its rules: "
                            f"{', '.join(rules) or 'none'})")
    own = [rule.key for rule in target.rules if rule.key in keys and not rule.adopted_from]
    if own and not force:
        raise DatabaseError(f"{into} has its own rule for {', '.join(own)}, fitted on its model's coverage; "
                            f"--force replaces it")
    return write_rules(into, target.device, [adopted(rules[key], source) for key in dict.fromkeys(keys)])


def fitted_entry(params: dict[str, Any], problem: Problem, device: dict[str, Any]) -> dict[str, Any]:
    """An entry's configuration, tuned for another shape, fitted to ``problem``'s by the family (as a rule's choice
    is): its split-K, edges, row splits were the other shape's."""
    return problem.impl.fit_config(params, problem, _device_info(device), load_space(problem.family))


_devices: dict[tuple, DeviceInfo] = {}


def _device_info(device: dict[str, Any]) -> DeviceInfo:
    key = tuple(sorted((str(k), str(v)) for k, v in device.items()))
    if key not in _devices:
        _devices[key] = DeviceInfo.from_record(device)
    return _devices[key]


def rule_phrase(rule: Rule, db_file: DbFile, index: int) -> str:
    """What a choice by a rule announces it used: which configuration of its portfolio (``index``), which rule,
    from which file, how good it was on held-out shapes."""
    return (f"configuration #{index} of the fitted rule for {rule.key} in {db_file.path} ({rule.summary()}), "
            f"fitted to the shape")


__all__ = ["rule_for", "ranking", "ranked_configs", "rule_phrase", "sibling_differences", "adopted", "adopt_rules"]
