"""On the GPU: what the split-K combine costs, isolated. The tuned split-K entry for a shape is timed against
the same kernel with SPLIT_K=1 on a problem with the same blocks doing the same K steps (M scaled up by the
split, K divided by it), which only stores C. cuBLAS (CuPy) on both problems is timed in the same process.
Method: autotune.timing.bench (CUDA events, warm-up, L2 flushed before each run, median, one call per run, so
host launch time counts where the GPU waits for it); every result is checked against cuBLAS first.

    python scripts/splitk_cost.py 8192x128x8192 1000x1000x1000      (prints a Markdown table)
"""
import sys

import cupy as cp

from autotune import get_best_kernel
from autotune.build import build_kernel
from autotune.timing import L2Flusher, bench


def operands(M: int, N: int, K: int):
    rng = cp.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=cp.float32)
    B = rng.standard_normal((K, N), dtype=cp.float32)
    return A, B, cp.full((M, N), cp.nan, dtype=cp.float32)


def check(kernel, A, B, C) -> None:
    ref = A @ B
    err = float(cp.abs(C - ref).max() / cp.abs(ref).max())
    assert err < 1e-4, f"{kernel}: relative error {err}"


def timed_and_checked(kernel, A, B, C, flush) -> float:
    """Median ms of the kernel's prepared plan; C is checked after the first call and after the last."""
    plan = kernel.bind(A, B, out=C)
    plan()
    check(kernel, A, B, C)
    ms = bench(plan, flush=flush).median_ms
    check(kernel, A, B, C)
    return ms


def main(shapes: list[str]) -> None:
    flush = L2Flusher()
    rows = []
    for shape in shapes:
        M, N, K = (int(x) for x in shape.split("x"))
        tuned = get_best_kernel("matmul", (M, N, K))
        split = tuned.params["SPLIT_K"]
        whole = build_kernel("matmul", {**tuned.params, "SPLIT_K": 1})
        A, B, C = operands(M, N, K)
        A2, B2, C2 = operands(M * split, N, -(-K // split))
        t_split = timed_and_checked(tuned, A, B, C, flush)
        t_whole = timed_and_checked(whole, A2, B2, C2, flush)
        t_blas = bench(lambda: cp.matmul(A, B, out=C), flush=flush).median_ms
        t_blas2 = bench(lambda: cp.matmul(A2, B2, out=C2), flush=flush).median_ms
        rows.append((shape, split, f"{M * split}x{N}x{-(-K // split)}", t_split, t_whole, t_blas, t_blas2))
    print("| shape | SPLIT_K | same blocks, no split | split ms | no-split ms | cuBLAS ms | cuBLAS no-split ms |")
    print("|---|---|---|---|---|---|---|")
    for shape, split, other, *times in rows:
        print(f"| {shape} | {split} | {other} | " + " | ".join(f"{t:.4f}" for t in times) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
