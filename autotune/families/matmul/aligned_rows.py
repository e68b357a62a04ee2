"""Copies of 16-bit matrices into rows that start 16-byte aligned: what a TMA matmul variant (families/matmul/config.py
``is_tma``) multiplies where an operand's rows do not (the tensor memory accelerator reads rows whose starts and
stride are whole 16-byte pieces; templates/matmul_wgmma.py.j2). One thread per element, consecutive threads along a
row. A fixed kernel, compiled once per process and element type (and cached on disk), not generated.
"""
from __future__ import annotations

from numba import cuda

THREADS = 256
ALIGNED_ELEMENTS = 8  # 16 bytes of 16-bit elements


def aligned_ld(cols: int) -> int:
    """The row stride of a copy with ``cols`` columns: whole 16-byte pieces."""
    return -(-cols // ALIGNED_ELEMENTS) * ALIGNED_ELEMENTS


@cuda.jit(cache=True)
def aligned_rows(X, Y, rows, cols, ldx, ldy):
    """Y[r * ldy + c] = X[r * ldx + c] for r < rows, c < cols."""
    i = cuda.grid(1)
    if i < rows * cols:
        r = i // cols
        c = i - r * cols
        Y[r * ldy + c] = X[r * ldx + c]


def signature(storage: str) -> str:
    """The launch signature for elements of Numba type ``storage`` (float16, or uint16 for bfloat16's bits)."""
    return f"void({storage}[::1], {storage}[::1], int64, int64, int64, int64)"
