"""Choosing through a fitted rule: for a problem without an exact database entry, the rule of its family, dtype and
arguments in the GPU model's files (yours first) ranks its portfolio for the shape, and the family fits the chosen
configuration to the shape (``KernelFamily.fit_config``), with the multiprocessor count the file declares. See
autotune/core/rule.py for what a rule is, autotune/tuning/fit.py for how one is fitted.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.device import DeviceInfo, same_model, sibling_differences
from ..core.problem import Problem
from ..core.rule import Rule, parse_rule
from ..core.space import config_key, load_space
from .db import DatabaseError, DbFile, load_file, misnamed, write_rules


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


def adopted(rule: Rule, source: DbFile) -> Rule:
    """``rule`` of ``source``'s model as another model's file holds it: marked with the device record of the model
    whose coverage it was fitted on (kept where the rule was itself adopted), which its file checks against its own
    model and its announcements name. The caller checks that the two models are siblings
    (``core.device.sibling_differences``)."""
    return parse_rule(dict(rule.record, adopted_from=rule.adopted_from or dict(source.device)))


def adopt_rules(source: DbFile, into: Path, keys: list[str], *, force: bool = False) -> list[str]:
    """Write ``source``'s rules for ``keys`` (``Rule.key``) into the database file ``into`` of a sibling model
    (``adopted``), other entries and rules kept; a rule that file fitted on its own coverage is replaced only with
    ``force`` (judged under the file's lock). DatabaseError, naming the files, where the models are not siblings,
    ``into`` is not named for its model, a rule was fitted on ``into``'s own model, or a key has no rule."""
    target = load_file(into, strict=True)
    name = target.device["name"]
    wrong = misnamed(target)
    if wrong:
        raise DatabaseError(f"{wrong}; lookups would not read it")
    if same_model(source.device["name"], name):
        raise DatabaseError(f"{source.path} and {into} are both of {name}: nothing to adopt")
    differences = sibling_differences(source.device, target.device)
    if differences:
        raise DatabaseError(f"{source.path} ({source.device['name']}) and {into} ({name}) differ in "
                            f"{'; '.join(differences)}: a rule serves only a model of the same compute capability "
                            f"and multiprocessor count")
    rules = {rule.key: rule for rule in source.rules}
    missing = [key for key in keys if key not in rules]
    if missing:
        raise DatabaseError(f"{source.path} has no rule for {', '.join(missing)} (its rules: "
                            f"{', '.join(rules) or 'none'})")
    homecoming = [key for key in keys if rules[key].adopted_from and same_model(rules[key].adopted_from["name"], name)]
    if homecoming:
        raise DatabaseError(f"{source.path}'s rule for {', '.join(homecoming)} was fitted on {name}'s own coverage: "
                            f"nothing to adopt")
    return write_rules(into, target.device, [adopted(rules[key], source) for key in dict.fromkeys(keys)],
                       keep_own=not force)


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


__all__ = ["rule_for", "ranking", "ranked_configs", "rule_phrase", "adopted", "adopt_rules"]
