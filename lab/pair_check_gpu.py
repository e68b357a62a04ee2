"""Blocks in clusters of two sharing A's rows (CLUSTER 2: each copies half of them into both by TMA multicast)
checked on a Hopper GPU, then timed against the same tiles unpaired and cuBLAS in the same process.

    python lab/pair_check_gpu.py [RESULTS_DIR] [--dtype float16 bfloat16] [--check-only] [--hang-s 240]

The checks run in a child process under a watchdog (``--hang-s``): a pair whose barriers never complete hangs its
kernel, and the watchdog then reports the last case begun instead of waiting out the caller's time. Checks: pairs
of 64 x 128 (4 and 8 stages), 128 x 64 (8 stages, two consumer warpgroups), 128 x 128 and 128 x 256, layouts nn
and nt (the second dtype: the first pair alone, its code the same but for its types), on shapes with partial
tiles in M, N and K, an odd count of tiles along N (a pair's second block past N), rows not 16-byte aligned
(70 x 90 x 130), the suite's and issue 55's small shapes, and a stack; each through the family's oracle (integer
data exact, normal data within its error bound), the output poisoned with NaN first.
Times (the first dtype): issue 55's shapes and two stacks, each with the database's entry for it, the entry's
tiles paired, and 128 x 64 tiles in 8 stages paired and not (cuBLAS's at these sizes), beside cuBLAS through
PyTorch, as `autotune bench` times (CUDA events, L2 flushed, median).
Writes pair-check.json to RESULTS_DIR; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from variant_times import print_table

TMA = {"BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "CLUSTER": 2}
PAIRS = [{**TMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 8},
         {**TMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 8, "GROUP_M": 1},
         {**TMA, "BM": 128, "BN": 64, "ASYNC_STAGES": 8, "GROUP_M": 8},
         {**TMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 8},
         {**TMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3, "GROUP_M": 16}]
CHECKED = [(70, 90, 130), (130, 60, 72), (1000, 1000, 1000), (1024, 1024, 1024), (127, 3000, 511),
           (8, 300, 130, 200)]
TIMED = [(1024, 1024, 1024), (1000, 1000, 1000), (4096, 4096, 256), (8192, 128, 8192), (4096, 4096, 4096),
         (256, 128, 128, 128), (32, 512, 512, 512)]


def problem_of(shape, dtype: str, layout: str):
    from autotune.core.problem import Problem

    args = {"layout": layout, **({"batch": "strided"} if len(shape) == 4 else {})}
    return Problem("matmul", shape, dtype, args)


def checks(dtypes: list[str]) -> int:
    """Every pair of PAIRS on every shape of CHECKED, printing each case before it runs; 1 where one is wrong."""
    from autotune.runtime.build import build_kernel
    from variant_times import oracle_errors

    rng, wrong, count = np.random.default_rng(55), 0, 0
    for dtype in dtypes:
        for params in PAIRS if dtype == dtypes[0] else PAIRS[:1]:  # the others' code differs only in its types
            for layout in ("nn", "nt"):
                kernels = {}
                for shape in CHECKED:
                    problem = problem_of(shape, dtype, layout)
                    batched = bool(problem.args.get("batch"))
                    if batched not in kernels:
                        kernels[batched] = build_kernel("matmul", params, dtype, **problem.args)
                    print(f"case {dtype} {layout} {params['BM']}x{params['BN']}/{params['ASYNC_STAGES']} {shape}",
                          flush=True)
                    for error in oracle_errors(kernels[batched], problem, rng):
                        count += 1
                        if error:
                            wrong += 1
                            print(f"WRONG {dtype} {layout} {params} {shape}: {error}", flush=True)
    print(f"checks: {count}, wrong: {wrong}", flush=True)
    return 1 if wrong else 0


def timings(dtype: str) -> list[dict]:
    from autotune.core.space import load_space
    from variant_times import database_entries, timed_row

    space, entries = load_space("matmul"), database_entries()
    rows = []
    for shape in TIMED:
        problem = problem_of(shape, dtype, "nn")
        entry = entries.get(problem.key)
        variants = {}
        if entry is not None:
            variants["entry"] = dict(entry.params)
            paired = {**entry.params, "SCHEDULE": "tile", "SPLIT_K": 1, "CLUSTER": 2}
            paired.pop("SPLIT_ADD", None)
            variants["entry paired"] = paired
        for params in PAIRS[2:3] or PAIRS[:1]:  # cuBLAS's tiles at these sizes: 128 x 64, 8 stages, in pairs
            variants[f"pair {params['BM']}x{params['BN']}/{params['ASYNC_STAGES']}"] = params
            variants[f"{params['BM']}x{params['BN']}/{params['ASYNC_STAGES']}"] = {**params, "CLUSTER": 1}
        rows.append(timed_row(problem, {label: space.checked_or_none(params, dtype=dtype, args=problem.args)
                                        for label, params in variants.items()}))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=".")
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--hang-s", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true",
                    help="the first pair alone, on the first dtype, checked at three shapes and timed at three")
    ap.add_argument("--checks-here", action="store_true", help=argparse.SUPPRESS)  # the watched child
    a = ap.parse_args()
    if a.quick:
        global PAIRS, CHECKED, TIMED
        PAIRS, CHECKED = PAIRS[:1], [(70, 90, 130), (1024, 1024, 1024), (8, 300, 130, 200)]
        TIMED, a.dtype = [(1024, 1024, 1024), (4096, 4096, 4096), (256, 128, 128, 128)], a.dtype[:1]
    if a.checks_here:
        return checks(a.dtype)
    child = [sys.executable, os.path.abspath(__file__), "--checks-here", "--dtype", *a.dtype] + \
        (["--quick"] if a.quick else [])
    try:
        done = subprocess.run(child, capture_output=True, text=True, timeout=a.hang_s)
        log, status = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        log, status = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), "hang"
    cases = [line for line in log.splitlines() if line.startswith("case ")]
    print("\n".join(line for line in log.splitlines() if not line.startswith("case "))[-6000:])
    found = {"checks": {"status": status, "last case": cases[-1] if cases else None, "cases": len(cases)}}
    print(f"checks: {status} after {len(cases)} cases; last begun: {cases[-1] if cases else None}", flush=True)
    if status == 0 and not a.check_only:
        found["timings"] = {dtype: timings(dtype) for dtype in a.dtype[:1]}
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "pair-check.json"), "w") as f:
        json.dump(found, f, indent=1, default=str)
    print_table([row for rows in found.get("timings", {}).values() for row in rows])
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
