"""Choosing through a fitted rule: for a problem without an exact database entry, the rule of its family, dtype and
arguments in the GPU model's files (yours first) ranks its portfolio for the shape, and the family fits the chosen
configuration to the shape (``KernelFamily.fit_config``), with the multiprocessor count the file declares. See
autotune/core/rule.py for what a rule is, autotune/tuning/fit.py for how one is fitted.
"""
from __future__ import annotations

from typing import Any

from ..core.device import DeviceInfo
from ..core.problem import Problem
from ..core.rule import Rule
from ..core.space import config_key, load_space
from .db import DbFile


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


__all__ = ["rule_for", "ranking", "ranked_configs", "rule_phrase"]
