"""Batched matmul and the gemv kernel on a GPU: every new template path checked against float64 NumPy, then a
first look at the untuned defaults' speed against PyTorch (not a benchmark: `autotune bench` and tuning are).

    python lab/batch_gemv_gpu.py [--check-only]
    NUMBA_ENABLE_CUDASIM=1 python lab/batch_gemv_gpu.py --check-only --small   # the script itself, in the simulator

Checks: batched tiled, mma.sync (fp64, fp16, bf16), wgmma (cp.async-fed float16, TF32 through registers) and seed
kernels on stacks with broadcast operands on either side and two batch levels; the gemv kernel on both sides and
forms, split K (atomic and workspace), stacks; autotune.matmul of stacks and vectors (one launch each). Timing:
median of CUDA-event-timed repeats, autotune.matmul with out= (its replayed plan) against torch.bmm / torch.matmul.
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np


def stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x


def check_kernels(small: bool = False) -> list[str]:
    from autotune import build_kernel
    from autotune.runtime import arrays

    rng = np.random.default_rng(0)
    tiled = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 8}
    mma16 = {"BM": 64, "BN": 64, "BK": 32, "TM": 4, "TN": 4, "VEC": 8, "UNROLL_K": 16, "MMA": 16, "A_SMEM": "mmajor",
             "ASYNC_STAGES": 3}
    wgmma = {"BM": 128, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "ASYNC_STAGES": 4}
    wgmma_tf32 = {"BM": 128, "BN": 128, "BK": 32, "MMA": 8, "WGMMA": 1, "ASYNC_STAGES": 0}
    gemv = {"GEMV": 1, "BLOCK": 256, "KT": 8, "TL": 1, "TS": 4, "VEC": 4, "UNROLL_K": 4, "SPLIT_K": 4}
    stacks = [((5, 200, 300), (5, 300, 170)), ((200, 300), (5, 300, 170)), ((5, 200, 300), (300, 170)),
              ((2, 1, 200, 300), (3, 300, 170))]
    skinny = [((1, 3001), (3001, 2049)), ((2049, 3001), (3001, 7)), ((4, 1, 3001), (4, 3001, 513))]
    if small:  # the simulator: shapes of a few blocks, no wgmma (a Python thread per GPU thread)
        stacks = [((2, 20, 30), (2, 30, 17)), ((20, 30), (2, 30, 17)), ((2, 1, 20, 30), (3, 30, 17))]
        skinny = [((1, 301), (301, 129)), ((129, 301), (301, 7)), ((2, 1, 301), (2, 301, 65))]
    cases = [(tiled, "float32", {"layout": "nn"}, stacks),
             ({**tiled, "SPLIT_K": 4}, "float32", {"layout": "tt"}, stacks),
             ({**tiled, "SPLIT_K": 4, "SPLIT_ADD": "last_block", "VEC": 2, "MMA": 8, "UNROLL_K": 16}, "float64",
              {"layout": "tn"}, stacks),
             (mma16, "float16", {"layout": "nt"}, stacks), (mma16, "bfloat16", {"layout": "nn"}, stacks),
             (wgmma, "float16", {"layout": "nn"}, stacks), (wgmma, "bfloat16", {"layout": "tt"}, stacks),
             (wgmma_tf32, "float32", {"layout": "nt", "precision": "3xtf32"}, stacks),
             ({"strategy": "shared16"}, "float32", {"layout": "nn"}, stacks[:2]),
             (gemv, "float32", {"layout": "nn"}, skinny), ({**gemv, "KT": 32}, "float32", {"layout": "tt"}, skinny),
             ({**gemv, "VEC": 8}, "float16", {"layout": "nn"}, skinny), ({**gemv, "VEC": 8}, "bfloat16",
                                                                          {"layout": "nt"}, skinny),
             ({**gemv, "VEC": 2, "TL": 2}, "float64", {"layout": "tn"}, skinny)]
    failures = []
    for params, dtype, family, shapes in cases:
        if small and params.get("WGMMA"):
            continue
        for a_shape, b_shape in shapes:
            M, N = a_shape[-2], b_shape[-1]
            batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
            args = dict(family)
            if batch:
                args["batch"] = "strided"
            side = "n" if N <= 16 and N <= M else "m" if M <= 16 else None
            if params.get("GEMV") and side is None:
                continue
            if side:
                args["skinny"] = side
            kernel = build_kernel("matmul", params, dtype, **args)
            A = rng.integers(-3, 4, a_shape).astype(dtype)
            B = rng.integers(-3, 4, b_shape).astype(dtype)
            a, b = (arrays.host_to_device(stored(x, t == "t")) for x, t in zip((A, B), family["layout"]))
            want = (A.astype(np.float64) @ B.astype(np.float64)).astype(dtype).astype(np.float64)
            out = arrays.host_to_device(np.full(want.shape, np.nan, dtype))
            kernel(a, b, out=out)
            got = arrays.device_to_host(out).astype(np.float64)
            ok = np.array_equal(got, want)
            line = f"{'ok  ' if ok else 'FAIL'} {dtype:8} {family} {a_shape} @ {b_shape} {params}"
            print(line, flush=True)
            if not ok:
                failures.append(f"{line}: {np.isnan(got).sum()} NaN, max error {np.nanmax(np.abs(got - want))}")
    return failures


def check_functions(small: bool = False) -> list[str]:
    import ml_dtypes
    from numba import cuda

    import autotune
    from autotune.families.matmul.kernel import MatmulKernel

    rng = np.random.default_rng(1)
    failures, launched = [], []
    launch = MatmulKernel.launch

    def counted(self, *args, **kwargs):  # each launch() issues one launch of the main kernel
        launched.append(True)
        return launch(self, *args, **kwargs)

    MatmulKernel.launch = counted
    try:
        for a_shape, b_shape, dtype in [((64, 100, 120), (120, 90), np.float32),
                                        ((100, 120), (64, 120, 90), np.float32),
                                        ((2, 1, 100, 120), (3, 120, 90), np.float16),
                                        ((4096,), (4096, 3000), np.float32), ((3000, 4096), (4096,), np.float32),
                                        ((3000, 4096), (4096, 5), ml_dtypes.bfloat16),
                                        ((8, 1, 4096), (8, 4096, 300), np.float16)][:0 if small else None]:
            A = rng.integers(-3, 4, a_shape).astype(dtype)
            B = rng.integers(-3, 4, b_shape).astype(dtype)
            launched.clear()
            got = autotune.matmul(cuda.to_device(A) if dtype != ml_dtypes.bfloat16 else A, B)
            got = np.asarray(got.copy_to_host() if hasattr(got, "copy_to_host") else got, np.float64)
            want = (A.astype(np.float64) @ B.astype(np.float64)).astype(dtype).astype(np.float64)
            ok = np.array_equal(got, want) and sum(launched) == 1
            line = f"{'ok  ' if ok else 'FAIL'} autotune.matmul {np.dtype(dtype).name} {a_shape} @ {b_shape}: " \
                   f"{sum(launched)} main launch(es)"
            print(line, flush=True)
            if not ok:
                failures.append(line)
    finally:
        MatmulKernel.launch = launch
    return failures


def timed(call, repeats: int = 50) -> float:
    import torch

    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def first_look() -> None:
    import torch

    import autotune

    print(f"\n{'problem':40} {'autotune ms':>12} {'torch ms':>10} {'ratio':>7}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for B, n in ((256, 128), (32, 512), (8, 2048)):
            x, y = (torch.randn(B, n, n, device="cuda", dtype=dtype) for _ in range(2))
            out = torch.empty(B, n, n, device="cuda", dtype=dtype)
            mine = timed(lambda: autotune.matmul(x, y, out=out))
            ref = timed(lambda: torch.bmm(x, y))
            torch.testing.assert_close(out.float(), torch.bmm(x.float(), y.float()), rtol=2e-2, atol=2e-1)
            print(f"{'bmm ' + str(dtype)[6:] + f' {B}x{n}^3':40} {mine:12.4f} {ref:10.4f} {ref / mine:7.2f}x")
    for dtype in (torch.float32, torch.float16):
        for n in (8192, 16384):
            W = torch.randn(n, n, device="cuda", dtype=dtype)
            v = torch.randn(n, device="cuda", dtype=dtype)
            for name, a, b in (("vector @ matrix", v, W), ("matrix @ vector", W, v)):
                out = torch.empty(n, device="cuda", dtype=dtype)
                mine = timed(lambda: autotune.matmul(a, b, out=out))
                ref = timed(lambda: torch.matmul(a, b))
                torch.testing.assert_close(out.float(), torch.matmul(a.float(), b.float()), rtol=2e-2, atol=1.0)
                gbs = n * n * W.element_size() / mine / 1e6
                print(f"{name + ' ' + str(dtype)[6:] + f' {n}':40} {mine:12.4f} {ref:10.4f} {ref / mine:7.2f}x "
                      f"({gbs:.0f} GB/s)")


def main() -> int:
    warnings.simplefilter("ignore")
    import numba
    import numba_cuda

    print(f"numpy {np.__version__}, numba {numba.__version__}, numba-cuda {numba_cuda.__version__}", flush=True)
    t0 = time.time()
    small = "--small" in sys.argv
    failures = check_kernels(small) + check_functions(small)
    print(f"\n{len(failures)} failures ({time.time() - t0:.0f} s)", flush=True)
    for line in failures:
        print(line)
    if "--check-only" not in sys.argv:
        first_look()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
