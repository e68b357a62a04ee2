"""Tuning on first use (opt-in): the first lookup of a shape without an exact database entry times a few candidate
configurations on scratch arrays of that shape and keeps the fastest in your database folder, so that this
process and every later one use it.

Turned on by ``AUTOTUNE_TUNE_ON_FIRST_USE=1`` in the environment (read when ``autotune`` is imported) or by
``autotune.tune_on_first_use()``. The candidates are the first ``candidates`` configurations the GPU model's fitted
rule ranks for the shape (fitted to it), else the winners of the nearest tuned shapes (fitted to it) and the
family's default. Each is compiled (seconds for a large matmul the first time; Numba's disk cache keeps it),
checked against float64 NumPy on the family's check data, output poisoned with NaN (a wrong candidate is never
kept), then timed briefly (``rep_ms`` of runs, L2 flushed). The cost per new shape is bounded: no candidate is
started once ``budget_s`` has passed, so a shape costs at most ``budget_s`` plus one compile and measurement; the
first time it runs in a process it says so, once. The winner is written to the folder tuning commands write
(``db``, else ``$AUTOTUNE_DB``, else ./tuned_db), merged as any tuning result is (replacing only a slower entry).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import backend
from ..core.device import DeviceInfo, current_device
from ..core.problem import Problem
from ..core.space import config_key, load_space
from .first_use_switch import first_use_requested
from .records import give_up_after


@dataclass(frozen=True)
class FirstUseSettings:
    candidates: int = 4
    budget_s: float = 30.0
    rep_ms: float = 20.0
    db: str | None = None  # the folder written (None: the one tuning commands write)


class FirstUse:
    """The hook ``runtime.lookup`` calls for a problem without an exact entry (``set_first_use``)."""

    def __init__(self, settings: FirstUseSettings = FirstUseSettings()):
        self.settings = settings
        self._told = False
        self._lock = threading.Lock()

    def __call__(self, problem: Problem, folders: list[Path], db) -> tuple[dict[str, Any], str] | None:
        from ..core.caller import TunedKernelWarning

        self._tell_once(TunedKernelWarning)
        device = current_device()
        candidates, source = candidates_for(problem, folders, device, self.settings.candidates)
        start = time.monotonic()
        timed = []
        for params in candidates:
            if timed and time.monotonic() - start > self.settings.budget_s:
                break
            fastest = min(t["median_ms"] for t, _ in timed) if timed else None
            found = time_candidate(problem, params, self.settings.rep_ms, give_up_after(fastest))
            if found is not None:
                timed.append((found, params))
        if not timed:
            return None
        timing, params = min(timed, key=lambda item: item[0]["median_ms"])
        path = keep(problem, params, timing, len(timed), device, self.settings.db or db)
        seconds = time.monotonic() - start
        return params, (f"tuned {problem.key} on first use: timed {len(timed)} of {len(candidates)} candidates "
                        f"({source}) in {seconds:.1f} s; kept the fastest, {timing['median_ms']:.4g} ms"
                        f"{' (simulator: meaningless)' if backend.simulator() else ''}, in {path}")

    def _tell_once(self, category) -> None:
        with self._lock:
            if self._told:
                return
            self._told = True
        s = self.settings
        warnings.warn(f"tuning on first use is on: the first lookup of a shape without a tuned entry times up to "
                      f"{s.candidates} candidate configurations on scratch arrays of its shape (compiling each the "
                      f"first time: seconds for a large matmul; a new shape costs at most {s.budget_s:g} s plus one "
                      f"compile), once per shape, and keeps the fastest in the database folder", category,
                      stacklevel=5)


def candidates_for(problem: Problem, folders: list[Path], device: DeviceInfo,
                   count: int) -> tuple[list[dict[str, Any]], str]:
    """The configurations to time and where they come from: the fitted rule's ranking, else the nearest entries'
    winners and the default, each fitted to the shape."""
    from ..runtime.db import DatabaseError, db_path, load_file
    from ..runtime.lookup import by_distance
    from ..runtime.rules import ranked_configs, rule_for

    files = []
    for folder in folders:  # the lookup has announced what cannot be read; skipped here quietly
        path = db_path(folder, device.name)
        try:
            files += [load_file(path)] if path.exists() else []
        except DatabaseError:
            continue
    found = rule_for(problem, files)
    if found:
        rule, db_file = found
        return ranked_configs(rule, problem, db_file.device, count), f"the fitted rule of {db_file.path.name}"
    space = load_space(problem.family)
    ranked = sorted(((d, i, e.params) for i, f in enumerate(files) for d, e in by_distance(problem, f.entries)),
                    key=lambda item: (item[0], item[1]))
    raw = [params for _, _, params in ranked][:max(0, count - 1)] + [problem.impl.default_params(problem)]
    configs, keys = [], set()
    for params in raw:
        checked = space.checked_or_none(params, dtype=problem.dtype, args=problem.args)
        if checked is None:
            continue
        fitted = problem.impl.fit_config(checked, problem, device, space)
        if config_key(fitted) not in keys and problem.impl.unfit_for(fitted, device) is None:
            keys.add(config_key(fitted))
            configs.append(fitted)
    return configs[:count], "the nearest tuned shapes and the default"


def time_candidate(problem: Problem, params: dict[str, Any], rep_ms: float,
                   give_up_ms: float | None = None) -> dict[str, Any] | None:
    """The candidate's timing on scratch data of the problem's shape, after its output was checked; None (said on
    stderr) where it fails to build, run or check. ``give_up_ms``: as ``measure.bench`` takes it."""
    from .evaluate import checked_timing

    timing, error = checked_timing(problem, params, rep_ms, give_up_ms)
    if error:  # a candidate that cannot run is skipped, never the caller's failure
        print(f"autotune: first-use candidate {params} of {problem.key} {error}", file=sys.stderr)
    return timing


def keep(problem: Problem, params: dict[str, Any], timing: dict[str, Any], trials: int, device: DeviceInfo,
         db) -> Path:
    """Write the winner into the database folder tuning commands write, with the hash of the source it measured
    (as a tuning run writes its winner); the file's path."""
    from ..runtime.db import db_dir, db_path, parse_entry, write_entries
    from .report import measured_record

    record = measured_record(problem, params, timing, device, trials)
    path = db_path(db_dir(db), device.name)
    write_entries(path, device.as_dict(), [parse_entry(record)])
    return path


def tune_on_first_use(enabled: bool = True, *, candidates: int = 4, budget_s: float = 30.0, rep_ms: float = 20.0,
                      db: str | os.PathLike | None = None) -> None:
    """Turn tuning on first use on (or off): the first lookup of a shape without an exact entry times up to
    ``candidates`` configurations on scratch arrays of its shape, for at most ``budget_s`` seconds plus one compile,
    and keeps the fastest in ``db`` (default: ``$AUTOTUNE_DB``, else ./tuned_db). Shapes looked up before keep their
    kernel for this process. The environment variable AUTOTUNE_TUNE_ON_FIRST_USE=1 does the same with the
    defaults when ``autotune`` is imported."""
    from ..runtime.lookup import set_first_use

    if candidates < 1 or not budget_s > 0 or not rep_ms > 0:
        raise ValueError("tune_on_first_use: candidates must be at least 1, budget_s and rep_ms more than 0")
    set_first_use(FirstUse(FirstUseSettings(candidates, float(budget_s), float(rep_ms),
                                            None if db is None else str(db))) if enabled else None)


def enable_from_environment() -> None:
    """``tune_on_first_use()`` where AUTOTUNE_TUNE_ON_FIRST_USE is 1 (or another true word); a value that is no
    such word is refused loudly rather than ignored (``first_use_switch.first_use_requested``)."""
    if first_use_requested():
        tune_on_first_use()


__all__ = ["tune_on_first_use", "enable_from_environment", "FirstUse", "FirstUseSettings", "candidates_for"]
