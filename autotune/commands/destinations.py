"""Where a tuning run's results go, checked before anything is measured: a run must not measure for an hour and
then find that it cannot write (``--db`` naming a file, ``--record-sweep`` naming a folder, a database file with
bad entries, a folder it may not write)."""
from __future__ import annotations

import os
from pathlib import Path


def check_destinations(*, database: Path | None = None, sweep: Path | None = None) -> None:
    """ValueError naming the option and the path where a result could not be written at the end of the run:
    ``database``, the database file the run writes (None: it writes none); ``sweep``, the sweep file."""
    from ..runtime.db import DatabaseError, check_writable

    if database is not None:
        try:
            check_writable(database)
        except DatabaseError as exc:
            raise ValueError(f"--db: {exc}; nothing was measured") from None
    if sweep is not None:
        problem = file_destination_problem(sweep)
        if problem:
            raise ValueError(f"--record-sweep {sweep}: {problem}; nothing was measured")


def file_destination_problem(path: Path) -> str | None:
    """Why a file could not be written at ``path`` (its folders made as needed), or None."""
    from ..runtime.db import DatabaseError, write_destination

    if path.is_dir():
        return "is a folder; name the sweep file to write in it, e.g. " + str(path / "sweep.yaml")
    try:
        destination = write_destination(path)
    except DatabaseError as exc:
        return str(exc)
    if destination.exists() and not destination.is_file():
        return f"{destination} is not a regular file"
    existing = destination.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so no folder can be made there"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"the folder {existing} is not writable"
    return None
