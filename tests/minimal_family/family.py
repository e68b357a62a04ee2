"""Row-wise layer normalisation, y = (x - mean) / sqrt(var + eps) for each row: a small complete kernel family
with a float argument, a kernel built on autotune.toolkit and a NumPy-style function (autotune.layernorm)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from autotune import Case, FamilyArg, Kernel, KernelFamily, compare_close, unwritten
from autotune.toolkit import (as_stream, configure, device_input, device_to_host, flat, follow, gpu_required,
                              input_dtype, is_c_contiguous, is_host, library_of, producer_stream, result_array,
                              returned, tuned_kernel)

HERE = Path(__file__).resolve().parent


class LayerNormFamily(KernelFamily):
    name = "layernorm"
    summary = "row-wise layer normalisation"
    shape_help = "M x N: M rows of N, each normalised"
    args = (FamilyArg("eps", (), 1e-5, "added to each row's variance", kind=float, bounds=(0.0, 1.0)),)
    space_file = HERE / "layernorm.yaml"
    template_dir = HERE
    baseline = {"BLOCK": 32}
    suite = ("4096x1024", "4096x8192")
    dry_run_shapes = ("5x37",)

    def check_shape(self, shape, args):
        if len(shape) != 2:
            raise ValueError(f"layernorm's problems are 2-D (M rows of N), got {'x'.join(map(str, shape))}")

    def work(self, problem):
        """The fewest bytes moved: x read once, y written once."""
        return 2.0 * math.prod(problem.shape) * np.dtype(problem.dtype).itemsize

    def out_shape(self, problem):
        return tuple(problem.shape)

    def template_context(self, params, dtype, args, simulator):
        return {**params, "dtype": dtype, "eps": args["eps"], "SIM": simulator,
                "description": f"layernorm {dtype} eps={args['eps']} {dict(params)}"}

    def make_kernel(self, module, params, dtype, args, source, simulator):
        return LayerNormKernel(self, module, params, dtype, args, source, simulator)

    def threads(self, params):
        return params["BLOCK"]

    def shared_bytes(self, params, itemsize):
        return params["BLOCK"] * itemsize

    def inputs(self, problem, rng, purpose):
        """Normal data around 3 (the mean matters), never zeros."""
        return [(3 + 2 * rng.standard_normal(problem.shape)).astype(problem.dtype)]

    def verification(self, problem, inputs, rng):
        """The data, then a copy with a constant row (variance 0: y = 0) and a row holding NaN (all NaN)."""
        x, eps = inputs[0], problem.args["eps"]
        y = x.copy()
        rows = rng.permutation(len(y))
        y[rows[0]] = 7.0
        if len(y) > 1:
            y[rows[1], rng.integers(y.shape[1])] = np.nan
        return [Case((x,), reference(x, eps)), Case((y,), reference(y, eps), "elements (constant and NaN rows)")]

    def verify(self, problem, case, got, rng):
        """Within rounding of the float64 result: the mean and variance round with log2(N), and x - mean loses
        what x's own rounding was (relative to the row's spread)."""
        x = case.inputs64[0]
        spread = np.sqrt(x.var(axis=-1, keepdims=True) + problem.args["eps"])
        bound = 16 * np.finfo(problem.dtype).eps * (4 + math.log2(problem.shape[1])) * (1 + np.abs(x) / spread)
        return unwritten(got, case.expected) or compare_close(got, case.expected, bound, case.what)

    def functions(self):
        return {"layernorm": layernorm}


def reference(x: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)


class LayerNormKernel(Kernel):
    """``k(x, out=None, stream=None)``: x a C-contiguous 2-D array of the kernel's dtype (NumPy or on the GPU)."""

    def __init__(self, family, module, params, dtype, args, source, simulator):
        super().__init__(family, module, params, dtype, args, source, simulator)
        self.entry = module.layernorm
        self.signature = f"void({dtype}[::1], {dtype}[::1], int64, int64)"

    def __call__(self, x, out=None, *, stream=None):
        stream = as_stream(stream)
        follow(stream, map(producer_stream, (x, out)))  # wait for the streams x and out were made on
        with gpu_required():
            d = device_input(x, "x")
            if d.ndim != 2 or np.dtype(d.dtype).name != self.dtype or not is_c_contiguous(d):
                raise ValueError(f"layernorm wants a C-contiguous 2-D {self.dtype} array, got "
                                 f"{np.dtype(d.dtype).name} {tuple(d.shape)}")
            M, N = d.shape
            y = result_array(out, (M, N), self.dtype, "C", stream)
            if M * N:
                launch = configure(self.entry, M, self.params["BLOCK"], 0, self.simulator, stream)
                launch(flat(d), flat(y), M, N)  # in place (out=x) is safe: each thread reads before it writes
        return device_to_host(y) if is_host(x) and out is None else y


def layernorm(x, eps: float = 1e-5, *, out=None, stream=None):
    """Each row of ``x`` (its last axis) normalised to mean 0 and variance 1: (x - mean) / sqrt(var + eps)."""
    d = device_input(x, "x")
    dtype = input_dtype("layernorm", "layernorm", d)
    if d.ndim == 0:
        raise ValueError("layernorm of a 0-d array: give at least one axis")
    shape = tuple(d.shape)
    rows, n = math.prod(shape[:-1]), shape[-1]
    result = result_array(out, shape, dtype, "C", as_stream(stream))
    if rows * n:
        kernel = tuned_kernel("layernorm", (rows, n), dtype, eps=eps)
        kernel(d.reshape(rows, n), out=result.reshape(rows, n), stream=stream)
    return returned(result, library_of(x), out)


family = LayerNormFamily()
