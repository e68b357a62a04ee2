"""Error and time of hand-picked TF32 tensor-core matmul variants and of cuBLAS on the same data.

    python lab/precision_probe.py [N] [RESULTS_DIR] [float16]

N x N x N standard normal float32 operands (default 4096); the error is the relative (Frobenius) error of 256 rows
of C against float64. Times: the bench's method (autotune.tuning.measure.bench: CUDA events, L2 flushed, median).
cuBLAS through CuPy (TF32 off) and PyTorch (TF32 off, then on), all in this process. Writes probe.json.
With float16: float16 operands, the tuned database entry of N^3 (get_best_kernel) beside CuPy's and PyTorch's
half GEMM, errors against the float64 product of the same float16 values.
"""
import json
import os
import sys
import time

import cupy
import numpy as np
import torch
from numba import cuda

from autotune.core.oracle import relative_error
from autotune.runtime.build import build_kernel
from autotune.tuning.measure import L2Flusher, bench

VARIANTS = [("3xtf32", {"BK": 16, "UNROLL_K": 16}), ("3xtf32", {"BK": 16, "UNROLL_K": 16, "A_SMEM": "mmajor"}),
            ("3xtf32", {"A_SMEM": "mmajor"}), ("3xtf32", {"A_SMEM": "mmajor", "ASYNC_STAGES": 3}),
            ("tf32", {"BK": 16, "UNROLL_K": 16, "A_SMEM": "mmajor"}), ("tf32", {"A_SMEM": "mmajor", "ASYNC_STAGES": 3})]
BASE = {"BM": 128, "BN": 128, "BK": 32, "TM": 8, "TN": 8, "VEC": 4, "MMA": 8, "UNROLL_K": 8}


def main(n: int, results: str, dtype: str = "float32") -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    rows = np.unique(np.linspace(0, n - 1, 256).astype(np.int64))
    ref = A[rows].astype(np.float64) @ B.astype(np.float64)
    flush = L2Flusher()
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((n, n), np.float32)
    cA, cB = cupy.asarray(A), cupy.asarray(B)
    tA, tB = torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda")
    flops = 2.0 * n ** 3
    found = []

    def row(name, fn, result):
        t = bench(fn, flush=flush)
        err = relative_error(result()[rows], ref)
        found.append({"name": name, "ms": t.median_ms, "tflops": flops / t.median_ms / 1e9, "err": err})
        print(f"{name:64} {t.median_ms:8.3f} ms {flops / t.median_ms / 1e9:7.1f} TFLOP/s err {err:.3g}", flush=True)

    def torch_matmul(tf32):
        def call():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return tA @ tB
        return call

    row("cuBLAS (cupy)", lambda: cA @ cB, lambda: cupy.asnumpy(cA @ cB))
    row("cuBLAS (torch)", torch_matmul(False), lambda: torch_matmul(False)().cpu().numpy())
    if dtype == "float16":
        from autotune import get_best_kernel

        dC = cuda.device_array((n, n), np.float16)
        kernel = get_best_kernel("matmul", (n, n, n), "float16")
        kernel(dA, dB, out=dC)
        row(f"tuned {kernel.params}", lambda: kernel(dA, dB, out=dC), dC.copy_to_host)
    else:
        row("cuBLAS TF32 (torch)", torch_matmul(True), lambda: torch_matmul(True)().cpu().numpy())
        for precision, extra in VARIANTS:
            start = time.time()
            kernel = build_kernel("matmul", {**BASE, **extra}, "float32", precision=precision)
            kernel(dA, dB, out=dC)
            cuda.synchronize()
            row(f"{precision} {extra} (compile {time.time() - start:.0f} s)", lambda: kernel(dA, dB, out=dC),
                dC.copy_to_host)
    with open(os.path.join(results, "probe.json"), "w") as f:
        json.dump(found, f, indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096, sys.argv[2] if len(sys.argv) > 2 else ".", *sys.argv[3:4])
