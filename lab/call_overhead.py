"""On the GPU: per-call cost of a tuned kernel through each call path, and that a replayed plan computes exactly
what the checked call computes. Host microseconds per call (synchronised every 200 calls) for: the checked call
making a new output (k(x)), the plan path (k(x, out=r)) and CuPy, at sizes where the launch dominates.

    python lab/call_overhead.py          (prints a Markdown table)
"""
import time

import numpy as np
from numba import cuda

from autotune import get_best_kernel


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        fn()
        if i % 200 == 199:
            cuda.synchronize()
    cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    import cupy as cp

    rng = np.random.default_rng()
    rows = []
    for n in (1 << 10, 1 << 20, 1 << 24):
        x = cp.asarray(rng.integers(-8, 9, n).astype(np.float32))
        k = get_best_kernel("reduce", (n,))
        r, r2, r0 = cp.full(1, cp.nan, cp.float32), cp.full(1, cp.nan, cp.float32), cp.empty((), cp.float32)
        checked = float(cp.asarray(k(x))[0])
        k(x, out=r)
        plan = k.bind(x, out=r2)
        plan()
        exact = float(x.astype(cp.float64).sum())
        same = checked == float(r[0]) == float(r2[0]) == exact
        rows.append((f"sum {n}", per_call_us(lambda: k(x)), per_call_us(lambda: k(x, out=r)), per_call_us(plan),
                     per_call_us(lambda: cp.sum(x, out=r0)), same, len(plan)))
    A = cp.asarray(rng.integers(-2, 3, (1024, 1024)).astype(np.float32))
    C, C2 = cp.full((1024, 1024), cp.nan, cp.float32), cp.full((1024, 1024), cp.nan, cp.float32)
    m = get_best_kernel("matmul", (1024, 1024, 1024))
    m(A, A, out=C)
    plan = m.bind(A, A, out=C2)
    plan()
    same = bool((C == C2).all()) and bool((C == A @ A).all())
    rows.append(("matmul 1024^3", per_call_us(lambda: m(A, A), 300), per_call_us(lambda: m(A, A, out=C), 300),
                 per_call_us(plan, 300), per_call_us(lambda: cp.matmul(A, A, out=C), 300), same, len(plan)))
    print("| call | k(x) us | k(x, out=r) us | plan() us | CuPy us | results equal | launches |")
    print("|---|---|---|---|---|---|---|")
    for name, a, b, c, d, same, launches in rows:
        print(f"| {name} | {a:.1f} | {b:.1f} | {c:.1f} | {d:.1f} | {same} | {launches} |")


if __name__ == "__main__":
    main()
