"""The tuned database: one YAML file per GPU model in a folder that users commit (``tuned_db/``).

Loading is safe and strict: the file is read bounded (``yamlfile.py``), and every entry is checked, field by
field, against the schema and its family's search space before anything is rendered; one check serves every
command, so what ``autotune db check`` accepts, ``show``, ``merge`` and lookups handle. A bad entry is reported
with the file, the entry and the field, and the rest of the file still loads. An entry whose problem appears
earlier in the same file is a duplicate: the first is used, the later ones are reported. Entries of a family not
registered in this process are kept as they are (never dropped by a write) and left unused.

Writing loses nothing: an exclusive lock beside the file serialises writers, the new file is written to a
temporary file and renamed over the old one (keeping its permissions), and merging replaces an entry only with a
faster measurement of the same key (or when forced). A file with bad or duplicate entries is not rewritten until
they are fixed.

A file may also hold ``rules:``, the fitted choices for untuned shapes (autotune/core/rule.py), one per family,
dtype and arguments, checked by the same load (each portfolio configuration against its family's search space);
files without them load as before, and every write keeps them.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..core.atomic import write_text_atomic
from ..core.device import checked_device_record, device_slug, same_model, sibling_differences
from ..core.fields import args_fields, dtype_field, family_field, short, short_text, unknown_field
from ..core.problem import MAX_DIMENSION, Problem
from ..core.registry import is_known
from ..core.rule import Rule, RuleError, parse_rule
from ..core.space import load_space
from ..core.yamlfast import parse_yaml_fast
from ..core.yamlfile import YamlFileError, decode_text, dump_yaml, read_bytes
from .db_records import DbFile, Entry, family_of, read_back

SCHEMA = 1
STANDARD_FIELDS = ("family", "dtype", "shape", "params", "time", "rate", "unit", "baseline", "device", "versions",
                   "template_hash", "source_hash", "trials", "date", "resources")
REQUIRED = ("family", "dtype", "shape", "params", "time")
#: an entry's fields as the first releases named them: read, and written under today's name
OLD_FIELDS = {"kernel": "family"}
MAX_MS = 1e9  # a time beyond 11 days is no measurement
MAX_NUMBER = 1e15
#: A database file's bounds: 32 MiB holds about 40,000 entries as the writer writes them (a hundred times the
#: shipped files); the values (after aliases) are bounded in proportion, as the memory a parse takes.
MAX_FILE_BYTES = 32 << 20
MAX_FILE_NODES = 4_000_000


class DatabaseError(ValueError):
    """A database file or entry is malformed; the message names the file, the entry and the field."""


def db_dir(path: str | os.PathLike | None = None) -> Path:
    """Your database folder, where tuning runs write: the argument, else $AUTOTUNE_DB, else ./tuned_db (``~``
    expanded: the README's ``db="~/kernels"``)."""
    return Path(path or os.environ.get("AUTOTUNE_DB") or "tuned_db").expanduser()


def db_path(folder: Path, device_name: str) -> Path:
    return folder / f"{device_slug(device_name)}.yaml"


# -- reading ----------------------------------------------------------------------------------------
def load_file(path: Path, *, strict: bool = False) -> DbFile:
    """Entries of one file; bad entries are skipped and described in ``problems`` (the first is raised when
    strict). DatabaseError when the file as a whole cannot be used.

    Read through the parse cache (``db_cache.py``): a file whose content this code has read and validated
    before is not parsed or validated again, and one this process read whose status shows no change since is not
    read again (``db_cache.kept_file``)."""
    from .db_cache import cached_file, kept_file

    path = Path(path)
    try:
        status = os.stat(path)
    except OSError:
        status = None  # read_bytes names what is wrong
    db_file = kept_file(path, status) if status is not None else None
    if db_file is None:
        try:
            data = read_bytes(path, max_bytes=MAX_FILE_BYTES)
        except YamlFileError as exc:
            raise _unreadable(path, exc) from None
        db_file = cached_file(path, data, lambda: parse_file(path, data), status)
    if strict and db_file.problems:
        raise DatabaseError(db_file.problems[0])
    return db_file


def _unreadable(path: Path, exc: YamlFileError) -> DatabaseError:
    detail = str(exc).removeprefix(f"{path}: ")
    return DatabaseError(f"{path}: {'' if detail.startswith('cannot read') else 'cannot read: '}{detail}")


def parse_file(path: Path, data: bytes) -> DbFile:
    """The database file ``path`` whose bytes are ``data``, parsed (libyaml where usable, bounded as every
    user file) and checked (``checked_file``); DatabaseError when the file as a whole cannot be used."""
    try:
        doc = parse_yaml_fast(decode_text(path, data), max_nodes=MAX_FILE_NODES)
    except YamlFileError as exc:
        raise _unreadable(path, exc) from None
    return checked_file(path, doc)


def checked_file(path: Path, doc: Any) -> DbFile:
    """The parsed file ``doc`` of ``path`` checked: the file's fields, then every entry; DatabaseError when the
    file as a whole cannot be used."""
    where = str(path)
    if not isinstance(doc, dict):
        raise DatabaseError(f"{where}: expected a mapping with 'schema', 'device' and 'entries'")
    if doc.get("schema") != SCHEMA:
        raise DatabaseError(f"{where}: field 'schema' is {doc.get('schema')!r}; this autotune reads schema {SCHEMA}")
    extra = sorted(str(k) for k in doc if k not in ("schema", "device", "entries", "rules"))
    if extra:
        raise DatabaseError(f"{where}: unknown field {extra[0]!r} (a file has schema, device, entries, rules)")
    try:
        device = _device(doc.get("device"))
    except DatabaseError as exc:
        raise DatabaseError(f"{where}: {exc}") from None
    entries = doc.get("entries") or []
    if not isinstance(entries, list):
        raise DatabaseError(f"{where}: field 'entries' must be a list")
    good, problems, foreign, first = [], [], [], {}
    validated: dict[tuple, dict[str, Any]] = {}
    for i, raw in enumerate(entries):
        label = f"{where}: entry #{i + 1}{_entry_label(raw)}"
        if isinstance(raw, dict) and isinstance(family_of(raw), str) and not is_known(family_of(raw)):
            foreign.append(raw)
            continue
        try:
            entry = parse_entry(raw, validated)
        except DatabaseError as exc:
            message = f"{label}: {exc}"
        else:
            key = entry.problem.key
            if key not in first:
                first[key] = i + 1
                good.append(entry)
                continue
            message = (f"{label}: a second entry for {key} (entry #{first[key]} is the one used); remove one of "
                       f"them")
        problems.append(message)
    rules, foreign_rules = _load_rules(where, doc.get("rules"), problems, device)
    return DbFile(path=path, device=device, entries=good, problems=problems, foreign=foreign, rules=rules,
                  foreign_rules=foreign_rules)


def _load_rules(where: str, raw_rules: Any, problems: list[str],
                device: Mapping[str, Any]) -> tuple[list[Rule], list[dict]]:
    """The file's rules, each checked (``parse_rule``); a bad one, a second for the same key, or one adopted from a
    model that is not a sibling of the file's ``device`` (or is it) is described in ``problems``, as entries
    are."""
    if raw_rules is None:
        return [], []
    if not isinstance(raw_rules, list):
        raise DatabaseError(f"{where}: field 'rules' must be a list")
    rules, foreign, first = [], [], {}
    for i, raw in enumerate(raw_rules):
        label = f"{where}: rule #{i + 1}{_entry_label(raw)}"
        if isinstance(raw, dict) and isinstance(raw.get("family"), str) and not is_known(raw["family"]):
            foreign.append(raw)
            continue
        try:
            rule = parse_rule(raw)
        except RuleError as exc:
            message = f"{label}: {exc}"
        else:
            unfit = _adopted_unfit(rule, device)
            if not unfit and rule.key not in first:
                first[rule.key] = i + 1
                rules.append(rule)
                continue
            message = f"{label}: {unfit}" if unfit else \
                f"{label}: a second rule for {rule.key} (rule #{first[rule.key]} is the one used); remove one"
        problems.append(message)
    return rules, foreign


def _adopted_unfit(rule: Rule, device: Mapping[str, Any]) -> str | None:
    """Why an adopted rule cannot serve the file's model ``device`` (None where it can): the model it was fitted on
    is this one, or no longer of the same compute capability and multiprocessor count (a record edited since)."""
    origin = rule.adopted_from
    if not origin:
        return None
    if same_model(origin["name"], device["name"]):
        return f"field 'adopted_from' names this file's own model {device['name']!r}; remove the field"
    differences = sibling_differences(origin, device)
    if differences:
        return (f"adopted from {origin['name']}, which differs from this file's model in {'; '.join(differences)}: "
                f"its configurations are not fitted for it; remove the rule or fit one on this model's coverage")
    return None


def _entry_label(raw: Any) -> str:
    if isinstance(raw, dict):
        bits = [str(raw.get(k)) for k in ("family", "kernel", "dtype", "op", "layout")
                if isinstance(raw.get(k), (str, int))]
        if isinstance(raw.get("shape"), list) and len(raw["shape"]) <= 8:
            bits.append("x".join(map(str, raw["shape"]))[:80])
        return f" ({' '.join(bits)[:160]})" if bits else ""
    return ""


def _device(value: Any) -> dict[str, Any]:
    return checked_device_record(value, DatabaseError)


def parse_entry(raw: Any, validated: dict[tuple, dict[str, Any]] | None = None) -> Entry:
    """One entry checked against the schema and its search space; DatabaseError names the field. Every field
    another command reads is checked here, so what passes is safe to show, merge and use. ``validated``: the
    parameters already checked while reading one file, by family, dtype, arguments and values (many entries
    of a file share their winner's parameters, and the check does not depend on the shape)."""
    if not isinstance(raw, dict):
        raise DatabaseError("an entry must be a mapping")
    raw = _renamed(raw)
    impl = family_field(raw, DatabaseError)
    family = impl.name
    unknown = unknown_field(raw, impl, STANDARD_FIELDS)
    if unknown is not None:
        raise DatabaseError(f"unknown field {unknown!r}")
    for name in REQUIRED:
        if name not in raw:
            raise DatabaseError(f"field {name!r} is missing")
    dtype = dtype_field(raw, impl, DatabaseError)
    shape = raw["shape"]
    if not isinstance(shape, list) or not shape or len(shape) > 8 or \
            not all(type(d) is int and 1 <= d <= MAX_DIMENSION for d in shape):
        raise DatabaseError(f"field 'shape' must be a list of positive integers, got {short(shape)}")
    args = args_fields(raw, impl, DatabaseError)
    try:
        problem = Problem(family, tuple(shape), dtype, args)
    except ValueError as exc:
        raise DatabaseError(f"field 'shape': {exc}") from None
    params = raw["params"]
    if not isinstance(params, dict):
        raise DatabaseError("field 'params' must be a mapping of parameter names to values")
    key = _validation_key(problem, params) if validated is not None else None
    checked = validated.get(key) if key is not None else None
    if checked is None:
        try:
            # Parameters added to the templates after the entry was written take their defaults, which by the
            # rule of the search spaces reproduce the kernel the entry measured.
            checked = load_space(family).validate(params, dtype=dtype, args=problem.args)
        except ValueError as exc:
            raise DatabaseError(f"field 'params': {short_text(exc, 400)}") from None
        if key is not None:
            validated[key] = checked
    _check_fields(raw)
    return Entry(problem=problem, params=dict(checked), record=dict(raw))


def _validation_key(problem: Problem, params: dict[str, Any]) -> tuple | None:
    """What a parameter check depends on, each value with its type (True is not 1 to the check); None where a
    value is not hashable."""
    try:
        key = (problem.family, problem.dtype, tuple((k, type(v), v) for k, v in sorted(problem.args.items())),
               tuple((str(k), type(v), v) for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))))
        hash(key)
    except TypeError:
        return None
    return key


def _renamed(raw: dict[str, Any]) -> dict[str, Any]:
    """The entry with its fields under today's names, in their order; DatabaseError where both names are given."""
    for old, new in OLD_FIELDS.items():
        if old in raw:
            if new in raw:
                raise DatabaseError(f"fields {old!r} and {new!r} are both given; {old!r} is the old name of {new!r}")
            raw = {(new if k == old else k): v for k, v in raw.items()}
    return raw


def _check_fields(raw: Mapping[str, Any]) -> None:
    """The optional fields, each of the type and range that the other commands rely on."""
    _timing("time", raw["time"], required=True)
    if "rate" in raw and not _number(raw["rate"]):
        raise DatabaseError(f"field 'rate' must be a non-negative finite number, got {short(raw['rate'])}")
    for name in ("unit", "template_hash", "source_hash"):
        if name in raw and not isinstance(raw[name], str):
            raise DatabaseError(f"field {name!r} must be text, got {short(raw[name])}")
    if "trials" in raw and not _count(raw["trials"]):
        raise DatabaseError(f"field 'trials' must be a non-negative integer, got {short(raw['trials'])}")
    if "date" in raw and not isinstance(raw["date"], (str, datetime.date)):
        raise DatabaseError(f"field 'date' must be a date such as 2026-11-23, got {short(raw['date'])}")
    baseline = raw.get("baseline")
    if baseline is not None:
        if not isinstance(baseline, dict):
            raise DatabaseError(f"field 'baseline' must be a mapping (the seed kernel's timing), got "
                                f"{short(baseline)}")
        _timing("baseline", baseline, required=False)
        if "params" in baseline and not isinstance(baseline["params"], dict):
            raise DatabaseError("field 'baseline': 'params' must be a mapping")
        if "rate" in baseline and not _number(baseline["rate"]):
            raise DatabaseError("field 'baseline': 'rate' must be a non-negative finite number")
    resources = raw.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            raise DatabaseError(f"field 'resources' must be a mapping, got {short(resources)}")
        for name, value in resources.items():
            if name != "cc" and not _count(value):
                raise DatabaseError(f"field 'resources': {name!r} must be a non-negative integer, got {short(value)}")
    if "device" in raw:
        try:
            _device(raw["device"])
        except DatabaseError as exc:
            raise DatabaseError(f"field 'device' of the entry: {exc}") from None
    versions = raw.get("versions")
    if versions is not None and not (isinstance(versions, dict) and
                                     all(isinstance(v, (str, int, float)) for v in versions.values())):
        raise DatabaseError("field 'versions' must map package names to version text")


def _timing(name: str, value: Any, *, required: bool) -> None:
    if not isinstance(value, dict):
        raise DatabaseError(f"field {name!r} must hold numbers median_ms, p20_ms and p80_ms")
    for key in ("median_ms", "p20_ms", "p80_ms"):
        if key in value or required:
            if not _number(value.get(key), MAX_MS):
                raise DatabaseError(f"field {name!r} must hold numbers median_ms, p20_ms and p80_ms (finite, "
                                    f"0 to {MAX_MS:g} ms); {key} is {short(value.get(key))}")
    if "reps" in value and not _count(value["reps"]):
        raise DatabaseError(f"field {name!r}: 'reps' must be a non-negative integer")


def _number(value: Any, limit: float = MAX_NUMBER) -> bool:
    if type(value) is int:
        return 0 <= value <= limit
    return type(value) is float and math.isfinite(value) and 0 <= value <= limit


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_NUMBER


# -- what an entry measured ----------------------------------------------------------------------------
def current_source(entry: Entry) -> str:
    """The GPU source (not the simulator's) that the entry's configuration renders to with today's templates."""
    from .build import render_source

    _, _, source = render_source(entry.problem.family, entry.params, entry.problem.dtype, simulator=False,
                                 **entry.problem.args)
    return source


def stale_note(entry: Entry, source: str | None = None) -> str | None:
    """Why the entry no longer describes the kernel its configuration renders to (``source``: that render, where
    the caller has it), or None. An entry records ``source_hash``, the hash of the GPU source it measured; a
    different render today means the templates or the family changed since, so its time and the checks it passed
    are of another kernel, possibly a wrong one. Entries without ``source_hash`` (written before autotune
    recorded it) are not judged: their ``template_hash`` covers whole template files, which change without
    changing a render."""
    recorded = entry.record.get("source_hash")
    if not recorded:
        return None
    from .render import source_hash
    try:
        now = source_hash(source if source is not None else current_source(entry))
    except Exception as exc:  # a template that no longer renders this configuration
        return f"its configuration no longer renders ({type(exc).__name__}: {short_text(exc, 400)})"
    if now == recorded:
        return None
    return (f"the kernel its parameters render to changed since it was tuned (source_hash {recorded}, now {now}): "
            f"its time and checks are of the old kernel; re-tune it (--force) or restore the templates")


def stale_entries(db_file: DbFile) -> list[str]:
    """A sentence, naming the file and the entry, for each entry of ``db_file`` that ``stale_note`` finds stale
    (each distinct configuration rendered once)."""
    return [f"{db_file.path}: entry {entry.problem.key}: {note}" for entry, note in stale(db_file)]


def stale(db_file: DbFile) -> list[tuple[Entry, str]]:
    """Each entry of ``db_file`` that ``stale_note`` finds stale, with the note (each distinct configuration
    rendered once)."""
    found, renders = [], {}
    for entry in db_file.entries:
        if not entry.record.get("source_hash"):
            continue
        key = (entry.problem.family, entry.problem.dtype, _frozen(entry.problem.args), _frozen(entry.params))
        if key not in renders:
            try:
                renders[key] = current_source(entry)
            except Exception:
                renders[key] = None  # stale_note renders again and says why it fails
        note = stale_note(entry, renders[key])
        if note:
            found.append((entry, note))
    return found


def _frozen(mapping: Mapping[str, Any]) -> tuple:
    return tuple(sorted(((k, str(v)) for k, v in mapping.items())))


# -- the folders a lookup reads -----------------------------------------------------------------------
def shipped_folder() -> Path | None:
    """The database that comes with the package (the checkout's tuned_db/ in a checkout)."""
    from ..core.resources import resource_dir

    try:
        return resource_dir("tuned_db")
    except FileNotFoundError:
        return None


def database_folders(db: str | os.PathLike | None = None) -> list[Path]:
    """The folders lookups read, in order: yours (``db``, else $AUTOTUNE_DB, else ./tuned_db where it exists),
    then the database shipped with the package. Yours comes first, entry by entry: the shipped one serves the
    problems yours lacks."""
    folders = []
    mine = db_dir(db).absolute()
    if db is not None or os.environ.get("AUTOTUNE_DB") or mine.is_dir():
        folders.append(mine)
    shipped = shipped_folder()
    if shipped is not None and not any(_same(shipped, f) for f in folders):
        folders.append(shipped)
    return folders


def named_folder(db: str | os.PathLike | None = None) -> tuple[str, Path] | None:
    """The database folder the caller named and how (``db=PATH``, or ``$AUTOTUNE_DB``); None where neither is
    given (./tuned_db is then read where it exists, and said nothing of where not)."""
    if db is not None:
        return f"db={db}", db_dir(db)
    env = os.environ.get("AUTOTUNE_DB")
    return (f"AUTOTUNE_DB={env}", db_dir(env)) if env else None


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` is no database folder ('no such folder', 'a file, not a folder'); None where it is one."""
    try:
        if folder.is_dir():
            return None
        if folder.exists():
            return "a file, not a folder: a database folder holds one <gpu-model>.yaml file per GPU model"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return "no such folder"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def load_folder(folder: Path) -> tuple[list[DbFile], list[str]]:
    """Every ``*.yaml`` file of the folder that can be read and is named for the GPU model it declares, and a
    sentence for each that is not."""
    files, problems = [], []
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            db_file = load_file(path)
        except DatabaseError as exc:
            problems.append(str(exc))
            continue
        why = misnamed(db_file)
        if why:
            problems.append(why)
        else:
            files.append(db_file)
    return files, problems


def misnamed(db_file: DbFile) -> str | None:
    """Why a file of a database folder is not that of the GPU model it declares (None where it is): lookups find a
    model's file by its name, so a copy or a backup beside it (``nvidia-h200.old.yaml``), or a file holding
    another model's entries under this one's name, would serve the wrong model or the right one as another."""
    expected = device_slug(db_file.device["name"])
    if db_file.path.stem == expected:
        return None
    return (f"{db_file.path}: declares the GPU model {db_file.device['name']!r}, whose file is {expected}.yaml; "
            f"rename it or move it out of the folder")


def same_cc_files(folders: list[Path], name: str, cc: tuple[int, int]) -> tuple[list[DbFile], list[str]]:
    """The files of other GPU models than ``name`` in ``folders`` whose device has compute capability ``cc``
    (their kernels run here), in folder order, and a sentence for each file of the folders that cannot be read."""
    files, problems, wanted = [], [], f"{cc[0]}.{cc[1]}"
    for folder in folders:
        found, unread = load_folder(folder)
        problems += unread
        files += [f for f in found if f.device["name"] != name and f.device.get("cc") == wanted]
    return files, problems


# -- writing ----------------------------------------------------------------------------------------
def entry_record(problem: Problem, params: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A database entry in file form, its keys in a fixed order."""
    record: dict[str, Any] = {"family": problem.family, "dtype": problem.dtype, "shape": list(problem.shape)}
    text = problem.impl.args_text(problem.args)
    record.update({a.name: text[a.name] for a in problem.impl.args if a.written(problem.args[a.name])})
    record["params"] = dict(params)
    record.update({k: v for k, v in fields.items() if v is not None})
    return record


def _sort_key(entry: Entry) -> tuple:
    args = entry.problem.impl.args_text(entry.problem.args)
    return (entry.problem.family, entry.problem.dtype, *(str(v) for v in args.values()), entry.problem.shape)


def dump(device: Mapping[str, Any], entries: list[Entry], foreign: list[dict[str, Any]] = (),
         rules: list[Rule] = (), foreign_rules: list[dict[str, Any]] = ()) -> str:
    """The file text: deterministic (entries sorted by key, keys in insertion order), so diffs stay clean; entries
    of families not registered here follow, as they were; then the rules, sorted by key, where there are any."""
    return file_text(document(device, entries, foreign, rules, foreign_rules))


def document(device: Mapping[str, Any], entries: list[Entry], foreign: list[dict[str, Any]] = (),
             rules: list[Rule] = (), foreign_rules: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """What ``dump`` writes, before it is text."""
    records = [e.record for e in sorted(entries, key=_sort_key)]
    records += sorted(foreign, key=lambda raw: (str(family_of(raw)), dump_yaml(raw)))
    doc = {"schema": SCHEMA, "device": dict(device), "entries": records}
    if rules or foreign_rules:
        doc["rules"] = [r.record for r in sorted(rules, key=lambda r: r.key)] + \
            sorted(foreign_rules, key=lambda raw: (str(raw.get("family")), dump_yaml(raw)))
    return doc


def file_text(doc: Mapping[str, Any]) -> str:
    header = "# Tuned kernels for one GPU model, written by `autotune`. Safe to commit; loaded with yaml.safe_load.\n"
    return header + dump_yaml(doc, sort_keys=False, default_flow_style=None, width=120)


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


def write_destination(path: Path) -> Path:
    """The file a write to ``path`` replaces: ``path``, or the file it leads to if it is a symbolic link (a
    rename over the link would replace the link with a regular file and leave its target as it was).
    DatabaseError where the link leads nowhere a file can be written: a loop, or a folder that does not exist."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        target = Path(os.path.realpath(path))
        if target.parent.is_dir():
            return target
        raise DatabaseError(f"{path}: a symbolic link to {target}, whose folder does not exist; not written") from None
    except (OSError, RuntimeError) as exc:
        raise DatabaseError(f"{path}: a symbolic link that cannot be followed ({exc}); not written") from None


def atomic_write(path: Path, text: str) -> None:
    """Replace the file at ``path`` with ``text`` as results are written (``core.atomic``): flushed to disk before
    the rename (``durable``: a database holds hours of measurements), keeping the file's mode (``keep_mode``: a
    database is shared and checked in, not the temporary file's 0600). A symbolic link is written through: its
    target is replaced, the link stays (``write_destination``)."""
    write_text_atomic(write_destination(path), text, durable=True, keep_mode=True)


def merge(existing: list[Entry], incoming: list[Entry], *, force: bool = False,
          reason: str = "--force") -> tuple[list[Entry], list[str]]:
    """Entries after merging: an incoming entry replaces the same key only if faster, or if forced (``reason``
    says why, for the note). A re-measurement of the same configuration is faster by a lower median; another
    configuration must be faster by more than the noise (``Timing.faster_than``, the tuner's tie rule), so that
    merging runs of different days does not flip a winner on noise."""
    merged = {e.problem.key: e for e in existing}
    notes = []
    for entry in incoming:
        old = merged.get(entry.problem.key)
        if old is None or force or _faster(entry, old):
            merged[entry.problem.key] = entry
            notes.append(_replace_note(entry, old, reason))
        else:
            beyond = "" if entry.params == old.params else " by more than the noise"
            notes.append(f"kept {entry.problem.key}: {old.median_ms:.4g} ms (the new {entry.median_ms:.4g} ms is not "
                         f"faster{beyond}; --force replaces it)")
    return list(merged.values()), notes


def _faster(entry: Entry, old: Entry) -> bool:
    if entry.params == old.params:
        return entry.median_ms < old.median_ms
    return entry.timing.faster_than(old.timing)


def _replace_note(entry: Entry, old: Entry | None, reason: str) -> str:
    new = f"{entry.problem.key}: {entry.median_ms:.4g} ms"
    if old is None:
        return f"added {new}"
    if entry.params == old.params:
        return f"re-measured {new} (recorded {old.median_ms:.4g} ms), the same configuration"
    if entry.median_ms < old.median_ms:
        return f"replaced {new} (was {old.median_ms:.4g} ms)"
    return f"replaced {new} (recorded {old.median_ms:.4g} ms; {reason})"


def check_writable(path: Path) -> None:
    """Before any work whose results go to the database file ``path``: DatabaseError, naming the file, where the
    write at the end would fail: the folder is a file, or cannot be written; the file is no regular file, cannot
    be read, or holds bad entries (a file with bad entries is not rewritten until they are fixed)."""
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise DatabaseError(f"{folder}: not a folder; a database is a folder holding one YAML file per GPU model")
    destination = write_destination(path)
    if destination.exists() or destination.is_symlink():
        if not destination.is_file():
            raise DatabaseError(f"{destination}: not a regular file; the database file of this GPU model must be one")
        current = load_file(destination)
        if current.problems:
            raise DatabaseError("; ".join(current.problems) + " -- fix or remove these entries first: a file with bad "
                                "entries is not rewritten")
    existing = destination.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise DatabaseError(f"{existing}: not a folder; the database folder {folder} cannot be made there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DatabaseError(f"{existing}: not writable; the database file {destination} could not be written")


def write_entries(path: Path, device: Mapping[str, Any], incoming: list[Entry], *, force: bool = False,
                  reason: str = "--force") -> list[str]:
    """Merge ``incoming`` into the file at ``path`` under its lock; the other entries are kept as they were. A
    symbolic link is written through (its target's folder is locked and its target replaced)."""
    def change(current: DbFile) -> tuple[list[Entry], list[Rule], list[str]]:
        entries, notes = merge(current.entries, incoming, force=force, reason=reason)
        return entries, current.rules, notes

    return _rewrite(path, device, change)


def replace_entry(path: Path, device: Mapping[str, Any], old: Entry, new: Entry) -> str | None:
    """Put ``new`` in the place of ``old`` in the file at ``path``, under its lock, only where the file still holds
    ``old``'s record for that key (nothing wrote another since ``old`` was read); a note of what was done, or None
    where the file changed meanwhile (then nothing is written)."""
    def change(current: DbFile) -> tuple[list[Entry], list[Rule], list[str]]:
        held = {e.problem.key: e for e in current.entries}.get(old.problem.key)
        if held is None or held.record != old.record:
            return current.entries, current.rules, []
        return [new if e is held else e for e in current.entries], current.rules, [_replace_note(new, old, "")]

    notes = _rewrite(path, device, change)
    return notes[0] if notes else None


def write_rules(path: Path, device: Mapping[str, Any], incoming: list[Rule], *, replace: bool = True,
                keep_own: bool = False) -> list[str]:
    """Put ``incoming`` rules into the file at ``path`` under its lock, entries and other rules kept. A rule
    replaces the one of the same family, dtype and arguments (a refit from newer data), unless ``replace`` is
    False (a merge from another machine: the file's rule is kept, but for an adopted one, which a rule fitted on
    the model's own coverage replaces). ``keep_own``: DatabaseError, nothing written, where a rule fitted on the
    model's own coverage would be replaced (``autotune rule adopt`` without --force). A symbolic link is written
    through."""
    def change(current: DbFile) -> tuple[list[Entry], list[Rule], list[str]]:
        rules = {r.key: r for r in current.rules}
        notes = []
        for rule in incoming:
            unfit = _adopted_unfit(rule, current.device)  # as reading the file would judge it
            if unfit:
                notes.append(f"left out the rule for {rule.key}: {unfit}")
                continue
            held = rules.get(rule.key)
            if held is not None and keep_own and not held.adopted_from:
                raise DatabaseError(f"{path} has its own rule for {rule.key}, fitted on its model's coverage; "
                                    f"--force replaces it")
            if held is not None and not replace and not (held.adopted_from and not rule.adopted_from):
                origin = f"adopted from {held.adopted_from['name']}" if held.adopted_from else "own"
                notes.append(f"kept the rule for {rule.key} (this file's, {origin})")
                continue
            if held is None:
                notes.append(f"added the rule for {rule.key}: {rule.summary()}")
            elif held.adopted_from and not rule.adopted_from:
                notes.append(f"replaced the rule for {rule.key} adopted from {held.adopted_from['name']} with one "
                             f"fitted on this model's own coverage: {rule.summary()}")
            else:
                notes.append(f"replaced the rule for {rule.key}: {rule.summary()}")
            rules[rule.key] = rule
        return current.entries, list(rules.values()), notes

    return _rewrite(path, device, change)


def _rewrite(path: Path, device: Mapping[str, Any], change) -> list[str]:
    """Rewrite the file at ``path`` (through a link, under its folder's lock) with the entries and rules that
    ``change(current file)`` returns, and return its notes; a file with bad entries is refused, not rewritten, and
    a file whose text would not change is left alone (a refresh of many entries that keeps most of them does not
    rewrite the whole file each time). The new text goes into the parse cache as reading it gives it back
    (checked as a read checks it), so the next read does not parse it again."""
    from .db_cache import store_written

    path = write_destination(path)
    with locked(path):
        current = load_file(path) if path.exists() else DbFile(path, dict(device), [], [])
        if current.problems:
            raise DatabaseError("; ".join(current.problems) + " -- fix or remove these entries before writing")
        entries, rules, notes = change(current)
        doc = document(current.device if path.exists() else device, entries, current.foreign, rules,
                       current.foreign_rules)
        text = file_text(doc)
        if path.exists() and path.read_bytes() == text.encode():
            return notes
        atomic_write(path, text)
    store_written(path, text.encode(), lambda: checked_file(path, read_back(doc)))
    return notes
