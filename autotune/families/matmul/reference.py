"""float64 references of A @ B and the error each precision may have against them (the family's oracle)."""
from __future__ import annotations

import numpy as np

from ...core.oracle import relative_error
from .config import ERROR_ROWS, dims


def error_rows(shape: tuple[int, ...]) -> np.ndarray:
    """The rows of C whose error a rounded precision's check measures: all, or up to ERROR_ROWS (fewer where N*K
    is large, to bound the reference's cost) spread over M; of every matrix of a stack."""
    B, M, N, K = dims(shape)
    count = min(M, max(8, min(ERROR_ROWS, (1 << 31) // (B * N * K))))
    return np.unique(np.linspace(0, M - 1, count).astype(np.int64))


def tf32_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 as cvt.rna.tf32.f32 does: to 10 mantissa bits, ties away from zero (adding
    half of the last kept bit to the magnitude's bits and clearing the 13 below); NaN and infinities kept."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), rounded, x)


def fma_chain(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B (float32) as an ieee kernel without split-K computes it: each element one chain of fp32 FMAs over k
    in order. The product of two float32 is exact in float64, so a float64 add rounded to float32 is the FMA
    (but for rare double roundings). Stacks broadcast as np.matmul's."""
    A, B = (np.asarray(x, np.float64) for x in (A, B))
    acc = np.zeros(np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1]), np.float32)
    for k in range(A.shape[-1]):
        acc = (acc + A[..., :, k:k + 1] * B[..., k:k + 1, :]).astype(np.float32)
    return acc


def tensor_core_chain(A: np.ndarray, B: np.ndarray, step: int = 16) -> np.ndarray:
    """A @ B (float32) as the tensor cores sum it: each k16 step's products exactly, added to float32 accumulators
    with truncation (round toward zero), the tensor cores' accumulation. Its error is a few times the fp32 FMA
    chain's, and the wgmma kernels' errors lie between the two (``lab/wgmma_check.py`` measures them)."""
    A, B = (np.asarray(x, np.float64) for x in (A, B))
    acc = np.zeros(np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1]), np.float32)
    for k in range(0, A.shape[-1], step):
        exact = acc + A[..., k:k + step] @ B[..., k:k + step, :]
        acc = exact.astype(np.float32)
        away = np.abs(acc) > np.abs(exact)  # rounded away from zero: one step back towards it
        acc[away] = np.nextafter(acc[away], np.float32(0))
    return acc


def error_bound(precision: str, A: np.ndarray, B: np.ndarray, expected: np.ndarray,
                out_dtype: str = "float32") -> float:
    """The relative error a precision's results may have on A @ B: twice that of its reference on the same data.
    3xtf32 promises fp32-level error: its reference is the ieee kernels' chain of fp32 FMAs (``fma_chain``); tf32
    that of cuBLAS with TF32 on: the TF32-rounded operands' error plus the FMA chain's; fp16 and bf16 (float16,
    bfloat16 operands) NumPy's and cuBLAS's: the FMA chain rounded to the operands' dtype where the result has it
    (a sum kept in float16
    errs far more), and where it is float32 the tensor cores' own truncating sum (``tensor_core_chain``), which
    errs up to 3x more than the FMA chain. At least 2**-22 where the reference happens to be nearly exact (K of 1
    or 2); at 3xtf32 at least 2**-20, since it drops the product of the two small parts and what lies beyond them,
    up to about four 2**-22 of a single product (a 1 x 1 x 1 product once erred 2.51e-7, over 2**-22)."""
    chain = tensor_core_chain if precision in ("fp16", "bf16") and out_dtype == "float32" else fma_chain
    error = relative_error(chain(A, B).astype(out_dtype), expected)
    if precision == "tf32":
        rounded = tf32_round(A).astype(np.float64) @ tf32_round(B).astype(np.float64)
        error += relative_error(rounded, expected)
    return max(2 * error, 2.0 ** -20 if precision == "3xtf32" else 2.0 ** -22)


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) @ B.astype(np.float64)
