"""``autotune warm``: compile the database's kernels ahead, so that no process waits for a compile later.

On a GPU machine each entry for this GPU model is compiled in a pool of processes and its code stored in the code
cache (autotune/runtime/code_cache.py): later processes (``get_best_kernel``) load the compiled kernel instead of
compiling it. Without a GPU, ``--cc`` compiles the entries of the GPU models with that compute capability to PTX
and links them to a cubin (nvJitLink), which proves they build, reports their registers and spills, and stores the
cubins in the code cache of this machine's toolchain (a container built without a GPU starts with them).
``--ship`` (with ``--cc``) builds the code shipped with the package: the cubins of the shipped database's entries,
in ``tuned_db/code``, compiling only those missing and removing those no entry needs any more; ``--ship --check``
compiles nothing and fails when one is missing (what CI runs). Each entry's compile seconds, registers and spills
are printed, then a total. An entry that spills here but was tuned without spilling (its recorded
resources) is flagged: another toolchain (NVVM, ptxas) allocated its registers differently, which may cost speed.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.log import logger
from ..runtime.db import DatabaseError, Entry, load_file, load_folder
from ..tuning.records import Job, job_for


@dataclass(frozen=True)
class WarmResult:
    key: str
    ok: bool
    seconds: float
    registers: int | None = None
    spill_bytes: int | None = None
    reason: str = ""


def warm(db: str | None = None, cc: str | None = None, jobs: int | None = None, out=None, *,
         families: list[str] | None = None, ship: bool = False, check: bool = False) -> int:
    """Compile the entries (of ``families`` only, where given); 0 when all compiled, 1 when one failed, 3 without
    a GPU and without ``cc``; with ``ship``, build (or with ``check``, check) the shipped code (``ship_code``)."""
    out = sys.stdout if out is None else out  # the stdout of the call, not of the import
    from ..core.device import current_device, device_slug, gpu_available

    if ship or check:
        if not ship or not cc or db:
            raise ValueError("--ship builds the code shipped with the package's own database for one compute "
                             "capability: it takes --cc X.Y and no --db; --check goes with --ship")
        from ..runtime.db import shipped_folder

        folder = shipped_folder()
        if folder is None:
            print("autotune warm --ship: this installation has no shipped database", file=sys.stderr)
            return 1
        return ship_code(folder, _parse_cc(cc), jobs, out, check)
    if cc is None and not gpu_available():
        logger.error("autotune warm: no CUDA GPU is visible; with --cc X.Y (e.g. --cc 9.0) it compiles for that "
                     "compute capability without one")
        return 3
    target = _parse_cc(cc) if cc else current_device().cc
    wanted = (lambda f: str(f.device.get("cc")) == f"{target[0]}.{target[1]}") if cc else \
        (lambda f: f.path.stem == device_slug(current_device().name))
    entries = [e for e in _entries(db, wanted) if not families or e.problem.family in families]
    if not entries:
        what = "compute capability " + cc if cc else current_device().name
        print(f"no database entries for {what}" + (f" of {', '.join(families)}" if families else ""), file=out)
        return 0
    from ..tuning.worker import CompilePool

    workers = jobs or max(1, os.cpu_count() or 1)
    print(f"compiling {len(entries)} kernels for sm_{target[0]}{target[1]} in {workers} processes", file=out,
          flush=True)
    t0 = time.perf_counter()
    failed = newly_spilling = 0
    with CompilePool(workers, real_compiler=bool(cc)) as pool:
        futures = [pool.submit(warm_one, job_for(e.problem, e.params), target if cc else None) for e in entries]
        for entry, future in zip(entries, futures):
            r = future.result()
            failed += not r.ok
            newly_spilling += spills_unlike_its_record(entry, r)
            print(entry_line(entry, r), file=out, flush=True)
    print(f"{len(entries) - failed} of {len(entries)} compiled in {time.perf_counter() - t0:.1f} s", file=out)
    if newly_spilling:
        print(f"{newly_spilling} kernels spill with this toolchain but were tuned without spilling: they may run "
              f"slower here; `autotune selftest --device 0` checks their results, re-tuning their shapes (--force) "
              f"finds variants that do not spill", file=out)
    return 1 if failed else 0


def spills_unlike_its_record(entry: Entry, result: WarmResult) -> bool:
    """Whether ``entry`` compiled to a kernel that spills where the kernel it was tuned with did not (its recorded
    resources; an entry without them is not judged)."""
    recorded = entry.record.get("resources") or {}
    if not result.ok or not result.spill_bytes or "spill_stores" not in recorded:
        return False
    return recorded["spill_stores"] + recorded.get("spill_loads", 0) == 0


def entry_line(entry: Entry, result: WarmResult) -> str:
    """One entry's line of the report: outcome, seconds, registers, spill bytes, key, and why it failed or that
    it spills unlike its record."""
    spill = "-" if result.spill_bytes is None else result.spill_bytes
    note = result.reason or ("spills here, tuned without spilling" if spills_unlike_its_record(entry, result) else "")
    return (f"{'ok  ' if result.ok else 'FAIL'} {result.seconds:7.1f} s  registers {result.registers or '-':>4}  "
            f"spill bytes {spill:>4}  {entry.problem.key}" + (f"  {note}" if note else ""))


def ship_code(folder: Path, cc: tuple[int, int], jobs: int | None, out, check: bool = False) -> int:
    """Build the shipped code (``folder/code``) of every entry of the database ``folder`` (the shipped one) for GPUs
    of compute capability ``cc``, compiling only what is missing and removing stored code no entry needs; with
    ``check`` only report what is missing or stale. 0 when nothing is missing (and nothing failed), else 1."""
    from ..runtime import code_cache
    from ..runtime.compiler import arch

    root = folder / "code"
    entries = _entries(str(folder), lambda f: str(f.device.get("cc")) == f"{cc[0]}.{cc[1]}")
    target = arch(cc)
    print(f"{'checking' if check else 'building'} the shipped code of {len(entries)} entries for {target} in "
          f"{root}", file=out, flush=True)
    from ..tuning.worker import CompilePool

    t0 = time.perf_counter()
    needed: set[str] = set()
    missing = failed = 0
    with CompilePool(jobs or max(1, os.cpu_count() or 1), real_compiler=True) as pool:
        futures = [pool.submit(ship_one, job_for(e.problem, e.params), cc, root, check) for e in entries]
        for entry, future in zip(entries, futures):
            r = future.result()
            needed.update(r.files)
            missing += r.state == "missing"
            failed += r.state == "failed"
            print(f"{r.state:8} {r.seconds:6.1f} s  {entry.problem.key}" + (f"  {r.reason}" if r.reason else ""),
                  file=out, flush=True)
    stale = [path for path, key in code_cache.stored(root).items()
             if str(path) not in needed and (key is None or key.arch == target)]
    for path in stale:
        if not check:
            path.unlink()
        print(f"{'stale  ' if check else 'removed'}  {path.relative_to(root)}", file=out)
    print(f"{len(entries) - missing - failed} of {len(entries)} entries have their shipped code"
          + (f", {missing} missing" if missing else "") + (f", {failed} failed" if failed else "")
          + (f", {len(stale)} stale files" if stale and check else "") + f" ({time.perf_counter() - t0:.1f} s)",
          file=out)
    if missing and check:
        print(f"build it: autotune warm --cc {cc[0]}.{cc[1]} --ship (then commit {root})", file=out)
    return 1 if missing or failed else 0


@dataclass(frozen=True)
class ShipResult:
    state: str  # present, built, missing (with check), failed
    seconds: float
    files: tuple[str, ...] = ()
    reason: str = ""


def ship_one(job: Job, cc: tuple[int, int], root: Path, check: bool) -> ShipResult:
    """One entry's shipped code in ``root`` (its kernel's and its helpers'): present, else built (unless
    ``check``)."""
    from ..runtime import code_cache
    from ..runtime.build import build_kernel
    from ..runtime.compiler import arch, compile_ahead_report
    from ..runtime.driver_kernels import ahead_keys

    t0 = time.perf_counter()
    try:
        kernel = build_kernel(job.family, job.params, job.dtype, **job.args)
        launched = [(kernel.entry, kernel.signature), *kernel.helper_kernels()]
        keys = [key for d, signature in launched for where, key in ahead_keys(d, signature, arch(cc), shipped=root)
                if where == root]
        files = tuple(str(code_cache.path_of(root, key)) for key in keys)
        if len(keys) < len(launched):
            return ShipResult("failed", time.perf_counter() - t0, files, "its code cannot be cached")
        if all(code_cache.load(root, key) is not None for key in keys):
            return ShipResult("present", time.perf_counter() - t0, files)
        if check:
            return ShipResult("missing", time.perf_counter() - t0, files)
        compile_ahead_report(kernel, cc, ship=root)
        if not all(code_cache.load(root, key) is not None for key in keys):
            return ShipResult("failed", time.perf_counter() - t0, files, "compiled, but its code was not stored")
    except Exception as exc:
        return ShipResult("failed", time.perf_counter() - t0, reason=f"{type(exc).__name__}: {exc}"[:300])
    return ShipResult("built", time.perf_counter() - t0, files)


def warm_one(job: Job, cc: tuple[int, int] | None) -> WarmResult:
    """Compile one entry: for this GPU, or for ``cc`` to a cubin without a GPU; its code stored either way."""
    from ..runtime.build import build_kernel
    from ..runtime.compiler import compile_ahead_report

    t0 = time.perf_counter()
    key = job.problem().key
    try:
        report = compile_ahead_report(build_kernel(job.family, job.params, job.dtype, **job.args), cc)
    except Exception as exc:
        return WarmResult(key, False, time.perf_counter() - t0, reason=f"{type(exc).__name__}: {exc}"[:300])
    return WarmResult(key, True, time.perf_counter() - t0, report.registers, report.spill_stores + report.spill_loads)


def _parse_cc(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in text.split("."))
    except ValueError:
        raise ValueError(f"--cc takes a compute capability such as 9.0, got {text!r}") from None
    return major, minor


def _entries(db: str | None, wanted) -> list[Entry]:
    """The entries to compile: of a database file, or of the files in a folder (default: the lookup folders)
    that ``wanted`` accepts; one configuration compiled once."""
    if db and Path(db).is_file():
        files = [load_file(Path(db))]
    else:
        from ..runtime.lookup import lookup_folders

        if db and not Path(db).is_dir():
            raise DatabaseError(f"--db {db}: no such file or folder")
        folders = [Path(db)] if db else lookup_folders(None, device="any")
        files = []
        for folder in folders:
            found, skipped = load_folder(folder)
            files += [f for f in found if wanted(f)]
            for problem in skipped:  # not read by lookups either: nothing of it is compiled
                print(f"skipped a database file that cannot be used: {problem}", file=sys.stderr)
    seen, entries = set(), []
    for f in files:
        for e in f.entries:
            key = (e.problem.family, e.problem.dtype, tuple(sorted(e.problem.args.items(), key=str)),
                   tuple(sorted(e.params.items())))
            if key not in seen:
                seen.add(key)
                entries.append(e)
    return entries
