"""Tables for people (tuning summaries, the database) and the database entries a tuning run produces."""
from __future__ import annotations

import datetime
from typing import Any, Collection, Iterable

from ..core import backend
from ..core.device import DeviceInfo


def table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    """A Markdown table, columns padded so that it also reads well in a terminal."""
    rows = [[_cell(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return "-" if value is None else str(value)


def fraction_of_peak(problem, rate: float | None, device: DeviceInfo) -> float | None:
    peak = problem.impl.peak_for(problem, device)
    return rate / peak if rate and peak else None


def tune_table(results, device: DeviceInfo) -> str:
    rows = []
    for r in results:
        base = r.baseline or {}
        speedup = base["median_ms"] / r.timing["median_ms"] if r.timing and base else None
        peak = fraction_of_peak(r.problem, r.rate, device)
        rows.append([r.problem.key, r.timing["median_ms"] if r.timing else None,
                     f"{r.rate:.4g} {r.problem.unit}" if r.rate else None,
                     f"{100 * peak:.1f}%" if peak else None, base.get("median_ms"),
                     f"{speedup:.2f}x" if speedup else None, f"{r.measured}/{r.failed}/{r.pruned}",
                     f"{r.per_minute:.1f}", r.best])
    note = "" if all(r.meaningful for r in results) else \
        "\nSIMULATOR: these timings are host-clock times of a Python simulation and mean nothing about GPU speed."
    failures = [f"  {f}" for r in results for f in r.failures[:5]]
    method = "median of CUDA-event timings, L2 flushed before each run" if not note else "host clock, one run"
    return (f"\nTuned on {device.name} (times: {method})\n"
            + table(["problem", "best ms", "rate", "of peak", "seed ms", "vs seed", "ok/fail/pruned",
                     "variants/min", "best configuration"], rows)
            + note + ("\nfailed trials (first 5 per problem):\n" + "\n".join(failures) if failures else ""))


def versions() -> dict[str, str]:
    """The toolchain a measurement was made with: Numba, numba-cuda, CUDA, and the replacements of numba-cuda
    internals that were active (autotune/_patches), which change compile speed only, recorded so that an entry says
    what made it."""
    import numba

    from .. import _patches

    out = {"numba": numba.__version__}
    try:
        from importlib.metadata import version

        out["numba_cuda"] = version("numba-cuda")
    except Exception:
        pass
    if not backend.simulator():
        from numba import cuda

        out["cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
        out["cuda_driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
    out["numba_patches"] = ",".join(_patches.active(backend.simulator())) or "none"
    return out


def measured_record(problem, params: dict[str, Any], timing: dict[str, Any], device: DeviceInfo, trials: int,
                    **fields: Any) -> dict[str, Any]:
    """The database record of ``params`` measured on ``device`` for ``problem`` (``timing``: a ``Timing.as_dict``;
    ``fields``: baseline, resources), with the hash of the GPU source the configuration renders to
    (``source_hash``), so that a lookup can tell when the templates no longer render the kernel it measured."""
    from ..runtime.build import render_source
    from ..runtime.db import entry_record
    from ..runtime.render import source_hash, template_hash

    _, _, source = render_source(problem.family, params, problem.dtype, simulator=False, **problem.args)
    time = {k: timing[k] for k in ("median_ms", "p20_ms", "p80_ms", "reps")}
    return entry_record(problem, params, time=time, rate=round(problem.rate(timing["median_ms"] / 1e3), 4),
                        unit=problem.unit, **fields, device=device.as_dict(), versions=versions(),
                        template_hash=template_hash(problem.impl), source_hash=source_hash(source), trials=trials,
                        date=datetime.date.today().isoformat())


def write_results(results, device: DeviceInfo, db: str | None, config, force: bool = False) -> list[str]:
    """Write each tuned winner into the device's database file (merging; see db.write_entries), with the hash of
    the GPU source its configuration renders to (``source_hash``), so that a lookup can tell when the templates
    no longer render the kernel it measured."""
    from ..runtime.db import db_dir, db_path, parse_entry, write_entries

    path = db_path(db_dir(db), device.name)
    lines = []
    for r in results:
        if not r.best:
            continue
        record = measured_record(r.problem, r.best, r.timing, device, r.measured, baseline=_rounded(r.baseline),
                                 resources=r.resources)
        # A run that measured the current entry's configuration itself has compared them fairly: its best
        # replaces the entry even if the entry's recorded time (perhaps from older code) is lower.
        lines += write_entries(path, device.as_dict(), [parse_entry(record)], force=force or r.incumbent_measured,
                               reason="--force" if force else "this run measured the recorded configuration too, "
                                                              "and this one was faster")
    return lines + [f"database: {path}"]


def _rounded(d: dict | None) -> dict | None:
    if not d:
        return None
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}


def db_table(files, families: Collection[str] | None = None) -> str:
    """A table per database file of its entries (of ``families`` only, where given)."""
    parts = []
    for f in files:
        rows = [[e.problem.key, e.median_ms, f"{e.record.get('rate', '-')} {e.record.get('unit', '')}",
                 (e.record.get("baseline") or {}).get("median_ms"), e.record.get("trials"), e.record.get("date"),
                 e.params] for e in f.entries if not families or e.problem.family in families]
        if families and not rows and not f.problems:
            continue
        parts.append(f"{f.path} -- {f.device.get('name')} (cc {f.device.get('cc')}, {f.device.get('sm_count')} SMs)\n"
                     + table(["problem", "ms", "rate", "seed ms", "trials", "date", "parameters"], rows))
        parts.extend(f"  skipped: {p}" for p in f.problems)
    return "\n\n".join(parts) if parts else "the database is empty"
