"""Calling a reduction variant: argument checks, launch configuration, the last-block counter, plans.

A flat reduction of device input returns a 1-element device array, so no host synchronisation happens unless
the input was a NumPy array. The output has the result's dtype (reduce.result_dtype: an int32 sum is int64).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...core.device import current_device, gpu_required
from ...core.dtypes import kernel_view, storage
from ...core.family import Kernel
from ...runtime import arrays, result_pool
from ...runtime.launch import Plan, Planned, configure, elementwise, fill, zero
from ...runtime.libraries import library_of
from ...runtime.streams import DEFAULT, as_stream, follow, stream_key
from .config import (
    accumulator_dtype,
    identity,
    kernel_args,
    kernel_out_dtype,
    result_dtype,
    result_shape,
    rows_per_block,
    staged,
    uses_atomics,
)

# {x}: the input's dtype; {o}: the dtype of what the kernel writes; {acc}: the accumulator's
ARG_TYPES = {"X": "{x}[::1]", "Y": "{x}[::1]", "out": "{o}[::1]", "partial": "{acc}[::1]", "counter": "int32[::1]",
             "n": "int64", "M": "int64", "N": "int64", "L": "int64", "rows_per_split": "int64", "vec_ok": "boolean"}
RANK = {None: None, 0: 2, 1: 2, -2: 3}  # the input rank each axis form takes (None: any)


def signature(params: Mapping[str, Any], dtype: str, args: Mapping[str, Any]) -> str:
    types = {"x": storage(dtype), "o": storage(kernel_out_dtype(params, dtype, args)),
             "acc": accumulator_dtype(args["op"], dtype)}
    return f"void({', '.join(ARG_TYPES[n].format(**types) for n in kernel_args(params, args))})"


def entry_name(family: Mapping[str, Any]) -> str:
    return {None: "reduce_all", 1: "reduce_rows", 0: "reduce_cols", -2: "reduce_cols"}[family["axis"]]


class ReduceKernel(Planned, Kernel):
    """A compiled reduction variant: ``k(x)``, ``k(x, axis=1)`` (as built), ``k(a, b)`` for dot. Built with
    ``axis=-2`` it takes an (outer, R, inner) array and returns (outer, inner).

    With device arrays a call after the first replays a prepared plan (see launch.py): into ``out=``, or onto a
    new output; ``k.bind(x, out=r)`` returns the plan to call directly.
    """

    def __init__(self, family, module, params: Mapping[str, Any], dtype: str, args: Mapping[str, Any], source: str,
                 simulator: bool):
        super().__init__(family, module, params, dtype, args, source, simulator)
        self.op = args["op"]
        self.axis = args["axis"]
        self.out_dtype = result_dtype(self.op, dtype)
        self.acc_dtype = accumulator_dtype(self.op, dtype)
        self.staged = staged(params, dtype, args)
        self.entry = getattr(module, entry_name(args))
        self.arg_names = kernel_args(params, args)
        self._launches: dict[tuple, tuple] = {}
        self._counters: dict[int, Any] = {}
        self._workspaces: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"<ReduceKernel {self.op} axis={self.axis} {self.dtype} {self.params}>"

    def helper_kernels(self) -> list[tuple[Any, str]]:
        """The module's fixed kernels a call launches besides the variant's, with their launch signatures: the
        fill that sets the output to a max's or min's identity before blocks combine into it with atomics (a sum's
        identity, all zero bits, is a driver memset on the GPU), the finishing pass of a two-pass combine, and the
        store of a staged result. (The fill of an empty call's result compiles at its first use.)"""
        out, acc = storage(kernel_out_dtype(self.params, self.dtype, self.args)), self.acc_dtype
        helpers = []
        if uses_atomics(self.params, self.args) and identity(self.op, acc) != 0:
            helpers.append((self.module.fill, f"void({out}[::1], {out})"))
        if self.axis is None and self.params["COMBINE"] == "two_pass":
            helpers.append((self.module.finish, f"void({acc}[::1], int64, {out}[::1])"))
        if self.staged:
            helpers.append((self.module.store, f"void({acc}[::1], {storage(self.out_dtype)}[::1])"))
        return helpers

    @property
    def signature(self) -> str:
        return signature(self.params, self.dtype, self.args)

    # -- user entry point ------------------------------------------------------------------------
    def __call__(self, x, y=None, *, axis: Any = "as built", out=None, stream=None):
        if axis != "as built" and axis != self.axis:
            raise ValueError(f"this kernel was built for axis={self.axis}; build another with axis={axis!r}")
        stream = as_stream(stream)
        follow(stream, map(arrays.producer_stream, (x, y, out)))
        if out is not None and (plan := self._plan_for((x, y), out, lambda: self.bind(x, y, out=out, stream=stream),
                                                       stream)):
            plan()
            return out
        if out is not None:
            _, run = self._prepare(x, y, out, stream)
            run()
            return out
        library = library_of(x, y)
        if (result := self._replayed_new((x, y), stream)) is not None:
            return result if library.wrap is None else library.wrap(result)
        result = self._run_new((x, y), self._prepare(x, y, out, stream), stream)
        if library.host:  # a whole reduction gives NumPy's scalar (a 0-d PyTorch tensor)
            value = arrays.device_to_host(result)
            return library.result(value.reshape(()) if self.axis is None else value, scalar=self.axis is None)
        return result if library.wrap is None else library.wrap(result)

    def bind(self, x, y=None, *, out=None, stream=None) -> Plan:
        """The call ``k(x[, y], out=out, stream=stream)`` checked once; calling the plan launches it again and
        returns the output."""
        return self._plan(self._prepare(x, y, out, as_stream(stream)))

    def _prepare(self, x, y, out, stream):
        with gpu_required():
            return self._prepare_checked(x, y, out, stream)

    def _prepare_checked(self, x, y, out, stream):
        if (y is None) != (self.op != "dot"):
            raise TypeError("dot takes two arrays: k(a, b)" if self.op == "dot" else f"{self.op} takes one array")
        dx = self._input(x, "x")
        dy = self._input(y, "y") if y is not None else dx
        if tuple(dy.shape) != tuple(dx.shape):
            raise ValueError(f"dot operands differ in shape: {tuple(dx.shape)} and {tuple(dy.shape)}")
        rank = RANK[self.axis]
        if rank is not None and dx.ndim != rank:
            raise ValueError(f"axis={self.axis} needs a {rank}-D array, got shape {tuple(dx.shape)}")
        result = self._output(out, dx, stream)
        if dx.size == 0:
            return result, self._empty(result, dx, stream)
        target = self._scratch_for(result, dx, dy, stream=stream)
        x_flat = arrays.flat(dx)
        y_flat = x_flat if dy is dx else arrays.flat(dy)
        return result, lambda: self._into(result, target,
                                          lambda: self.launch(x_flat, y_flat, target, tuple(dx.shape), stream), stream)

    def _input(self, x, name: str):
        d = arrays.to_device(x, name)
        arrays.check_dtype(d, name, self.dtype, self.family.dtypes)
        if not arrays.is_c_contiguous(d):
            raise ValueError(f"{name} must be C-contiguous (copy it first: np.ascontiguousarray, cupy.ascontiguousarray, tensor.contiguous())")
        return d

    def _output(self, out, dx, stream):
        shape = result_shape(tuple(dx.shape), self.axis)
        if out is None:
            return result_pool.empty(shape, self.out_dtype, "C", stream)
        if arrays.is_host(out):
            raise TypeError("out must be a device array (CuPy, PyTorch CUDA or Numba), not a NumPy array")
        d = arrays.to_device(out, "out")
        if np.dtype(d.dtype).name != self.out_dtype:
            raise TypeError(f"out has dtype {np.dtype(d.dtype).name}; a {self.op} of {self.dtype} gives "
                            f"{self.out_dtype}")
        if tuple(d.shape) != shape or not arrays.is_c_contiguous(d):
            raise ValueError(f"out must be a C-contiguous array of shape {shape}, got {tuple(d.shape)}")
        return d

    def _empty(self, result, dx, stream):
        """The call on an empty input, as NumPy has it: max and min of nothing raise (where the reduced extent is
        0), a sum of nothing is 0, and an empty result needs no launch."""
        reduced = dx.size if self.axis is None else dx.shape[1 if self.axis == -2 else self.axis]
        if reduced == 0 and self.op not in ("sum", "dot"):
            raise ValueError(f"zero-size array to reduction operation {self.op}, which has no identity")
        return lambda: self._enqueue(*fill(self.module, kernel_view(arrays.flat(result)), 0, self.simulator, stream)) \
            if result.size else None

    # -- launching -------------------------------------------------------------------------------
    def launch(self, x_flat, y_flat, out, shape: tuple[int, ...], stream=DEFAULT) -> None:
        """Launch on flat, already-checked device arrays (the tuner's path), on ``stream`` (see streams.py). A
        staged variant (reduce.staged) writes a workspace of accumulators, then stores it into ``out``."""
        x_view = kernel_view(x_flat)
        y_flat = x_view if y_flat is x_flat else kernel_view(y_flat)
        x_flat, out = x_view, kernel_view(arrays.flat(out))
        target = self._workspace(out, shape, stream) if self.staged else out
        self._launch_main(x_flat, y_flat, target, shape, stream)
        if self.staged:
            self._enqueue(elementwise(self.module.store, out.size, self.simulator, stream), target, out)

    def _launch_main(self, x_flat, y_flat, out, shape: tuple[int, ...], stream) -> None:
        p = self.params
        vec_ok = arrays.aligned(x_flat, p["VEC"]) and arrays.aligned(y_flat, p["VEC"])
        if self.axis is None:
            self._launch_all(x_flat, y_flat, out, x_flat.size, vec_ok, stream)
            return
        M, N = shape[-2:]
        vec_ok = vec_ok and N % p["VEC"] == 0
        configured, extra = self._config(shape, stream)
        if self.axis == 1:
            self._enqueue(configured, *self._args(X=x_flat, Y=y_flat, M=M, N=N, out=out, vec_ok=vec_ok))
        else:
            if p["ROW_SPLIT"] > 1:  # the template combines row slices with atomics
                self._enqueue(*self._identity_step(out, stream))
            self._enqueue(configured, *self._args(X=x_flat, Y=y_flat, M=M, N=N, L=out.size, out=out,
                                                  rows_per_split=extra[0], vec_ok=vec_ok))

    def _identity_step(self, out, stream) -> tuple:
        """The step that sets ``out`` to the reduction's identity before blocks combine into it with atomics: a
        driver memset where the identity is all zero bits (sums, dots: one kernel launch less per call, which is
        most of a small sum's host time), else the fill kernel (max, min)."""
        value = identity(self.op, self.acc_dtype)
        if value == 0 and out.size * out.dtype.itemsize % 4 == 0:
            return zero(self.module, out, self.simulator, stream)
        return fill(self.module, out, value, self.simulator, stream)

    def _workspace(self, out, shape: tuple[int, ...], stream):
        """The accumulators a staged variant combines into, kept per (shape, stream) as the partials are."""
        from numba import cuda

        key = (shape, stream_key(stream))
        if key not in self._workspaces:
            self._workspaces[key] = cuda.device_array(out.size, dtype=self.acc_dtype)
        return self._workspaces[key]

    def _args(self, **values) -> list:
        """The values of the arguments the variant's kernel takes, in its order."""
        return [values[name] for name in self.arg_names]

    def _launch_all(self, x_flat, y_flat, out, n: int, vec_ok: bool, stream) -> None:
        configured, (partial, blocks) = self._config((n,), stream)
        combine = self.params["COMBINE"]
        if combine == "atomic":
            self._enqueue(*self._identity_step(out, stream))
        counter = self._counter_array(stream) if "counter" in self.arg_names else None
        self._enqueue(configured, *self._args(X=x_flat, Y=y_flat, n=n, partial=partial, counter=counter, out=out,
                                              vec_ok=vec_ok))
        if combine == "two_pass":
            self._enqueue(configure(self.module.finish, 1, self.params["BLOCK"], 0, self.simulator, stream), partial,
                          blocks, out)

    def _counter_array(self, stream):
        """The last-block counter of calls on ``stream`` (zero between calls: the last block resets it; see the
        COMBINEs last_block and atomic_last)."""
        from numba import cuda

        key = stream_key(stream)
        if key not in self._counters:
            self._counters[key] = cuda.to_device(np.zeros(1, dtype=np.int32))
        return self._counters[key]

    def _config(self, shape: tuple[int, ...], stream):
        """The launch configuration and workspace for calls of this shape on this stream."""
        key = (shape, stream_key(stream))
        if key not in self._launches:
            self._launches[key] = self._make_config(shape, stream)
        return self._launches[key]

    def _make_config(self, shape: tuple[int, ...], stream):
        from numba import cuda

        p = self.params
        sms = current_device().sm_count
        if self.axis is None:
            (n,) = shape
            chunk = p["BLOCK"] * p["ITEMS"] * p["VEC"]
            blocks = max(1, min(-(-n // chunk), p["WAVES"] * sms))
            if p["COMBINE"] == "atomic_last":  # the accumulator the blocks combine into: the identity between calls
                partial = cuda.to_device(np.full(1, identity(self.op, self.acc_dtype), dtype=self.acc_dtype))
            else:
                partial = cuda.device_array(blocks, dtype=self.acc_dtype)
            return configure(self.entry, blocks, p["BLOCK"], 0, self.simulator, stream), (partial, blocks)
        M, N = shape[-2:]
        if self.axis == 1:
            blocks = max(1, min(-(-M // rows_per_block(p)), p["WAVES"] * sms))
            return configure(self.entry, blocks, p["BLOCK"], 0, self.simulator, stream), None
        splits = max(1, min(p["ROW_SPLIT"], M))
        rows_per_split = -(-M // splits)
        splits = -(-M // rows_per_split)
        columns = N * (shape[0] if self.axis == -2 else 1)
        grid = (max(1, -(-columns // (p["BX"] * p["VEC"]))), splits)
        return configure(self.entry, grid, p["BLOCK"], 0, self.simulator, stream), (rows_per_split, splits)


