"""On the GPU: does cuBLAS's TF32 GEMM round its float32 operands to TF32 or truncate them?

    python lab/tf32_rounding.py            (needs PyTorch)

TF32 keeps 10 of float32's 23 mantissa bits. The tensor cores read the top 19 bits of each operand, which
truncates; CUTLASS's mma.sync kernels round in registers first (cvt.rna), but an operand fed to wgmma straight
from shared memory cannot be rounded on the way. Which one cuBLAS does decides the error bound a TF32 kernel
must meet to match it, and whether a kernel may skip the rounding. For each shape, C from `torch.matmul` with
TF32 on is compared with float64 products of the operands rounded (nearest, ties away, as cvt.rna) and
truncated: the one cuBLAS computed differs from C by float32 accumulation only (about 1e-7 relative), the other
by TF32's own error (about 1e-4). Printed: the median relative difference of C from each.
"""
import sys

import torch


def to_tf32(x: torch.Tensor, mode: str) -> torch.Tensor:
    """float32 ``x`` with 10 mantissa bits: 'round' to nearest, ties away from zero (cvt.rna), or 'truncate'."""
    bits = x.view(torch.int32)
    if mode == "round":
        bits = bits + (1 << 12)
    return (bits & ~((1 << 13) - 1)).view(torch.float32)


def main() -> int:
    torch.backends.cuda.matmul.allow_tf32 = True
    gen = torch.Generator(device="cuda").manual_seed(0)
    print("| shape | vs rounded operands | vs truncated operands | cuBLAS does |\n| --- | --- | --- | --- |")
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096), (1000, 1000, 1000), (127, 3000, 511)):
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(k, n, device="cuda", generator=gen)
        c = (a @ b).double()
        diff = {}
        for mode in ("round", "truncate"):
            ref = to_tf32(a, mode).double() @ to_tf32(b, mode).double()
            diff[mode] = float(((c - ref).abs() / ref.abs().clamp_min(1e-3)).median())
        verdict = min(diff, key=diff.get) if max(diff.values()) > 10 * min(diff.values()) else "unclear"
        print(f"| {m}x{n}x{k} | {diff['round']:.2e} | {diff['truncate']:.2e} | {verdict} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
