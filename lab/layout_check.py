"""On a GPU: the seeds and this GPU's 1000^3 matmul configurations on the transposed layouts, checked as the selftest does.

    python lab/layout_check.py

For layouts tn, nt and tt: the naive and shared16 seeds and this GPU model's committed fp32 and fp64 1000^3
configurations, on the selftest's seven matmul shapes, each with a fresh NaN-poisoned output and with `out=`
overlapping the first input. A short version of `autotune selftest --kind matmul` (which takes about half an hour
on all layouts) for the transposed-operand path.
"""
import time
from pathlib import Path

import numpy as np

from autotune.commands.selftest import _check, _check_overlapping
from autotune.core.device import current_device
from autotune.core.problem import Problem
from autotune.runtime.build import build_kernel
from autotune.runtime.db import db_path, load_file

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(1, 1, 1), (7, 13, 5), (37, 29, 41), (17, 19, 1), (130, 3, 9), (257, 263, 129), (1000, 1000, 1000)]


def main() -> None:
    path = db_path(ROOT / "tuned_db", current_device().name)
    entries = {e.problem.key: e.params for e in load_file(path, strict=True).entries}
    variants = [("float32", {"strategy": "naive"}), ("float32", {"strategy": "shared16"})] + [
        (dtype, entries[f"matmul/{dtype}/nn/1000x1000x1000"]) for dtype in ("float32", "float64")
        if f"matmul/{dtype}/nn/1000x1000x1000" in entries]
    rng = np.random.default_rng()
    rows, failures = [], 0
    for layout in ("tn", "nt", "tt"):
        for dtype, params in variants:
            t0 = time.time()
            kernel = build_kernel("matmul", params, dtype, layout=layout)
            checks = bad = 0
            for shape in SHAPES:
                problem = Problem("matmul", shape, dtype, {"layout": layout})
                for check in (_check, _check_overlapping):
                    try:
                        error = check(kernel, problem, rng)
                    except Exception as exc:  # a launch failure is a failed check
                        error = f"{type(exc).__name__}: {exc}"
                    checks += 1
                    if error:
                        bad += 1
                        print("FAIL", problem.key, params, error[:300], flush=True)
            failures += bad
            name = params.get("strategy", "tiled") + (f" MMA {params['MMA']}" if params.get("MMA") else "")
            rows.append(f"| {layout} | {dtype} | {name} | {checks} | {bad} | {time.time() - t0:.1f} |")
            print(rows[-1], flush=True)
    print("\n| layout | dtype | variant | checks | failures | s |\n|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(f"failures: {failures}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
