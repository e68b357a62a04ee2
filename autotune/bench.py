"""``autotune bench``: the tuned kernels next to vendor libraries and the seed kernels, in one process and run.

Every contender is timed with ``timing.bench`` (CUDA events, warm-up, L2 flushed before each run, median) on
the same standard-normal inputs; each of ours is first checked with ``Instance.check``. Peers: cuBLAS through
CuPy and PyTorch (TF32 off), CuPy/CUB and PyTorch reductions, Numba's ``cuda.reduce``; they are skipped with a
note when not installed. Results go to a Markdown table and, where matplotlib is installed, a PNG plot.
"""
from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from .build import build_kernel
from .compiler import ResourceReport
from .device import current_device
from .evaluate import compile_variant, job
from .lookup import choose, database_folder
from .problem import Instance, Problem
from .report import fraction_of_peak, table, versions
from .space import load_space
from .timing import L2Flusher, bench
from .worker import compile_pool

SEEDS = {"matmul": [("seed naive", {"strategy": "naive"}), ("seed shared16", {"strategy": "shared16"})],
         "reduce": [("seed tree+2nd pass", {"BLOCK": 256, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "tree",
                                            "COMBINE": "two_pass"})]}


def peers(problem: Problem, args: list) -> dict[str, Callable[[], object]]:
    """Library implementations of the problem on the same device arrays, where the library is installed."""
    found: dict[str, Callable[[], object]] = {}
    try:
        import cupy

        xs = [cupy.asarray(a) for a in args]
        found.update(_cupy_calls(cupy, problem, xs))
    except ImportError:
        pass
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        ts = [torch.as_tensor(a, device="cuda") for a in args]
        found.update(_torch_calls(torch, problem, ts))
    except ImportError:
        pass
    if problem.kind == "reduce" and problem.family["axis"] is None and problem.family["op"] != "dot":
        from numba import cuda

        op = problem.family["op"]
        fn = {"sum": lambda a, b: a + b, "max": lambda a, b: max(a, b), "min": lambda a, b: min(a, b)}[op]
        reducer = cuda.reduce(fn)
        flat = args[0].reshape(args[0].size)
        found["numba cuda.reduce"] = lambda: reducer(flat)
    return found


def _cupy_calls(cupy, problem: Problem, xs):
    if problem.kind == "matmul":
        A, B = xs
        return {"cuBLAS (cupy)": lambda: A @ B}
    op, axis = problem.family["op"], problem.family["axis"]
    if op == "dot":
        if axis is None:
            a, b = xs[0].ravel(), xs[1].ravel()
            return {"cupy.dot": lambda: cupy.dot(a, b), "cupy (a*b).sum": lambda: (xs[0] * xs[1]).sum()}
        return {"cupy (a*b).sum": lambda: (xs[0] * xs[1]).sum(axis=axis)}
    fn = getattr(cupy, op)
    return {f"cupy.{op}": lambda: fn(xs[0], axis=axis)}


def _torch_calls(torch, problem: Problem, ts):
    if problem.kind == "matmul":
        A, B = ts
        return {"cuBLAS (torch)": lambda: A @ B}
    op, axis = problem.family["op"], problem.family["axis"]
    if op == "dot":
        if axis is None:
            a, b = ts[0].ravel(), ts[1].ravel()
            return {"torch.dot": lambda: torch.dot(a, b)}
        return {"torch (a*b).sum": lambda: (ts[0] * ts[1]).sum(dim=axis)}
    if axis is None:
        fn = {"sum": torch.sum, "max": torch.max, "min": torch.min}[op]
        return {f"torch.{op}": lambda: fn(ts[0])}
    fn = {"sum": lambda t: t.sum(dim=axis), "max": lambda t: t.amax(dim=axis), "min": lambda t: t.amin(dim=axis)}[op]
    return {f"torch.{op}": lambda: fn(ts[0])}


def bench_problem(problem: Problem, folder: Path, flusher) -> list[dict]:
    """Rows for one problem: ours (tuned, seeds) and the peers, each timed the same way."""
    rng = np.random.default_rng()
    inst = Instance(problem, rng)
    params, note = choose(problem, folder)
    rows = []
    space = load_space(problem.kind)
    seeds = [(name, space.restrict(p, dtype=problem.dtype, family=problem.family)) for name, p in SEEDS[problem.kind]]
    for name, p in [("autotune" + (" (untuned)" if note and "default" in note else ""), params), *seeds]:
        kernel = build_kernel(problem.kind, p, problem.dtype, **problem.family)
        error = inst.check(kernel)
        if error:
            rows.append({"name": name, "error": error})
            continue
        t = bench(lambda: inst.run(kernel, timing=True), flush=flusher)
        res = ResourceReport.from_dispatcher(kernel.kernel, current_device().cc)
        rows.append({"name": name, "timing": t, "registers": res.registers, "local": res.stack_bytes, "params": p})
    for name, call in peers(problem, inst.time_args).items():
        try:
            rows.append({"name": name, "timing": bench(call, flush=flusher)})
        except Exception as exc:  # a peer that cannot run this shape is reported, not fatal
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    return rows


def compile_ahead(problems: list[Problem], folder: Path) -> None:
    """Compile every kernel the suite will time in parallel CPU processes first, so that the timing process
    loads them from Numba's disk cache instead of compiling one after another (up to a minute each)."""
    jobs = []
    for problem in problems:
        space = load_space(problem.kind)
        for _, p in [("tuned", choose(problem, folder)[0]), *SEEDS[problem.kind]]:
            jobs.append(job(problem, space.restrict(p, dtype=problem.dtype, family=problem.family)))
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    print(f"compiling {len(jobs)} kernels in {workers} processes", file=sys.stderr, flush=True)
    with compile_pool(workers) as pool:
        for result in pool.map(compile_variant, jobs):
            if not result["ok"]:
                print(result["reason"], file=sys.stderr)


def bench_name(problem: Problem) -> str:
    """File name stem of a bench: one per kind, op, axis and dtype, so different runs do not overwrite."""
    dtype = "" if problem.dtype == "float32" else f"-{problem.dtype}"
    if problem.kind == "matmul":
        return "matmul" + dtype
    axis = problem.family["axis"]
    return f"reduce-{problem.family['op']}" + ("" if axis is None else f"-axis{axis}") + dtype


def run_suite(problems: list[Problem], db: str | None, out_dir: str) -> str:
    device = current_device()
    folder = database_folder(db)
    flusher = L2Flusher()
    compile_ahead(problems, folder)
    sections, plot_data = [], []
    for problem in problems:
        print(f"bench {problem.key}", file=sys.stderr, flush=True)
        rows = bench_problem(problem, folder, flusher)
        sections.append(_section(problem, rows, device))
        plot_data.append((problem, rows))
        print(sections[-1] + "\n", flush=True)
    kind = problems[0].kind
    name = bench_name(problems[0])
    command = "autotune " + " ".join(sys.argv[1:])
    header = (f"# autotune bench {kind} on {device.name}\n\n"
              f"Date {datetime.date.today().isoformat()}; {versions()}; command: `{command}`.\n"
              f"Times: median of CUDA-event timings of single calls, L2 flushed (2x L2 overwritten) before each and "
              f"the call queued behind a 200 us GPU sleep (GPU time only, host launch time hidden), after warm-up; "
              f"every autotune variant was first checked exactly against float64 NumPy.\n")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{device.slug}-{name}.md"
    md.write_text(header + "\n" + "\n\n".join(sections) + "\n")
    plotted = _plot(plot_data, device, out / f"{device.slug}-{name}.png")
    print(f"wrote {md}" + (f" and {plotted}" if plotted else " (matplotlib not installed: no plot)"))
    return str(md)


def _reference_row(problem: Problem, rows: list[dict]) -> dict | None:
    names = ("cuBLAS (cupy)", "cuBLAS (torch)") if problem.kind == "matmul" else ("cupy.sum", "cupy.max", "cupy.min",
                                                                                  "cupy.dot", "cupy (a*b).sum")
    for row in rows:
        if row["name"] in names and "timing" in row:
            return row
    return None


def _section(problem: Problem, rows: list[dict], device) -> str:
    ref = _reference_row(problem, rows)
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["name"], "error", None, None, None, None, None, r["error"][:80]])
            continue
        ms = r["timing"].median_ms
        rate = problem.rate(ms / 1e3)
        peak = fraction_of_peak(problem, rate, device)
        ratio = ref["timing"].median_ms / ms if ref else None
        body.append([r["name"], ms, f"{rate:.4g} {problem.unit}", f"{100 * peak:.1f}%" if peak else None,
                     f"{ratio:.2f}x" if ratio else None, r.get("registers"), r.get("local"),
                     f"spread {100 * r['timing'].spread:.1f}%, {r['timing'].reps} reps"])
    return (f"## {problem.key}\n\n"
            + table(["kernel", "ms", "rate", "of peak", f"vs {ref['name'] if ref else '-'}", "registers",
                     "local B", "notes"], body)
            + "\n\n(local B: local memory per thread, stack frame plus spills, as the driver reports it)")


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
