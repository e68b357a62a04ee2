"""Assertions shared by the tests: float64 NumPy references, elementwise error bounds, NaN poisoning."""
from __future__ import annotations

import numpy as np
from numba import cuda


def poisoned(shape, dtype):
    """A device array full of the poison (NaN; integers: oracle.poison's pattern): any element a kernel fails to
    write keeps it and fails the check."""
    from autotune.core.oracle import poison

    return cuda.to_device(np.full(shape, poison(dtype), dtype=dtype))


def random_matrix(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def small_integers(rng, shape, dtype):
    """Integer-valued floats in [-8, 8], never all zero: sums of them are exact in float32 and float64."""
    x = rng.integers(-8, 9, size=shape).astype(dtype)
    x.flat[0] = 3
    return x


def assert_matmul_close(C, A, B):
    """Each element within the rigorous bound K*eps*(|A||B|)_ij of the float64 product."""
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ref = A64 @ B64
    K = A.shape[1]
    bound = 2 * K * np.finfo(C.dtype).eps * (np.abs(A64) @ np.abs(B64)) + np.finfo(C.dtype).tiny
    assert C.shape == ref.shape
    assert not np.isnan(C).any(), f"{np.isnan(C).sum()} elements of C were not written"
    bad = np.abs(C - ref) > bound
    assert not bad.any(), f"{bad.sum()} elements off; worst {np.abs(C - ref).max()} at {np.unravel_index(np.argmax(np.abs(C - ref)), C.shape)}"


def assert_reduction_close(result, ref, abs_sum, n, dtype):
    """Within the rigorous bound n*eps*sum|x| (the tests also check exactness on integer data)."""
    result = np.asarray(result, dtype=np.float64)
    assert not np.isnan(result).any(), "result has unwritten (NaN) elements"
    bound = 2 * max(n, 1) * np.finfo(dtype).eps * np.asarray(abs_sum) + np.finfo(dtype).tiny
    assert np.all(np.abs(result - ref) <= bound), f"max error {np.abs(result - ref).max()}, bound {np.min(bound)}"


def assert_launched_as_signed(args, signature: str, name: str) -> None:
    """The Numba types of a launch's arguments (device arrays as the C-contiguous 1-D arrays they are) are those
    of ``signature``: a kernel compiled ahead with it serves that launch."""
    import numba
    from numba.core import sigutils

    types = tuple(numba.typeof(np.empty(0, a.dtype)) if hasattr(a, "copy_to_host") else numba.typeof(a)
                  for a in args)
    assert types == sigutils.normalize_signature(signature)[0], name


def finishes(call, seconds: float = 20.0):
    """``call()``'s result, or the exception it raised, within ``seconds``; AssertionError if it still blocks (a
    reader waiting on a FIFO: the caller then releases it with ``release_fifo``)."""
    import threading

    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still blocked after {seconds} s"
    return outcome[0]


def release_fifo(path) -> None:
    """Give a reader still blocked opening the FIFO at ``path`` its end of file (nothing if none waits)."""
    import os

    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
