"""The tuning studies a state folder (or a shared storage) keeps: listed, read and deleted.

Every tuning run records each measurement in an Optuna study named ``<problem key>@<gpu model>`` (a sweep's
``.../sweep/<space>``), by default in a journal file per GPU model under ``<state dir>/studies/``
(storage.py). A study is what lets a stopped run resume and a later run start from what was measured; deleting
one makes the next run of its problem start afresh (the tuned database is not touched).
"""
from __future__ import annotations

import datetime
import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from .storage import open_database, open_journal, redacted


@dataclass(frozen=True)
class Place:
    """A storage holding studies: a journal file, or a database URL (shown without its password)."""

    where: str
    storage: Any


@dataclass(frozen=True)
class StudySummary:
    """One study: where it is kept, its trials by state, its fastest measurement and when it ran."""

    name: str
    where: str
    complete: int
    failed: int
    pruned: int
    unfinished: int
    best_ms: float | None
    started: datetime.datetime | None
    last: datetime.datetime | None


def places(state_dir: str | Path, url: str | None = None,
           report: Callable[[str], None] = lambda line: None) -> list[Place]:
    """The storages to read: the database at ``url``, else every journal file under ``state_dir``/studies."""
    if url:
        return [Place(redacted(url), open_database(url))]
    folder = Path(state_dir) / "studies"
    return [Place(str(path), open_journal(path, report)) for path in sorted(folder.glob("*.journal"))]


def matching(place: Place, patterns: list[str]) -> list[str]:
    """The names of the studies in ``place`` that one of ``patterns`` (exact names or shell-style patterns such
    as ``softmax/*``) matches; every study where there are no patterns."""
    names = sorted(s.study_name for s in place.storage.get_all_studies())
    if not patterns:
        return names
    return [n for n in names if any(n == p or fnmatch.fnmatchcase(n, p) for p in patterns)]


def trials(place: Place, name: str) -> list[FrozenTrial]:
    """A study's trials in the order they were asked."""
    study_id = place.storage.get_study_id_from_name(name)
    return sorted(place.storage.get_all_trials(study_id, deepcopy=False), key=lambda t: t.number)


def summary(place: Place, name: str) -> StudySummary:
    found = trials(place, name)
    count = lambda *states: sum(t.state in states for t in found)  # noqa: E731
    values = [t.value for t in found if t.state == TrialState.COMPLETE and t.value is not None]
    starts = [t.datetime_start for t in found if t.datetime_start]
    ends = [t.datetime_complete or t.datetime_start for t in found if t.datetime_complete or t.datetime_start]
    return StudySummary(name=name, where=place.where, complete=count(TrialState.COMPLETE),
                        failed=count(TrialState.FAIL), pruned=count(TrialState.PRUNED),
                        unfinished=count(TrialState.RUNNING, TrialState.WAITING),
                        best_ms=min(values) if values else None, started=min(starts) if starts else None,
                        last=max(ends) if ends else None)


def delete(place: Place, name: str) -> None:
    """Remove a study and its trials from its storage (a journal records the deletion)."""
    optuna.delete_study(study_name=name, storage=place.storage)


__all__ = ["Place", "StudySummary", "places", "matching", "trials", "summary", "delete"]
