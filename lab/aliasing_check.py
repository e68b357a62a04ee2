"""On a GPU: stacked matmul with ``out=`` on any matrix of either operand, NumPy stacks of transposed matrices, and
NumPy subclasses, each against float64 NumPy.

    python lab/aliasing_check.py [--cupy]

The CUDA simulator runs these in the tests (tests/test_properties.py, tests/test_functions.py); this runs them
through the real driver, where a device array's strided view is made from its CUDA Array Interface
(``arrays.permuted``) and launches are queued asynchronously. For each dtype, stack shape and broadcast form,
every pairing of an output matrix i with a matrix j of A or of B: C's matrix i starts at that operand's matrix j,
the call must give NumPy's ``A @ B`` of the operands as they were (every element within the rigorous bound
2 K eps (|A||B|)). ``--cupy`` also passes the operands as CuPy arrays. Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import warnings

import numpy as np
from numba import cuda

import autotune
from autotune.runtime import arrays

SHAPES = [(3, 5, 7), (17, 1, 33), (64, 64, 64)]  # M, N, K
FORMS = [((2,), (2,)), ((3,), (1,)), ((1,), (3,)), ((3,), ()), ((), (2,))]  # the stack dimensions of A and B


def within_bound(got, A, B) -> bool:
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    bound = 2 * A.shape[-1] * np.finfo(got.dtype).eps * (np.abs(A64) @ np.abs(B64)) + np.finfo(got.dtype).tiny
    return got.shape == (A64 @ B64).shape and bool(np.all(np.abs(got - A64 @ B64) <= bound))


def overlapping_call(A, B, shared: str, i: int, j: int, to_device) -> np.ndarray:
    """``autotune.matmul(A, B, out=C)`` with C's matrix i on matrix j of the shared operand (one buffer)."""
    expected_shape = np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1])
    operand = A if shared == "A" else B
    c_matrix, o_matrix = expected_shape[-2] * expected_shape[-1], operand.shape[-2] * operand.shape[-1]
    start = max(0, i * c_matrix - j * o_matrix)
    c_start = start + j * o_matrix - i * c_matrix
    size = int(np.prod(expected_shape))
    buffer = np.full(max(start + operand.size, c_start + size), np.nan, operand.dtype)
    buffer[start:start + operand.size] = operand.ravel()
    device = to_device(buffer)
    shared_d = device[start:start + operand.size].reshape(operand.shape)
    out = device[c_start:c_start + size].reshape(expected_shape)
    args = (shared_d, to_device(B)) if shared == "A" else (to_device(A), shared_d)
    result = autotune.matmul(*args, out=out)
    assert result is out
    return arrays.to_host(out)


def check_overlaps(rng, to_device, label: str) -> int:
    failures = checks = 0
    for dtype, (M, N, K), (a_lead, b_lead) in itertools.product(("float32", "float64"), SHAPES, FORMS):
        A = rng.standard_normal(a_lead + (M, K)).astype(dtype)
        B = rng.standard_normal(b_lead + (K, N)).astype(dtype)
        batch = int(np.prod(np.broadcast_shapes(a_lead, b_lead)))
        for shared, operand in (("A", A), ("B", B)):
            for i, j in itertools.product(range(batch), range(max(1, operand.size // (operand.shape[-1] *
                                                                                     operand.shape[-2])))):
                got = overlapping_call(A, B, shared, i, j, to_device)
                checks += 1
                if not within_bound(got, A, B):
                    failures += 1
                    print(f"FAIL {label} {dtype} A{A.shape} B{B.shape} out[{i}] on {shared}[{j}]")
    print(f"{label}: out= on any matrix of A or B: {checks - failures}/{checks} right")
    return failures


def check_transposed_stacks(rng) -> int:
    failures = 0
    A = rng.standard_normal((3, 65, 40)).astype(np.float32).transpose(0, 2, 1)  # 3 transposed 40 x 65
    B = rng.standard_normal((3, 33, 65)).astype(np.float32).transpose(0, 2, 1)
    d = arrays.to_device(A, "A")
    if tuple(d.shape) != A.shape or tuple(d.strides) != A.strides:
        print(f"FAIL the device copy of a transposed stack has shape {d.shape} strides {d.strides}, "
              f"not {A.shape} {A.strides}")
        failures += 1
    if not np.array_equal(arrays.to_host(d), A):
        print("FAIL the device copy of a transposed stack holds other values")
        failures += 1
    for b in (B, np.ascontiguousarray(B[0])):
        if not within_bound(np.asarray(autotune.matmul(A, b)), A, b):
            print(f"FAIL NumPy stack of transposed matrices @ {b.shape}")
            failures += 1
    print(f"NumPy stacks of transposed matrices: {'right' if not failures else f'{failures} failures'}")
    return failures


def check_subclasses() -> int:
    failures = 0
    masked = np.ma.array([5.0, -100.0, 7.0], mask=[0, 1, 0], dtype=np.float32)
    for name, call in (("masked min", lambda: autotune.min(masked)),
                       ("np.matrix sum", lambda: autotune.sum(np.asmatrix(np.ones((2, 3), np.float32)), axis=0))):
        try:
            call()
        except TypeError as exc:
            print(f"{name}: refused: {exc}")
        else:
            print(f"FAIL {name} was not refused")
            failures += 1
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cupy", action="store_true", help="also pass the operands as CuPy arrays")
    args = parser.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    rng = np.random.default_rng()
    failures = check_overlaps(rng, cuda.to_device, "Numba device arrays")
    if args.cupy:
        import cupy

        failures += check_overlaps(rng, cupy.asarray, "CuPy arrays")
    failures += check_transposed_stacks(rng) + check_subclasses()
    cuda.synchronize()
    print("all right" if not failures else f"{failures} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
