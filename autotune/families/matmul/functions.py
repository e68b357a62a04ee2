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
from . import batch as batching
from .family import family as matmul_family
from .kernel import INT32_MAX

__all__ = ["matmul", "matmul_call"]


def matmul(A, B, *, out=None, dtype=None, stream=None, precision: str = "ieee"):
    """``A @ B`` as ``np.matmul``: 2-D products, 1-D operands (a vector is a 1 x K row on the left, a K x 1
    column on the right, and that 1 is dropped from the result) and stacks of matrices, whose leading dimensions
    broadcast. Each 2-D operand (each matrix of a stack) is C-contiguous or the transpose of one. ``dtype``: the
    operands' (default) or, for float16 and bfloat16 operands, float32 (the float32 sums, not rounded, as
    ``np.matmul(A, B, dtype=np.float32)``); a bfloat16 product is bfloat16 by default, as ``np.dot``'s, PyTorch's
    and JAX's (``np.matmul`` gives float32 for want of a bfloat16 loop in ml_dtypes). ``precision`` (float32
    only): "ieee" fp32 products, "3xtf32" fp32-level error on the TF32 tensor cores, "tf32" TF32-rounded operands
    (see the matmul family)."""
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
        # A stack may be several launches, and one launch reads every matrix of the stack: an output that overlaps
        # any matrix of an input is judged over the whole call (no launch may overwrite what it or a later one
        # reads), and the products go to a staging array.
        target = staged(result, (dA, dB), launch_stream)
        c3 = target.reshape(batch + (M, N))
        kernel_args = {"precision": precision, "out_dtype": args["out_dtype"]}
        plans = stack_plans(a2, b2, c3, batch, dtype, kernel_args, launch_stream)
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


def stack_plans(a2, b2, c3, batch: tuple[int, ...], dtype: str, kernel_args: dict, stream) -> list[Plan]:
    """The launches of ``c3 = a2 @ b2`` over the stack ``batch`` (NumPy's broadcasting), fewest first:

    - one matrix: the kernel tuned for it;
    - a C-contiguous stack times one matrix: one product of all the stack's rows ((B*M, K) @ (K, N), a single
      problem whose tiles span the matrices), where its indices stay 32-bit;
    - else one batched launch (problem B x M x N x K, batch.py) for every index of the leading batch dimensions
      whose trailing ones collapse to two levels of strides: one launch for stacks of one batch dimension each,
      broadcast or not, and for any stack that collapses so;
    - where an operand's matrices are in neither layout or a stride is negative, the matrices one by one (the
      unbatched kernel, as NumPy's semantics ask: each matrix checked on its own)."""
    M, K = tuple(a2.shape)[-2:]
    N = tuple(b2.shape)[-1]
    if not batch:
        return [tuned_kernel("matmul", (M, N, K), dtype, layout=layout_of(a2, "A") + layout_of(b2, "B"),
                             **kernel_args).bind(a2, b2, out=c3, stream=stream)]
    rows = math.prod(batch) * M
    if math.prod(tuple(b2.shape)[:-2]) == 1 and tuple(a2.shape[:-2]) == batch and arrays.is_c_contiguous(a2) and \
            rows * K <= INT32_MAX and rows * N <= INT32_MAX:
        b = b2 if b2.ndim == 2 else arrays.indexed(b2, (0,) * (b2.ndim - 2))
        return stack_plans(a2.reshape(rows, K), b, c3.reshape(rows, N), (), dtype, kernel_args, stream)
    split = stack_split(a2, b2, batch)
    if split is None:
        check_stack_matrices(a2, b2, batch)
        return [stack_plans(stacked(a2, index, batch), stacked(b2, index, batch), c3[index], (), dtype,
                            kernel_args, stream)[0] for index in np.ndindex(*batch)]
    layout = "".join(batching.matrix_order(tuple(x.shape)[-2:], batching.element_strides(x)[-2:])
                     for x in (a2, b2))
    kernel = tuned_kernel("matmul", (math.prod(batch[split:]), M, N, K), dtype, layout=layout, **kernel_args)
    return [kernel.bind(leading(a2, index, batch), leading(b2, index, batch), c3[index] if index else c3,
                        stream=stream) for index in np.ndindex(*batch[:split])]


def check_stack_matrices(a2, b2, batch: tuple[int, ...]) -> None:
    """Refuse, naming the whole operand, a stack whose matrices are in neither layout the kernels read (each matrix
    C-contiguous or the transpose of one; an F-contiguous stack's are neither: its first index runs fastest). Every
    matrix of a stack has the first one's strides, so the first one answers for all."""
    for x, name in ((a2, "A"), (b2, "B")):
        if x.ndim < 3 or not x.size:
            continue
        try:
            layout_of(stacked(x, (0,) * len(batch), batch), name)
        except ValueError:
            raise ValueError(f"matmul: the matrices of {name} (shape {tuple(x.shape)}, strides {tuple(x.strides)} "
                             f"bytes) are strided views, neither C-contiguous nor the transposes of C-contiguous "
                             f"matrices that autotune reads (an F-contiguous stack's matrices are such views): copy "
                             f"it first (np.ascontiguousarray, cupy.ascontiguousarray, tensor.contiguous())") from None


def stack_split(a2, b2, batch: tuple[int, ...]) -> int | None:
    """How many leading batch dimensions to launch one by one so that the rest collapse to two levels of strides
    (batch.collapse), the fewest; None where a batched kernel cannot read the operands (a matrix in neither
    layout, a negative stride) or only single matrices remain."""
    strides = []
    for x in (a2, b2):
        steps = batching.element_strides(x)
        if batching.matrix_order(tuple(x.shape)[-2:], steps[-2:]) is None or any(s < 0 for s in steps):
            return None
        lead = len(batch) - (x.ndim - 2)
        strides.append((0,) * lead + tuple(0 if n == 1 else s for n, s in zip(tuple(x.shape)[:-2], steps[:-2])))
    M, N = tuple(a2.shape)[-2], tuple(b2.shape)[-1]
    c_steps = tuple(math.prod(batch[i + 1:]) * M * N for i in range(len(batch)))
    for split in range(len(batch)):
        rest = [tuple(s[split:]) for s in (*strides, c_steps)]
        if len(batching.collapse(batch[split:], rest)) <= 2:
            return split
    return None


def leading(d, index: tuple[int, ...], batch: tuple[int, ...]):
    """The sub-stack of ``d`` at the leading batch ``index`` (its own leading dimensions aligned to the end of
    ``batch``; those it lacks or has of one are broadcast)."""
    lead = d.ndim - 2 - (len(batch) - len(index))
    if lead <= 0:
        return d
    own = tuple(0 if n == 1 else i for i, n in zip(index[len(index) - lead:], tuple(d.shape)[:lead]))
    return arrays.indexed(d, own)


def stacked(d, index: tuple[int, ...], batch: tuple[int, ...]):
    """Matrix ``index`` of the stack ``batch`` from ``d``, whose leading dimensions broadcast to it."""
    lead = d.ndim - 2
    if lead == 0:
        return d
    own = tuple(0 if n == 1 else i for i, n in zip(index[len(batch) - lead:], d.shape[:lead]))
    return arrays.indexed(d, own)
