"""The K split that ``fit_config`` gives a wgmma choice (``_wgmma_split``) timed against the choice as the rule's
portfolio holds it, on the held-out shapes where the two differ, beside cuBLAS in the same process.

    python lab/wgmma_split_ab.py [RESULTS_DIR] [--case f16 bf16 tf32 3xtf32] [--list]

For each case: the fitted rule of this GPU model in tuned_db/, and every shape of the family's held-out set
(`autotune coverage matmul --dtype D --list --set held-out`) whose choice the split changes. Both forms are checked
through the family's oracle (output poisoned with NaN first), then timed as `autotune bench` times (CUDA events,
L2 flushed, median), then cuBLAS through PyTorch (with TF32 on for tf32). `--list` prints the pairs without a GPU.
Writes wgmma-split-ab.json to RESULTS_DIR; prints a table last (per case: the geometric mean of given / split).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from autotune.core.device import current_device
from autotune.core.problem import Problem
from autotune.core.registry import family
from autotune.core.space import load_space
from autotune.runtime.db import database_folders, db_path, load_file
from autotune.runtime.rules import rule_for

CASES = {"f16": ("float16", {}), "bf16": ("bfloat16", {}), "tf32": ("float32", {"precision": "tf32"}),
         "3xtf32": ("float32", {"precision": "3xtf32"})}


def pairs(case: str, device, files) -> list[tuple[Problem, dict, dict]]:
    """(problem, the choice as given, the choice fitted) for each held-out shape where the fit changes the split."""
    dtype, extra = CASES[case]
    args = {"layout": "nn", **extra}
    space = load_space("matmul")
    found = []
    for shape in family("matmul").shape_set("held-out", dtype, args):
        problem = Problem("matmul", shape, dtype, args)
        ruled = rule_for(problem, files)
        if ruled is None:
            continue
        given = space.validate(ruled[0].choice(problem.shape), dtype=dtype, args=problem.args)
        fitted = problem.impl.fit_config(given, problem, device, space)
        if given.get("WGMMA") and given.get("SPLIT_K", 1) != fitted.get("SPLIT_K", 1):
            found.append((problem, given, fitted))
    return found


def timed(problem: Problem, params: dict, inst, flusher) -> dict:
    from autotune.runtime.build import build_kernel
    from autotune.tuning.measure import bench

    kernel = build_kernel("matmul", params, problem.dtype, **problem.args)
    error = inst.check(kernel)
    if error:
        return {"error": error}
    return {"ms": bench(lambda: inst.run(kernel, timing=True), flush=flusher).median_ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=".")
    ap.add_argument("--case", nargs="+", choices=sorted(CASES), default=["f16", "bf16", "tf32"])
    ap.add_argument("--list", action="store_true", help="print the pairs only (no GPU needed)")
    ap.add_argument("--device-name", help="the GPU model whose database to read with --list (default: this GPU)")
    a = ap.parse_args()
    device = None if a.device_name else current_device()
    name = a.device_name or device.name
    files = [load_file(p) for p in (db_path(f, name) for f in database_folders(None)) if p.exists()]
    if device is None:  # no GPU needed: that model's database file says its SM count
        from autotune.core.device import DeviceInfo

        device = DeviceInfo.from_record(files[0].device)
    found = {case: pairs(case, device, files) for case in a.case}
    if a.list:
        for case, rows in found.items():
            for problem, given, fitted in rows:
                print(f"{case} {'x'.join(map(str, problem.shape))}: {given['BM']}x{given['BN']} split "
                      f"{given.get('SPLIT_K', 1)} -> {fitted.get('SPLIT_K', 1)}")
        return 0
    import numpy as np

    from autotune.tuning.instance import Instance
    from autotune.tuning.measure import bench, l2_flusher

    flusher, rows, table = l2_flusher(), [], []
    for case, cases in found.items():
        ratios = []
        for problem, given, fitted in cases:
            inst = Instance(problem, np.random.default_rng())
            before, after = timed(problem, given, inst, flusher), timed(problem, fitted, inst, flusher)
            peers = {}
            for peer, call in problem.impl.peers(problem, inst.time_args).items():
                peers[peer] = bench(call, flush=flusher).median_ms
            cublas = min(peers.values()) if peers else None
            rows.append({"case": case, "problem": problem.key, "given": given, "fitted": fitted, "before": before,
                         "after": after, "peers": peers})
            if "ms" in before and "ms" in after:
                ratios.append(before["ms"] / after["ms"])
                table.append(f"| {case} | {'x'.join(map(str, problem.shape))} | {given.get('SPLIT_K', 1)} -> "
                             f"{fitted.get('SPLIT_K', 1)} | {before['ms']:.4g} | {after['ms']:.4g} | "
                             f"{before['ms'] / after['ms']:.2f}x | "
                             + (f"{cublas / before['ms']:.2f}x -> {cublas / after['ms']:.2f}x |" if cublas else "- |"))
            else:
                table.append(f"| {case} | {'x'.join(map(str, problem.shape))} | wrong or failed: {before} {after} |")
        if ratios:
            table.append(f"| {case} | geometric mean over {len(ratios)} | | | | "
                         f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x | |")
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "wgmma-split-ab.json"), "w") as f:
        json.dump({"device": device.name, "rows": rows}, f, indent=1)
    print(f"wgmma K split on {device.name} (ms, CUDA events, L2 flushed, medians; cuBLAS through PyTorch)")
    print("| case | M x N x K | split | as given | fitted | given / fitted | vs cuBLAS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(table))
    return 1 if any("error" in r["before"] or "error" in r["after"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
