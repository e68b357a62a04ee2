"""Matmul on wgmma checked and timed on a Hopper GPU: float16 or bfloat16 (templates/matmul_wgmma.py.j2) or
float32 at precision tf32 or 3xtf32 (templates/matmul_wgmma_tf32.py.j2; at tf32 also on TF32-rounded copies,
ASYNC_STAGES 3 or 4, templates/matmul_wgmma.py.j2); `tma` and `tma-tf32`: float16 and tf32 variants fed by the
TMA (TMA 1); `schedules`: float16 TMA variants with a block per tile, persistent and Stream-K (SCHEDULE), timed
at the shapes of issue 55 (1024^3, 4096 x 4096 x 256, 8192 x 128 x 8192, 1000^3, 4096^3, 8192^3); `stages`: float16
TMA variants with the deeper pipelines (ASYNC_STAGES 6 and 8, each schedule) beside 4 stages, timed at the first
four of those shapes (the small ones, where cuBLAS keeps 8 stages of 128 x 64 tiles).

    python lab/wgmma_check.py [RESULTS_DIR] [--precision float16|bfloat16|tma|tf32|tma-tf32|3xtf32|schedules|stages]
                              [--quick]

Checks: every layout (and the 16-bit dtypes' result dtypes), tiles of one, two and four warpgroups (float16: 3 and 4
stages), on shapes with partial tiles in M, N and K and rows whose starts are not 16-byte aligned (70 x 90 x 130:
the loads' and the stores' element-by-element paths), aligned ones (1000^3, 4096 x 4096 x 256) and the irregular
suite shapes, each through the family's oracle (integer data exact, normal data within its error bound), the
output poisoned with NaN first. Times: 4096^3 and 8192^3 with the bench's method (CUDA events, L2 flushed,
median) beside cuBLAS (CuPy, PyTorch; for float32 with TF32 off and on; bfloat16: PyTorch alone) in the same
process, with each result's
error against float64 on 256 rows. Writes wgmma-<precision>.json to RESULTS_DIR; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from numba import cuda

from autotune.core.dtypes import HALF
from autotune.core.oracle import poison, relative_error
from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.runtime.arrays import device_to_host, host_to_device
from autotune.runtime.build import build_kernel

WGMMA = {"MMA": 16, "WGMMA": 1, "BK": 64}
TF32 = {"MMA": 8, "WGMMA": 1, "BK": 32, "ASYNC_STAGES": 0}
COPIES = {**TF32, "ASYNC_STAGES": 4}  # tf32 on rounded copies
CHECKED = {"float16": [({**WGMMA, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}, ["nn", "tn", "nt", "tt"]),
                       ({**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4}, ["nn", "tt"]),
                       ({**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 1}, ["tn", "nt"]),
                       ({**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 3, "GROUP_M": 16}, ["nn"])],
           "tma": [({**WGMMA, "BM": 64, "BN": 64, "ASYNC_STAGES": 3, "TMA": 1}, ["nn", "tn", "nt", "tt"]),
                   ({**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1}, ["nn", "tt"]),
                   ({**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 1, "TMA": 1}, ["tn", "nt"]),
                   ({**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 3, "GROUP_M": 16, "TMA": 1}, ["nn"])],
           "bfloat16": [({**WGMMA, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}, ["nn", "tn", "nt", "tt"]),
                        ({**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4}, ["nn", "tt"]),
                        ({**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 1}, ["tn", "nt"])],
           "tf32": [({**TF32, "BM": 64, "BN": 64}, ["nn", "tn", "nt", "tt"]),
                    ({**TF32, "BM": 128, "BN": 256}, ["nn", "tt"]),
                    ({**TF32, "BM": 256, "BN": 64, "GROUP_M": 1}, ["tn", "nt"]),
                    ({**COPIES, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}, ["nn", "tn", "nt", "tt"]),
                    ({**COPIES, "BM": 128, "BN": 256}, ["nn", "tt"]),
                    ({**COPIES, "BM": 256, "BN": 128, "GROUP_M": 1}, ["tn", "nt"])],
           "tma-tf32": [({**COPIES, "BM": 64, "BN": 64, "ASYNC_STAGES": 3, "TMA": 1}, ["nn", "tn", "nt", "tt"]),
                        ({**COPIES, "BM": 128, "BN": 256, "TMA": 1}, ["nn", "tt"])],
           "schedules": [({**WGMMA, "BM": 64, "BN": 64, "ASYNC_STAGES": 4, "TMA": 1, "SCHEDULE": s},
                          ["nn", "tn", "nt", "tt"]) for s in ("persistent", "stream_k")]
           + [({**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": stages, "TMA": 1, "SCHEDULE": s}, ["nn", "tt"])
              for stages in (3, 4) for s in ("persistent", "stream_k")],
           "stages": [({**WGMMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 8, "TMA": 1}, ["nn", "tn", "nt", "tt"]),
                      ({**WGMMA, "BM": 128, "BN": 64, "ASYNC_STAGES": 8, "TMA": 1, "GROUP_M": 1}, ["nn", "tt"])]
           + [({**WGMMA, "BM": bm, "BN": bn, "ASYNC_STAGES": stages, "TMA": 1, "SCHEDULE": s}, ["nn", "tt"])
              for bm, bn, stages in ((64, 128, 8), (128, 128, 6)) for s in ("persistent", "stream_k")],
           "3xtf32": [({**TF32, "BM": 64, "BN": 64}, ["nn", "tn", "nt", "tt"]),
                      ({**TF32, "BM": 128, "BN": 128}, ["nn", "tt"]),
                      ({**TF32, "BM": 256, "BN": 64, "GROUP_M": 1}, ["tn", "nt"])]}
SHAPES = [(70, 90, 130), (1, 1, 1), (257, 263, 129), (1000, 1000, 1000), (127, 3000, 511), (4096, 4096, 256)]
TIMED = {"float16": [{**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4},
                     {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3},
                     {**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4},
                     {**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 4}],
         "tma": [{**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4},
                 {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1},
                 {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3, "TMA": 1},
                 {**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4, "TMA": 1},
                 {**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 4, "TMA": 1},
                 {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1, "GROUP_M": 16}],
         "bfloat16": [{**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4},
                      {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3},
                      {**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4}],
         "tf32": [{**TF32, "BM": 128, "BN": 256}, {**TF32, "BM": 128, "BN": 128}, {**TF32, "BM": 256, "BN": 128},
                  {**COPIES, "BM": 128, "BN": 256}, {**COPIES, "BM": 128, "BN": 256, "ASYNC_STAGES": 3},
                  {**COPIES, "BM": 256, "BN": 128}, {**COPIES, "BM": 128, "BN": 128},
                  {**COPIES, "BM": 128, "BN": 256, "GROUP_M": 16}],
         "tma-tf32": [{**COPIES, "BM": 128, "BN": 256}, {**COPIES, "BM": 128, "BN": 256, "TMA": 1},
                      {**COPIES, "BM": 128, "BN": 256, "TMA": 1, "GROUP_M": 16},
                      {**COPIES, "BM": 256, "BN": 128, "TMA": 1}, {**COPIES, "BM": 128, "BN": 128, "TMA": 1}],
         "schedules": [{**WGMMA, "BM": bm, "BN": bn, "ASYNC_STAGES": stages, "TMA": 1, "SCHEDULE": s}
                       for bm, bn, stages in ((128, 256, 4), (128, 256, 3), (128, 128, 4))
                       for s in ("tile", "persistent", "stream_k")],
         "stages": [{**WGMMA, "BM": bm, "BN": bn, "ASYNC_STAGES": stages, "TMA": 1, "SCHEDULE": s}
                    for bm, bn, deep in ((64, 128, (4, 6, 8)), (128, 64, (4, 6, 8)), (64, 64, (4, 8)),
                                         (128, 128, (4, 6)))
                    for stages in deep for s in ("tile", "persistent")],
         "3xtf32": [{**TF32, "BM": 128, "BN": 128}, {**TF32, "BM": 128, "BN": 64}, {**TF32, "BM": 64, "BN": 128},
                    {**TF32, "BM": 64, "BN": 64}]}
SCHEDULE_SHAPES = [(1024, 1024, 1024), (4096, 4096, 256), (8192, 128, 8192), (1000, 1000, 1000), (4096, 4096, 4096),
                   (8192, 8192, 8192)]


def family_of(precision: str, layout: str, out_dtype=None) -> tuple[str, dict]:
    """The dtype and family arguments of a precision: float16's or bfloat16's (tma: float16's), or float32's at a
    TF32 precision (tma-tf32: tf32's)."""
    if precision in ("tma", "schedules", "stages"):
        return "float16", {"layout": layout, "out_dtype": out_dtype}
    if precision == "tma-tf32":
        return "float32", {"layout": layout, "precision": "tf32"}
    if precision in HALF:
        return precision, {"layout": layout, "out_dtype": out_dtype}
    return "float32", {"layout": layout, "precision": precision}


def check_all(rng, precision: str, quick: bool) -> list[dict]:
    found = []
    for params, layouts in CHECKED[precision][:1] if quick else CHECKED[precision]:
        for layout in layouts:
            for out_dtype in (None, "float32") if precision in (*HALF, "tma", "schedules", "stages") else (None,):
                start = time.time()
                dtype, family = family_of(precision, layout, out_dtype)
                if load_space("matmul").checked_or_none(params, dtype=dtype, args=family) is None:
                    print(f"skipped {params} {layout} out {out_dtype or dtype}: not valid there", flush=True)
                    continue
                kernel = build_kernel("matmul", params, dtype, **family)
                for shape in SHAPES[:2] if quick else SHAPES:
                    problem = Problem("matmul", shape, dtype, family)
                    impl = problem.impl
                    for case in impl.verification(problem, impl.inputs(problem, rng, "check"), rng):
                        out = host_to_device(np.full(problem.out_shape, poison(problem.out_dtype), problem.out_dtype))
                        kernel(*case.inputs, out=out)
                        problem_found = impl.verify(problem, case, device_to_host(out), rng)
                        found.append({"params": params, "layout": layout, "out_dtype": out_dtype, "shape": shape,
                                      "result": problem_found or "right"})
                        if problem_found:
                            print(f"WRONG {params} {layout} {out_dtype} {shape}: {problem_found}", flush=True)
                took = time.time() - start
                print(f"checked {params} {layout} out {out_dtype or dtype} ({took:.1f} s)", flush=True)
    return found


def time_all(shapes: list[tuple[int, int, int]], precision: str) -> list[dict]:
    import cupy
    import torch

    from autotune.tuning.measure import L2Flusher, bench

    rng = np.random.default_rng(0)
    flush = L2Flusher()
    rows = []
    dtype, family = family_of(precision, "nn")
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=np.float32).astype(dtype)
        B = rng.standard_normal((K, N), dtype=np.float32).astype(dtype)
        picked = np.unique(np.linspace(0, M - 1, 256).astype(np.int64))
        ref = A[picked].astype(np.float64) @ B.astype(np.float64)
        dA, dB, dC = host_to_device(A), host_to_device(B), cuda.device_array((M, N), dtype)
        if dtype == "bfloat16":  # PyTorch takes bfloat16 as its bits; CuPy is left out
            tA, tB = (torch.from_numpy(x.view(np.int16)).to("cuda").view(torch.bfloat16) for x in (A, B))
        else:
            tA, tB = torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda")

        def row(name, fn, result):
            fn()
            cuda.synchronize()
            t = bench(fn, flush=flush)
            err = relative_error(np.asarray(result(), np.float64)[picked], ref)
            rows.append({"shape": [M, N, K], "name": name, "ms": t.median_ms,
                         "tflops": 2.0 * M * N * K / t.median_ms / 1e9, "err": err})

        if dtype != "bfloat16":
            cA, cB = cupy.asarray(A), cupy.asarray(B)
            row("cuBLAS (cupy)", lambda: cA @ cB, lambda: cupy.asnumpy(cA @ cB))
        for tf32 in (False, True) if dtype == "float32" else (False,):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            row("cuBLAS (torch" + (", TF32 on)" if tf32 else ")"), lambda: tA @ tB,
                lambda: (tA @ tB).float().cpu().numpy())
        torch.backends.cuda.matmul.allow_tf32 = False
        for params in TIMED[precision]:
            kernel = build_kernel("matmul", params, dtype, **family)
            stages = f" stages {params['ASYNC_STAGES']}" if params["ASYNC_STAGES"] else ""
            stages += " TMA" if params.get("TMA") else ""
            group = f" G{params['GROUP_M']}" if "GROUP_M" in params else ""
            group += f" {params['SCHEDULE']}" if "SCHEDULE" in params else ""
            row(f"wgmma {precision} {params['BM']}x{params['BN']}{stages}{group}", lambda: kernel(dA, dB, out=dC),
                lambda: device_to_host(dC).astype(np.float32))
        if precision == "tf32":
            row("rounded copies of A and B alone", *rounded_copies(dA, dB, M))
    return rows


def rounded_copies(dA, dB, n: int):
    """The first step of a tf32 variant on rounded copies, alone (layout nn: A copied, B transposed), and what
    it leaves in the copy of A."""
    from autotune.families.matmul import tf32_copies as tc

    a, b = (cuda.device_array(n * n, np.float32) for _ in range(2))
    ins, outs = (dA.reshape(n * n), dB.reshape(n * n)), (a, b)
    kernels = (tc.rounded_rows, tc.rounded_transpose)
    launches = [k[tc.grid(n, n, k is tc.rounded_transpose), (tc.TILE, tc.ROWS)] for k in kernels]

    def fn():
        launches[0](ins[0], outs[0], n, n, n, n, True)
        launches[1](ins[1], outs[1], n, n, n, n)

    return fn, lambda: device_to_host(a).reshape(n, n) @ device_to_host(b).reshape(n, n).T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=".")
    parser.add_argument("--precision", choices=sorted(CHECKED), default="float16",
                        help="float16, bfloat16, or float32 at precision tf32 or 3xtf32")
    parser.add_argument("--quick", action="store_true",
                        help="one configuration on two shapes; 4096^3 only (schedules: the first two shapes)")
    args = parser.parse_args()
    os.makedirs(args.results, exist_ok=True)
    checks = check_all(np.random.default_rng(0), args.precision, args.quick)
    if args.precision in ("schedules", "stages"):
        shapes = SCHEDULE_SHAPES[:2] if args.quick else SCHEDULE_SHAPES[:4 if args.precision == "stages" else None]
    else:
        shapes = [(n, n, n) for n in ([4096] if args.quick else [4096, 8192])]
    timed = time_all(shapes, args.precision)
    with open(os.path.join(args.results, f"wgmma-{args.precision}.json"), "w") as f:
        json.dump({"checks": checks, "timed": timed}, f, indent=1)
    wrong = [c for c in checks if c["result"] != "right"]
    print(f"\n{len(checks)} checks, {len(wrong)} wrong")
    print(f"{'M x N x K':>16} {'contender':44} {'ms':>8} {'TFLOP/s':>8} {'rel. error':>10}")
    for r in timed:
        shape = "x".join(map(str, r["shape"]))
        print(f"{shape:>16} {r['name']:44} {r['ms']:8.3f} {r['tflops']:8.1f} {r['err']:10.3g}")


if __name__ == "__main__":
    main()
