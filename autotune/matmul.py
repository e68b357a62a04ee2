"""The matmul family: C = A @ B for float32/float64, with A and/or B optionally stored transposed.

``layout`` names how A and B are stored, BLAS-style: "nn" (both row-major), "tn" (A is given as the
transpose of a row-major K x M array, e.g. ``At.T``), "nt", "tt".

A split-K variant with ``SPLIT_ADD: last_block`` keeps, per shape it is called with, a workspace of
SPLIT_K x M x N elements (rounded up to whole tiles) and a counter per tile; like the reductions' counter, they
belong to the kernel object, so calls of one kernel object run one after another (Numba's default stream).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from . import arrays
from .constraints import MAX_STATIC_SHARED_BYTES, matmul_shared_bytes, matmul_threads, shared_pad, shared_stages
from .device import simulator_active
from .launch import Plan, Planned, configure

if TYPE_CHECKING:
    from .space import SearchSpace

LAYOUTS = ("nn", "tn", "nt", "tt")
INT32_MAX = 2**31 - 1


def family_args(layout: str = "nn") -> dict[str, Any]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return {"layout": layout}


def _vector_width(vec: int, extent: int) -> int:
    """Widest access of at most ``vec`` elements that divides ``extent``."""
    return next(w for w in (4, 2, 1) if w <= vec and extent % w == 0)


def template_context(params: Mapping[str, Any], dtype: str, family: Mapping[str, Any], simulator: bool) -> dict:
    layout = family["layout"]
    ctx: dict[str, Any] = {**params, "dtype": dtype, "SIM": simulator, "TRANS_A": layout[0] == "t",
                           "TRANS_B": layout[1] == "t", "MMA": params.get("MMA", 0),
                           "description": f"matmul {layout} {dtype} {dict(params)}"}
    if params["strategy"] == "tiled":
        threads = matmul_threads(params)
        vec = params["VEC"]
        mma = ctx["MMA"]
        if mma:  # fragments are loaded from a k-major A tile; the thread arrangement is the mma's (template)
            ctx["A_SMEM"] = "kmajor"
        pad = shared_pad(params)
        ctx.update(
            MMA_SLOTS=mma // 2 + mma // 4,
            AS_LD=params["BM"] + pad,
            BS_LD=params["BN"] + pad,
            THREADS=threads,
            ASYNC_STAGES=params.get("ASYNC_STAGES", 0),
            STAGES=shared_stages(params),
            ITEMSIZE=np.dtype(dtype).itemsize,
            DYNAMIC_SHARED=dynamic_shared_bytes(params, dtype) > 0,
            LOADS_A=params["BM"] * params["BK"] // (threads * vec),
            LOADS_B=params["BK"] * params["BN"] // (threads * vec),
            VA=_vector_width(vec, params["TM"]) if ctx["A_SMEM"] == "kmajor" else 1,
            VB=_vector_width(vec, params["TN"]),
            VC=_vector_width(vec, 2 if mma else params["TN"]),
            SPLIT_ADD=split_add(params),
            PARTIAL_VEC=_vector_width(16 // np.dtype(dtype).itemsize, params["TM"] * params["TN"]),
        )
    return ctx


def dynamic_shared_bytes(params: Mapping[str, Any], dtype: str) -> int:
    """Bytes of dynamic shared memory a launch of this variant needs: its tiles, where they exceed what a
    kernel may declare statically; 0 otherwise."""
    if params.get("strategy", "tiled") != "tiled":
        return 0
    n = matmul_shared_bytes(params, np.dtype(dtype).itemsize)
    return n if n > MAX_STATIC_SHARED_BYTES else 0


def problem_starts(start: Mapping[str, Any], shape: tuple[int, ...], sm_count: int,
                   space: "SearchSpace") -> list[dict[str, Any]]:
    """Copies of a tiled starting configuration fitted to this problem: split-K that fills the GPU, and clamped
    edges where M or N is no multiple of the tile.

    A start written for big squares leaves most SMs idle on a skinny or small problem (128x64 tiles of 8192x128
    are 128 blocks for 132 SMs); splitting K gives the smallest split that reaches one and two waves of blocks,
    as long as each split keeps at least two K tiles. A split start (given or found) is tried with each way of
    combining its slices (SPLIT_ADD; the tuner drops the vector one where the dtype has none). Where the tiles
    overhang M or N, the start and its splits are also tried with ``EDGE: clamp``: the 1024^3 winner took 0.063 ms
    on 1000^3 clamped and 0.082 ms not (H100, benchmarks/NOTES.md item 20), which the tuner's 40 trials had not
    found.
    """
    if start.get("strategy", "tiled") != "tiled":
        return []
    M, N, _ = shape
    if start.get("SPLIT_K", 1) > 1:
        split = [start]
    else:
        splits = _filling_splits(start, shape, sm_count, space.params["SPLIT_K"].values)
        split = [{**start, "SPLIT_K": s} for s in splits]
    fitted = [{**c, "SPLIT_ADD": add} for c in split for add in ("atomic", "vector", "last_block")]
    if start.get("EDGE") == "interior" and (M % start["BM"] or N % start["BN"]):
        fitted += [{**c, "EDGE": "clamp"} for c in [*fitted, start]]
    return fitted


def _filling_splits(start: Mapping[str, Any], shape: tuple[int, ...], sm_count: int, splits) -> list[int]:
    """The smallest K splits that give one and two waves of blocks, each split keeping two K tiles."""
    M, N, K = shape
    blocks = -(-M // start["BM"]) * -(-N // start["BN"])
    found: list[int] = []
    for waves in (1, 2):
        split = next((s for s in splits if blocks * s >= waves * sm_count), None)
        if split and split > 1 and K >= 2 * start["BK"] * split and split not in found:
            found.append(split)
    return found


def split_add(params: Mapping[str, Any]) -> str | None:
    """How the K slices of a variant meet in C (its SPLIT_ADD, default atomic), or None where K is not split."""
    if params.get("SPLIT_K", 1) == 1:
        return None
    return params.get("SPLIT_ADD", "atomic")


def index_type(params: Mapping[str, Any]) -> str:
    return "int32" if params.get("INDEX_BITS") == 32 else "int64"


def signature(params: Mapping[str, Any], dtype: str) -> str:
    it = index_type(params)
    return (f"void({dtype}[::1], {dtype}[::1], {dtype}[::1], {dtype}[::1], int32[::1], {', '.join([it] * 7)}, "
            "boolean, boolean, boolean)")


class MatmulKernel(Planned):
    """A compiled matmul variant. ``k(A, B)`` or ``k(A, B, out=C)``; see the module docstring for layouts.

    With device arrays and ``out=`` a call after the first replays a prepared plan (see launch.py);
    ``k.bind(A, B, out=C)`` returns that plan to call directly.
    """

    kind = "matmul"

    def __init__(self, module, params: Mapping[str, Any], dtype: str, family: Mapping[str, Any], source: str):
        self.module = module
        self.params = dict(params)
        self.dtype = dtype
        self.family = dict(family)
        self.layout = family["layout"]
        self.source = source
        self.kernel = module.matmul
        self._launches: dict[tuple[int, int, int], tuple] = {}
        self._int = np.int32 if index_type(params) == "int32" else np.int64
        self._stand_ins = None

    def __repr__(self) -> str:
        return f"<MatmulKernel {self.dtype} layout={self.layout} {self.params}>"

    @property
    def signature(self) -> str:
        return signature(self.params, self.dtype)

    def flops(self, M: int, N: int, K: int) -> float:
        return 2.0 * M * N * K

    def _operand(self, x, name: str, transposed: bool):
        d = arrays.to_device(x, name)
        arrays.check_dtype(d, name, self.dtype)
        if d.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(d.shape)}")
        if transposed:
            if not arrays.is_f_contiguous(d):
                raise ValueError(f"layout {self.layout!r} wants {name} as the transpose of a C-contiguous array "
                                 f"(pass X.T); got strides {d.strides}")
            return d, arrays.flat(d.T), d.shape[0]
        if not arrays.is_c_contiguous(d):
            hint = " (it is a transposed view: build with a 't' layout)" if arrays.is_f_contiguous(d) else ""
            raise ValueError(f"{name} must be C-contiguous for layout {self.layout!r}{hint}")
        return d, arrays.flat(d), d.shape[1]

    def _launch_config(self, M: int, N: int, K: int):
        key = (M, N, K)
        if key not in self._launches:
            p = self.params
            if p["strategy"] == "naive":
                grid, block, k_chunk = ((M + 15) // 16, (N + 15) // 16), (16, 16), K
            elif p["strategy"] == "shared16":
                grid, block, k_chunk = ((N + 15) // 16, (M + 15) // 16), (16, 16), K
            else:
                per_split = -(-K // p["SPLIT_K"])
                k_chunk = -(-per_split // p["BK"]) * p["BK"]
                blocks = (-(-M // p["BM"])) * (-(-N // p["BN"]))
                grid, block = (blocks, -(-K // k_chunk)), matmul_threads(p)
            shared = dynamic_shared_bytes(p, self.dtype)
            self._launches[key] = (configure(self.kernel, grid, block, shared), k_chunk, self._scratch(grid))
        return self._launches[key]

    def _scratch(self, grid) -> tuple:
        """The workspace of partial tiles and the per-tile counters of SPLIT_ADD last_block, kept per shape (the
        counters are zeroed once here; the kernel resets them); for other variants, one-element stand-ins made
        once per kernel."""
        from numba import cuda

        p = self.params
        if split_add(p) == "last_block":
            tiles, slices = grid
            return (cuda.device_array(tiles * slices * p["BM"] * p["BN"], dtype=self.dtype),
                    cuda.to_device(np.zeros(tiles, dtype=np.int32)))
        if self._stand_ins is None:
            self._stand_ins = cuda.device_array(1, dtype=self.dtype), cuda.device_array(1, dtype=np.int32)
        return self._stand_ins

    def __call__(self, A, B, out=None):
        if out is not None and (plan := self._plan_for((A, B), out, lambda: self.bind(A, B, out=out))):
            plan()
            return out
        C, run = self._prepare(A, B, out)
        run()
        if out is None and arrays.is_host(A) and arrays.is_host(B):
            return C.copy_to_host()
        return out if out is not None else C

    def bind(self, A, B, out=None) -> Plan:
        """The call ``k(A, B, out=out)`` checked once; calling the plan launches it again and returns C."""
        return self._plan(self._prepare(A, B, out))

    def _prepare(self, A, B, out):
        dA, a_flat, lda = self._operand(A, "A", self.layout[0] == "t")
        dB, b_flat, ldb = self._operand(B, "B", self.layout[1] == "t")
        (M, K), (K2, N) = dA.shape, dB.shape
        if K != K2:
            raise ValueError(f"shapes {tuple(dA.shape)} and {tuple(dB.shape)} do not align for A @ B (K {K} != {K2})")
        if min(M, N, K) == 0:
            raise ValueError(f"matmul needs M, N, K >= 1, got M={M}, N={N}, K={K}")
        C = self._output(out, M, N)
        target = self._scratch_for(C, dA, dB)
        c_flat = arrays.flat(target)
        return C, lambda: self._into(C, target, lambda: self.launch(a_flat, b_flat, c_flat, M, N, K, lda, ldb))

    def _output(self, out, M: int, N: int):
        from numba import cuda

        if out is None:
            return cuda.device_array((M, N), dtype=self.dtype)
        if arrays.is_host(out):
            raise TypeError("out must be a device array (CuPy, PyTorch CUDA or Numba), not a NumPy array")
        C = arrays.to_device(out, "out")
        arrays.check_dtype(C, "out", self.dtype)
        if tuple(C.shape) != (M, N) or not arrays.is_c_contiguous(C):
            raise ValueError(f"out must be a C-contiguous ({M}, {N}) array, got shape {tuple(C.shape)}")
        return C

    def launch(self, a_flat, b_flat, c_flat, M: int, N: int, K: int, lda: int, ldb: int) -> None:
        """Launch on flat, already-checked device arrays (the tuner's path)."""
        p = self.params
        if self._int is np.int32 and max(a_flat.size, b_flat.size, c_flat.size) > INT32_MAX:
            raise ValueError("this variant uses 32-bit indices and the operands have more than 2**31 elements; "
                             "use INDEX_BITS=64")
        configured, k_chunk, (partials, counters) = self._launch_config(M, N, K)
        vec = p.get("VEC", 1)
        vec_a, vec_b, vec_c = (bool(arrays.aligned(x, vec) and ld % vec == 0)
                               for x, ld in ((a_flat, lda), (b_flat, ldb), (c_flat, N)))
        if split_add(p) in ("atomic", "vector"):  # the slices add into C
            self._enqueue(*zero(self.module, c_flat))
        i = self._int
        self._enqueue(configured, a_flat, b_flat, c_flat, partials, counters, i(M), i(N), i(K), i(lda), i(ldb), i(N),
                      i(k_chunk), vec_a, vec_b, vec_c)


def zero(module, d) -> tuple:
    """The step that zeroes a flat device array: a driver memset on the default stream, where Numba launches
    (0.5-1.5% faster than the fill kernel on the H200's split-K entries, benchmarks/NOTES.md item 18); the fill
    kernel in the simulator, which has no driver."""
    if simulator_active():
        return fill(module, d, 0)
    from numba.cuda.cudadrv.driver import device_pointer, driver

    words = d.size * d.dtype.itemsize // 4
    return (functools.partial(driver.cuMemsetD32Async, device_pointer(d), 0, words, 0),)


def fill(module, d, value) -> tuple:
    """The launch that sets every element of a flat device array to ``value`` with the module's fill kernel."""
    threads = 256
    return configure(module.fill, max(1, -(-d.size // threads)), threads), d, d.dtype.type(value)


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) @ B.astype(np.float64)
