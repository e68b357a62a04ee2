"""One launch of the tuned matmul and one of cuBLAS (CuPy) on the same operands, for Nsight Compute to profile.

    ncu --clock-control none -k regex:'matmul|gemm|cutlass' --section WarpStateStats ... \
        python3 scripts/ncu_matmul.py 4096x4096x4096 [float32]
"""
import sys

import cupy as cp

from autotune import get_best_kernel


def main(shape: str, dtype: str = "float32") -> None:
    M, N, K = (int(x) for x in shape.split("x"))
    rng = cp.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=cp.float64).astype(dtype)
    B = rng.standard_normal((K, N), dtype=cp.float64).astype(dtype)
    C = cp.empty((M, N), dtype=dtype)
    kernel = get_best_kernel("matmul", (M, N, K), dtype=dtype)
    print(kernel, file=sys.stderr)
    kernel(A, B, out=C)
    cp.matmul(A, B)
    cp.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    main(*sys.argv[1:])
