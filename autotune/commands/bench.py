"""``autotune bench``: the tuned kernels next to vendor libraries and the seed kernels, in one process and run.

Every contender is timed with ``measure.bench`` (CUDA events, warm-up, L2 flushed before each run, median) on
the same standard-normal inputs; each of ours is first checked with its family's oracle. Peers are the family's
(``KernelFamily.peers``: cuBLAS through CuPy and PyTorch with TF32 off, CuPy/CUB and PyTorch reductions, Numba's
``cuda.reduce``); those whose library is not installed are skipped and named. Results go to a Markdown table
and, where matplotlib is installed, a PNG plot (``pip install "autotune[bench]"`` installs all three).
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from ..core.device import current_device, selected_gpus
from ..core.log import logger
from ..core.problem import Problem
from ..core.space import load_space
from ..runtime import arrays
from ..runtime.build import build_kernel
from ..runtime.compiler import resources_here
from ..runtime.lookup import choice, lookup_folders
from ..tuning.evaluate import compile_variant
from ..tuning.instance import Instance
from ..tuning.measure import L2Flusher, bench
from ..tuning.records import job_for
from ..tuning.report import fraction_of_peak, table, versions
from ..tuning.worker import CompilePool
from .bench_json import merged, problem_rows, read_rows, summary, write_rows

OPTIONAL = {"cupy": "CuPy", "torch": "PyTorch", "matplotlib": "matplotlib (plots)"}


def missing_optional() -> list[str]:
    """The optional bench libraries that are not installed here."""
    return [name for module, name in OPTIONAL.items() if importlib.util.find_spec(module) is None]


def select_peer_device(index: int) -> None:
    """Make GPU ``index`` the current device of the peer libraries installed here (``torch.cuda.set_device``,
    CuPy's ``Device(index).use()``), as Numba's is: the peers' arrays (``torch.as_tensor(a, device="cuda")``,
    ``cupy.asarray(a)``) and calls then stay on the GPU the bench times, where by default they would go to GPU 0."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(index)
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        cupy.cuda.Device(index).use()


def seeds_of(problem: Problem) -> list[tuple[str, dict]]:
    space = load_space(problem.family)
    return [(name, space.restrict(p, dtype=problem.dtype, args=problem.args))
            for name, p in problem.impl.seeds()]


def bench_problem(problem: Problem, folders: list[Path], flusher, tuned: list[Path] = (), seeds: bool = True,
                  simulator: bool = False) -> list[dict]:
    """Rows for one problem: ours (chosen as a lookup chooses; the entry tuned for the shape in the ``tuned``
    folders too, where there is one), the seeds (unless ``seeds`` is False) and the peers, each timed the same
    way (in the simulator: ours only, checked and timed on the host clock)."""
    rng = np.random.default_rng()
    inst = Instance(problem, rng)
    chosen = choice(problem, folders)
    rows = []
    contenders = [("autotune" + (" (untuned)" if chosen.default else ""), chosen.params, chosen.how),
                  *((name, p, None) for name, p in (seeds_of(problem) if seeds else []))]
    exact = _tuned_entry(problem, tuned)
    if exact is not None:
        contenders.insert(1, ("autotune tuned for the shape", exact, "tuned"))
    for name, p, how in contenders:
        kernel = build_kernel(problem.family, p, problem.dtype, **problem.args)
        error = inst.check(kernel)
        if error:
            rows.append({"name": name, "error": error})
            continue
        t = bench(lambda: inst.run(kernel, timing=True), flush=flusher, simulator=simulator)
        res = None if simulator else resources_here(kernel)
        rows.append({"name": name, "timing": t, "registers": res and res.registers, "local": res and res.stack_bytes,
                     "params": p,
                     "accuracy": problem.impl.result_error(problem, inst.time_host, arrays.device_to_host(inst.out))})
        if how == "tuned":
            rows[-1]["tuned"] = True
        elif how is not None:
            rows[-1]["chosen_by"] = how
    if simulator:
        return rows
    for name, call in problem.impl.peers(problem, inst.time_args).items():
        try:
            t = bench(call, flush=flusher)
            rows.append({"name": name, "timing": t, "peer": True,
                         "accuracy": problem.impl.result_error(problem, inst.time_host, arrays.to_host(call()))})
        except Exception as exc:  # a peer that cannot run this shape is reported, not fatal
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    return rows


def _tuned_entry(problem: Problem, tuned: list[Path]) -> dict | None:
    """The exact entry for ``problem`` in the ``tuned`` folders (``--against-db``), else None."""
    if not tuned:
        return None
    chosen = choice(problem, list(tuned))
    return chosen.params if chosen.how == "exact" else None


def compile_ahead(problems: list[Problem], folders: list[Path], tuned: list[Path] = (), seeds: bool = True) -> None:
    """Compile every kernel the suite will time in parallel CPU processes first, so that the timing process
    loads their stored code instead of compiling one after another."""
    jobs = []
    for problem in problems:
        exact = _tuned_entry(problem, tuned)
        own = [p for _, p in seeds_of(problem)] if seeds else []
        for p in [choice(problem, folders).params, *([exact] if exact else []), *own]:
            jobs.append(job_for(problem, load_space(problem.family).validate(p, dtype=problem.dtype,
                                                                           args=problem.args)))
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    logger.info(f"compiling {len(jobs)} kernels in {workers} processes")
    with CompilePool(workers, devices=selected_gpus()) as pool:
        for result in pool.map(compile_variant, jobs):
            if not result.ok:
                logger.warning(result.reason)


def measuring_arguments(argv: list[str]) -> list[str]:
    """The command line without ``--out FOLDER``: where the report was written says nothing about what it
    measured, and a machine's own folder (a temporary one) would only confuse a reader repeating the command."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    return kept


def run_suite(problems: list[Problem], db: str | None, out_dir: str, simulator: bool = False, held_out: bool = False,
              tuned: list[Path] = ()) -> str:
    """Bench the problems; write the Markdown table, the plot and the JSON rows (bench_json.py). ``held_out``: the
    files are named with the GPU model and 'held-out', the seed kernels are left out (what matters there is ours
    against the vendor), and the rows join that GPU's held-out JSON file, summarised in its Markdown file. With
    ``simulator``: a dry run in the CUDA simulator (our kernels only, host-clock timings that mean nothing)."""
    device = current_device()
    folders = lookup_folders(db)
    missing = missing_optional()
    if simulator:
        logger.info("SIMULATOR DRY RUN: our kernels are checked and timed in Numba's CUDA simulator on the CPU; "
                    "timings are meaningless and no library is timed beside them.")
    elif missing:
        logger.warning(f"not installed, so skipped: {', '.join(missing)} (pip install \"autotune[bench]\")")
    if not simulator:
        from numba import cuda

        select_peer_device(cuda.get_current_device().id)
    flusher = None if simulator else L2Flusher()
    compile_ahead(problems, folders, tuned, seeds=not held_out)
    sections, plot_data, json_rows = [], [], []
    for problem in problems:
        logger.info(f"bench {problem.key}")
        rows = bench_problem(problem, folders, flusher, tuned, seeds=not held_out, simulator=simulator)
        sections.append(_section(problem, rows, device))
        plot_data.append((problem, rows))
        json_rows += problem_rows(problem.key, rows)
        print(sections[-1] + "\n", flush=True)
    kind = problems[0].family
    name = problems[0].impl.bench_name(problems[0])
    command = "autotune " + " ".join(measuring_arguments(sys.argv[1:]))
    header = (f"# autotune bench {kind} on {device.name}\n\n"
              f"Date {datetime.date.today().isoformat()}; {versions()}; command: `{command}`.\n"
              f"Times: median of CUDA-event timings of single calls, L2 flushed (2x L2 overwritten) before each and "
              f"the call queued behind a 200 us GPU sleep (GPU time only, host launch time hidden), after warm-up; "
              f"every autotune variant was first checked against float64 NumPy by its family's oracle (exactly where "
              f"the data allow, else within the stated error bound).\n")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{device.slug}-held-out-{name}" if held_out else f"{device.slug}-{name}"
    md = out / f"{stem}.md"
    md.write_text(header + "\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    write_rows(out / f"{stem}.json", json_rows)
    plotted = _plot(plot_data, device, out / f"{stem}.png")
    print(f"wrote {md}, {out / f'{stem}.json'}" + (f" and {plotted}" if plotted else
                                                   " (matplotlib not installed: no plot)"))
    if held_out:
        _held_out_files(out, device, json_rows, command)
    return str(md)


def _held_out_files(out: Path, device, json_rows: list[dict], command: str) -> None:
    """Add this run's rows to the GPU model's held-out JSON file (a rerun of a problem replaces its rows) and
    rewrite its Markdown summary."""
    from ..runtime.db import locked

    path = out / f"{device.slug}-held-out.json"
    with locked(path):  # benches of several cases on several GPUs add to one file
        rows = merged(read_rows(path), json_rows)
        write_rows(path, rows)
    md = path.with_suffix(".md")
    md.write_text(f"# autotune on shapes it was never tuned for, {device.name}\n\n"
                  f"Each family's held-out shapes (`autotune coverage FAMILY --list --set held-out` prints them "
                  f"and the seeded rule that draws them) and its standard suite, benched with `autotune bench "
                  f"FAMILY --held-out`; the last command: `{command}`, {datetime.date.today().isoformat()}; every "
                  f"row in `{path.name}`.\n\n" + summary(rows) + "\n", encoding="utf-8")
    print(f"wrote {path} and {md}")


def _reference_row(problem: Problem, rows: list[dict]) -> dict | None:
    for row in rows:
        if row["name"] in problem.impl.reference_peers and "timing" in row:
            return row
    return None


def _section(problem: Problem, rows: list[dict], device) -> str:
    """A problem's table. Where the family measures errors (``result_error``), a column of each contender's
    relative error against float64 on the same timing data."""
    ref = _reference_row(problem, rows)
    accuracy = any(r.get("accuracy") is not None for r in rows)
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["name"], "error", None, None, None, *([None] if accuracy else []), None, None,
                         r["error"][:80]])
            continue
        ms = r["timing"].median_ms
        rate = problem.rate(ms / 1e3)
        peak = fraction_of_peak(problem, rate, device)
        ratio = ref["timing"].median_ms / ms if ref else None
        error = [f"{r['accuracy']:.3g}" if r.get("accuracy") is not None else None] if accuracy else []
        body.append([r["name"], ms, f"{rate:.4g} {problem.unit}", f"{100 * peak:.1f}%" if peak else None,
                     f"{ratio:.2f}x" if ratio else None, *error, r.get("registers"), r.get("local"),
                     f"spread {100 * r['timing'].spread:.1f}%, {r['timing'].reps} reps"])
    return (f"## {problem.key}\n\n"
            + table(["kernel", "ms", "rate", "of peak", f"vs {ref['name'] if ref else '-'}",
                     *(["rel. error"] if accuracy else []), "registers", "local B", "notes"], body)
            + "\n\n(local B: local memory per thread, stack frame plus spills, as the driver reports it"
            + ("; rel. error: Frobenius norm of the error of sampled rows of the result against float64, on the "
               "timed data" if accuracy else "") + ")")


def _plot(data, device, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = sorted({r["name"] for _, rows in data for r in rows if "timing" in r})
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(data)), 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, (problem, rows) in enumerate(data):
            for r in rows:
                if r["name"] == name and "timing" in r:
                    xs.append(j + i * width)
                    ys.append(problem.rate(r["timing"].median_ms / 1e3))
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(data))])
    ax.set_xticklabels([p.key.split("/", 2)[2] for p, _ in data], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(data[0][0].unit)
    ax.set_title(f"autotune bench on {device.name} (higher is better)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
