"""Stale entries measured again: ``autotune db refresh``.

An entry records the hash of the GPU source it measured (``source_hash``). Where the templates changed since, its
configuration renders another kernel, so its time and the checks it passed are of a kernel that no longer exists,
and every lookup of it says so (``db.stale_note``). Re-tuning the shape (``--force``) is one answer; after a change
meant to make the same configurations faster (a template's code, not its search space), measuring each stale
entry's configuration again is the cheaper one: each is built from the current templates, checked against the
family's oracle on fresh data (output poisoned with NaN first), timed as a tuning run times its winner, and written
back with its new time and ``source_hash``. A configuration that fails or computes a wrong result is not written:
its entry stays stale and the run ends with exit 1, naming it. Only the file of this GPU model is touched, and its
other entries are kept as they were (written under the folder's lock, as every database write).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.device import DeviceInfo


@dataclass(frozen=True)
class Refreshed:
    """One stale entry measured again: its problem key, the time it recorded, and the new time (None where the
    configuration failed, ``error`` saying how)."""
    key: str
    recorded_ms: float
    median_ms: float | None
    error: str | None = None

    def line(self) -> str:
        if self.median_ms is None:
            return f"FAIL {self.key}: {self.error}; its entry is left as it was (re-tune it: --force)"
        ratio = self.median_ms / self.recorded_ms
        return f"re-measured {self.key}: {self.median_ms:.4g} ms, {ratio:.3f}x the {self.recorded_ms:.4g} ms recorded"


def refresh_file(path: Path, device: DeviceInfo, only: tuple[str, ...] = (),
                 report: Callable[[str], None] = print) -> list[Refreshed]:
    """Measure each stale entry of the database file ``path`` (whose keys start with one of ``only``, where given)
    again on this process's GPU and write the ones that pass back into the file; what became of each."""
    from ..runtime.db import load_file, parse_entry, stale, write_entries
    from .evaluate import checked_timing
    from .report import measured_record

    found = [entry for entry, _ in stale(load_file(path, strict=True))
             if not only or entry.problem.key.startswith(only)]
    report(f"{len(found)} stale entries in {path}" + (f" starting with {', '.join(only)}" if only else ""))
    done, fresh = [], []
    for n, entry in enumerate(found, 1):
        timing, error = checked_timing(entry.problem, entry.params)
        result = Refreshed(entry.problem.key, entry.median_ms, timing and timing["median_ms"], error)
        report(f"[{n}/{len(found)}] {result.line()}")
        done.append(result)
        if timing:
            extra = {k: entry.record[k] for k in ("baseline", "resources") if k in entry.record}
            fresh.append(parse_entry(measured_record(entry.problem, entry.params, timing, device,
                                                     int(entry.record.get("trials", 1)), **extra)))
    if fresh:
        write_entries(path, device.as_dict(), fresh, force=True, reason="the same configuration, measured again "
                      "with the current templates")
        report(f"wrote {len(fresh)} entries to {path}")
    return done
