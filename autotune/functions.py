"""NumPy-style functions: ``autotune.sum/max/min/nanmax/nanmin/dot/matmul``, tuned for each call's own shape.

Each call brings its arrays to one of the families' problem forms, takes the kernel tuned for that shape (the
database entry for the exact shape, else the nearest, else the family's default, announced once per shape and
process by a ``TunedKernelWarning``) and keeps it for the next call of the same shape. The functions live with
their families (autotune/families/*/functions.py); ``dot`` joins both.

Semantics are NumPy's: result shapes and dtypes, ``axis`` (negative, a tuple), ``keepdims``, NaN in max and min,
the empty cases; ``matmul`` of 1-D operands and of stacks of matrices with broadcasting. What is not supported
raises a clear error instead of computing something else. Results come in the caller's array library
(autotune/runtime/libraries.py): NumPy inputs give NumPy results (a NumPy scalar where NumPy returns one),
PyTorch tensors PyTorch tensors, CuPy arrays CuPy arrays, Numba device arrays Numba device arrays (0-d where NumPy
returns a scalar), and for device inputs nothing waits for the GPU.

Layouts: C-contiguous arrays and F-contiguous ones (transposed views: ``x.T`` of a NumPy or CuPy array, a
PyTorch ``t.t()``) are read in place; a reduction of an F-contiguous array reduces the matching axis of its
C-contiguous base, a matmul operand picks the transposed layout. Other strided views are refused, naming the
copy to make. Work is queued on ``stream`` (see autotune/runtime/streams.py).
"""
from __future__ import annotations

from .families.matmul.functions import matmul, matmul_call
from .families.reduce.functions import max, min, nanmax, nanmin, reduce_call, sum
from .runtime.calls import device_input
from .runtime.libraries import library_of
from .runtime.streams import as_stream

__all__ = ["sum", "max", "min", "nanmax", "nanmin", "dot", "matmul"]


def dot(a, b, *, out=None, stream=None):
    """``np.dot`` of two 1-D arrays (their inner product) or two 2-D arrays (``matmul``)."""
    library = library_of(a, b)
    launch_stream = as_stream(stream)
    da, db = device_input(a, "a", launch_stream), device_input(b, "b", launch_stream)
    if da.ndim == 1 and db.ndim == 1:
        if da.shape != db.shape:
            raise ValueError(f"shapes {tuple(da.shape)} and {tuple(db.shape)} not aligned for dot")
        return reduce_call("dot", da, None, False, None, out, stream, y=db, library=library)
    if da.ndim == 2 and db.ndim == 2:
        return matmul_call(da, db, out, stream, library)
    raise ValueError(f"autotune.dot takes two 1-D or two 2-D arrays, got {da.ndim}-D and {db.ndim}-D (use "
                     f"autotune.matmul for stacks of matrices)")
