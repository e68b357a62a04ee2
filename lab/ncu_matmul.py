"""Launch one tuned matmul and cuBLAS on the same data a few times each, for a profiler to attach to.

    ncu --clock-control none -k regex:'matmul|gemm|xmma|cutlass|nvjet' --section SpeedOfLight --section WarpStateStats \\
        --section Occupancy --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \\
        python lab/ncu_matmul.py 4096x4096x4096 tf32          # or: 4096x4096x4096 ieee float16

The tuned kernel is the database's for this GPU (get_best_kernel); cuBLAS runs through PyTorch with TF32 on for
precision tf32, off otherwise. Each is launched 3 times (a profiler can take the last).
"""
import sys

import numpy as np
import torch
from numba import cuda

from autotune import get_best_kernel


def main(shape_text: str, precision: str, dtype: str = "float32") -> None:
    M, N, K = (int(d) for d in shape_text.split("x"))
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=np.float32).astype(dtype)
    B = rng.standard_normal((K, N), dtype=np.float32).astype(dtype)
    kernel = get_best_kernel("matmul", (M, N, K), dtype, precision=precision)
    print(kernel.params, flush=True)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((M, N), dtype)
    for _ in range(3):
        kernel(dA, dB, out=dC)
    cuda.synchronize()
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    tA, tB = torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda")
    for _ in range(3):
        tA @ tB
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ieee", *sys.argv[3:4])
