"""On the GPU: does host launch time leak into the timings of small matmuls, and do other configurations beat the
database's entries for the irregular shapes?

For each shape, the tuned entry and the candidates below are checked against cuBLAS (CuPy), then timed with
autotune.timing.bench (CUDA events, warm-up, L2 flushed before each run, median) two ways:
  plain  - as `autotune bench` and the tuner timed them before: flush, start event, call, end event;
  lead   - the same with a ~200 us sleeping kernel queued after the flush, so the host has queued the call before
           the GPU reaches the start event: only GPU time is measured (what timing.L2Flusher does by default
           since this probe).
cuBLAS through CuPy and PyTorch (TF32 off) is timed both ways in the same process. Kernels are compiled in
parallel CPU processes first (Numba's disk cache), as `autotune bench` does.

    python scripts/timing_probe.py            (prints a Markdown table; JSON rows to $OUT/timing_probe.json)
"""
import json
import os
from pathlib import Path

import cupy as cp

from autotune import get_best_kernel
from autotune.build import build_kernel
from autotune.evaluate import compile_variant, job
from autotune.problem import Problem
from autotune.space import load_space
from autotune.timing import L2Flusher, bench
from autotune.worker import compile_pool

BASE = {"strategy": "tiled", "VEC": 4, "A_SMEM": "kmajor", "THREAD_LAYOUT": "strided", "PREFETCH": 1,
        "INDEX_BITS": 32}
SQUARE_1024 = {**BASE, "BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4, "WARP_ROWS": 2, "UNROLL_K": 16,
               "GROUP_M": 16, "MIN_BLOCKS": 2}
BIG_16x8 = {**BASE, "BM": 256, "BN": 128, "BK": 8, "TM": 16, "TN": 8, "WARP_ROWS": 4, "UNROLL_K": 8, "GROUP_M": 8,
            "MIN_BLOCKS": 1}
MID_8x8 = {**BASE, "BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "WARP_ROWS": 4, "UNROLL_K": 16, "GROUP_M": 8,
           "MIN_BLOCKS": 2}
CANDIDATES = {
    (1000, 1000, 1000): [{**SQUARE_1024, "EDGE": e, "SPLIT_K": s} for e in ("interior", "clamp") for s in (1, 2)],
    (8192, 128, 8192): [{**BIG_16x8, "SPLIT_K": s} for s in (2, 4, 8)] + [{**MID_8x8, "SPLIT_K": s} for s in (2, 4)],
    (127, 3000, 511): [{**BASE, "BM": 128, "BN": 32, "BK": 16, "TM": 8, "TN": 4, "WARP_ROWS": 4, "UNROLL_K": 16,
                        "EDGE": "clamp", "SPLIT_K": s, "MIN_BLOCKS": 2} for s in (2, 4)]
                      + [{**BASE, "BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "WARP_ROWS": 2, "UNROLL_K": 16,
                          "EDGE": "clamp", "SPLIT_K": s, "MIN_BLOCKS": 4} for s in (1, 2)],
    (4096, 4096, 256): [],
    (1024, 1024, 1024): [],
}


def checked(kernel, A, B, C):
    C.fill(cp.nan)
    kernel(A, B, out=C)
    ref = A @ B
    err = float(cp.abs(C - ref).max() / cp.abs(ref).max())
    assert err < 1e-4 and not bool(cp.isnan(C).any()), f"{kernel.params}: relative error {err}"


def compile_all(shapes) -> None:
    space = load_space("matmul")
    jobs = [job(Problem("matmul", s, "float32", {"layout": "nn"}), space.restrict(p, dtype="float32",
                                                                                  family={"layout": "nn"}))
            for s in shapes for p in CANDIDATES[s]]
    with compile_pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        for result in pool.map(compile_variant, jobs):
            if not result["ok"]:
                print(result["reason"])


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    flush, lead = L2Flusher(lead_us=0), L2Flusher()
    compile_all(list(CANDIDATES))
    rows = []
    for shape, candidates in CANDIDATES.items():
        M, N, K = shape
        rng = cp.random.default_rng(0)
        A = rng.standard_normal((M, K), dtype=cp.float32)
        B = rng.standard_normal((K, N), dtype=cp.float32)
        C = cp.empty((M, N), dtype=cp.float32)
        tA, tB, tC = (torch.as_tensor(x, device="cuda") for x in (A, B, C))
        kernels = [("entry", get_best_kernel("matmul", shape))]
        kernels += [(f"cand{i}", build_kernel("matmul", p)) for i, p in enumerate(candidates)]
        calls = []
        for name, k in kernels:
            checked(k, A, B, C)
            calls.append((name, k.params, lambda k=k: k(A, B, out=C)))
        calls.append(("cupy", None, lambda: cp.matmul(A, B, out=C)))
        calls.append(("torch", None, lambda: torch.matmul(tA, tB, out=tC)))
        for name, params, call in calls:
            plain, led = bench(call, flush=flush), bench(call, flush=lead)
            rows.append({"shape": "x".join(map(str, shape)), "name": name, "params": params,
                         "plain_ms": plain.median_ms, "plain_spread": plain.spread,
                         "lead_ms": led.median_ms, "lead_spread": led.spread})
            print(json.dumps(rows[-1]), flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "timing_probe.json").write_text(json.dumps(rows, indent=1))
    print("\n| shape | kernel | plain ms | lead ms | plain/lead | SPLIT_K | BMxBN | EDGE |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p = r["params"] or {}
        print(f"| {r['shape']} | {r['name']} | {r['plain_ms']:.4f} | {r['lead_ms']:.4f} | "
              f"{r['plain_ms'] / r['lead_ms']:.3f} | {p.get('SPLIT_K', '')} | "
              f"{p.get('BM', '')}x{p.get('BN', '')} | {p.get('EDGE', '')} |")


if __name__ == "__main__":
    main()
