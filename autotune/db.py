"""The tuned database: one YAML file per GPU model in a folder that users commit (``tuned_db/``).

Loading is safe: ``yaml.safe_load`` only, every entry checked against the schema and its kernel's search
space before anything is rendered; a bad entry is reported with the file, the entry and the field, and the
rest of the file still loads. Writing loses nothing: an exclusive lock beside the file serialises writers,
the new file is written to a temporary file and renamed over the old one, and merging replaces an entry only
with a faster measurement of the same key (or when forced).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from .device import device_slug
from .problem import Problem
from .space import DTYPES, KERNELS, load_space

SCHEMA = 1
ENTRY_FIELDS = {"kernel", "dtype", "shape", "layout", "op", "axis", "params", "time", "rate", "unit", "baseline",
                "device", "versions", "template_hash", "trials", "date", "resources"}
REQUIRED = ("kernel", "dtype", "shape", "params", "time")


class DatabaseError(ValueError):
    """A database file or entry is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class Entry:
    problem: Problem
    params: dict[str, Any]
    record: dict[str, Any]

    @property
    def median_ms(self) -> float:
        return float(self.record["time"]["median_ms"])


@dataclass
class DbFile:
    path: Path
    device: dict[str, Any]
    entries: list[Entry]
    problems: list[str]


def db_dir(path: str | os.PathLike | None = None) -> Path:
    """The database folder: the argument, else $AUTOTUNE_DB, else ./tuned_db."""
    return Path(path or os.environ.get("AUTOTUNE_DB") or "tuned_db")


def db_path(folder: Path, device_name: str) -> Path:
    return folder / f"{device_slug(device_name)}.yaml"


# -- reading ----------------------------------------------------------------------------------------
def load_file(path: Path, *, strict: bool = False) -> DbFile:
    """Entries of one file; bad entries are skipped and described in ``problems`` (raised when strict)."""
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DatabaseError(f"{where}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise DatabaseError(f"{where}: expected a mapping with 'schema', 'device' and 'entries'")
    if data.get("schema") != SCHEMA:
        raise DatabaseError(f"{where}: field 'schema' is {data.get('schema')!r}; this autotune reads schema {SCHEMA}")
    device = data.get("device")
    if not isinstance(device, dict) or not isinstance(device.get("name"), str):
        raise DatabaseError(f"{where}: field 'device' must be a mapping with a 'name'")
    entries = data.get("entries") or []
    if not isinstance(entries, list):
        raise DatabaseError(f"{where}: field 'entries' must be a list")
    good, problems = [], []
    for i, raw in enumerate(entries):
        try:
            good.append(parse_entry(raw))
        except DatabaseError as exc:
            message = f"{where}: entry #{i + 1}{_entry_label(raw)}: {exc}"
            if strict:
                raise DatabaseError(message) from None
            problems.append(message)
    return DbFile(path=path, device=device, entries=good, problems=problems)


def _entry_label(raw: Any) -> str:
    if isinstance(raw, dict):
        bits = [str(raw.get(k)) for k in ("kernel", "dtype", "op", "layout") if isinstance(raw.get(k), (str, int))]
        if isinstance(raw.get("shape"), list):
            bits.append("x".join(map(str, raw["shape"])))
        return f" ({' '.join(bits)})" if bits else ""
    return ""


def parse_entry(raw: Any) -> Entry:
    """One entry checked against the schema and its search space; DatabaseError names the field."""
    if not isinstance(raw, dict):
        raise DatabaseError("an entry must be a mapping")
    unknown = sorted(set(map(str, raw)) - ENTRY_FIELDS)
    if unknown:
        raise DatabaseError(f"unknown field {unknown[0]!r}")
    for name in REQUIRED:
        if name not in raw:
            raise DatabaseError(f"field {name!r} is missing")
    kernel, dtype = raw["kernel"], raw["dtype"]
    if kernel not in KERNELS:
        raise DatabaseError(f"field 'kernel' is {kernel!r}; known: {', '.join(KERNELS)}")
    if dtype not in DTYPES:
        raise DatabaseError(f"field 'dtype' is {dtype!r}; allowed: {', '.join(DTYPES)}")
    shape = raw["shape"]
    if not isinstance(shape, list) or not shape or not all(type(d) is int and d >= 1 for d in shape):
        raise DatabaseError(f"field 'shape' must be a list of positive integers, got {shape!r}")
    family = {"layout": raw.get("layout", "nn")} if kernel == "matmul" else \
        {"op": raw.get("op", "sum"), "axis": _axis(raw.get("axis", "all"))}
    try:
        problem = Problem(kernel, tuple(shape), dtype, family)
    except ValueError as exc:
        raise DatabaseError(f"field {'layout' if kernel == 'matmul' else 'op/axis'}: {exc}") from None
    params = raw["params"]
    if not isinstance(params, dict):
        raise DatabaseError("field 'params' must be a mapping of parameter names to values")
    try:
        # Parameters added to the templates after the entry was written take their defaults, which by the rule
        # of search_spaces/*.yaml reproduce the kernel the entry measured.
        checked = load_space(kernel).validate(params, dtype=dtype, family=problem.family)
    except ValueError as exc:
        raise DatabaseError(f"field 'params': {exc}") from None
    timing = raw["time"]
    if not isinstance(timing, dict) or not all(_number(timing.get(k)) for k in ("median_ms", "p20_ms", "p80_ms")):
        raise DatabaseError("field 'time' must hold numbers median_ms, p20_ms and p80_ms")
    return Entry(problem=problem, params=checked, record=dict(raw))


def _axis(value: Any):
    if value == "all" or value is None:
        return None
    if value in (0, 1) and type(value) is int:
        return value
    raise DatabaseError(f"field 'axis' must be all, 0 or 1, got {value!r}")


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value >= 0


def load_folder(folder: Path) -> list[DbFile]:
    """Every ``*.yaml`` file of the folder (unreadable files raise)."""
    return [load_file(path) for path in sorted(Path(folder).glob("*.yaml"))]


# -- writing ----------------------------------------------------------------------------------------
def entry_record(problem: Problem, params: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A database entry in file form, its keys in a fixed order."""
    record: dict[str, Any] = {"kernel": problem.kind, "dtype": problem.dtype, "shape": list(problem.shape)}
    if problem.kind == "matmul":
        record["layout"] = problem.family["layout"]
    else:
        axis = problem.family["axis"]
        record["op"] = problem.family["op"]
        record["axis"] = "all" if axis is None else axis
    record["params"] = dict(params)
    record.update({k: v for k, v in fields.items() if v is not None})
    return record


def _sort_key(entry: Entry) -> tuple:
    return (entry.problem.kind, entry.problem.dtype, str(entry.record.get("layout", "")),
            str(entry.record.get("op", "")), str(entry.record.get("axis", "")), entry.problem.shape)


def dump(device: Mapping[str, Any], entries: list[Entry]) -> str:
    """The file text: deterministic (entries sorted by key, keys in insertion order), so diffs stay clean."""
    doc = {"schema": SCHEMA, "device": dict(device),
           "entries": [e.record for e in sorted(entries, key=_sort_key)]}
    header = "# Tuned kernels for one GPU model, written by `autotune`. Safe to commit; loaded with yaml.safe_load.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the folder holding ``path``: one writer at a time across processes.

    The folder is locked rather than the file because the file is replaced (a new inode) by every write, and
    rather than a lock file so that nothing extra appears in a folder that users commit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Write a temporary file beside ``path``, flush it to disk, rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def merge(existing: list[Entry], incoming: list[Entry], *, force: bool = False,
          reason: str = "--force") -> tuple[list[Entry], list[str]]:
    """Entries after merging: an incoming entry replaces the same key only if faster, or if forced (``reason``
    says why, for the note)."""
    merged = {e.problem.key: e for e in existing}
    notes = []
    for entry in incoming:
        old = merged.get(entry.problem.key)
        if old is None or force or entry.median_ms < old.median_ms:
            merged[entry.problem.key] = entry
            notes.append(_replace_note(entry, old, reason))
        else:
            notes.append(f"kept {entry.problem.key}: {old.median_ms:.4g} ms (the new {entry.median_ms:.4g} ms is not "
                         f"faster; --force replaces it)")
    return list(merged.values()), notes


def _replace_note(entry: Entry, old: Entry | None, reason: str) -> str:
    new = f"{entry.problem.key}: {entry.median_ms:.4g} ms"
    if old is None:
        return f"added {new}"
    if entry.params == old.params:
        return f"re-measured {new} (recorded {old.median_ms:.4g} ms), the same configuration"
    if entry.median_ms < old.median_ms:
        return f"replaced {new} (was {old.median_ms:.4g} ms)"
    return f"replaced {new} (recorded {old.median_ms:.4g} ms; {reason})"


def write_entries(path: Path, device: Mapping[str, Any], incoming: list[Entry], *, force: bool = False,
                  reason: str = "--force") -> list[str]:
    """Merge ``incoming`` into the file at ``path`` under its lock; the other entries are kept as they were."""
    with locked(path):
        current = load_file(path) if path.exists() else DbFile(path, dict(device), [], [])
        if current.problems:
            raise DatabaseError("; ".join(current.problems) + " -- fix or remove these entries before writing")
        entries, notes = merge(current.entries, incoming, force=force, reason=reason)
        atomic_write(path, dump(current.device if path.exists() else device, entries))
    return notes
