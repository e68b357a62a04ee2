"""The reduction family: sum, max, min and dot (sum of a*b) over a whole array or a 2-D array's axis.

``axis=None`` treats any C-contiguous array as flat; ``axis=1`` reduces along rows (one result per row),
``axis=0`` down columns (one result per column). A flat reduction of device input returns a 1-element
device array, so no host synchronisation happens unless the input was a NumPy array.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import arrays
from .device import current_device
from .launch import Plan, Planned, configure
from .matmul import fill

OPS = ("sum", "max", "min", "dot")
_IDENTITY = {"sum": "0", "dot": "0", "max": "-math.inf", "min": "math.inf"}


def family_args(op: str = "sum", axis: int | None = None) -> dict[str, Any]:
    if op not in OPS:
        raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")
    if axis not in (None, 0, 1) or isinstance(axis, bool):
        raise ValueError(f"axis must be None (whole array), 0 or 1; got {axis!r}")
    return {"op": op, "axis": axis}


def template_context(params: Mapping[str, Any], dtype: str, family: Mapping[str, Any], simulator: bool) -> dict:
    return {**params, **family, "dtype": dtype, "SIM": simulator, "identity": _IDENTITY[family["op"]],
            "description": f"reduce {family['op']} axis={family['axis']} {dtype} {dict(params)}"}


def signature(params: Mapping[str, Any], dtype: str, family: Mapping[str, Any]) -> str:
    arr = f"{dtype}[::1]"
    if family["axis"] is None:
        return f"void({arr}, {arr}, int64, {arr}, int32[::1], {arr}, boolean)"
    if family["axis"] == 1:
        return f"void({arr}, {arr}, int64, int64, {arr}, boolean)"
    return f"void({arr}, {arr}, int64, int64, {arr}, int64, boolean)"


def entry_name(family: Mapping[str, Any]) -> str:
    return {None: "reduce_all", 1: "reduce_rows", 0: "reduce_cols"}[family["axis"]]


class ReduceKernel(Planned):
    """A compiled reduction variant: ``k(x)``, ``k(x, axis=1)`` (as built), ``k(a, b)`` for dot.

    With device arrays and ``out=`` a call after the first replays a prepared plan (see launch.py);
    ``k.bind(x, out=r)`` returns that plan to call directly.
    """

    kind = "reduce"

    def __init__(self, module, params: Mapping[str, Any], dtype: str, family: Mapping[str, Any], source: str):
        self.module = module
        self.params = dict(params)
        self.dtype = dtype
        self.family = dict(family)
        self.op = family["op"]
        self.axis = family["axis"]
        self.source = source
        self.kernel = getattr(module, entry_name(family))
        self._launches: dict[tuple, tuple] = {}
        self._counter = None

    def __repr__(self) -> str:
        return f"<ReduceKernel {self.op} axis={self.axis} {self.dtype} {self.params}>"

    @property
    def signature(self) -> str:
        return signature(self.params, self.dtype, self.family)

    def bytes_moved(self, shape: tuple[int, ...]) -> int:
        n = int(np.prod(shape))
        return n * np.dtype(self.dtype).itemsize * (2 if self.op == "dot" else 1)

    # -- user entry point ------------------------------------------------------------------------
    def __call__(self, x, y=None, *, axis: Any = "as built", out=None):
        if axis != "as built" and axis != self.axis:
            raise ValueError(f"this kernel was built for axis={self.axis}; build another with axis={axis!r}")
        if out is not None and (plan := self._plan_for((x, y), out, lambda: self.bind(x, y, out=out))):
            plan()
            return out
        result, run = self._prepare(x, y, out)
        run()
        host = arrays.is_host(x) and (y is None or arrays.is_host(y)) and out is None
        if host:
            value = result.copy_to_host()
            return value[0] if self.axis is None else value
        return out if out is not None else result

    def bind(self, x, y=None, *, out=None) -> Plan:
        """The call ``k(x[, y], out=out)`` checked once; calling the plan launches it again and returns the output."""
        return self._plan(self._prepare(x, y, out))

    def _prepare(self, x, y, out):
        if (y is None) != (self.op != "dot"):
            raise TypeError("dot takes two arrays: k(a, b)" if self.op == "dot" else f"{self.op} takes one array")
        dx = self._input(x, "x")
        dy = self._input(y, "y") if y is not None else dx
        if tuple(dy.shape) != tuple(dx.shape):
            raise ValueError(f"dot operands differ in shape: {tuple(dx.shape)} and {tuple(dy.shape)}")
        if self.axis is not None and dx.ndim != 2:
            raise ValueError(f"axis={self.axis} needs a 2-D array, got shape {tuple(dx.shape)}")
        result = self._output(out, dx)
        if dx.size == 0:
            return result, self._empty(result, dx)
        target = self._scratch_for(result, dx, dy)
        x_flat, y_flat = arrays.flat(dx), arrays.flat(dy)
        return result, lambda: self._into(result, target, lambda: self.launch(x_flat, y_flat, target, tuple(dx.shape)))

    def _input(self, x, name: str):
        d = arrays.to_device(x, name)
        arrays.check_dtype(d, name, self.dtype)
        if not arrays.is_c_contiguous(d):
            raise ValueError(f"{name} must be C-contiguous (copy it first, e.g. cupy.ascontiguousarray)")
        return d

    def _output(self, out, dx):
        from numba import cuda

        shape = (1,) if self.axis is None else (dx.shape[1 - self.axis],)
        if out is None:
            return cuda.device_array(shape, dtype=self.dtype)
        if arrays.is_host(out):
            raise TypeError("out must be a device array (CuPy, PyTorch CUDA or Numba), not a NumPy array")
        d = arrays.to_device(out, "out")
        arrays.check_dtype(d, "out", self.dtype)
        if tuple(d.shape) != shape or not arrays.is_c_contiguous(d):
            raise ValueError(f"out must be a C-contiguous array of shape {shape}, got {tuple(d.shape)}")
        return d

    def _empty(self, result, dx):
        """The call on an empty input, as NumPy has it: max and min of nothing raise (where the reduced extent is
        0), a sum of nothing is 0, and an empty result needs no launch."""
        reduced = dx.size if self.axis is None else dx.shape[self.axis]
        if reduced == 0 and self.op in ("max", "min"):
            raise ValueError(f"zero-size array to reduction operation {self.op}, which has no identity")
        return lambda: self._enqueue(*fill(self.module, result, 0)) if result.size else None

    # -- launching -------------------------------------------------------------------------------
    def launch(self, x_flat, y_flat, out, shape: tuple[int, ...]) -> None:
        """Launch on flat, already-checked device arrays (the tuner's path)."""
        p = self.params
        vec_ok = arrays.aligned(x_flat, p["VEC"]) and arrays.aligned(y_flat, p["VEC"])
        if self.axis is None:
            self._launch_all(x_flat, y_flat, out, x_flat.size, vec_ok)
            return
        M, N = shape
        vec_ok = vec_ok and N % p["VEC"] == 0
        configured, extra = self._config(shape)
        if self.axis == 1:
            self._enqueue(configured, x_flat, y_flat, M, N, out, vec_ok)
        else:
            if p["ROW_SPLIT"] > 1:  # the template combines row slices with atomics
                self._enqueue(*fill(self.module, out, float(_host_identity(self.op))))
            self._enqueue(configured, x_flat, y_flat, M, N, out, extra[0], vec_ok)

    def _launch_all(self, x_flat, y_flat, out, n: int, vec_ok: bool) -> None:
        configured, (partial, blocks) = self._config((n,))
        combine = self.params["COMBINE"]
        if combine == "atomic":
            self._enqueue(*fill(self.module, out, float(_host_identity(self.op))))
        self._enqueue(configured, x_flat, y_flat, n, partial, self._counter_array(), out, vec_ok)
        if combine == "two_pass":
            self._enqueue(configure(self.module.finish, 1, self.params["BLOCK"]), partial, blocks, out)

    def _counter_array(self):
        from numba import cuda

        if self._counter is None:
            self._counter = cuda.to_device(np.zeros(1, dtype=np.int32))
        return self._counter

    def _config(self, shape: tuple[int, ...]):
        if shape not in self._launches:
            self._launches[shape] = self._make_config(shape)
        return self._launches[shape]

    def _make_config(self, shape: tuple[int, ...]):
        from numba import cuda

        p = self.params
        sms = current_device().sm_count
        if self.axis is None:
            (n,) = shape
            chunk = p["BLOCK"] * p["ITEMS"] * p["VEC"]
            blocks = max(1, min(-(-n // chunk), p["WAVES"] * sms))
            partial = cuda.device_array(blocks, dtype=self.dtype)
            return configure(self.kernel, blocks, p["BLOCK"]), (partial, blocks)
        M, N = shape
        if self.axis == 1:
            rows_per_block = p["BLOCK"] // 32 if p["ROW_MODE"] == "warp" else 1
            blocks = max(1, min(-(-M // rows_per_block), p["WAVES"] * sms))
            return configure(self.kernel, blocks, p["BLOCK"]), None
        splits = max(1, min(p["ROW_SPLIT"], M))
        rows_per_split = -(-M // splits)
        splits = -(-M // rows_per_split)
        grid = (max(1, -(-N // (p["BX"] * p["VEC"]))), splits)
        return configure(self.kernel, grid, p["BLOCK"]), (rows_per_split, splits)


def _host_identity(op: str) -> float:
    return {"sum": 0.0, "dot": 0.0, "max": -np.inf, "min": np.inf}[op]


def reference(op: str, x: np.ndarray, y: np.ndarray | None = None, axis: int | None = None) -> np.ndarray:
    """float64 NumPy result of the reduction."""
    x64 = x.astype(np.float64)
    if op == "dot":
        return (x64 * y.astype(np.float64)).sum(axis=axis)
    return {"sum": np.sum, "max": np.max, "min": np.min}[op](x64, axis=axis)
