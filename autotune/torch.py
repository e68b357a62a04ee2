"""autotune's functions as PyTorch operators: usable inside ``torch.compile``d code without graph breaks, and
``matmul`` differentiable. Optional: importing this module imports PyTorch (the rest of autotune never does).

    import autotune.torch as att

    C = att.matmul(A, B)                 # torch.ops.autotune.matmul; C.sum().backward() fills A.grad, B.grad
    s = att.sum(x, axis=1)               # torch.ops.autotune.reduce: sum, max, min, nanmax, nanmin
    f = torch.compile(lambda A, B: att.sum(att.matmul(A, B), axis=-1), fullgraph=True)

Each function is a ``torch.library.custom_op`` (namespace ``autotune``) with a fake implementation that gives
its result's shape, dtype and strides without running it, so ``torch.compile``, ``torch.export`` and meta
tensors trace through it. Semantics are autotune's, which are NumPy's (``axis``, ``keepdims``, NaN in max and
min, an int32 sum is int64, float16 and bfloat16 accumulated in float32; ``precision`` of a float32 matmul);
work runs on PyTorch's current stream, and results are tensors on the inputs' device. An operand that is
neither contiguous nor (for matmul, per matrix) a transposed view is copied contiguous first, as PyTorch's own
operators accept any strides.

``matmul``'s backward is two matmuls through the same operator (so the same tuned kernels, at the same
precision): dA = dC @ B^T and dB = A^T @ dC, summed over the dimensions the forward broadcast; the
transposes are views, read in place. The reductions record no gradient.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import functions
from .core.dtypes import torch_dtype
from .families.reduce.config import result_dtype

__all__ = ["matmul", "sum", "max", "min", "nanmax", "nanmin", "dot"]

REDUCTIONS = ("sum", "max", "min", "nanmax", "nanmin")


# -- the operators -------------------------------------------------------------------------------------------
@torch.library.custom_op("autotune::matmul", mutates_args=())
def _matmul(a: torch.Tensor, b: torch.Tensor, precision: str) -> torch.Tensor:
    return functions.matmul(_operand(a), _operand(b), precision=precision, stream=_stream(a))


@_matmul.register_fake
def _matmul_fake(a: torch.Tensor, b: torch.Tensor, precision: str) -> torch.Tensor:
    return a.new_empty(matmul_shape(tuple(a.shape), tuple(b.shape)))


@torch.library.custom_op("autotune::reduce", mutates_args=())
def _reduce(x: torch.Tensor, op: str, axis: Optional[list[int]], keepdims: bool) -> torch.Tensor:
    result = getattr(functions, _checked_op(op))(_readable(x), axis=_axis(axis), keepdims=keepdims,
                                                 stream=_stream(x))
    return result


@_reduce.register_fake
def _reduce_fake(x: torch.Tensor, op: str, axis: Optional[list[int]], keepdims: bool) -> torch.Tensor:
    shape = reduced_shape(tuple(x.shape), _axis(axis), keepdims)
    dtype = torch_dtype(result_dtype(_checked_op(op), _numpy_name(x.dtype)))
    if _f_ordered(x) and not x.is_contiguous():  # an F-ordered input reduces its C base: the result is F-ordered
        return x.new_empty_strided(shape, _f_strides(shape), dtype=dtype)
    return x.new_empty(shape, dtype=dtype)


@torch.library.custom_op("autotune::dot", mutates_args=())
def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return functions.dot(_readable(a), _readable(b), stream=_stream(a))


@_dot.register_fake
def _dot_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() == 1 and b.dim() == 1:
        torch._check(a.shape[0] == b.shape[0], lambda: f"dot: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
        return a.new_empty(())
    return a.new_empty(matmul_shape(tuple(a.shape), tuple(b.shape)))


# -- matmul's gradient ---------------------------------------------------------------------------------------
def _matmul_context(ctx, inputs, output) -> None:
    a, b, precision = inputs
    ctx.save_for_backward(a, b)
    ctx.precision = precision


def _matmul_backward(ctx, grad: torch.Tensor):
    """dA = dC @ B^T, dB = A^T @ dC through the same operator, on the operands as 2-D matrices (a 1-D operand is
    a row on the left, a column on the right), summed over broadcast dimensions back to each operand's shape."""
    a, b = ctx.saved_tensors
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    grad2 = grad
    if a.dim() == 1:
        grad2 = grad2.unsqueeze(-2 if b.dim() > 1 else -1)
    if b.dim() == 1:
        grad2 = grad2.unsqueeze(-1)
    da = db = None
    if ctx.needs_input_grad[0]:
        da = _summed_to(torch.ops.autotune.matmul(grad2, b2.mT, ctx.precision), a2.shape).reshape(a.shape)
    if ctx.needs_input_grad[1]:
        db = _summed_to(torch.ops.autotune.matmul(a2.mT, grad2, ctx.precision), b2.shape).reshape(b.shape)
    return da, db, None


def _summed_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """``grad`` summed over the leading dimensions the forward broadcast ``shape`` to."""
    return grad if tuple(grad.shape) == tuple(shape) else grad.sum_to_size(shape)


_matmul.register_autograd(_matmul_backward, setup_context=_matmul_context)


# -- the functions users call ----------------------------------------------------------------------------
def matmul(a: torch.Tensor, b: torch.Tensor, *, precision: str = "ieee") -> torch.Tensor:
    """``autotune.matmul(a, b, precision=...)`` as a PyTorch operator, differentiable in ``a`` and ``b``."""
    return torch.ops.autotune.matmul(a, b, precision)


def sum(x: torch.Tensor, axis=None, *, keepdims: bool = False) -> torch.Tensor:  # noqa: A001 - NumPy's name
    """``autotune.sum(x, axis, keepdims=...)`` as a PyTorch operator."""
    return torch.ops.autotune.reduce(x, "sum", _axis_list(axis), keepdims)


def max(x: torch.Tensor, axis=None, *, keepdims: bool = False) -> torch.Tensor:  # noqa: A001
    """``autotune.max`` as a PyTorch operator: NaN in a reduced line gives NaN (as ``torch.amax``)."""
    return torch.ops.autotune.reduce(x, "max", _axis_list(axis), keepdims)


def min(x: torch.Tensor, axis=None, *, keepdims: bool = False) -> torch.Tensor:  # noqa: A001
    """``autotune.min`` as a PyTorch operator."""
    return torch.ops.autotune.reduce(x, "min", _axis_list(axis), keepdims)


def nanmax(x: torch.Tensor, axis=None, *, keepdims: bool = False) -> torch.Tensor:
    """``autotune.nanmax`` as a PyTorch operator: NaN skipped."""
    return torch.ops.autotune.reduce(x, "nanmax", _axis_list(axis), keepdims)


def nanmin(x: torch.Tensor, axis=None, *, keepdims: bool = False) -> torch.Tensor:
    """``autotune.nanmin`` as a PyTorch operator."""
    return torch.ops.autotune.reduce(x, "nanmin", _axis_list(axis), keepdims)


def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``autotune.dot`` as a PyTorch operator (two 1-D tensors: a 0-d tensor; two 2-D ones: their product)."""
    return torch.ops.autotune.dot(a, b)


# -- shapes, as the fake implementations give them -------------------------------------------------------
def matmul_shape(a: tuple, b: tuple) -> tuple:
    """``np.matmul``'s result shape (1-D operands, broadcast stacks); works on PyTorch's symbolic sizes."""
    if not a or not b:
        raise ValueError("matmul: an operand is 0-d (a scalar); use multiplication")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    torch._check(a2[-1] == b2[-2], lambda: f"matmul: shapes {a} and {b} do not align")
    batch = broadcast(a2[:-2], b2[:-2])
    return (*batch, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ()))


def broadcast(x: tuple, y: tuple) -> tuple:
    """NumPy's broadcast of two shapes."""
    x, y = (1,) * (len(y) - len(x)) + tuple(x), (1,) * (len(x) - len(y)) + tuple(y)
    out = []
    for m, n in zip(x, y):
        if m == 1:
            out.append(n)
        elif n == 1:
            out.append(m)
        else:
            torch._check(m == n, lambda: f"matmul: the stack shapes {x} and {y} do not broadcast")
            out.append(m)
    return tuple(out)


def reduced_shape(shape: tuple, axis, keepdims: bool) -> tuple:
    """NumPy's result shape of a reduction of ``shape`` over ``axis`` (None: all)."""
    from .runtime.calls import normalize_axis

    axes = normalize_axis(axis, len(shape))
    return tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)


# -- helpers -----------------------------------------------------------------------------------------
def _checked_op(op: str) -> str:
    if op not in REDUCTIONS:
        raise ValueError(f"autotune::reduce: op must be one of {', '.join(REDUCTIONS)}, got {op!r}")
    return op


def _axis_list(axis) -> list[int] | None:
    """``axis`` as the operator's schema takes it: None, or a list (an int is a list of one; ``()`` an empty
    list, which reduces nothing)."""
    if axis is None:
        return None
    return [int(a) for a in axis] if isinstance(axis, (tuple, list)) else [int(axis)]


def _axis(axis: list[int] | None):
    return None if axis is None else tuple(axis)


def _stream(x: torch.Tensor):
    """PyTorch's current stream on ``x``'s device (its operators' stream), None for a CPU tensor."""
    return torch.cuda.current_stream(x.device) if x.is_cuda else None


def _readable(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself (without its autograd history) where it is C- or F-contiguous, else a contiguous copy."""
    x = x.detach()
    return x if x.is_contiguous() or _f_ordered(x) else x.contiguous()


def _operand(x: torch.Tensor) -> torch.Tensor:
    """A matmul operand as autotune reads it: on the GPU each matrix C-contiguous or the transpose of a
    C-contiguous one; on the host (copied to the GPU whole) C- or F-contiguous."""
    x = x.detach()
    transposed = x.dim() >= 2 and x.mT.is_contiguous() and (x.is_cuda or x.dim() == 2)
    return x if x.is_contiguous() or transposed else x.contiguous()


def _f_ordered(x: torch.Tensor) -> bool:
    return x.dim() >= 2 and x.permute(*reversed(range(x.dim()))).is_contiguous()


def _f_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in shape:
        strides.append(step)
        step *= n if n != 0 else 1
    return tuple(strides)


_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int32: "int32", torch.int64: "int64"}


def _numpy_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TypeError(f"autotune takes {', '.join(_NAMES.values())} tensors; got {dtype}") from None
