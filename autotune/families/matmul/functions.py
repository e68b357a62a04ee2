"""``autotune.matmul``: ``A @ B`` as ``np.matmul``, tuned for each call's own shape (see autotune/runtime/calls.py
for what every NumPy-style function does around its kernel)."""
from __future__ import annotations

import math

import numpy as np

from ...core.dtypes import HALF
from ...runtime import arrays
from ...runtime.calls import (
    Library,
    Replay,
    device_input,
    layout_of,
    library_of,
    result_array,
    returned,
    same_dtype,
    staged,
    tuned_kernel,
    unstaged,
    zero_fill,
)
from ...runtime.launch import Plan
from ...runtime.streams import as_stream
from .family import family as matmul_family

__all__ = ["matmul", "matmul_call"]


def matmul(A, B, *, out=None, dtype=None, stream=None, precision: str = "ieee"):
    """``A @ B`` as ``np.matmul``: 2-D products, 1-D operands (a vector is a 1 x K row on the left, a K x 1
    column on the right, and that 1 is dropped from the result) and stacks of matrices, whose leading dimensions
    broadcast. Each 2-D operand (each matrix of a stack) is C-contiguous or the transpose of one. ``dtype``: the
    operands' (default) or, for float16 and bfloat16 operands, float32 (the float32 sums, not rounded, as
    ``np.matmul(A, B, dtype=np.float32)``). ``precision`` (float32 only): "ieee" fp32 products, "3xtf32"
    fp32-level error on the TF32 tensor cores, "tf32" TF32-rounded operands (see the matmul family)."""
    return matmul_call(A, B, out, stream, library_of(A, B), precision, dtype)


def matmul_call(A, B, out, stream, library: Library, precision: str = "ieee", requested=None):
    """``A @ B`` as ``np.matmul``, the result in ``library`` (see autotune/runtime/libraries.py)."""
    launch_stream = as_stream(stream)
    replay = Replay(("matmul", precision, requested), (A, B), out, launch_stream, library)
    if (replayed := replay.result()) is not None:
        return replayed
    dA, dB = device_input(A, "A", launch_stream), device_input(B, "B", launch_stream)
    dtype = same_dtype("matmul", "matmul", dA, dB)
    out_dtype = matmul_out_dtype(dtype, requested)
    args = matmul_family.family_args(precision=precision, out_dtype=None if out_dtype == dtype else out_dtype)
    matmul_family.check_dtype(dtype, args)  # even where no kernel runs
    if dA.ndim == 0 or dB.ndim == 0:
        raise ValueError("matmul: an operand is 0-d (a scalar); use multiplication")
    a2 = dA.reshape(1, dA.shape[0]) if dA.ndim == 1 else dA
    b2 = dB.reshape(dB.shape[0], 1) if dB.ndim == 1 else dB
    (M, K), (K2, N) = a2.shape[-2:], b2.shape[-2:]
    if K != K2:
        raise ValueError(f"matmul: shapes {tuple(dA.shape)} and {tuple(dB.shape)} do not align (K {K} != {K2})")
    try:
        batch = np.broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: the stack shapes of {tuple(dA.shape)} and {tuple(dB.shape)} do not "
                         f"broadcast") from None
    shape = batch + ((M,) if dA.ndim > 1 else ()) + ((N,) if dB.ndim > 1 else ())
    result = result_array(out, shape, out_dtype, "C", launch_stream)
    replay.follow()
    if math.prod(batch) and M and N and not K:
        zero_fill(result, launch_stream)
    elif math.prod(batch) and M and N:
        # A stack is several launches: an output that overlaps any matrix of an input is judged over the whole
        # call (a launch must not overwrite what a later one reads), and the products go to a staging array.
        target = staged(result, (dA, dB), launch_stream)
        c3 = target.reshape(batch + (M, N))
        plans = []
        for index in np.ndindex(*batch):
            a, b = stacked(a2, index, batch), stacked(b2, index, batch)
            kernel = tuned_kernel("matmul", (M, N, K), dtype, layout=layout_of(a, "A") + layout_of(b, "B"),
                                  precision=precision, out_dtype=args["out_dtype"])
            plans.append(kernel.bind(a, b, out=c3[index] if index else c3, stream=launch_stream))
        replay.run(Plan.joined([*plans, unstaged(result, target, launch_stream)], result), result)
    return returned(result, library, out, scalar=shape == ())


def matmul_out_dtype(dtype: str, requested) -> str:
    """The result dtype of a matmul of ``dtype`` operands: theirs, or float32 where ``dtype=float32`` asks for
    it of float16 or bfloat16 operands (TypeError for any other request: autotune does not compute in a converted
    dtype)."""
    if requested is None:
        return dtype
    from ...core.problem import dtype_name

    name = dtype_name(requested)
    if name != dtype and not (dtype in HALF and name == "float32"):
        raise TypeError(f"matmul: dtype={name} is not supported for {dtype} operands (only {dtype}, and float32 "
                        f"for float16 and bfloat16 operands); convert the operands")
    return name


def stacked(d, index: tuple[int, ...], batch: tuple[int, ...]):
    """Matrix ``index`` of the stack ``batch`` from ``d``, whose leading dimensions broadcast to it."""
    lead = d.ndim - 2
    if lead == 0:
        return d
    own = tuple(0 if n == 1 else i for i, n in zip(index[len(batch) - lead:], d.shape[:lead]))
    return arrays.indexed(d, own)
