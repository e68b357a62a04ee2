"""Stacks of matrices for the matmul family: how a call's batch reaches one launch.

A batched matmul problem has the shape B x M x N x K (family argument ``batch`` "strided", which the shape
implies). Its kernels multiply matrix z of the stack in the blocks of grid row z (``gridDim.z``: the tiled
kernels keep x for the tiles and y for the K slices, the gemv kernel x for the matrix's blocks and y for its K
slices). Each operand reaches the kernel as one flat array from its first element plus the element strides of
two batch levels: matrix z = (z // inner) * inner + z % inner starts ``outer_stride * (z // inner) +
inner_stride * (z % inner)`` elements on. A stride of 0 broadcasts an operand: ``(B, M, K) @ (K, N)`` reads the
one K x N matrix for every z. Two levels express every broadcast of two stacks of one batch dimension each
(``(2, 1, M, K) @ (3, K, N)``: A's strides M*K and 0, B's 0 and K*N) and any stack whose batch dimensions
collapse to two; a call with more is split by its caller (``autotune.matmul`` loops over the leading ones).

Each matrix is stored as a 2-D matrix of the kernel's layout is (C-contiguous, or the transpose of one); the
stack around it may be strided (a slice ``x[::2]``, a broadcast view, PyTorch's ``x.mT`` of a stack). C is a
C-contiguous stack. ``gridDim.z`` takes at most 65535 matrices: a longer stack is launched in chunks of whole
outer rows (or of 65535 inner ones).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ...runtime import arrays

MAX_GRID_Z = 65535  # gridDim.z's limit


@dataclass(frozen=True)
class Stack:
    """How the matrices of one launch lie: ``outer`` x ``inner`` matrices, and for A, B and C the element strides
    (outer, inner) between them (0: the operand is broadcast over that level)."""

    outer: int
    inner: int
    a: tuple[int, int]
    b: tuple[int, int]
    c: tuple[int, int]

    @property
    def count(self) -> int:
        return self.outer * self.inner


def collapse(batch: Sequence[int], strides: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...]]]:
    """The batch dimensions as levels (count, the operands' strides), fewest first: dimensions of one matrix
    dropped, and each dimension merged into the one before it where every operand steps over both as over one
    (stride before = stride after * count after)."""
    levels: list[tuple[int, tuple[int, ...]]] = []
    for n, step in zip(batch, zip(*strides)):
        if n == 1:
            continue
        if levels:
            count, before = levels[-1]
            if all(b == s * n for b, s in zip(before, step)):
                levels[-1] = (count * n, step)
                continue
        levels.append((n, tuple(step)))
    return levels


def stack_of(batch: Sequence[int], a: Sequence[int], b: Sequence[int], c: Sequence[int]) -> Stack | None:
    """The two-level Stack of a batch of shape ``batch`` whose operands step ``a``, ``b``, ``c`` elements per
    batch index (0 where broadcast), or None where their dimensions do not collapse to two levels."""
    levels = collapse(batch, (a, b, c))
    if len(levels) > 2:
        return None
    levels = [(1, (0, 0, 0))] * (2 - len(levels)) + levels
    (outer, (ao, bo, co)), (inner, (ai, bi, ci)) = levels
    return Stack(outer, inner, (ao, ai), (bo, bi), (co, ci))


def chunks(stack: Stack, limit: int | None = None) -> Iterator[tuple[tuple[int, int, int], Stack]]:
    """The launches of ``stack`` at most ``limit`` (MAX_GRID_Z) matrices each: (element offsets of A, B and C,
    the chunk's Stack). One launch where the stack fits; else whole outer rows per launch, or pieces of one where a
    row is longer than the limit."""
    limit = limit or MAX_GRID_Z
    if stack.count <= limit:
        yield (0, 0, 0), stack
        return
    rows = limit // stack.inner
    for o in range(0, stack.outer, max(rows, 1)):
        if rows:
            chunk = Stack(min(rows, stack.outer - o), stack.inner, stack.a, stack.b, stack.c)
            yield (o * stack.a[0], o * stack.b[0], o * stack.c[0]), chunk
            continue
        for i in range(0, stack.inner, limit):
            chunk = Stack(1, min(limit, stack.inner - i), (0, stack.a[1]), (0, stack.b[1]), (0, stack.c[1]))
            yield tuple(o * s[0] + i * s[1] for s in (stack.a, stack.b, stack.c)), chunk


@dataclass(frozen=True)
class Operand:
    """One operand of a batched call: its flat array (from its first element, every element of the stack
    inside), its matrix's rows and columns, their row stride (``ld``), and its batch dimensions' shape and element
    strides (0 where a dimension is 1: broadcast)."""

    flat: Any
    rows: int
    cols: int
    ld: int
    batch: tuple[int, ...]
    strides: tuple[int, ...]


def in_layout(shape: tuple[int, int], strides: tuple[int, int], transposed: bool) -> bool:
    """Whether a rows x cols matrix with these element strides is C-contiguous (``transposed`` False) or the
    transpose of a C-contiguous one (F-contiguous); a dimension of one may have any stride."""
    (rows, cols), (sr, sc) = shape, strides
    if transposed:
        return (rows == 1 or sr == 1) and (cols == 1 or sc == rows)
    return (cols == 1 or sc == 1) and (rows == 1 or sr == cols)


def matrix_order(shape: tuple[int, int], strides: tuple[int, int]) -> str | None:
    """'n' for a C-contiguous matrix, else 't' for the transpose of one, else None."""
    return "n" if in_layout(shape, strides, False) else "t" if in_layout(shape, strides, True) else None


def element_strides(d) -> tuple[int, ...]:
    """A device array's strides in elements."""
    itemsize = d.dtype.itemsize
    return tuple(s // itemsize for s in tuple(d.strides))


def operand(d, name: str, transposed: bool) -> Operand:
    """``d`` (a device array of at least 2 dimensions, its last two a matrix) as the kernel reads it; ValueError
    naming what does not fit: a matrix stored in neither layout, or one not in the layout the kernel was built
    for, or a negative stride."""
    if d.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (a matrix, or a stack of them), got shape "
                         f"{tuple(d.shape)}")
    strides = element_strides(d)
    shape = tuple(d.shape)
    rows, cols = (int(n) for n in shape[-2:])
    if d.size and not in_layout((rows, cols), strides[-2:], transposed):
        layout = "the transpose of a C-contiguous matrix" if transposed else "a C-contiguous matrix"
        raise ValueError(f"each matrix of {name} must be {layout} (shape {tuple(d.shape)}, element strides "
                         f"{strides}); build the kernel with layout {'n' if transposed else 't'} for the other, or "
                         f"copy it")
    if min(strides, default=0) < 0:
        raise ValueError(f"{name} has a negative stride {strides}: copy it first")
    flat = arrays.span(d)
    ld = rows if transposed else cols
    batch = tuple(int(n) for n in shape[:-2])
    return Operand(flat, rows, cols, ld, batch, tuple(0 if n == 1 else s for n, s in zip(batch, strides[:-2])))


def broadcast(batch: tuple[int, ...], op: Operand) -> tuple[int, ...]:
    """``op``'s element strides over the dimensions of ``batch`` (its own aligned to their end, NumPy's rule):
    0 where it has no such dimension or one of size 1."""
    lead = len(batch) - len(op.batch)
    return (0,) * lead + op.strides


__all__ = ["Stack", "Operand", "collapse", "stack_of", "chunks", "operand", "matrix_order", "in_layout", "broadcast",
           "MAX_GRID_Z"]
