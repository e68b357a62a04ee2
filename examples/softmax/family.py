"""Row-wise softmax of a 2-D float32/float64 array: a kernel family written against autotune's public protocol
only (everything it imports is in ``autotune.__all__``), tuned and looked up with the same commands as the
built-in families.

    autotune tune --family examples/softmax --shape 4096x4096          # on a GPU
    autotune tune --family examples/softmax --simulator                # a dry run without one

    import autotune
    autotune.register_family("examples/softmax")
    y = autotune.get_best_kernel("softmax", x.shape)(x)   # y[i] = exp(x[i] - max(x[i])) / sum(exp(x[i] - max(x[i])))

Its template (``softmax.py.j2``) and search space (``softmax.yaml``) sit beside this file. The tuned parameters:
threads per row (a warp or the whole block), block size, vector width, vectors in flight per thread, and one
online pass (running max and rescaled sum) or separate max and sum passes.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from autotune import Case, Kernel, KernelFamily, compare_close, unwritten

HERE = Path(__file__).resolve().parent


class SoftmaxFamily(KernelFamily):
    name = "softmax"
    summary = "row-wise softmax"
    unit = "GB/s"
    space_file = HERE / "softmax.yaml"
    template_dir = HERE
    baseline = {"ROW_MODE": "block", "BLOCK": 128, "VEC": 1, "ITEMS": 1, "PASSES": "two_pass"}
    suite = ("4096x256", "4096x4096", "4096x32768", "65536x256", "65536x4096", "65536x32768")
    dry_run_shapes = ("37x41",)
    reference_peers = ("torch.softmax",)

    def check_shape(self, shape, args) -> None:
        if len(shape) != 2:
            raise ValueError(f"softmax is of a 2-D array (M rows of N), got shape {'x'.join(map(str, shape))}")

    def work(self, problem) -> float:
        """The fewest bytes moved: the array read once and the result written once."""
        return 2.0 * math.prod(problem.shape) * np.dtype(problem.dtype).itemsize

    def out_shape(self, problem):
        return tuple(problem.shape)

    def templates(self):
        return ["_common.j2", "softmax.py.j2"]

    def template(self, params) -> str:
        return "softmax.py.j2"

    def template_context(self, params, dtype, args, simulator):
        return {**params, "dtype": dtype, "SIM": simulator, "description": f"softmax {dtype} {dict(params)}"}

    def make_kernel(self, module, params, dtype, args, source, simulator):
        return SoftmaxKernel(self, module, params, dtype, args, source, simulator)

    def threads(self, params) -> int:
        return params["BLOCK"]

    def shared_bytes(self, params, itemsize: int) -> int:
        return 2 * params["BLOCK"] * itemsize

    # -- data and oracle --------------------------------------------------------------------------
    def inputs(self, problem, rng, purpose):
        """Normal data scaled by 4, so exp spans many orders of magnitude within a row (never zeros)."""
        return [(4 * rng.standard_normal(problem.shape)).astype(problem.dtype)]

    def verification(self, problem, inputs, rng):
        """The data, then the same with special values in some rows (NumPy's result: NaN for a row holding NaN,
        +inf or only -inf; 0 where -inf stands among finite values)."""
        x = inputs[0]
        cases = [Case((x,), reference(x))]
        M, N = x.shape
        if M and N:
            y = x.copy()
            rows = rng.permutation(M)
            for row, special in zip(rows, ("nan", "inf", "-inf", "all -inf", "-inf first")):
                if special == "all -inf":
                    y[row] = -np.inf
                elif special == "-inf first":
                    y[row, 0] = -np.inf
                else:
                    y[row, rng.integers(N)] = float(special)
            cases.append(Case((y,), reference(y), "elements (rows with NaN and infinities)"))
        return cases

    def verify(self, problem, case, got, rng):
        """Within a relative bound of the float64 result, per element: exp rounds within 2 ulp, and the sum's
        rounding grows with log2(N) in the tree (and with the rescaling steps of the online pass)."""
        eps = np.finfo(problem.dtype).eps
        bound = 8 * eps * (4 + math.log2(max(problem.shape[1], 1))) * np.abs(case.expected)
        return unwritten(got, case.expected) or compare_close(got, case.expected, bound, case.what)

    def peers(self, problem, inputs):
        try:
            import torch
        except ImportError:
            return {}
        x = torch.as_tensor(inputs[0], device="cuda")
        return {"torch.softmax": lambda: torch.softmax(x, dim=-1)}


def reference(x: np.ndarray) -> np.ndarray:
    """NumPy's softmax along the last axis, in float64."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


class SoftmaxKernel(Kernel):
    """``k(x)`` or ``k(x, out=y)``: x a 2-D C-contiguous float array (NumPy, CuPy, PyTorch CUDA, Numba); y may be
    x itself (in place)."""

    def __init__(self, family, module, params, dtype, args, source, simulator):
        super().__init__(family, module, params, dtype, args, source, simulator)
        self.entry = module.softmax
        self.signature = f"void({dtype}[::1], {dtype}[::1], int64, int64, boolean)"
        self.rows_per_block = 1 if params["ROW_MODE"] == "block" else params["BLOCK"] // 32

    def __call__(self, x, out=None):
        from numba import cuda

        host = isinstance(x, np.ndarray)
        d = _device(x)
        if np.dtype(d.dtype) != np.dtype(self.dtype) or d.ndim != 2 or not (d.size <= 1 or d.is_c_contiguous()):
            raise ValueError(f"softmax wants a C-contiguous 2-D {self.dtype} array, got {d.dtype} {tuple(d.shape)}")
        M, N = d.shape
        if N == 0 and M:
            raise ValueError("softmax of rows of length 0 (np.max of an empty row has no identity)")
        y = cuda.device_array((M, N), self.dtype) if out is None else _device(out)
        if tuple(y.shape) != (M, N) or np.dtype(y.dtype) != np.dtype(self.dtype) or not y.is_c_contiguous():
            raise ValueError(f"out must be a C-contiguous {self.dtype} array of shape {(M, N)}")
        if M * N:
            target = y if _same_or_apart(d, y) else cuda.device_array((M, N), self.dtype)
            vec = self.params["VEC"]
            aligned = all(_pointer(a) % (vec * d.dtype.itemsize) == 0 for a in (d, target))
            grid = -(-M // self.rows_per_block)
            self.entry[grid, self.params["BLOCK"]](d.reshape(M * N), target.reshape(M * N), M, N,
                                                   aligned and N % vec == 0)
            if target is not y:
                y.copy_to_device(target)
        return y.copy_to_host() if host and out is None else y


def _device(x):
    """A Numba device array: NumPy arrays are copied, Numba's used as they are, CuPy's and PyTorch's viewed."""
    from numba import cuda

    if isinstance(x, np.ndarray):
        return cuda.to_device(np.ascontiguousarray(x))
    if hasattr(x, "copy_to_host"):
        return x
    return cuda.as_cuda_array(x)


def _pointer(a) -> int:
    interface = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return interface["data"][0]


def _same_or_apart(x, y) -> bool:
    """In place (the same elements) is safe: each element is read before it is written, by the same thread.
    Any other overlap is computed into scratch first."""
    a, b = _pointer(x), _pointer(y)
    size = x.size * x.dtype.itemsize
    return a == b or a + size <= b or b + size <= a


family = SoftmaxFamily()
