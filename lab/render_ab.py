"""On a GPU: every committed winner's current render against a saved render set, timed in one process.

    python lab/render_ab.py --export REV DIR          # on a machine with the git history: save REV's golden renders
    python lab/render_ab.py --save-current DIR        # save the current templates' renders of the committed winners
    python lab/render_ab.py --before DIR [--candidate NAME=DIR ...] [--entries PREFIX[,PREFIX...]] [--rounds 3]
                            [--out FILE.md]
    python lab/render_ab.py --nan-cost [--out FILE.md]  # max/min against nanmax/nanmin, same configuration

For each distinct configuration of this GPU model's committed entries, both versions are compiled ahead in
parallel processes (Numba's disk cache), checked by the family's oracle on fresh data (a wrong version stops the
run), then timed in ``--rounds`` alternating rounds (with ``--candidate``, saved render sets take the place of the
current renders, several at once) with autotune's own method (CUDA events, L2 flushed before
each call, the call queued behind a short GPU sleep, median over ~100 ms). Reported: the median of the round
medians of each and their ratio (after / before), with each version's registers. ``--nan-cost`` does the same for
each max/min entry against the NaN-ignoring op with the identical configuration: what propagating NaN costs.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tables import emit  # lab/ is the first entry of sys.path when run as a script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def export(rev: str, folder: Path) -> None:
    import yaml

    show = lambda path: subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,  # noqa: E731
                                       capture_output=True, text=True).stdout
    index = yaml.safe_load(show("tests/golden/index.yaml"))
    (folder / "renders").mkdir(parents=True, exist_ok=True)
    (folder / "index.yaml").write_text(yaml.safe_dump(index))
    for sha in set(index.values()):
        (folder / "renders" / f"{sha}.py").write_text(show(f"tests/golden/renders/{sha}.py"))
    print(f"saved {len(index)} renders of {rev} in {folder}")


def save_current(folder: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import golden

    golden.GOLDEN = folder
    golden.write(golden.current_renders())
    print(f"saved the current renders in {folder}")


def pairs(before: Path | None, prefix: str, nan_cost: bool) -> list[tuple[str, object, str | None, dict]]:
    """(label, problem, before source or None, after arguments) per distinct configuration of this GPU's entries."""
    import yaml

    from autotune.core.device import current_device
    from autotune.core.problem import Problem
    from autotune.runtime.db import db_path, load_file

    path = db_path(ROOT / "tuned_db", current_device().name)
    index = yaml.safe_load((before / "index.yaml").read_text()) if before else {}
    found, seen = [], set()
    for e in load_file(path, strict=True).entries:
        p = e.problem
        wanted = any(p.key.startswith(one) for one in prefix.split(","))
        if not wanted or (nan_cost and p.args.get("op") not in ("max", "min")):
            continue
        config = (p.family, p.dtype, repr(sorted(p.args.items(), key=str)), repr(sorted(e.params.items())))
        if config in seen:
            continue
        seen.add(config)
        if nan_cost:
            other = Problem(p.family, p.shape, p.dtype, {**p.args, "op": "nan" + p.args["op"]})
            found.append((p.key, p, None, {"params": e.params, "problem": other}))
        else:
            sha = index[f"{path.name}: {p.key} gpu"]
            found.append((p.key, p, (before / "renders" / f"{sha}.py").read_text(), {"params": e.params}))
    return found


def _compile(job) -> str:
    """Compile one version in a fresh process, filling the disk cache for the timing process."""
    kind, dtype, family, params, source = job
    from autotune.core.registry import family as family_named
    from autotune.runtime.build import build_kernel
    from autotune.runtime.compiler import compile_as_launched, load_source

    kernel = build_kernel(kind, params, dtype, **family)
    if source is not None:
        kernel = family_named(kind).make_kernel(load_source(source), kernel.params, dtype, kernel.args, source, False)
    compile_as_launched(kernel.entry, kernel.signature)
    return kind


def kernels_for(problem, source, params):
    from autotune.runtime.build import build_kernel
    from autotune.runtime.compiler import load_source

    kernel = build_kernel(problem.family, params, problem.dtype, **problem.args)
    if source is None:
        return kernel
    return problem.impl.make_kernel(load_source(source), kernel.params, problem.dtype, kernel.args, source, False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", nargs=2, metavar=("REV", "DIR"))
    ap.add_argument("--before", type=Path)
    ap.add_argument("--nan-cost", action="store_true")
    ap.add_argument("--save-current", type=Path)
    ap.add_argument("--candidate", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--entries", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.export:
        export(a.export[0], Path(a.export[1]))
        return
    if a.save_current:
        save_current(a.save_current)
        return
    if a.candidate:
        compare_sets(a)
        return
    import numpy as np

    from autotune.core.device import current_device
    from autotune.runtime.compiler import ResourceReport
    from autotune.tuning.instance import Instance
    from autotune.tuning.measure import L2Flusher, bench

    work = pairs(a.before, a.entries, a.nan_cost)
    jobs = []
    for _, problem, source, after in work:
        other = after.get("problem", problem)
        jobs.append((problem.family, problem.dtype, dict(problem.args), after["params"], source))
        jobs.append((other.family, other.dtype, dict(other.args), after["params"], None))
    with cf.ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 1), mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    device, flusher, rng = current_device(), L2Flusher(), np.random.default_rng()
    header = ("| entry | before ms | after ms | after / before | registers before / after |" if not a.nan_cost else
              "| entry | NaN-propagating ms | NaN-ignoring ms | propagating / ignoring | registers |")
    rows = [f"GPU: {device.name}; {a.rounds} alternating rounds; medians of round medians (CUDA events, L2 flushed)",
            "", header, "|---|---|---|---|---|"]
    for label, problem, source, after in work:
        other = after.get("problem", problem)
        first = kernels_for(problem, source if not a.nan_cost else None, after["params"])
        second = kernels_for(other, None, after["params"])
        instances = [Instance(problem, rng), Instance(other, rng) if other is not problem else None]
        for kernel, inst in ((first, instances[0]), (second, instances[1] or instances[0])):
            error = inst.check(kernel)
            if error:
                raise SystemExit(f"{label}: a version computes a wrong result: {error}")
        times = {0: [], 1: []}
        for _ in range(a.rounds):
            for side, (kernel, inst) in enumerate(((first, instances[0]), (second, instances[1] or instances[0]))):
                times[side].append(bench(lambda: inst.run(kernel, timing=True), flush=flusher).median_ms)
        t0, t1 = statistics.median(times[0]), statistics.median(times[1])
        regs = [ResourceReport.from_dispatcher(k.entry, device.cc).registers for k in (first, second)]
        ratio = t1 / t0 if not a.nan_cost else t0 / t1
        rows.append(f"| {label} | {t0:.4f} | {t1:.4f} | {ratio:.3f} | {regs[0]} / {regs[1]} |")
        print(rows[-1], flush=True)
    emit(rows, a.out)


def compare_sets(a) -> None:
    """The baseline set against each candidate set, every version of an entry timed in the same rounds."""
    import numpy as np
    import yaml

    from autotune.core.device import current_device
    from autotune.runtime.compiler import ResourceReport
    from autotune.tuning.instance import Instance
    from autotune.tuning.measure import L2Flusher, bench

    sets = [("before", a.before)] + [tuple(c.split("=", 1)) for c in a.candidate]
    sets = [(name, Path(folder)) for name, folder in sets]
    indexes = {name: yaml.safe_load((folder / "index.yaml").read_text()) for name, folder in sets}
    work = pairs(a.before, a.entries, False)
    source = lambda name, folder, label: (folder / "renders" / f"{indexes[name][label]}.py").read_text()  # noqa
    from autotune.runtime.db import db_path

    file_name = db_path(ROOT / "tuned_db", current_device().name).name
    jobs = [(p.family, p.dtype, dict(p.args), after["params"], source(name, folder, f"{file_name}: {label} gpu"))
            for label, p, _, after in work for name, folder in sets]
    with cf.ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 1), mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    device, flusher, rng = current_device(), L2Flusher(), np.random.default_rng()
    names = [name for name, _ in sets]
    rows = [f"GPU: {device.name}; {a.rounds} alternating rounds; medians of round medians (CUDA events, L2 flushed)",
            "", "| entry | " + " | ".join(f"{n} ms" for n in names) + " | " +
            " | ".join(f"{n} / before" for n in names[1:]) + " | registers |", "|" + "---|" * (2 * len(names) + 1)]
    for label, problem, _, after in work:
        kernels = [kernels_for(problem, source(name, folder, f"{file_name}: {label} gpu"), after["params"])
                   for name, folder in sets]
        inst = Instance(problem, rng)
        for name, kernel in zip(names, kernels):
            error = inst.check(kernel)
            if error:
                raise SystemExit(f"{label} {name}: wrong result: {error}")
        times = [[] for _ in kernels]
        for _ in range(a.rounds):
            for side, kernel in enumerate(kernels):
                times[side].append(bench(lambda: inst.run(kernel, timing=True), flush=flusher).median_ms)
        medians = [statistics.median(t) for t in times]
        regs = [ResourceReport.from_dispatcher(k.entry, device.cc).registers for k in kernels]
        rows.append(f"| {label} | " + " | ".join(f"{m:.4f}" for m in medians) + " | " +
                    " | ".join(f"{m / medians[0]:.3f}" for m in medians[1:]) + f" | {' / '.join(map(str, regs))} |")
        print(rows[-1], flush=True)
    emit(rows, a.out)


if __name__ == "__main__":
    main()
