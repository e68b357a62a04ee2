"""Sweeps: every valid configuration of one problem measured once, with the tuner's own method, kept as a file.

A sweep is how the search is judged (``replay.py``): with every configuration's time on record, a search can be
replayed many times, with any sampler and seed, on the CPU. It is recorded by the tuner itself
(``autotune reduce ... --record-sweep FILE``): the grid sampler over the search space, the same compile pool, GPU
worker, checks and timing as any tuning run, in a study of its own, so a run that is stopped resumes where it
stopped. The file is written once every valid configuration has an outcome.

One row per configuration: its stage (``ok`` or where it failed, ``records.STAGES``), the median and p20/p80 time
of the ok ones, and the compile and measure seconds it cost, which the replay charges to its clock. The header
names the problem, the search space (a file beside the sweep, or the built-in one), the GPU, the versions, the
date and the command. Sweeps are read as any user file is (``yamlfile``) and validated row by row, so a sweep
that no longer matches its search space is named, not silently replayed.
"""
from __future__ import annotations

import datetime
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..core.device import DeviceInfo
from ..core.problem import Problem
from ..core.space import SearchSpace, config_key, load_space
from ..core.timing import Timing
from ..core.yamlfast import read_yaml_fast
from ..core.yamlfile import YamlFileError, dump_yaml
from .records import STAGES, Outcome

FORMAT = 1
OK = "ok"
COLUMNS = ("config", "stage", "median_ms", "p20_ms", "p80_ms", "reps", "compile_s", "measure_s", "reason")
MAX_SWEEP_BYTES = 16 << 20
MAX_SWEEP_NODES = 2_000_000
MAX_REPS = 10**9


class SweepError(ValueError):
    """A sweep file was refused; the message names the file and the row."""


@dataclass(frozen=True)
class SweepRow:
    """One configuration's outcome: ``timing`` for the ok ones; seconds spent compiling and measuring it."""

    config: Mapping[str, Any]
    stage: str
    timing: Timing | None
    compile_s: float
    measure_s: float
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.stage == OK

    def outcome(self, problem: Problem) -> Outcome:
        """What the tuner would have told its study for this configuration."""
        if not self.ok:
            return Outcome(ok=False, stage=self.stage, reason=self.reason or f"{self.stage} (recorded)",
                           compile_s=self.compile_s)
        return Outcome(ok=True, stage="measured", timing=self.timing.as_dict(),
                       rate=problem.rate(self.timing.median_ms / 1e3), compile_s=self.compile_s,
                       measure_s={"time": self.measure_s})


@dataclass(frozen=True)
class Sweep:
    problem: Problem
    device: DeviceInfo
    space_path: Path | None  # None: the built-in search space of the family
    compile_workers: int
    recorded: Mapping[str, str]
    rows: tuple[SweepRow, ...]

    def space(self) -> SearchSpace:
        return load_space(self.problem.family, self.space_path)

    def row_of(self, config: Mapping[str, Any]) -> SweepRow | None:
        return self._by_key.get(config_key(config))

    @functools.cached_property
    def _by_key(self) -> dict[str, SweepRow]:
        return {config_key(r.config): r for r in self.rows}

    @functools.cached_property
    def best(self) -> SweepRow:
        return min((r for r in self.rows if r.ok), key=lambda r: r.timing.median_ms)


def valid_configurations(space: SearchSpace, problem: Problem) -> list[dict[str, Any]]:
    """Every configuration of the space that is valid for the problem, in the grid sampler's order."""
    return [c for c in space.configurations(problem.args)
            if space.violation(c, dtype=problem.dtype, args=problem.args) is None]


def rows_from_study(study) -> list[SweepRow]:
    """The measured, failed and compile-pruned trials of a study, one row per configuration (its first outcome;
    duplicates and interrupted trials left out)."""
    from optuna.trial import TrialState

    rows: dict[str, SweepRow] = {}
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        if "config" not in attrs or "stage" not in attrs or "duplicate_of" in attrs \
                or config_key(attrs["config"]) in rows:
            continue
        measure_s = float(sum((attrs.get("measure_s") or {}).values()))
        compile_s = float(attrs.get("compile_s") or 0.0)
        if t.state == TrialState.COMPLETE:
            row = SweepRow(dict(attrs["config"]), OK, Timing.from_dict(attrs["timing"]), compile_s, measure_s)
        elif t.state in (TrialState.FAIL, TrialState.PRUNED):
            row = SweepRow(dict(attrs["config"]), attrs["stage"], None, compile_s, measure_s,
                           str(attrs.get("reason", ""))[:200])
        else:
            continue
        rows[config_key(row.config)] = row
    return list(rows.values())


def versions() -> dict[str, str]:
    """The database's version record (numba, numba-cuda, CUDA runtime), with autotune, NumPy and Optuna."""
    import numpy
    import optuna

    from ..core.version import __version__
    from .report import versions as compiler_versions

    return {"autotune": __version__, **compiler_versions(), "numpy": numpy.__version__, "optuna": optuna.__version__}


def write_sweep(path: Path, sweep: Sweep) -> None:
    """The sweep as YAML, one row per line (atomic: a reader sees the old file or the whole new one).

    A row is ``[[parameter values in the order of params], stage, median_ms, p20_ms, p80_ms, reps, compile_s,
    measure_s, reason]``; a parameter that does not apply is null, the timing of a failed row is null."""
    from ..runtime.db import atomic_write

    p = sweep.problem
    names = list(sweep.space().params)
    header = {
        "sweep": FORMAT,
        "problem": {"family": p.family, "shape": list(p.shape), "dtype": p.dtype, "args": _plain(p.args)},
        "space": os.path.relpath(sweep.space_path.resolve(), path.resolve().parent) if sweep.space_path else None,
        "device": {"name": sweep.device.name, "cc": f"{sweep.device.cc[0]}.{sweep.device.cc[1]}",
                   "sm_count": sweep.device.sm_count, "l2_bytes": sweep.device.l2_bytes},
        "compile_workers": sweep.compile_workers,
        "recorded": dict(sweep.recorded),
    }
    lines = ["# A sweep: every valid configuration of one problem measured once by the tuner (autotune/tuning/sweep.py).",
             dump_yaml(header, sort_keys=False, width=1 << 16).rstrip(),
             "params: " + _flow(names), "columns: " + _flow(list(COLUMNS)), "rows:"]
    for r in sweep.rows:
        t = r.timing
        row = [[r.config.get(n) for n in names], r.stage, t and t.median_ms, t and t.p20_ms, t and t.p80_ms,
               t and t.reps, round(r.compile_s, 3), round(r.measure_s, 3)] + ([r.reason] if r.reason else [])
        lines.append("  - " + _flow(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(lines) + "\n")


def _flow(value: Any) -> str:
    return dump_yaml(value, default_flow_style=True, sort_keys=False, width=1 << 16).strip()


def new_sweep(problem: Problem, device: DeviceInfo, space_path: str | None, compile_workers: int,
              rows: list[SweepRow], command: str) -> Sweep:
    recorded = {"date": datetime.date.today().isoformat(), "command": command, **versions()}
    return Sweep(problem, device, Path(space_path) if space_path else None, compile_workers, recorded, tuple(rows))


def load_sweep(path: str | Path) -> Sweep:
    """A sweep file, read safely and checked: its problem, its space, and every row against that space."""
    path = Path(path)
    try:
        doc = read_yaml_fast(path, max_bytes=MAX_SWEEP_BYTES, max_nodes=MAX_SWEEP_NODES)
    except YamlFileError as exc:
        raise SweepError(str(exc)) from None
    where = str(path)
    if not isinstance(doc, dict) or doc.get("sweep") != FORMAT:
        raise SweepError(f"{where}: not a sweep file (format {FORMAT}: a mapping with 'sweep: {FORMAT}')")
    problem = _problem(where, doc.get("problem"))
    space_path = _space_path(where, path, doc.get("space"))
    device = _device(where, doc.get("device"))
    workers = doc.get("compile_workers")
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 1024:
        raise SweepError(f"{where}: compile_workers must be a whole number from 1 to 1024, got {workers!r}")
    recorded = doc.get("recorded") or {}
    if not isinstance(recorded, dict):
        raise SweepError(f"{where}: recorded must be a mapping")
    try:
        space = load_space(problem.family, space_path)
    except ValueError as exc:
        raise SweepError(f"{where}: its search space: {exc}") from None
    names = doc.get("params")
    if not isinstance(names, list) or len(set(map(str, names))) != len(names) or not set(names) <= set(space.params):
        raise SweepError(f"{where}: params must name the search space's parameters, each once "
                         f"({', '.join(space.params)}); got {names!r}")
    if doc.get("columns") != list(COLUMNS):
        raise SweepError(f"{where}: columns must be {list(COLUMNS)}")
    raw = doc.get("rows")
    if not isinstance(raw, list) or not raw:
        raise SweepError(f"{where}: rows must be a non-empty list")
    rows = tuple(_row(f"{where}: row {i + 1}", item, names, space, problem) for i, item in enumerate(raw))
    seen: dict[str, int] = {}
    for i, r in enumerate(rows):
        first = seen.setdefault(config_key(r.config), i + 1)
        if first != i + 1:
            raise SweepError(f"{where}: row {i + 1}: the same configuration as row {first}")
    if not any(r.ok for r in rows):
        raise SweepError(f"{where}: no row was measured (every configuration failed)")
    return Sweep(problem, device, space_path, workers, {str(k): str(v) for k, v in recorded.items()}, rows)


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in mapping.items()}


def _problem(where: str, spec: Any) -> Problem:
    """The sweep's problem: ``family``, ``shape``, ``dtype`` and ``args``; or as the first sweeps wrote it,
    ``kind`` (the family) and ``family`` (its arguments)."""
    old = isinstance(spec, dict) and "kind" in spec
    keys = {"kind", "shape", "dtype", "family"} if old else {"family", "shape", "dtype", "args"}
    if not isinstance(spec, dict) or set(spec) - keys:
        raise SweepError(f"{where}: problem must be a mapping of family, shape, dtype and args")
    name, args = (spec.get("kind"), spec.get("family")) if old else (spec.get("family"), spec.get("args"))
    if args is not None and not isinstance(args, dict):
        raise SweepError(f"{where}: problem: the family's arguments must be a mapping, got {type(args).__name__}")
    try:
        return Problem(str(name), tuple(spec.get("shape") or ()), str(spec.get("dtype", "float32")), dict(args or {}))
    except (ValueError, TypeError) as exc:
        raise SweepError(f"{where}: problem: {exc}") from None


def _space_path(where: str, sweep_path: Path, spec: Any) -> Path | None:
    """The sweep's search space: None for the built-in one, else a file named relative to the sweep file."""
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise SweepError(f"{where}: space must be a file name relative to the sweep, or null")
    candidate = Path(spec)
    return candidate if candidate.is_absolute() else sweep_path.parent / candidate


def _device(where: str, spec: Any) -> DeviceInfo:
    """The GPU the sweep was recorded on: ``name``, ``cc`` ('9.0'), ``sm_count`` and ``l2_bytes``, whole numbers in
    range (a YAML ``.inf`` or ``2.5`` is refused, not rounded)."""
    usage = f"{where}: device must give name, cc (e.g. '9.0'), sm_count and optionally l2_bytes"
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise SweepError(usage)
    cc = str(spec.get("cc"))
    major, dot, minor = cc.partition(".")
    if not (dot and major.isdigit() and minor.isdigit() and len(cc) <= 8):
        raise SweepError(f"{usage}; cc is {spec.get('cc')!r}")
    for key, low, high in (("sm_count", 1, 1 << 16), ("l2_bytes", 0, 1 << 40)):
        value = spec.get(key, 0 if key == "l2_bytes" else None)
        if type(value) is not int or not low <= value <= high:
            raise SweepError(f"{usage}; {key} must be a whole number from {low} to {high}, got {value!r}"[:400])
    return DeviceInfo(name=spec["name"], cc=(int(major), int(minor)), sm_count=spec["sm_count"],
                      l2_bytes=spec.get("l2_bytes", 0))


def _row(where: str, item: Any, names: list[str], space: SearchSpace, problem: Problem) -> SweepRow:
    if not isinstance(item, list) or not 8 <= len(item) <= 9 or not isinstance(item[0], list) \
            or len(item[0]) != len(names):
        raise SweepError(f"{where}: must be a list [[{len(names)} parameter values], stage, median_ms, p20_ms, "
                         f"p80_ms, reps, compile_s, measure_s(, reason)]")
    config = {n: v for n, v in zip(names, item[0]) if v is not None}
    try:
        space.validate(config, dtype=problem.dtype, args=problem.args, fill_defaults=False)
    except ValueError as exc:
        raise SweepError(f"{where}: the configuration is not valid in the sweep's search space now "
                         f"(record the sweep again): {exc}") from None
    values = dict(zip(COLUMNS[1:], item[1:]))
    stage = values["stage"]
    if stage != OK and stage not in STAGES:
        raise SweepError(f"{where}: stage must be {OK} or one of {', '.join(STAGES)}, got {stage!r}")
    compile_s = _seconds(where, values, "compile_s")
    measure_s = _seconds(where, values, "measure_s")
    timing = None
    if stage == OK:
        median, p20, p80 = (_seconds(where, values, k, positive=True) for k in ("median_ms", "p20_ms", "p80_ms"))
        if not p20 <= median <= p80:
            raise SweepError(f"{where}: needs p20_ms <= median_ms <= p80_ms")
        reps = values["reps"]
        if not isinstance(reps, int) or isinstance(reps, bool) or not 1 <= reps <= MAX_REPS:
            raise SweepError(f"{where}: reps must be a whole number from 1 to {MAX_REPS}")
        timing = Timing(median, p20, p80, reps)
    return SweepRow(config, stage, timing, compile_s, measure_s, str(values.get("reason") or "")[:200])


def _seconds(where: str, values: Mapping[str, Any], key: str, positive: bool = False) -> float:
    value = values.get(key)
    number = _finite(value)
    if number is None or number < 0 or (positive and number == 0):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise SweepError(f"{where}: {key} must be a finite number {'above' if positive else 'of at least'} 0, "
                         f"got {shown}")
    return number


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (text, a bool, infinity, NaN, an int no float holds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
