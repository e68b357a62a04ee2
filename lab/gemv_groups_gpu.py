"""The gemv kernel with K shared by groups of warps of a block (KW > 1, their sums meeting in shared memory)
checked on the GPU, then timed against the same kernel with K split over blocks (a zeroed C, or for a 16-bit C a
float32 workspace and a second kernel) and the database's entry, beside cuBLAS through PyTorch in one process.

    python lab/gemv_groups_gpu.py [RESULTS_DIR] [--check-only]

Checks: KW of 2 to 16 in both forms (the matrix's rows along K or along C's long side), every dtype, shapes with
an odd long side, K no multiple of any step, a short side taken in two passes (the barrier that ends each pass),
split K on top and a stack; each through the family's oracle (integer data exact, normal data within its error
bound), the output poisoned with NaN first. Times: issue 54's vector products (M or N of 1, 8192 and 16384
square) in float16, bfloat16 and float32: the database's entry, then each gemv start of the space with 16-byte
loads fitted to the problem by K split and by groups (matmul.problem_starts), as `autotune bench` times (CUDA
events, L2 flushed, median). Writes gemv-groups.json to RESULTS_DIR; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from variant_times import database_entries, oracle_errors, print_table, timed_row

BASE = {"GEMV": 1, "BLOCK": 256, "TL": 1, "TS": 1, "UNROLL_K": 2, "SPLIT_K": 1}
CHECKED = [  # (parameters, dtype, layout, shape)
    ({**BASE, "KT": 32, "KW": 8, "VEC": 4}, "float32", "nn", (1001, 1, 4099)),          # rows, a warp per row
    ({**BASE, "KT": 8, "KW": 8, "VEC": 8}, "float16", "nn", (1, 4097, 3001)),           # cols, no split
    ({**BASE, "KT": 4, "KW": 8, "VEC": 8, "SPLIT_K": 4}, "float16", "nn", (3, 2053, 4001)),  # cols, + workspace
    ({**BASE, "KT": 8, "KW": 4, "VEC": 8, "TS": 2}, "bfloat16", "nn", (5, 1029, 777)),  # cols, passes of 2
    ({**BASE, "KT": 1, "KW": 8, "VEC": 4, "TS": 4, "TL": 2}, "float32", "tn", (9, 3001, 517)),  # cols, no shuffles
    ({**BASE, "KT": 16, "KW": 16, "BLOCK": 512, "VEC": 2}, "float64", "nt", (777, 3, 2001)),  # rows, 16 groups
    ({**BASE, "KT": 32, "KW": 4, "VEC": 8, "SPLIT_K": 2}, "bfloat16", "nt", (2, 999, 4097)),  # rows, side m
]
STACKED = ({**BASE, "KT": 8, "KW": 4, "VEC": 8}, "float16", "nn", (6, 1, 1031, 2049))
TIMED = [("float16", (1, 8192, 8192)), ("float16", (1, 16384, 16384)), ("float16", (8192, 1, 8192)),
         ("bfloat16", (1, 8192, 8192)), ("float32", (1, 8192, 8192)), ("float32", (8192, 1, 8192))]


def checks(rng) -> list[dict]:
    from autotune.core.problem import Problem
    from autotune.runtime.build import build_kernel

    rows = []
    for params, dtype, layout, shape in CHECKED + [STACKED]:
        problem = Problem("matmul", shape, dtype, {"layout": layout})
        kernel = build_kernel("matmul", params, dtype, **problem.args)
        errors = [e for e in oracle_errors(kernel, problem, rng) if e]
        rows.append({"params": params, "dtype": dtype, "layout": layout, "shape": shape,
                     "error": errors[0] if errors else None})
        print("case", problem.key, params, "WRONG " + errors[0] if errors else "ok", flush=True)
    return rows


def variants(problem, entries: dict) -> dict[str, dict | None]:
    """The entry for the problem (of ``entries``, the database's), then each gemv start fitted by K split and by
    groups, each named by its fit."""
    from autotune.core.device import current_device
    from autotune.core.dtypes import numpy_dtype
    from autotune.core.space import load_space

    device, space = current_device(), load_space("matmul")
    found: dict[str, dict | None] = {}
    if problem.key in entries:
        found["entry"] = dict(entries[problem.key].params)
    for start in space.starts:
        start = space.checked_or_none(start, dtype=problem.dtype, args=problem.args)
        if not start or not start.get("GEMV") or start["VEC"] * numpy_dtype(problem.dtype).itemsize != 16:
            continue
        for form in problem.impl.problem_starts(start, problem, device, space)[:2]:
            form = space.checked_or_none(form, dtype=problem.dtype, args=problem.args)
            if form:
                label = "KT{KT} KW{KW} VEC{VEC} TS{TS} split{SPLIT_K}".format(**form)
                found.setdefault(label, form)
    return found


def main() -> int:
    from autotune.core.problem import Problem

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=".")
    ap.add_argument("--check-only", action="store_true")
    a = ap.parse_args()
    found = {"checks": checks(np.random.default_rng(54))}
    wrong = [r for r in found["checks"] if r["error"]]
    print(f"checks: {len(found['checks'])}, wrong: {len(wrong)}", flush=True)
    if not a.check_only:
        entries = database_entries()
        found["timings"] = [timed_row(problem, variants(problem, entries)) for problem in
                            (Problem("matmul", shape, dtype) for dtype, shape in TIMED)]
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "gemv-groups.json"), "w") as f:
        json.dump(found, f, indent=1, default=str)
    print_table(found.get("timings", []))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
