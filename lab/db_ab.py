"""On a GPU: each entry of another database file against this GPU's committed entry for the same problem.

    python lab/db_ab.py NEW.yaml [--entries PREFIX] [--rounds 3] [--out FILE.md]

Answers whether a tuning run (e.g. the default suite tuned from an empty database) found winners as fast as the
committed ones, measured in the same process rather than compared with times recorded on other days. Both
configurations of each problem are compiled ahead in parallel processes (Numba's disk cache), checked by the
family's oracle on fresh data (a wrong one stops the run) and timed in ``--rounds`` alternating rounds with
autotune's own method (CUDA events, L2 flushed before each call, median over ~100 ms). Reported per problem: the
median of the round medians of each, new / committed, and whether the two configurations are the same.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path

from render_ab import _compile, kernels_for  # lab/ is the first entry of sys.path when run as a script
from tables import emit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pairs(new_file: Path, prefix: str) -> list[tuple[object, dict, dict]]:
    """(problem, committed params, new params) for each problem both files hold, in the new file's order."""
    from autotune.core.device import current_device
    from autotune.runtime.db import db_path, load_file

    committed = {e.problem.key: e for e in load_file(db_path(ROOT / "tuned_db", current_device().name),
                                                       strict=True).entries}
    found = []
    for e in load_file(new_file, strict=True).entries:
        if e.problem.key.startswith(prefix) and e.problem.key in committed:
            found.append((e.problem, committed[e.problem.key].params, e.params))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", type=Path, help="a database file (one GPU model's YAML)")
    ap.add_argument("--entries", default="", help="only problems whose key starts so (e.g. matmul/float32/nn)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    import numpy as np

    from autotune.core import backend
    from autotune.core.device import current_device
    from autotune.tuning.instance import Instance
    from autotune.tuning.measure import L2Flusher, bench

    work = pairs(a.new, a.entries)
    if not work:
        raise SystemExit(f"{a.new} has no problem that this GPU's committed database file holds")
    jobs = [(p.family, p.dtype, dict(p.args), params, None) for p, old, new in work for params in (old, new)]
    if not backend.simulator():  # the simulator compiles nothing
        with cf.ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 1), mp_context=mp.get_context("spawn")) as pool:
            list(pool.map(_compile, jobs))
    device, flusher, rng = current_device(), L2Flusher(), np.random.default_rng()
    rows = [f"GPU: {device.name}; {a.new} against the committed entries; {a.rounds} alternating rounds; medians of "
            "round medians (CUDA events, L2 flushed)", "",
            "| problem | committed ms | new ms | new / committed | same configuration |", "|---|---|---|---|---|"]
    for problem, old, new in work:
        kernels = [kernels_for(problem, None, params) for params in (old, new)]
        inst = Instance(problem, rng)
        for kernel in kernels:
            error = inst.check(kernel)
            if error:
                raise SystemExit(f"{problem.key}: a configuration computes a wrong result: {error}")
        times: list[list[float]] = [[], []]
        for _ in range(a.rounds):
            for side, kernel in enumerate(kernels):
                times[side].append(bench(lambda: inst.run(kernel, timing=True), flush=flusher).median_ms)
        t_old, t_new = statistics.median(times[0]), statistics.median(times[1])
        same = kernels[0].params == kernels[1].params
        rows.append(f"| {problem.key} | {t_old:.4f} | {t_new:.4f} | {t_new / t_old:.3f} | {'yes' if same else 'no'} |")
        print(rows[-1], flush=True)
    emit(rows, a.out)


if __name__ == "__main__":
    main()
