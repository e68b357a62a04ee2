"""float16 matmul on wgmma (templates/matmul_wgmma.py.j2) checked and timed on a Hopper GPU.

    python lab/wgmma_check.py [RESULTS_DIR] [--quick]

Checks: every layout and result dtype, tiles of one, two and four warpgroups, 3 and 4 stages, on shapes with
partial tiles in M, N and K and rows whose starts are not 16-byte aligned (70 x 90 x 130: the copies' and the
stores' element-by-element paths), aligned ones (1000^3, 4096 x 4096 x 256) and the irregular suite shapes,
each through the family's oracle (integer data exact, normal data within its error bound), the output poisoned
with NaN first. Times: 4096^3 and 8192^3 with the bench's method (CUDA events, L2 flushed, median) beside cuBLAS
(CuPy, PyTorch) in the same process. Writes wgmma.json to RESULTS_DIR; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from numba import cuda

from autotune.build import build_kernel
from autotune.oracle import poison, relative_error
from autotune.problem import Problem

WGMMA = {"MMA": 16, "WGMMA": 1, "BK": 64}
CHECKED = [({**WGMMA, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}, ["nn", "tn", "nt", "tt"]),
           ({**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4}, ["nn", "tt"]),
           ({**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4, "GROUP_M": 1}, ["tn", "nt"]),
           ({**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 3, "GROUP_M": 16}, ["nn"])]
SHAPES = [(70, 90, 130), (1, 1, 1), (257, 263, 129), (1000, 1000, 1000), (127, 3000, 511), (4096, 4096, 256)]
TIMED = [{**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 4}, {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3},
         {**WGMMA, "BM": 256, "BN": 128, "ASYNC_STAGES": 4}, {**WGMMA, "BM": 128, "BN": 128, "ASYNC_STAGES": 4}]


def check_all(rng, quick: bool) -> list[dict]:
    found = []
    for params, layouts in CHECKED[:1] if quick else CHECKED:
        for layout in layouts:
            for out_dtype in (None, "float32"):
                start = time.time()
                kernel = build_kernel("matmul", params, "float16", layout=layout, out_dtype=out_dtype)
                for shape in SHAPES[:2] if quick else SHAPES:
                    problem = Problem("matmul", shape, "float16", {"layout": layout, "out_dtype": out_dtype})
                    impl = problem.impl
                    for case in impl.verification(problem, impl.inputs(problem, rng, "check"), rng):
                        out = cuda.to_device(np.full(problem.out_shape, poison(problem.out_dtype), problem.out_dtype))
                        kernel(*case.inputs, out=out)
                        problem_found = impl.verify(problem, case, out.copy_to_host(), rng)
                        found.append({"params": params, "layout": layout, "out_dtype": out_dtype, "shape": shape,
                                      "result": problem_found or "right"})
                        if problem_found:
                            print(f"WRONG {params} {layout} {out_dtype} {shape}: {problem_found}", flush=True)
                took = time.time() - start
                print(f"checked {params} {layout} out {out_dtype or 'float16'} ({took:.1f} s)", flush=True)
    return found


def time_all(sizes: list[int]) -> list[dict]:
    import cupy
    import torch

    from autotune.timing import L2Flusher, bench

    rng = np.random.default_rng(0)
    flush = L2Flusher()
    rows = []
    for n in sizes:
        A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
        B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
        picked = np.unique(np.linspace(0, n - 1, 256).astype(np.int64))
        ref = A[picked].astype(np.float64) @ B.astype(np.float64)
        dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((n, n), np.float16)
        cA, cB = cupy.asarray(A), cupy.asarray(B)
        tA, tB = torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda")

        def row(name, fn, result):
            fn()
            cuda.synchronize()
            t = bench(fn, flush=flush)
            err = relative_error(np.asarray(result(), np.float64)[picked], ref)
            rows.append({"n": n, "name": name, "ms": t.median_ms, "tflops": 2.0 * n ** 3 / t.median_ms / 1e9,
                         "err": err})

        row("cuBLAS (cupy)", lambda: cA @ cB, lambda: cupy.asnumpy(cA @ cB))
        row("cuBLAS (torch)", lambda: tA @ tB, lambda: (tA @ tB).cpu().numpy())
        for params in TIMED:
            kernel = build_kernel("matmul", params, "float16")
            row(f"wgmma {params['BM']}x{params['BN']} stages {params['ASYNC_STAGES']}",
                lambda: kernel(dA, dB, out=dC), dC.copy_to_host)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=".")
    parser.add_argument("--quick", action="store_true", help="one configuration on two shapes; 4096^3 only")
    args = parser.parse_args()
    checks = check_all(np.random.default_rng(0), args.quick)
    timed = time_all([4096] if args.quick else [4096, 8192])
    with open(os.path.join(args.results, "wgmma.json"), "w") as f:
        json.dump({"checks": checks, "timed": timed}, f, indent=1)
    wrong = [c for c in checks if c["result"] != "right"]
    print(f"\n{len(checks)} checks, {len(wrong)} wrong")
    print(f"{'N':>6} {'contender':36} {'ms':>8} {'TFLOP/s':>8} {'rel. error':>10}")
    for r in timed:
        print(f"{r['n']:>6} {r['name']:36} {r['ms']:8.3f} {r['tflops']:8.1f} {r['err']:10.3g}")


if __name__ == "__main__":
    main()
