"""The cross-time matrix: every candidate configuration of one family, dtype and arguments timed on every shape of
a set, on one GPU model. ``autotune coverage`` measures it (tuning/coverage.py); ``autotune rule fit`` fits a rule
from it (tuning/fit.py).

A cell is the median time of the candidate *as its family fits it to that shape* (``KernelFamily.fit_config``:
matmul's split-K and edge handling), which is what a lookup through a rule launches (the faster of two runs where
both were ten times the row's fastest so far or slower: ``measure.bench``'s ``give_up_ms``); ``None`` where it was not
measured or failed (``failed`` says which and at what stage: a candidate that computes a wrong result on a shape
must never be chosen there).

The file is JSON (numbers, lists and mappings only), read bounded in size and checked field by field before use:
a matrix is data a colleague may hand you.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.device import checked_device_record
from ..core.problem import Problem, shape_text
from ..core.registry import FamilyError
from ..core.registry import family as family_named
from ..core.space import config_key, load_space

FORMAT = "autotune cross-time matrix"
VERSION = 1
MAX_BYTES = 32 << 20
MAX_SHAPES = 5000
MAX_CANDIDATES = 1000


class MatrixError(ValueError):
    """A matrix file cannot be used; the message names the file and the field."""


@dataclass
class CrossMatrix:
    device: dict[str, Any]
    family: str
    dtype: str
    args: dict[str, Any]
    shapes: list[tuple[int, ...]]
    candidates: list[dict[str, Any]]
    ms: list[list[float | None]]
    failed: dict[tuple[int, int], str] = field(default_factory=dict)
    shape_set: str = "coverage"
    command: str = ""
    date: str = ""

    @property
    def case(self) -> str:
        """'matmul/float32/nn': the family, dtype and arguments, as problem keys begin."""
        return f"{self.family}/{self.dtype}/{family_named(self.family).key_tag(self.args)}"

    def problem(self, shape: tuple[int, ...]) -> Problem:
        return Problem(self.family, shape, self.dtype, self.args)

    def best_ms(self, row: int) -> float | None:
        times = [t for t in self.ms[row] if t is not None]
        return min(times) if times else None

    def measured_rows(self) -> list[int]:
        """The shapes with at least one candidate measured."""
        return [i for i in range(len(self.shapes)) if self.best_ms(i) is not None]

    def ruled_rows(self) -> list[int]:
        """The measured shapes that a rule fitted on this matrix serves: those whose problem keeps the matrix's
        arguments. A skinny or stacked shape of a matmul set sets arguments of its own (other kernels apply), so
        the rule never chooses for it; fitting or scoring on it would judge the rule on shapes it does not serve."""
        args = dict(family_named(self.family).family_args(**self.args))
        return [i for i in self.measured_rows() if dict(self.problem(self.shapes[i]).args) == args]


def file_name(device_slug: str, case: str, shape_set: str = "coverage") -> str:
    """'nvidia-h100-80gb-hbm3-matmul-float32-nn.json' (a held-out set adds '-held-out')."""
    stem = "-".join(part for part in case.replace("/", "-").split("-") if part)
    return f"{device_slug}-{stem}{'' if shape_set == 'coverage' else '-' + shape_set}.json"


def to_dict(matrix: CrossMatrix) -> dict[str, Any]:
    impl = family_named(matrix.family)
    return {"format": FORMAT, "version": VERSION, "device": dict(matrix.device), "family": matrix.family,
            "dtype": matrix.dtype, "args": impl.args_text(matrix.args), "set": matrix.shape_set,
            "command": matrix.command, "date": matrix.date, "candidates": [dict(c) for c in matrix.candidates],
            "shapes": [list(s) for s in matrix.shapes],
            "ms": [[None if t is None else round(t, 6) for t in row] for row in matrix.ms],
            "failed": [[s, c, stage] for (s, c), stage in sorted(matrix.failed.items())]}


def write_matrix(path: Path, matrix: CrossMatrix) -> None:
    """Write the file atomically (a temporary file renamed over it)."""
    from ..runtime.db import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(to_dict(matrix), separators=(",", ":")) + "\n")


def read_matrix(path: str | os.PathLike) -> CrossMatrix:
    """A matrix file, checked; MatrixError names the file and what is wrong."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise MatrixError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise MatrixError(f"{path}: larger than {MAX_BYTES >> 20} MiB; not read")
    try:
        raw = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise MatrixError(f"{path}: not a JSON matrix file ({str(exc)[:160]})") from None
    try:
        return from_dict(raw)
    except MatrixError as exc:
        raise MatrixError(f"{path}: {exc}") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a matrix holds")


def from_dict(raw: Any) -> CrossMatrix:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise MatrixError(f"not a cross-time matrix (field 'format' must be {FORMAT!r})")
    if raw.get("version") != VERSION:
        raise MatrixError(f"field 'version' is {raw.get('version')!r}; this autotune reads version {VERSION}")
    device = checked_device_record(raw.get("device"), MatrixError)  # written into the database as it is
    try:
        impl = family_named(raw.get("family"))
    except (FamilyError, TypeError) as exc:
        raise MatrixError(f"field 'family': {exc}") from None
    args_raw = raw.get("args", {})
    if not isinstance(args_raw, dict):
        raise MatrixError("field 'args' must be a mapping of the family's arguments")
    try:
        args = impl.family_args(**args_raw)
    except (ValueError, TypeError) as exc:
        raise MatrixError(f"field 'args': {exc}") from None
    dtype = raw.get("dtype")
    if dtype not in impl.dtypes:
        raise MatrixError(f"field 'dtype' is {dtype!r}; allowed: {', '.join(impl.dtypes)}")
    shapes = _shapes(raw.get("shapes"), impl.name, dtype, args)
    candidates = _candidates(raw.get("candidates"), impl.name, dtype, args)
    ms = _times(raw.get("ms"), len(shapes), len(candidates))
    failed = _failed(raw.get("failed", []), len(shapes), len(candidates))
    texts = {k: raw.get(k, "") for k in ("set", "command", "date")}
    if not all(isinstance(v, str) and len(v) <= 4000 for v in texts.values()):
        raise MatrixError("fields 'set', 'command' and 'date' must be short text")
    return CrossMatrix(device=device, family=impl.name, dtype=dtype, args=args, shapes=shapes,
                       candidates=candidates, ms=ms, failed=failed, shape_set=texts["set"] or "coverage",
                       command=texts["command"], date=texts["date"])


def _shapes(value: Any, family: str, dtype: str, args: dict[str, Any]) -> list[tuple[int, ...]]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SHAPES:
        raise MatrixError(f"field 'shapes' must be a list of 1 to {MAX_SHAPES} shapes")
    shapes = []
    for i, s in enumerate(value):
        if not isinstance(s, list) or not s or not all(type(d) is int and 1 <= d <= 2**48 for d in s):
            raise MatrixError(f"field 'shapes' item #{i + 1} must be a list of positive integers")
        try:
            Problem(family, tuple(s), dtype, args)
        except ValueError as exc:
            raise MatrixError(f"field 'shapes' item #{i + 1}: {exc}") from None
        shapes.append(tuple(s))
    if len({len(s) for s in shapes}) != 1:
        raise MatrixError("field 'shapes': every shape must have the same number of dimensions")
    if len(set(shapes)) != len(shapes):
        dup = next(s for s in shapes if shapes.count(s) > 1)
        raise MatrixError(f"field 'shapes': {shape_text(dup)} is given twice")
    return shapes


def _candidates(value: Any, family: str, dtype: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CANDIDATES:
        raise MatrixError(f"field 'candidates' must be a list of 1 to {MAX_CANDIDATES} configurations")
    space = load_space(family)
    checked, keys = [], set()
    for i, params in enumerate(value):
        if not isinstance(params, dict):
            raise MatrixError(f"field 'candidates' item #{i + 1} must be a mapping of parameters")
        try:
            config = space.validate(params, dtype=dtype, args=args)
        except ValueError as exc:
            raise MatrixError(f"field 'candidates' item #{i + 1}: {str(exc)[:300]}") from None
        if config_key(config) in keys:
            raise MatrixError(f"field 'candidates' item #{i + 1} repeats an earlier configuration")
        keys.add(config_key(config))
        checked.append(config)
    return checked


def _times(value: Any, rows: int, cols: int) -> list[list[float | None]]:
    if not isinstance(value, list) or len(value) != rows:
        raise MatrixError(f"field 'ms' must have a row per shape ({rows})")
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != cols:
            raise MatrixError(f"field 'ms' row #{i + 1} must have a time per candidate ({cols})")
        for t in row:
            if t is not None and not (type(t) in (int, float) and math.isfinite(t) and 0 < t < 1e9):
                raise MatrixError(f"field 'ms' row #{i + 1}: {t!r} is no time in ms (null where not measured)")
        out.append([None if t is None else float(t) for t in row])
    return out


def _failed(value: Any, rows: int, cols: int) -> dict[tuple[int, int], str]:
    if not isinstance(value, list):
        raise MatrixError("field 'failed' must be a list of [shape index, candidate index, stage]")
    out = {}
    for item in value:
        if not (isinstance(item, list) and len(item) == 3 and type(item[0]) is int and type(item[1]) is int
                and 0 <= item[0] < rows and 0 <= item[1] < cols and isinstance(item[2], str) and len(item[2]) < 40):
            raise MatrixError(f"field 'failed': {str(item)[:60]} is not [shape index, candidate index, stage]")
        out[(item[0], item[1])] = item[2]
    return out


__all__ = ["CrossMatrix", "MatrixError", "read_matrix", "write_matrix", "to_dict", "from_dict", "file_name"]
