"""Where studies live: a journal file per GPU model (default), or a database URL shared by several tuners.

A journal is checked before a study opens it. A crash in the middle of a write leaves an incomplete last record
(no line end); Optuna would skip it when reading but append the next record right after it, burying the damage
in the middle of the file. So an incomplete last record is removed, under Optuna's own lock, and the run says so;
every complete record is kept. Any other damage stops the run with the file, the line and what to do: a line
that is no JSON operation, and a JSON operation Optuna cannot apply (an unknown ``op_code``, a field missing),
which Optuna reports with no file or line (``AssertionError: Should not reach.``) and is found here by replaying
the records one by one. A journal path that is not a regular file (a FIFO would block the reader) is refused.

A database URL (``--storage postgresql://user:password@host/db``) is opened with one-line errors for what goes
wrong most: a missing driver (``pip install "autotune[postgres]"``), a server that does not answer, credentials
it refuses. Passwords never appear in messages.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna
from optuna.storages.journal import BaseJournalBackend


class StorageError(ValueError):
    """The study storage cannot be used; the message says why and what to do."""


def open_journal(path: Path, report: Callable[[str], None]):
    """Optuna storage over the journal file at ``path``, checked (and an incomplete last record removed) first."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = JournalFileSymlinkLock(str(path))  # the lock Optuna's journal takes by default
    if path.exists():
        if not path.is_file():
            raise StorageError(f"{path}: not a regular file; a study journal is a file (give --state-dir another "
                               f"folder, or move this aside)")
        lock.acquire()
        try:
            note = repair_journal(path)
        finally:
            lock.release()
        if note:
            report(note)
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # Optuna replays every record here; one it cannot apply stops it
        raise StorageError(replay_failure(path, exc)) from None


class _Records(BaseJournalBackend):
    """A read-only journal backend over records in memory that remembers how many it handed out: Optuna applies
    them as it reads them, so after a failure ``handed`` is the number of the record it failed on."""

    def __init__(self, records: list[dict]):
        self.records = records
        self.handed = 0

    def read_logs(self, log_number_from: int) -> Iterator[dict]:
        for number in range(log_number_from, len(self.records)):
            self.handed = number + 1
            yield self.records[number]

    def append_logs(self, logs: list[dict]) -> None:
        raise StorageError("a journal being checked is not written")


def replay_failure(path: Path, exc: BaseException) -> str:
    """What to say when Optuna cannot open the journal at ``path`` (``exc``): the line whose record it cannot
    apply, found by replaying the records one by one, and what to do."""
    from optuna.storages import JournalStorage

    where = "Optuna cannot replay it"
    try:
        lines = path.read_bytes().splitlines()
        numbered = [(i + 1, json.loads(line)) for i, line in enumerate(lines) if line.strip()]
    except (OSError, ValueError):  # changed since it was checked: say what Optuna said
        numbered = None
    if numbered is not None:
        replayed = _Records([record for _, record in numbered])
        try:
            JournalStorage(replayed)
        except Exception as found:
            exc = found
            if replayed.handed:
                line = numbered[replayed.handed - 1][0]
                where = f"line {line} of {len(lines)} is a journal record Optuna cannot apply"
    reason = " ".join(str(exc).split())[:200] or "no message"
    return (f"{path}: {where} ({type(exc).__name__}: {reason}). The study history is damaged there: remove that "
            f"line if it is the only damage (the records after it may then fail in turn), or move the file aside "
            f"to start the studies of this GPU model afresh")


def repair_journal(path: Path) -> str | None:
    """Check every record of a journal; remove an incomplete last one (returning a sentence that says so), raise
    StorageError for any other damage."""
    data = path.read_bytes()
    complete, _, tail = data.rpartition(b"\n")
    records = complete.split(b"\n") if complete else []
    for number, line in enumerate(records, start=1):
        problem = _record_problem(line)
        if problem:
            raise StorageError(
                f"{path}: line {number} of {len(records) + bool(tail)} is not a journal record ({problem}). The study "
                f"history is damaged there: remove that line if it is the only damage (the records after it stay "
                f"usable), or move the file aside to start the studies of this GPU model afresh")
    if not tail:
        return None
    if _record_problem(tail) is None:  # a whole record that only lacks its line end
        with open(path, "ab") as f:
            f.write(b"\n")
        return None
    with open(path, "r+b") as f:
        f.truncate(len(data) - len(tail))
    return (f"recovered {path}: removed an incomplete last record ({len(tail)} bytes, left by a run stopped in the "
            f"middle of a write); the {len(records)} complete records are kept")


def _record_problem(line: bytes) -> str | None:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"not JSON: {exc.msg if hasattr(exc, 'msg') else exc}"
    if not isinstance(record, dict) or "op_code" not in record:
        return "JSON, but not an Optuna journal operation"
    return None


def open_database(url: str, attempts: int = 5):
    """Optuna storage in the database at ``url``; StorageError with one line for the usual failures.

    Tuners started together on a fresh database race to create its tables and its schema-version row: the losers
    see a table that already exists, a duplicate version row (SQLite's IntegrityError, PostgreSQL's duplicate
    CREATE TYPE) or, with SQLite, a locked file. Such an error is retried after a random pause; the next attempt
    finds what the winner made. What retrying cannot mend (a missing driver, refused credentials, a server that
    does not answer, a bad URL) stops at once."""
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except Exception as exc:
            missing = _missing_module(exc)
            if missing:
                raise StorageError(f"--storage {redacted(url)}: the database driver {missing!r} is not installed; "
                                   f"for PostgreSQL: pip install \"autotune[postgres]\"") from None
            if attempt == attempts - 1 or _permanent_problem(exc):
                raise StorageError(f"--storage {redacted(url)}: {_database_problem(exc)}") from None
        time.sleep(0.2 + random.random() * (attempt + 1))
    raise AssertionError("unreachable")


def _missing_module(exc: BaseException | None) -> str | None:
    """The module whose absence caused ``exc`` (Optuna wraps the driver's ImportError in its own)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _database_problem(exc: Exception) -> str:
    return _permanent_problem(exc) or f"{type(exc).__name__}: {_text_of(exc)[:240]}"


def _permanent_problem(exc: Exception) -> str | None:
    """A sentence for the failures that retrying cannot mend; None for the others."""
    text = _text_of(exc)
    lowered = text.lower()
    if "password authentication failed" in lowered or "authentication" in lowered:
        return f"the server refused the credentials ({text[:160]})"
    if "could not connect" in lowered or "connection refused" in lowered or "connection failed" in lowered \
            or "timeout" in lowered or "could not translate host" in lowered or "name or service" in lowered:
        return f"cannot reach the database server ({text[:200]})"
    if "does not exist" in lowered:
        return f"{text[:200]} (create it first, e.g. createdb)"
    if "unable to open database file" in lowered:
        return f"cannot open the database file ({text[:200]}; does its folder exist?)"
    if "could not parse" in lowered or "argument" in type(exc).__name__.lower():
        return f"not a database URL such as postgresql://user:password@host/db ({text[:120]})"
    return None


def _text_of(exc: Exception) -> str:
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def redacted(url: str) -> str:
    """The URL with its password hidden."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def open_study(storage, name: str, sampler, url: str | None = None) -> optuna.Study:
    """Create or load the study. Tuners started together on a fresh database race to create its tables (seen
    with PostgreSQL: a duplicate CREATE TYPE); the loser retries and then finds them."""
    for attempt in range(4):
        try:
            return optuna.create_study(storage=storage, study_name=name, sampler=sampler, direction="minimize",
                                       load_if_exists=True)
        except Exception:
            if attempt == 3 or url is None:
                raise
            time.sleep(0.5 + random.random() * (attempt + 1))
            storage = open_database(url)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class EarlierStudy:
    """A study of the same problem that measured with other code (another provenance): its name, its user
    attributes (where it recorded its provenance) and how many trials it holds."""

    name: str
    user_attrs: dict[str, Any]
    trials: int


def earlier_study(storage, base: str, name: str) -> EarlierStudy | None:
    """The most recent study in ``storage`` named ``base`` or ``base#<digest>`` other than ``name``: the study of
    the same problem that a study tied to another provenance would have been (None if there is none)."""
    found = [s for s in storage.get_all_studies()
             if s.study_name != name and (s.study_name == base or s.study_name.startswith(base + "#"))]
    if not found:
        return None
    ids = {s.study_name: storage.get_study_id_from_name(s.study_name) for s in found}
    last = max(found, key=lambda s: ids[s.study_name])  # study ids grow: the last one made
    trials = len(storage.get_all_trials(ids[last.study_name], deepcopy=False))
    return EarlierStudy(name=last.study_name, user_attrs=dict(last.user_attrs), trials=trials)


def journal_path(state_dir: str | os.PathLike, device_slug: str) -> Path:
    return Path(state_dir) / "studies" / f"{device_slug}.journal"
