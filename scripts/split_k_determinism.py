"""On the GPU: are split-K results the same bits on every call? For each way of combining the K slices
(SPLIT_ADD), this GPU's database entry for the shape (default 127x3000x511, split 4 ways) is called 50 times on the
same operands; prints how many distinct results came back and the largest error against float64 NumPy.

    python3 scripts/split_k_determinism.py [MxNxK]
"""
import hashlib
import sys

import numpy as np
from numba import cuda

from autotune import build_kernel, get_best_kernel


def main(shape: str = "127x3000x511", calls: int = 50) -> None:
    M, N, K = (int(x) for x in shape.split("x"))
    params = dict(get_best_kernel("matmul", (M, N, K)).params)
    if params.get("SPLIT_K", 1) == 1:
        raise SystemExit(f"the entry for {shape} does not split K: {params}")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    reference = A.astype(np.float64) @ B.astype(np.float64)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((M, N), np.float32)
    print(f"| SPLIT_ADD | distinct results in {calls} calls | max abs error vs float64 |")
    print("| --- | --- | --- |")
    for add in ("atomic", "vector", "last_block"):
        kernel = build_kernel("matmul", {**params, "SPLIT_ADD": add})
        digests, worst = set(), 0.0
        for _ in range(calls):
            kernel(dA, dB, out=dC)
            C = dC.copy_to_host()
            digests.add(hashlib.sha256(C.tobytes()).hexdigest())
            worst = max(worst, float(np.abs(C - reference).max()))
        print(f"| {add} | {len(digests)} | {worst:.3g} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
