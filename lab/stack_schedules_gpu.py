"""Stacks of matrices on the TMA-fed wgmma kernel with a block per SM walking the tiles of every matrix (SCHEDULE
persistent on a batched problem), checked and timed against the same tiles with a block per tile, beside
`torch.bmm` in the same process.

    python lab/stack_schedules_gpu.py [RESULTS_DIR] [--dtype float16 bfloat16]

Checks: persistent variants (64 x 128 in 4 and 8 stages, 128 x 128, 128 x 256 storing C a part of its columns at a
time) on stacks with tiles overhanging M, N and K, fewer tiles than SMs and many times more, through the family's
oracle (integer data exact, normal data within its error bound; the same stack against one broadcast matrix), the
output poisoned with NaN first; and a stack of two batch levels against float64 NumPy. Times: issue 54's stacks
(256 x 128^3, 32 x 512^3, 8 x 2048^3), each with the database's entry for it (its tiles as they are, then the same
tiles persistent) and `torch.bmm`, as `autotune bench` times (CUDA events, L2 flushed, median). Writes
stack-schedules.json to RESULTS_DIR; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from variant_times import database_entries, oracle_errors, print_table, timed_row

TMA = {"BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1}
PERSISTENT = [{**TMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 4, "SCHEDULE": "persistent", "GROUP_M": 8},
              {**TMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 8, "SCHEDULE": "persistent", "GROUP_M": 1},
              {**TMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 4, "SCHEDULE": "persistent", "GROUP_M": 8},
              {**TMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "SCHEDULE": "persistent", "GROUP_M": 16}]
CHECKED = [(3, 130, 150, 72), (1, 64, 64, 64), (300, 70, 33, 100), (16, 1000, 333, 555), (256, 128, 128, 128)]
TIMED = [(256, 128, 128, 128), (32, 512, 512, 512), (8, 2048, 2048, 2048)]


def stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    """A stack as a layout stores it: each matrix C-contiguous, or the transpose of a C-contiguous one."""
    return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x


def checks(dtype: str, rng) -> list[dict]:
    from autotune.core.problem import Problem
    from autotune.runtime import arrays
    from autotune.runtime.build import build_kernel

    rows = []
    for params in PERSISTENT:
        for layout in ("nn", "tt"):
            kernel = build_kernel("matmul", params, dtype, layout=layout, batch="strided")
            for shape in CHECKED:
                problem = Problem("matmul", shape, dtype, {"layout": layout, "batch": "strided"})
                rows += [{"params": params, "layout": layout, "shape": shape, "error": error}
                         for error in oracle_errors(kernel, problem, rng)]
            A = rng.integers(-3, 4, (2, 1, 70, 96)).astype(dtype)  # two batch levels: (2, 1) against (3,)
            B = rng.integers(-3, 4, (3, 96, 40)).astype(dtype)
            C = kernel(*(arrays.host_to_device(stored(x, t == "t")) for x, t in zip((A, B), layout)))
            got = arrays.device_to_host(C).astype(np.float64)
            want = (A.astype(np.float64) @ B.astype(np.float64)).astype(dtype).astype(np.float64)
            rows.append({"params": params, "layout": layout, "shape": "(2, 1, 70, 96) @ (3, 96, 40)",
                         "error": None if np.array_equal(got, want) else "differs from NumPy"})
    return rows


def timings(dtype: str) -> list[dict]:
    from autotune.core.problem import Problem

    entries = database_entries()
    rows = []
    for shape in TIMED:
        problem = Problem("matmul", shape, dtype, {"layout": "nn", "batch": "strided"})
        entry = entries.get(problem.key)
        given = dict(entry.params) if entry else {**TMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 8}
        variants = {"entry" if entry else "64x128 tile": given}
        if given.get("TMA"):
            variants["persistent"] = {**given, "SCHEDULE": "persistent", "SPLIT_K": 1}
        variants = {label: {k: v for k, v in params.items() if not (k == "SPLIT_ADD" and params.get("SPLIT_K", 1) == 1)}
                    for label, params in variants.items()}
        rows.append(timed_row(problem, variants))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=".")
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    a = ap.parse_args()
    rng = np.random.default_rng(54)
    found = {dtype: {"checks": checks(dtype, rng), "timings": timings(dtype)} for dtype in a.dtype}
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "stack-schedules.json"), "w") as f:
        json.dump(found, f, indent=1, default=str)
    wrong = [(d, r) for d, f in found.items() for r in f["checks"] if r["error"]]
    for dtype, row in wrong[:20]:
        print("WRONG", dtype, row)
    print(f"checks: {sum(len(f['checks']) for f in found.values())}, wrong: {len(wrong)}")
    print_table([row for f in found.values() for row in f["timings"]])
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
