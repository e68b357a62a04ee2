"""On the GPU: each fp32 nn matmul entry of this GPU's database against the same configuration with parameters
changed, timed in alternating rounds in one process, cuBLAS (CuPy) in each round.

    python scripts/entry_ab.py --set NAME=VALUE [--set ...] [--rounds 3] [--shape 127x3000x511 ...]

(benchmarks/NOTES.md item 24 ran it as `--set CARRIED_INDEX=1` at commit 4f3e339, which had that parameter.)

Every variant is first checked against cuBLAS on NaN-poisoned output. Times: autotune.timing.bench with the
L2 flush and the lead (GPU time only), medians; the table gives each variant's median over the rounds' medians
and its registers and local memory as the driver reports them. JSON rows go to $OUT/ab.json.
"""
import argparse
import json
import os
import statistics
from pathlib import Path

import cupy as cp

from autotune.build import build_kernel
from autotune.compiler import ResourceReport
from autotune.db import db_path, load_file
from autotune.device import current_device
from autotune.evaluate import compile_variant, job
from autotune.problem import Problem
from autotune.space import load_space
from autotune.timing import L2Flusher, bench
from autotune.worker import compile_pool
from timing_probe import checked  # scripts/ is on the path when this runs as a script


def parse_value(text: str):
    return int(text) if text.lstrip("-").isdigit() else text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", required=True, help="NAME=VALUE applied to each entry")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", action="append", default=[])
    a = ap.parse_args()
    change = {name: parse_value(value) for name, value in (s.split("=", 1) for s in a.set)}
    device = current_device()
    entries = [e for e in load_file(db_path(Path("tuned_db"), device.name), strict=True).entries
               if e.problem.kind == "matmul" and e.problem.dtype == "float32" and e.problem.family["layout"] == "nn"]
    if a.shape:
        entries = [e for e in entries if "x".join(map(str, e.problem.shape)) in a.shape]
    space = load_space("matmul")
    pairs = []
    for e in entries:
        changed = {**e.params, **change}
        try:
            space.validate(changed, dtype="float32", family={"layout": "nn"})
        except ValueError as exc:
            print(f"{e.problem.shape}: skipped ({exc})")
            continue
        pairs.append((e.problem.shape, e.params, changed))
    if not pairs:
        raise SystemExit(f"no fp32 nn matmul entry of {device.name} takes {change}")
    jobs = [job(Problem("matmul", s, "float32", {"layout": "nn"}), p) for s, *ps in pairs for p in ps]
    with compile_pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        for result in pool.map(compile_variant, jobs):
            if not result["ok"]:
                print(result["reason"])
    flush = L2Flusher()
    rows = []
    for shape, base, changed in pairs:
        M, N, K = shape
        rng = cp.random.default_rng(0)
        A = rng.standard_normal((M, K), dtype=cp.float32)
        B = rng.standard_normal((K, N), dtype=cp.float32)
        C = cp.empty((M, N), dtype=cp.float32)
        calls = {}
        for name, params in (("entry", base), ("changed", changed)):
            k = build_kernel("matmul", params)
            checked(k, A, B, C)
            report = ResourceReport.from_dispatcher(k.kernel, device.cc)
            calls[name] = (lambda k=k: k(A, B, out=C), report)
        calls["cupy"] = (lambda: cp.matmul(A, B, out=C), None)
        medians = {name: [] for name in calls}
        for _ in range(a.rounds):
            for name, (call, _) in calls.items():
                medians[name].append(bench(call, flush=flush).median_ms)
        for name, (_, report) in calls.items():
            rows.append({"shape": "x".join(map(str, shape)), "name": name, "ms": statistics.median(medians[name]),
                         "rounds": medians[name], "registers": report.registers if report else None,
                         "local": report.stack_bytes if report else None})
            print(json.dumps(rows[-1]), flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "ab.json").write_text(json.dumps({"device": device.name, "change": change, "rows": rows}, indent=1))
    print(f"\n{device.name}; change {change}; median of {a.rounds} round medians (ms)")
    print("| shape | entry | changed | changed/entry | cuBLAS | entry regs | changed regs |")
    print("|---|---|---|---|---|---|---|")
    for i in range(0, len(rows), 3):
        e, c, b = rows[i:i + 3]
        print(f"| {e['shape']} | {e['ms']:.4f} | {c['ms']:.4f} | {c['ms'] / e['ms']:.3f} | {b['ms']:.4f} | "
              f"{e['registers']}/{e['local']} | {c['registers']}/{c['local']} |")


if __name__ == "__main__":
    main()
