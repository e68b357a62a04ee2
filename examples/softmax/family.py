"""Row-wise softmax: a kernel family written against autotune's public API only (``autotune`` and
``autotune.toolkit``), tuned, stored and looked up with the same commands as the built-in families, and called like
them: ``autotune.softmax(x, out=..., stream=...)`` once registered.

    autotune tune --family examples/softmax --device 0 --shape 4096x4096   # on a GPU
    autotune tune --family examples/softmax --simulator                    # a dry run without one

    import autotune
    autotune.register_family("examples/softmax")
    y = autotune.softmax(x)                      # y[..., i] = exp(x[..., i] - max) / sum(exp(x - max)), last axis
    k = autotune.get_best_kernel("softmax", x.shape)   # the kernel object of one 2-D shape: k(x, out=y, stream=s)

Its template (``softmax.py.j2``) and search space (``softmax.yaml``) sit beside this file; docs/families.md walks
through them. The kernel reads a row of up to TPR x VEC x ITEMS elements once into registers (TPR threads per
row: a warp, or the whole block) and writes each element once; longer rows are streamed, with one online pass
(running max and rescaled sum) or separate max and sum passes, then the write pass.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from autotune import Case, Kernel, KernelFamily, Predicate, compare_close, unwritten
from autotune.toolkit import (
    Plan,
    Planned,
    Replay,
    aligned,
    as_stream,
    configure,
    device_input,
    device_pointer,
    device_to_host,
    flat,
    follow,
    gpu_required,
    input_dtype,
    is_c_contiguous,
    is_host,
    library_of,
    order_of,
    overlaps,
    producer_stream,
    result_array,
    returned,
    tuned_kernel,
)

HERE = Path(__file__).resolve().parent
ITEMS = (1, 2, 4, 8, 16)  # the space's ITEMS values: vectors per thread of a row held in registers
WARP_ROWS_UP_TO = 2048  # rows up to this long are given a warp each by the untuned default; longer, a block
MAX_GRID = 2**31 - 1  # blocks in a launch's x dimension


def _cache_bytes_at_most(params, ctx, max):
    """A thread's share of a cached row (ITEMS vectors of VEC elements) fits in ``max`` bytes of registers."""
    if params["CACHE"] != "registers":
        return None
    held = params["VEC"] * params["ITEMS"] * ctx.itemsize
    if held > max:
        return f"VEC={params['VEC']} x ITEMS={params['ITEMS']} {ctx.dtype} elements ({held} bytes) exceed {max} " \
               f"bytes of registers per thread"
    return None


class SoftmaxFamily(KernelFamily):
    name = "softmax"
    summary = "row-wise softmax (along the last axis)"
    shape_help = "M x N: M rows of N, softmax along each row"
    unit = "GB/s"
    space_file = HERE / "softmax.yaml"
    template_dir = HERE
    baseline = {"ROW_MODE": "block", "BLOCK": 128, "VEC": 1, "ITEMS": 1, "CACHE": "none", "PASSES": "two_pass"}
    suite = ("4096x256", "4096x1024", "4096x4096", "4096x32768", "65536x256", "65536x4096", "65536x32768")
    dry_run_shapes = ("37x41",)
    reference_peers = ("torch.softmax",)
    predicates = {"cache_bytes_at_most": Predicate(_cache_bytes_at_most, frozenset({"VEC", "ITEMS", "CACHE"}),
                                                   ("max",), doc="a thread's cached elements fit in max bytes")}

    def check_shape(self, shape, args) -> None:
        if len(shape) != 2:
            raise ValueError(f"softmax's problems are 2-D (M rows of N), got shape {'x'.join(map(str, shape))}")

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
        """A block of several warps per row combines their maxima and sums through 2 x 32 slots."""
        return 2 * 32 * itemsize if params["ROW_MODE"] == "block" and params["BLOCK"] > 32 else 0

    # -- search ------------------------------------------------------------------------------------
    def default_params(self, problem) -> dict:
        """A warp per row up to WARP_ROWS_UP_TO elements, else a block of 1024 threads; the row held in registers
        where it fits, 16-byte vectors."""
        n = problem.shape[1]
        vec = 16 // np.dtype(problem.dtype).itemsize
        if n <= WARP_ROWS_UP_TO:
            return {"ROW_MODE": "warp", "BLOCK": 128, "VEC": vec, "ITEMS": _items_for(n, 32 * vec),
                    "CACHE": "registers", "PASSES": "online"}
        return {"ROW_MODE": "block", "BLOCK": 1024, "VEC": vec, "ITEMS": _items_for(n, 1024 * vec),
                "CACHE": "registers", "PASSES": "online"}

    def problem_starts(self, start, problem, device, space):
        """The start with ITEMS raised (where the space allows) until the row fits in registers: a row read once
        is the fastest form wherever the registers hold it."""
        if start.get("CACHE") != "registers":
            return []
        per_step = (32 if start["ROW_MODE"] == "warp" else start["BLOCK"]) * start["VEC"]
        fitted = {**start, "ITEMS": _items_for(problem.shape[1], per_step)}
        return [fitted] if fitted != start else []

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

    # -- bench, selftest, functions ----------------------------------------------------------------
    def peers(self, problem, inputs):
        try:
            import torch
        except ImportError:
            return {}
        x = torch.as_tensor(inputs[0], device="cuda")
        return {"torch.softmax": lambda: torch.softmax(x, dim=-1)}

    def selftest_cases(self, small: bool):
        """Rows of 1, a prime length, and on the GPU lengths that exceed every row cached in registers (streamed
        rows) and that are no multiple of any vector width."""
        shapes = [(1, 1), (7, 41)] + ([] if small else [(3, 1000), (33, 4099), (2, 70001)])
        return [(dtype, {}, shapes) for dtype in self.dtypes[:1 if small else None]]

    def selftest_extras(self):
        """Both streamed forms with rows that exceed what the registers hold (ITEMS 1) and without a cache."""
        return [{"CACHE": "none", "PASSES": "online", "ITEMS": 1}, {"CACHE": "none", "PASSES": "two_pass"},
                {"CACHE": "registers", "ITEMS": 1, "PASSES": "two_pass"}]

    def functions(self):
        return {"softmax": softmax}


def _items_for(n: int, per_step: int) -> int:
    """The fewest ITEMS whose vectors hold a row of ``n`` (the most where none does)."""
    return next((items for items in ITEMS if items * per_step >= n), ITEMS[-1])


def reference(x: np.ndarray) -> np.ndarray:
    """Softmax along the last axis in float64, as NumPy computes exp(x - max) / sum(exp(x - max))."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


class SoftmaxKernel(Planned, Kernel):
    """``k(x)``, ``k(x, out=y, stream=s)``: x a C-contiguous 2-D array (NumPy, CuPy, PyTorch CUDA, Numba) of the
    kernel's dtype; y may be x itself (in place). With device arrays a call after the first replays a plan
    (``autotune.toolkit.Planned``); ``k.bind(x, out=y)`` returns the plan to call directly."""

    def __init__(self, family, module, params, dtype, args, source, simulator):
        super().__init__(family, module, params, dtype, args, source, simulator)
        self.entry = module.softmax
        self.signature = f"void({dtype}[::1], {dtype}[::1], int64, int64, boolean)"
        self.rows_per_block = 1 if params["ROW_MODE"] == "block" else params["BLOCK"] // 32

    def __repr__(self) -> str:
        return f"<SoftmaxKernel {self.dtype} {self.params}>"

    def __call__(self, x, out=None, *, stream=None):
        stream = as_stream(stream)
        follow(stream, map(producer_stream, (x, out)))
        if out is not None:
            plan = self._plan_for((x,), out, lambda: self.bind(x, out=out, stream=stream), stream)
            if plan is not None:
                return plan()
            _, run = self._prepare(x, out, stream)
            run()
            return out
        if (result := self._replayed_new((x,), stream)) is not None:
            return result
        result = self._run_new((x,), self._prepare(x, None, stream), stream)
        return device_to_host(result) if is_host(x) else result

    def bind(self, x, out=None, *, stream=None) -> Plan:
        """The call ``k(x, out=out, stream=stream)`` checked once; calling the plan launches it again and returns
        the output."""
        return self._plan(self._prepare(x, out, as_stream(stream)))

    def _prepare(self, x, out, stream):
        """(the output, a call that launches the kernel): the arguments checked, the output made or checked."""
        with gpu_required():
            d = device_input(x, "x")
            if np.dtype(d.dtype).name != self.dtype or d.ndim != 2 or not is_c_contiguous(d):
                raise ValueError(f"softmax wants a C-contiguous 2-D {self.dtype} array, got {np.dtype(d.dtype).name} "
                                 f"{tuple(d.shape)}" + ("" if is_c_contiguous(d) else " (not C-contiguous)"))
            M, N = d.shape
            if N == 0 and M:
                raise ValueError("softmax of rows of length 0 (the maximum of an empty row has no identity)")
            y = result_array(out, (M, N), self.dtype, "C", stream)
            if M * N == 0:
                return y, lambda: None
            target = y if _written_directly(d, y) else self._scratch_for(y, d, stream=stream)
            vec = self.params["VEC"]
            vec_ok = aligned(d, vec) and aligned(target, vec) and N % vec == 0
            grid = -(-M // self.rows_per_block)  # a block per row (a warp per row: BLOCK / 32 rows per block)
            if grid > MAX_GRID:
                raise ValueError(f"softmax of {M} rows takes {grid} blocks of this kernel, more than a launch has "
                                 f"({MAX_GRID}); call it on fewer rows at a time")
            configured = configure(self.entry, grid, self.params["BLOCK"], 0, self.simulator, stream)
            x_flat, y_flat = flat(d), flat(target)
            return y, lambda: self._into(y, target, lambda: self._enqueue(configured, x_flat, y_flat, M, N, vec_ok),
                                         stream)


def _written_directly(x, y) -> bool:
    """Whether the kernel may write y while it reads x: they share no memory, or y is x itself (each element is
    read before it is written, by the same thread). Any other overlap is computed into scratch first."""
    return device_pointer(x) == device_pointer(y) and tuple(x.shape) == tuple(y.shape) or not overlaps(y, x)


def softmax(x, axis: int = -1, *, out=None, stream=None):
    """``exp(x - x.max(axis, keepdims=True)) / sum(...)`` along the last axis of an array of any rank (NumPy
    semantics of that formula: NaN for a row holding NaN, +inf or only -inf), on the GPU. float32 and float64;
    the result in the caller's array library (NumPy in, NumPy out; PyTorch, CuPy in: theirs; or ``out=``).
    ``stream``: the caller's stream (Numba, CuPy, PyTorch, cuda.core). Repeated calls on the same device arrays
    replay the first call's launches."""
    launch_stream = as_stream(stream)
    library = library_of(x)
    replay = Replay(("softmax", axis), (x,), out, launch_stream, library)
    if (replayed := replay.result()) is not None:
        return replayed
    d = device_input(x, "x")
    dtype = input_dtype("softmax", "softmax", d)
    if d.ndim == 0:
        raise ValueError("softmax of a 0-d array: give at least one axis")
    if axis not in (-1, d.ndim - 1):
        raise ValueError(f"softmax runs along the last axis (axis=-1), got axis={axis!r}: move that axis last first "
                         f"(np.moveaxis, then a contiguous copy)")
    if order_of(d, "x") != "C" and d.ndim > 1 and d.size > 1:
        raise ValueError("x must be C-contiguous (its rows contiguous): copy it first (np.ascontiguousarray, "
                         "cupy.ascontiguousarray, tensor.contiguous())")
    shape = tuple(d.shape)
    N, M = shape[-1], math.prod(shape[:-1])
    result = result_array(out, shape, dtype, "C", launch_stream)
    replay.follow()
    if M and not N:
        raise ValueError("softmax of rows of length 0 (the maximum of an empty row has no identity)")
    if M * N:
        kernel = tuned_kernel("softmax", (M, N), dtype)
        replay.run(kernel.bind(d.reshape(M, N), out=result.reshape(M, N), stream=launch_stream), result)
    return returned(result, library, out)


family = SoftmaxFamily()
