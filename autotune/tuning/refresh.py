"""Stale entries measured again: ``autotune db refresh``.

An entry records the hash of the GPU source it measured (``source_hash``). Where the templates changed since, its
configuration renders another kernel, so its time and the checks it passed are of a kernel that no longer exists,
and every lookup of it says so (``db.stale_note``). Re-tuning the shape (``--force``) is one answer; after a change
meant to make the same configurations faster (a template's code, not its search space), measuring each stale
entry's configuration again is the cheaper one: each is built from the current templates, checked against the
family's oracle on fresh data (output poisoned with NaN first), timed as a tuning run times its winner, and written
back at once with its new time and ``source_hash`` (its ``resources``, of the old kernel, left out; its trials and
vendor baseline kept), so that a run stopped midway keeps what it measured. An entry is replaced only where the
file still holds it as it was read: one another run wrote meanwhile is kept. A configuration that fails or computes
a wrong result is not written: its entry stays stale and the run ends with exit 1, naming it. Only the file of this
GPU model is touched, and its other entries are kept as they were (written under the folder's lock, as every
database write).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.device import DeviceInfo


@dataclass(frozen=True)
class Refreshed:
    """One stale entry measured again: its problem key, the time it recorded, and the new time (None where the
    configuration failed, ``error`` saying how); ``written`` False where the file changed meanwhile."""
    key: str
    recorded_ms: float
    median_ms: float | None
    error: str | None = None
    written: bool = True

    def line(self) -> str:
        if self.median_ms is None:
            return f"FAIL {self.key}: {self.error}; its entry is left as it was (re-tune it: --force)"
        ratio = f", {self.median_ms / self.recorded_ms:.3f}x the {self.recorded_ms:.4g} ms recorded" \
            if self.recorded_ms > 0 else ""
        kept = "" if self.written else " (not written: another run wrote this entry meanwhile, and it is kept)"
        return f"re-measured {self.key}: {self.median_ms:.4g} ms{ratio}{kept}"


def refresh_file(path: Path, device: DeviceInfo, only: tuple[str, ...] = (),
                 report: Callable[[str], None] = print) -> list[Refreshed]:
    """Measure each stale entry of the database file ``path`` (whose keys start with one of ``only``, where given)
    again on this process's GPU, writing each that passes back into the file as soon as it is measured; what
    became of each."""
    from ..runtime.db import check_writable, load_file, parse_entry, replace_entry, stale
    from .evaluate import checked_timing
    from .report import measured_record

    check_writable(path)
    db_file = load_file(path, strict=True)
    unmatched = [p for p in only if not any(e.problem.key.startswith(p) for e in db_file.entries)]
    if unmatched:
        report(f"no entry of {path} starts with {', '.join(unmatched)}")
    found = [entry for entry, _ in stale(db_file) if not only or entry.problem.key.startswith(only)]
    report(f"stale entries in {path}" + (f" starting with {', '.join(only)}" if only else "") + f": {len(found)}")
    done = []
    for n, entry in enumerate(found, 1):
        timing, error = checked_timing(entry.problem, entry.params)
        written = False
        if timing:
            baseline = {"baseline": entry.record["baseline"]} if "baseline" in entry.record else {}
            new = parse_entry(measured_record(entry.problem, entry.params, timing, device,
                                              int(entry.record.get("trials", 1)), **baseline))
            written = replace_entry(path, device.as_dict(), entry, new) is not None
        result = Refreshed(entry.problem.key, entry.median_ms, timing and timing["median_ms"], error, written)
        report(f"[{n}/{len(found)}] {result.line()}")
        done.append(result)
    return done
