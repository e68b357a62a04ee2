"""The matmul family: C = A @ B for float32, float64, float16 and bfloat16, with A and/or B optionally stored
transposed.

``layout`` names how A and B are stored, BLAS-style: "nn" (both row-major), "tn" (A is given as the
transpose of a row-major K x M array, e.g. ``At.T``), "nt", "tt". ``precision`` says how float32 products may be
rounded: "ieee" (fp32 FMAs on the CUDA cores), "3xtf32" (fp32-level error on the TF32 tensor cores: each operand
split into two TF32 parts and three products summed) or "tf32" (one product of TF32-rounded operands, as cuBLAS
with TF32 enabled). float16 is NumPy's: products and sums in float32, the result rounded to float16 (as
``np.matmul`` of float16 arrays and cuBLAS's half GEMM with float32 compute), or with ``out_dtype`` float32 kept
in float32 (``np.matmul(A, B, dtype=np.float32)``); tiled float16 variants run on the tensor cores. bfloat16
(ml_dtypes', see autotune/dtypes.py) is float16's twin: the same kernels on bf16 products, its tiles holding bits.
Six templates
render it: the seed kernels of the Numba documentation (``strategy`` naive, shared16), the register-tiled kernel on
the CUDA cores and, with ``MMA`` > 0, the tensor-core kernel (``mma.sync`` through inline PTX: fp64, TF32 for
float32 at the tf32 precisions, fp16 for float16, bf16 for bfloat16); with ``WGMMA`` on Hopper, the warpgroup
kernels (float16, bfloat16, and float32 at the tf32 precisions); and for skinny problems (M or N at most 16,
family argument ``skinny``) the matrix-vector kernel (``GEMV`` 1, autotune/families/matmul_gemv.py).

A problem of shape B x M x N x K is a stack of B products in one launch (family argument ``batch`` "strided",
which the shape sets; autotune/families/matmul_batch.py). Every template renders it but the TMA-fed and the
rounded-copy wgmma kernels; its kernel takes each operand as a stack (B, M, K) or as one matrix (M, K) that every
product reads (broadcast), and writes C as a (B, M, N) stack.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..constraints import MAX_STATIC_SHARED_BYTES, Predicate
from ..dtypes import HALF, numpy_dtype, retyped, storage
from ..family import Case, FamilyArg, KernelFamily
from ..oracle import compare_exact, compare_norm, relative_error, unwritten
from ..resources import resource_dir, templates_dir
from . import matmul_gemv as gemv

LAYOUTS = ("nn", "tn", "nt", "tt")
PRECISIONS = ("ieee", "3xtf32", "tf32")
MMA_TILES = {"fp64": "dmma_tile", "tf32": "tf32_tile", "3xtf32": "tf32x3_tile", "fp16": "f16_tile",
             "bf16": "bf16_tile"}
WGMMA_ALIGN = 1024  # bytes: wgmma's 128-byte swizzle repeats every 8 rows of 128 bytes, from such a boundary
EXACT_LIMIT = 1 << 27  # M*N*K up to which a check computes the whole float64 product
ERROR_ROWS = 64  # rows of C whose error a check of a rounded precision measures, where C is larger


# -- geometry of a configuration --------------------------------------------------------------------
def is_tiled(p: Mapping[str, Any]) -> bool:
    return p.get("strategy", "tiled") == "tiled"


def dims(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(B, M, N, K) of a problem shape: B x M x N x K, or M x N x K (one matrix: B = 1)."""
    return tuple(shape) if len(shape) == 4 else (1, *shape)


def is_wgmma(p: Mapping[str, Any]) -> bool:
    """A variant on Hopper's warpgroup MMA: float16 (MMA 16, templates/matmul_wgmma.py.j2) or float32 on TF32 (MMA
    8, templates/matmul_wgmma_tf32.py.j2)."""
    return bool(p.get("WGMMA", 0))


def is_wgmma_tf32(p: Mapping[str, Any]) -> bool:
    return is_wgmma(p) and p.get("MMA") == 8


def is_tma(p: Mapping[str, Any]) -> bool:
    """A wgmma variant whose tiles a producer warpgroup copies with the TMA (templates/matmul_wgmma.py.j2: float16,
    bfloat16, and float32 at tf32 from rounded copies), from tensor maps the call makes on the host."""
    return is_wgmma(p) and bool(p.get("TMA", 0))


def reads_rounded_copies(p: Mapping[str, Any]) -> bool:
    """A TF32 wgmma variant fed by cp.async or the TMA (ASYNC_STAGES > 0, precision tf32): its operands are first
    rounded to TF32 into K-major copies (autotune/tf32_copies.py), which float16's kernel then multiplies from
    shared memory (templates/matmul_wgmma.py.j2 with TF32). With ASYNC_STAGES 0 they are rounded on their way
    through registers (templates/matmul_wgmma_tf32.py.j2)."""
    return is_wgmma_tf32(p) and p.get("ASYNC_STAGES", 0) > 0


def matmul_threads(p: Mapping[str, Any]) -> int:
    if gemv.is_gemv(p):
        return p["BLOCK"]
    if not is_tiled(p):
        return 256
    if is_wgmma(p):
        return 128 * (p["BM"] // 64 + is_tma(p))  # a warpgroup per 64 rows, and the TMA's producer
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def matmul_shared_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    if gemv.is_gemv(p):
        return 0
    if not is_tiled(p):
        return 2 * 16 * 16 * itemsize
    if is_wgmma(p):
        return wgmma_shared_bytes(p, itemsize)
    return shared_stages(p) * (a_tile_elements(p, itemsize) + p["BK"] * (p["BN"] + shared_pad(p, itemsize))) * itemsize


def wgmma_shared_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    """The operand tiles (float16 and TF32 read from rounded copies: ASYNC_STAGES of A and B; TF32 otherwise: B
    alone, two buffers of a big and a small part at 3xtf32, three of one part at tf32, whichever is larger, as this
    does not know the precision) or, after them in the same memory, the BM x (BN + 8) tile of C (float32 at most);
    and up to 1024 bytes to the first boundary of the swizzle's atoms."""
    if is_wgmma_tf32(p) and not reads_rounded_copies(p):
        operands = 2 * 2 * p["BN"] * p["BK"] * itemsize
    else:
        operands = p["ASYNC_STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * itemsize
    return max(operands, p["BM"] * (p["BN"] + 8) * 4) + WGMMA_ALIGN


def a_row_stride(p: Mapping[str, Any], itemsize: int) -> int:
    """Elements between the rows of an m-major A tile (As[m][k]). With MMA the lanes of a fragment load read 16
    bytes from each of 8 rows (4 k; float16's ldmatrix 8): padded by 16 bytes, those rows fall on distinct banks
    (a row of a multiple of 32 words would put all 8 on the same 4)."""
    return p["BK"] + ((8 if itemsize == 2 else 4) if p.get("MMA", 0) else 0)


def a_tile_elements(p: Mapping[str, Any], itemsize: int) -> int:
    """Elements of one shared A tile: BK rows of BM (plus pad) k-major, BM rows of a_row_stride m-major."""
    if p.get("A_SMEM", "kmajor") == "mmajor":
        return p["BM"] * a_row_stride(p, itemsize)
    return p["BK"] * (p["BM"] + shared_pad(p, itemsize))


def shared_pad(p: Mapping[str, Any], itemsize: int) -> int:
    """Elements added to each k row of the shared tiles. With MMA the lanes of a fragment load read 8
    consecutive elements from each of 4 k rows; rows 32 bytes (4 doubles, 8 floats) apart from a multiple of 128
    bytes fall on distinct banks, where unpadded ones would conflict 4 ways. float16's ldmatrix reads 16 bytes from
    each of 8 rows: rows 16 bytes apart from a multiple of 128."""
    if not p.get("MMA", 0):
        return 0
    return 8 if itemsize == 2 else 32 // itemsize


def mma_precision(dtype: str, args: Mapping[str, Any]) -> str:
    """Which tensor-core products an MMA variant issues: fp64's for float64, fp16's for float16, bf16's for
    bfloat16, else the precision's TF32 ones."""
    return {"float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}.get(dtype) or args.get("precision", "ieee")


def accumulator_dtype(dtype: str) -> str:
    """What a variant sums in (its accumulators, split-K workspace): float16's and bfloat16's products in float32,
    as NumPy and PyTorch do; the others in their own type."""
    return "float32" if dtype in HALF else dtype


def shared_stages(p: Mapping[str, Any]) -> int:
    """Shared A and B tiles a tiled matmul keeps: the cp.async pipeline's depth, else two with PREFETCH."""
    return p.get("ASYNC_STAGES", 0) or (2 if p.get("PREFETCH", 1) else 1)


def dynamic_shared_bytes(params: Mapping[str, Any], dtype: str) -> int:
    """Bytes of dynamic shared memory a launch of this variant needs: its tiles, where they exceed what a
    kernel may declare statically; 0 otherwise."""
    if not is_tiled(params):
        return 0
    n = matmul_shared_bytes(params, np.dtype(dtype).itemsize)
    return n if n > MAX_STATIC_SHARED_BYTES or is_wgmma(params) else 0


def split_add(params: Mapping[str, Any]) -> str | None:
    """How the K slices of a variant meet in C (its SPLIT_ADD, default atomic), or None where K is not split."""
    if params.get("SPLIT_K", 1) == 1:
        return None
    return params.get("SPLIT_ADD", "atomic")


BATCH_ARGS = ("inner", "a_outer", "a_inner", "b_outer", "b_inner", "c_step")  # templates/_batch.j2


def kernel_args(params: Mapping[str, Any], args: Mapping[str, Any] | None = None,
                dtype: str | None = None) -> tuple[str, ...]:
    """The arguments a variant's kernel takes: only those it uses. The seeds take the operands and their shape;
    tiled variants the K chunk of a slice too, the workspace and tile counters where the last block sums the K
    slices, and the flags that say whether each operand's vectors are aligned where they are read; the gemv kernel
    likewise (``args``, the family arguments, say its form and ``dtype`` its workspace). A batched kernel (``args``
    batch "strided") takes the stack's geometry last (BATCH_ARGS)."""
    batched = bool(args and args.get("batch"))
    return _kernel_args(params, args, dtype) + (BATCH_ARGS if batched else ())


def _kernel_args(params: Mapping[str, Any], args: Mapping[str, Any] | None, dtype: str | None) -> tuple[str, ...]:
    names = ["A", "B", "C"]
    if gemv.is_gemv(params):
        return gemv_args(params, args, dtype)
    if not is_tiled(params):
        return tuple(names + ["M", "N", "K", "lda", "ldb", "ldc"])
    if is_tma(params):  # the tensor maps of A and B (the simulator reads A and B themselves)
        return tuple(names + ["maps", "M", "N", "K", "lda", "ldb", "ldc", "vec_c"])
    if is_wgmma(params):
        return tuple(names + ["M", "N", "K", "lda", "ldb", "ldc", "vec_a", "vec_b", "vec_c"])
    if split_add(params) == "last_block":
        names += ["W", "counters"]
    names += ["M", "N", "K", "lda", "ldb", "ldc", "k_chunk"]
    if params["EDGE"] == "interior":  # one flag, vec_ok, stands for all three
        names += ["vec_a", "vec_b", "vec_c"]
    else:
        vec = params["VEC"]
        mma = params.get("MMA", 0)
        names += ["vec_a", "vec_b"] if vec > 1 else []
        vc = _vector_width(vec, 2 if mma else params["TN"])
        names += ["vec_c"] if vc > 1 and split_add(params) != "atomic" else []
    return tuple(names)


def gemv_args(params: Mapping[str, Any], args: Mapping[str, Any], dtype: str) -> tuple[str, ...]:
    """The gemv kernel's arguments: the float32 workspace W in C's place where K slices meet there; the vectors'
    alignment flag only where they are read VEC at a time (rows form, K-major vectors)."""
    out = MatmulFamily.out_dtype_of(dtype, args)
    names = ["A", "B", "W" if gemv.workspace(params, out) else "C", "M", "N", "K", "lda", "ldb", "ldc", "k_chunk"]
    if params["VEC"] > 1:
        side = args["skinny"]
        matrix, vectors = ("vec_a", "vec_b") if side == "n" else ("vec_b", "vec_a")
        rows_kmajor = gemv.form(args) == "rows" and gemv.vectors_k_major(args)
        names += sorted([matrix] + ([vectors] if rows_kmajor else []))
    return tuple(names)


def _vector_width(vec: int, extent: int) -> int:
    """Widest access of at most ``vec`` elements that divides ``extent``."""
    return next(w for w in (4, 2, 1) if w <= vec and extent % w == 0)


# -- the family's own constraint predicates -----------------------------------------------------------
def _tile_loads_even(p, ctx):
    n = matmul_threads(p) * p["VEC"]
    for name, elems in (("A", p["BM"] * p["BK"]), ("B", p["BK"] * p["BN"])):
        if elems % n:
            return f"the {name} tile ({elems} elements) must split evenly over threads*VEC = {n}"
    return None


def _warp_grid_fits(p, ctx):
    rows = p["WARP_ROWS"]
    if rows and ((p["BM"] // p["TM"]) % rows or (p["BN"] // p["TN"]) % (32 // rows)):
        return (f"WARP_ROWS={rows}: a warp's {rows} x {32 // rows} threads must tile the BM/TM x BN/TN = "
                f"{p['BM'] // p['TM']} x {p['BN'] // p['TN']} thread grid")
    return None


def _accumulators_at_most(p, ctx, max):
    if p["TM"] * p["TN"] > max:
        return f"TM*TN = {p['TM'] * p['TN']} accumulators per thread exceeds {max}"
    return None


def _accumulator_bytes_at_most(p, ctx, max):
    n = p["TM"] * p["TN"] * np.dtype(accumulator_dtype(ctx.dtype)).itemsize
    if n > max:
        return f"TM*TN = {p['TM'] * p['TN']} {ctx.dtype} accumulators are {n} bytes per thread, over {max}"
    return None


def _mma_fits(p, ctx):
    if is_wgmma(p):
        return None  # wgmma_fits
    k = p["MMA"]
    precision = ctx.family.get("precision", "ieee")
    if ctx.dtype in HALF and k != 16:
        return f"MMA={k}: tiled {ctx.dtype} runs on the tensor cores, mma.sync m16n8k16 (MMA=16)"
    if ctx.dtype in HALF and p["TN"] % 4:
        return (f"MMA=16: {ctx.dtype} needs TN={p['TN']} to be a multiple of 4 (one ldmatrix.x4 loads two n8 pieces "
                f"of B)")
    if not k:
        if precision != "ieee":
            return f"precision {precision} runs on the tensor cores: MMA must be 4 or 8, not 0"
        return None
    if ctx.dtype == "float32" and precision == "ieee":
        return (f"MMA={k} on float32 needs precision tf32 or 3xtf32 (the TF32 tensor cores); ieee float32 runs on "
                f"the CUDA cores")
    if ctx.dtype == "float32" and k == 16:
        return "MMA=16: TF32 has mma.sync m16n8k4 and m16n8k8 only"
    if p["TM"] % 2 or p["TN"] % 2:
        return f"MMA={k}: TM={p['TM']} and TN={p['TN']} must be even (a lane holds 2 x 2 results of each mma)"
    if (p["BM"] // p["TM"]) % 8 or (p["BN"] // p["TN"]) % 4:
        return (f"MMA={k}: a warp's 8 x 4 lanes must tile the BM/TM x BN/TN = {p['BM'] // p['TM']} x "
                f"{p['BN'] // p['TN']} thread grid")
    if p["UNROLL_K"] % k:
        return f"MMA={k} must divide UNROLL_K={p['UNROLL_K']} (whole mma steps per unrolled trip)"
    n, blocks = matmul_threads(p), max(p["MIN_BLOCKS"], 1)
    tiles = 2 if precision == "3xtf32" else 1  # 3xtf32 sums each shared tile in a tile of its own
    accumulators = tiles * p["TM"] * p["TN"]
    words = np.dtype(accumulator_dtype(ctx.dtype)).itemsize // 4
    registers, needed = min(255, 65536 // (n * blocks)), words * accumulators + 64
    if registers < needed:
        return (f"MMA={k}: {n} threads x {blocks} blocks per SM leave {registers} registers per thread, where "
                f"{accumulators} {ctx.dtype} accumulators and the mma fragments need about {needed} (on the "
                f"H200 such fp64 variants failed to compile or spilled and computed wrong results)")
    return None


def _wgmma_fits(p, ctx):
    if not is_wgmma(p):
        if p["BK"] == 64:
            return ("BK=64 is the depth of the float16 wgmma kernel's tiles (WGMMA=1); the other variants take BK up "
                    "to 32")
        return None
    if p["BM"] not in (64, 128, 256) or p["BN"] not in (64, 128, 256):
        return (f"WGMMA=1 tiles are 64, 128 or 256 rows (a warpgroup per 64) by 64, 128 or 256 columns, not "
                f"{p['BM']} x {p['BN']}")
    if ctx.dtype in HALF:
        return _wgmma_f16_fits(p, ctx)
    precision = ctx.family.get("precision", "ieee")
    if ctx.dtype != "float32" or precision == "ieee":
        return (f"WGMMA=1 multiplies float16 or bfloat16 (MMA=16) or float32 at precision tf32 or 3xtf32 (MMA=8), "
                f"not {ctx.dtype}"
                + (" at precision ieee" if ctx.dtype == "float32" else ""))
    if p["MMA"] != 8:
        return f"WGMMA=1 on float32 issues wgmma m64nNk8 of TF32: MMA must be 8, not {p['MMA']}"
    if p["BK"] != 32:
        return (f"WGMMA=1 on float32 reads shared rows of 32 floats (128 bytes, the swizzle's span): BK must be 32, "
                f"not {p['BK']}")
    if p["ASYNC_STAGES"] or p.get("TMA"):
        return _wgmma_copies_fit(p, precision)
    if 4 * p["BN"] < p["BM"]:
        return (f"WGMMA=1 on float32: BN={p['BN']} is too narrow for BM={p['BM']} (each thread loads whole 16-byte "
                f"pieces of B)")
    threads = matmul_threads(p)
    accumulators = p["BN"] // 2 * (2 if precision == "3xtf32" else 1)
    needed = accumulators + 16 * (3 if precision == "3xtf32" else 2) + p["BN"] * p["BK"] // threads + 24
    if needed > min(255, 65536 // threads):
        return (f"WGMMA=1 at {precision}: {threads} threads leave {min(255, 65536 // threads)} registers per thread, "
                f"where {accumulators} accumulators, the A fragments and the loads need about {needed}")
    return None


def _wgmma_copies_fit(p, precision):
    if precision != "tf32":
        return ("WGMMA=1 at 3xtf32 splits its operands on their way through registers: ASYNC_STAGES must be 0 and "
                "TMA 0 (the cp.async and TMA pipelines read operands rounded beforehand, precision tf32)")
    return _async_wgmma_fits(p)


def _async_wgmma_fits(p):
    """The cp.async- or TMA-fed wgmma kernel (float16, or float32 on rounded copies): its stages and registers
    (a consumer of the TMA's copies keeps the accumulators and little else)."""
    if p["ASYNC_STAGES"] not in (3, 4):
        return (f"WGMMA=1 keeps one tile's multiply running while the next is copied: ASYNC_STAGES must be 3 or 4, "
                f"not {p['ASYNC_STAGES']}")
    registers = 65536 // matmul_threads(p)
    needed = p["BN"] // 2 + (32 if is_tma(p) else 64)
    if needed > min(255, registers):
        return (f"WGMMA=1: {matmul_threads(p)} threads leave {registers} registers per thread, where {p['BN'] // 2} "
                f"accumulators and the {'addresses' if is_tma(p) else 'copies'} need about {needed}")
    return None


def _wgmma_f16_fits(p, ctx):
    if p["MMA"] != 16:
        return f"WGMMA=1 on {ctx.dtype} issues wgmma m64nNk16: MMA must be 16, not {p['MMA']}"
    if p["BK"] != 64:
        return f"WGMMA=1 reads shared rows of 64 halves (128 bytes, the swizzle's span): BK must be 64, not {p['BK']}"
    return _async_wgmma_fits(p)


def _split_add_fits(p, ctx):
    if ctx.dtype in HALF and split_add(p) == "atomic" and ctx.family.get("out_dtype") in (None, "input"):
        return f"SPLIT_ADD=atomic: {ctx.dtype} results are rounded once, from the float32 sum: use last_block"
    if p["SPLIT_ADD"] != "vector":
        return None
    if ctx.dtype != "float32":
        return f"SPLIT_ADD=vector: red.global.add has vectors of float32 only, not {ctx.dtype}"
    if p["VEC"] == 1 or p["TN"] % 2:
        return f"SPLIT_ADD=vector needs a thread's columns in vectors (VEC={p['VEC']}, TN={p['TN']})"
    return None


def _batch_fits(p, ctx):
    """A batched problem's kernels index each operand's matrices from one flat array: not those fed by tensor maps
    of one matrix (TMA 1), nor those multiplying copies of one matrix rounded first (tf32 wgmma on copies).
    Two rules (TMA alone, then the copies), so that a tuner is not offered TMA 1 at all (SearchSpace.for_dtype)."""
    if ctx.family.get("batch") and p.get("TMA"):
        return ("TMA=1 copies tiles through 2-D tensor maps of one matrix: a batched problem (B x M x N x K) takes "
                "TMA 0 (every thread copies with cp.async)")
    return None


def _batch_copies_fit(p, ctx):
    if ctx.family.get("batch") and reads_rounded_copies(p):
        return ("WGMMA=1 with ASYNC_STAGES > 0 at tf32 multiplies copies of one matrix rounded first: a batched "
                "problem takes ASYNC_STAGES 0 (rounded on the way through registers) or mma.sync")
    return None


PREDICATES = {
    "batch_fits": Predicate(_batch_fits, frozenset({"TMA"})),
    "batch_copies_fit": Predicate(_batch_copies_fit, frozenset({"WGMMA"})),
    "gemv_fits": Predicate(gemv.fits, frozenset({"BLOCK", "KT", "TL", "TS", "VEC", "UNROLL_K"})),
    "tile_loads_even": Predicate(_tile_loads_even, frozenset({"BM", "BN", "BK", "TM", "TN", "VEC"})),
    "warp_grid_fits": Predicate(_warp_grid_fits, frozenset({"BM", "BN", "TM", "TN", "WARP_ROWS"})),
    "accumulators_at_most": Predicate(_accumulators_at_most, frozenset({"TM", "TN"}), ("max",)),
    "accumulator_bytes_at_most": Predicate(_accumulator_bytes_at_most, frozenset({"TM", "TN"}), ("max",)),
    "split_add_fits": Predicate(_split_add_fits, frozenset({"SPLIT_ADD", "SPLIT_K", "VEC", "TN"})),
    "wgmma_fits": Predicate(_wgmma_fits, frozenset({"BM", "BN", "BK"})),
    "mma_fits": Predicate(_mma_fits, frozenset({"MMA", "BM", "BN", "TM", "TN", "UNROLL_K", "MIN_BLOCKS",
                                                "ASYNC_STAGES"})),
}


# -- the family -------------------------------------------------------------------------------------
class MatmulFamily(KernelFamily):
    name = "matmul"
    summary = "C = A @ B"
    dtypes = ("float32", "float64", "float16", "bfloat16")
    args = (FamilyArg("layout", LAYOUTS, "nn", "which of A, B are given transposed (BLAS-style: nn, tn, nt, tt)"),
            FamilyArg("precision", PRECISIONS, "ieee", "float32 products: ieee (fp32 FMAs), 3xtf32 (fp32-level "
                      "error on the TF32 tensor cores) or tf32 (TF32-rounded operands, as cuBLAS with TF32 on)",
                      implicit=True),
            FamilyArg("out_dtype", (None, "float32"), None, "the result's dtype: input (the operands') or float32 "
                      "(float16 or bfloat16 operands: the float32 sums, not rounded)", none_means="input",
                      implicit=True),
            FamilyArg("batch", (None, "strided"), None, "a stack of B products in one launch, each operand a stack "
                      "or one matrix read by every product: set by a B x M x N x K shape (give it only to render or "
                      "build such a kernel without a shape)", none_means="none", implicit=True),
            FamilyArg("skinny", (None, "m", "n"), None, f"which side of C is at most {gemv.SKINNY} (where the gemv "
                      f"kernel applies, GEMV 1): set by the shape, n where N is (N <= M), else m (give it only to "
                      f"render or build such a kernel without a shape)", none_means="none", implicit=True))
    unit = "TFLOP/s"
    baseline = {"strategy": "shared16"}
    suite = ("1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192", "4096x4096x256",
             "8192x128x8192", "1000x1000x1000", "127x3000x511")
    dry_run_shapes = ("37x29x11",)
    predicates = PREDICATES
    reference_peers = ("cuBLAS (cupy)", "cuBLAS (torch)", "cuBLAS TF32 (torch)")

    def __init__(self):
        self.space_file = resource_dir("search_spaces") / "matmul.yaml"
        self.template_dir = templates_dir()

    def canonical_args(self, shape, args) -> dict[str, Any]:
        """``batch`` and ``skinny`` as the shape sets them (ValueError where they were given otherwise): a problem
        has one key, and its family arguments say which kernels apply to it."""
        if len(shape) not in (3, 4):
            return dict(args)  # check_shape says why
        _, M, N, _ = dims(shape)
        derived = {"batch": "strided" if len(shape) == 4 else None, "skinny": gemv.skinny_side(M, N)}
        for name, value in derived.items():
            if args[name] not in (None, value):
                what = "x".join(map(str, shape))
                raise ValueError(f"matmul {name} {args[name]} does not fit the shape {what} (it sets {name} "
                                 f"{value or 'none'})")
        return {**args, **derived}

    def check_shape(self, shape, args) -> None:
        if len(shape) not in (3, 4):
            raise ValueError(f"a matmul shape is M x N x K, or B x M x N x K for a stack of B products, got "
                             f"{'x'.join(map(str, shape))}")

    def key_tag(self, args) -> str:
        """The arguments as a key segment, those the shape sets (batch, skinny) left out: the shape says them."""
        return super().key_tag({**args, "batch": None, "skinny": None})

    def check_dtype(self, dtype, args) -> None:
        if args["precision"] != "ieee" and dtype != "float32":
            raise ValueError(f"precision {args['precision']} is for float32 matmul; {dtype} has ieee only")
        if args["out_dtype"] is not None and dtype not in HALF:
            raise ValueError(f"out_dtype {args['out_dtype']} is for float16 and bfloat16 operands; a {dtype} matmul "
                             f"gives {dtype}")

    def out_dtype(self, problem) -> str:
        return self.out_dtype_of(problem.dtype, problem.family)

    @staticmethod
    def out_dtype_of(dtype: str, args: Mapping[str, Any]) -> str:
        return args.get("out_dtype") or dtype

    def work(self, problem) -> float:
        B, M, N, K = dims(problem.shape)
        return 2.0 * B * M * N * K

    def peak(self, device, dtype: str) -> float | None:
        return device.peak_tflops(dtype)

    def peak_for(self, problem, device) -> float | None:
        """TF32 precisions run on the TF32 tensor cores: their rate, not fp32's on the CUDA cores; float16 and
        bfloat16 on the fp16 ones (the same rate)."""
        if problem.family["precision"] != "ieee":
            return device.peak_tflops("tf32")
        return self.peak(device, "float16" if problem.dtype in HALF else problem.dtype)

    def out_shape(self, problem) -> tuple[int, ...]:
        return tuple(problem.shape[:-1])

    def templates(self) -> list[str]:
        return ["_common.j2", "_sim.j2", "_matmul.j2", "matmul_seed.py.j2", "matmul_tiled.py.j2", "matmul_mma.py.j2",
                "_wgmma.j2", "matmul_wgmma.py.j2", "matmul_wgmma_tf32.py.j2", "_batch.j2", "matmul_gemv.py.j2"]

    def template(self, params) -> str:
        if gemv.is_gemv(params):
            return "matmul_gemv.py.j2"
        if not is_tiled(params):
            return "matmul_seed.py.j2"
        if is_wgmma(params):
            tf32_registers = is_wgmma_tf32(params) and not reads_rounded_copies(params)
            return "matmul_wgmma_tf32.py.j2" if tf32_registers else "matmul_wgmma.py.j2"
        return "matmul_mma.py.j2" if params.get("MMA", 0) else "matmul_tiled.py.j2"

    def template_context(self, params, dtype, args, simulator) -> dict[str, Any]:
        layout = args["layout"]
        # ZERO is the accumulators' zero; EL0 an element's (a float16 global constant is invalid NVVM IR in
        # numba-cuda 0.30, so float16's is written in place).
        # A bfloat16 kernel holds its operands as their bits (uint16, see autotune/dtypes.py).
        acc, out = accumulator_dtype(dtype), self.out_dtype_of(dtype, args)
        element = storage(dtype)
        ctx: dict[str, Any] = {**params, "dtype": element, "ACC": acc,
                               "EL0": "ZERO" if acc == dtype else f"{element}(0)", "BF16": dtype == "bfloat16",
                               "OUT_BF16": out == "bfloat16",
                               "SIM": simulator, "TRANS_A": layout[0] == "t",
                               "TRANS_B": layout[1] == "t", "MMA": params.get("MMA", 0),
                               "ARGS": kernel_args(params, args, dtype), "BATCH": bool(args.get("batch")),
                               "description": f"matmul {layout} {dtype} {dict(params)}"}
        if gemv.is_gemv(params):
            ctx.update(gemv.template_context(params, args), WORKSPACE=gemv.workspace(params, out))
            return ctx
        if not is_tiled(params):
            return ctx
        threads = matmul_threads(params)
        if is_wgmma(params):
            ctx.update(THREADS=threads, STAGES=params["ASYNC_STAGES"], OUT=storage(out),
                       OUT_SIZE=numpy_dtype(out).itemsize, ALIGN=WGMMA_ALIGN, PRECISION=args.get("precision", "ieee"),
                       TF32=reads_rounded_copies(params), TMA=is_tma(params))
            if ctx["TF32"]:  # the copies are K-major whatever the layout: A as M x K, B as N x K
                ctx.update(TRANS_A=False, TRANS_B=True, EL0="float32(0)")
            return ctx
        vec = params["VEC"]
        mma = ctx["MMA"]
        itemsize = numpy_dtype(dtype).itemsize
        pad = shared_pad(params, itemsize)
        precision = mma_precision(dtype, args)
        ctx.update(
            MMA_PRECISION=precision,
            MMA_TILE=MMA_TILES.get(precision, ""),
            MMA_SLOTS=mma // 2 + mma // 4,
            AS_LD=params["BM"] + pad,
            AM_LD=a_row_stride(params, itemsize),
            A_SIZE=a_tile_elements(params, itemsize),
            BS_LD=params["BN"] + pad,
            THREADS=threads,
            ASYNC_STAGES=params.get("ASYNC_STAGES", 0),
            STAGES=shared_stages(params),
            ITEMSIZE=itemsize,
            DYNAMIC_SHARED=dynamic_shared_bytes(params, dtype) > 0,
            LOADS_A=params["BM"] * params["BK"] // (threads * vec),
            LOADS_B=params["BK"] * params["BN"] // (threads * vec),
            VA=_vector_width(vec, params["TM"]) if ctx["A_SMEM"] == "kmajor" else 1,
            VB=_vector_width(vec, params["TN"]),
            VC=_vector_width(vec, 2 if mma else params["TN"]),
            SPLIT_ADD=split_add(params),
            PARTIAL_VEC=_vector_width(16 // np.dtype(ctx["ACC"]).itemsize, params["TM"] * params["TN"]),
        )
        return ctx

    def make_kernel(self, module, params, dtype, args, source, simulator):
        from .matmul_kernel import MatmulKernel

        return MatmulKernel(self, module, params, dtype, args, source, simulator)

    def threads(self, params) -> int:
        return matmul_threads(params)

    def shared_bytes(self, params, itemsize: int) -> int:
        return matmul_shared_bytes(params, itemsize)

    def unfit_for(self, params, device) -> str | None:
        """wgmma exists on compute capability 9.0 alone (sm_90a: Hopper; not on later GPUs either)."""
        if is_wgmma(params) and tuple(device.cc[:2]) != (9, 0):
            cc = ".".join(map(str, device.cc[:2]))
            return f"WGMMA=1 runs on Hopper (compute capability 9.0) only, not on {device.name} ({cc})"
        return None

    # -- data and oracle ----------------------------------------------------------------------------
    def inputs(self, problem, rng, purpose):
        """A and B as the layout stores them. Check data are integers in [-2, 2] (never all zero): every sum of
        K products of |a*b| <= 4 is exact in float32 while 4K < 2**24, so a result is right to the last bit or
        wrong. Timing data are standard normal (never zeros, which can run faster). A batched problem's are stacks
        (B, M, K) and (B, K, N), each matrix stored as the layout says (a transposed one as ``x.swapaxes(-1, -2)``
        of a C-contiguous stack)."""
        _, M, N, K = dims(problem.shape)
        stack = tuple(problem.shape[:-3])
        layout = problem.family["layout"]
        arrays = []
        for shape, transposed in (((M, K), layout[0] == "t"), ((K, N), layout[1] == "t")):
            if purpose == "check":
                x = rng.integers(-2, 3, size=stack + shape, dtype=np.int8).astype(problem.dtype)
                x[..., 0, 0] = 1
            else:
                x = rng.standard_normal(stack + shape, dtype=np.float32).astype(problem.dtype)
            arrays.append(np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x)
        return arrays

    def verification(self, problem, inputs, rng) -> list[Case]:
        """The integer case (exact at every precision: its values and sums are TF32- and fp32-exact; float16's and
        bfloat16's results are the exact sums rounded to their dtype, checked over ``error_rows``) and, at a
        rounded precision and for 16-bit operands, standard normal data whose error must stay within twice the
        error of the reference on
        the same data (``error_bound``). A batched problem has a second integer case: the same stack of A times
        B's first matrix alone, which every product reads (a broadcast operand: stride 0)."""
        precision = {"float16": "fp16", "bfloat16": "bf16"}.get(problem.dtype) or problem.family["precision"]
        out_dtype = self.out_dtype(problem)
        cases = [self._exact_case(problem, tuple(inputs))]
        if len(problem.shape) == 4:
            cases.append(self._exact_case(problem, (inputs[0], inputs[1][0]), ", B broadcast"))
        if precision != "ieee":
            data = tuple(self.inputs(problem, rng, "time"))
            rows = error_rows(problem.shape)
            A, B = (a.astype(np.float64) for a in data)
            expected = A[..., rows, :] @ B
            cases.append(Case(data, expected, "error rows",
                              error_bound(precision, data[0][..., rows, :], data[1], expected, out_dtype)))
        return cases

    def _exact_case(self, problem, inputs: tuple, what: str = "") -> Case:
        """The integer data's case: their exact product, where C is float16 or bfloat16 its ``error_rows``
        rounded to that dtype; none past EXACT_LIMIT (verify runs Freivalds' test)."""
        B, M, N, K = dims(problem.shape)
        A, Bm = (a.astype(np.float64) for a in inputs)
        out_dtype = self.out_dtype(problem)
        if out_dtype in HALF:
            rows = error_rows(problem.shape)
            return Case(inputs, (A[..., rows, :] @ Bm).astype(out_dtype).astype(np.float64), "exact rows" + what)
        return Case(inputs, A @ Bm if B * M * N * K <= EXACT_LIMIT else None, "elements" + what)

    def verify(self, problem, case, got, rng) -> str | None:
        """Exact on integer data: small problems elementwise, large ones by Freivalds' test; within the case's
        tolerance (relative error, Frobenius norm, over ``error_rows``) on the normal data of a rounded precision.

        Freivalds: C v == A (B v) for random integer vectors v; every product and sum here is an integer far
        below 2**53, so float64 is exact and any wrong element makes the test fail with probability >= 1/2
        per vector (much higher for integer v drawn from a wide range). Plus 512 sampled elements exactly (32
        random rows by 16 random columns)."""
        problem_text = unwritten(got)
        if problem_text:
            return problem_text
        C = got.astype(np.float64)
        rows = error_rows(problem.shape)
        if case.tolerance is not None:
            precision = problem.dtype if problem.dtype in HALF else problem.family["precision"]
            return compare_norm(C[..., rows, :], case.expected, case.tolerance, what=f"{precision} results")
        broadcast = case.what.endswith("B broadcast")
        if case.what.startswith("exact rows"):
            return compare_exact(C[..., rows, :], case.expected,
                                 what="rows of C" + (" (B broadcast)" if broadcast else ""))
        if case.expected is not None:
            return compare_exact(C, case.expected, **({"what": "elements (B broadcast)"} if broadcast else {}))
        A, B = case.inputs64
        _, M, N, _ = dims(problem.shape)
        for _ in range(3):
            v = rng.integers(-1000, 1001, size=(N, 1)).astype(np.float64)
            problem_text = compare_exact(C @ v, A @ (B @ v), what="C @ v (Freivalds' test)")
            if problem_text:
                return problem_text
        if C.ndim == 3:  # the sampled elements of one matrix of the stack
            z = int(rng.integers(0, C.shape[0]))
            C, A, B = C[z], A[z], B[z] if B.ndim == 3 else B
        rows, cols = rng.integers(0, M, size=32), rng.integers(0, N, size=16)
        return compare_exact(C[np.ix_(rows, cols)], A[rows] @ B[:, cols], what="sampled elements")

    def result_error(self, problem, inputs, result) -> float:
        """Relative (Frobenius) error of ``error_rows`` of C against the float64 product of the same operands."""
        rows = error_rows(problem.shape)
        A, B = (np.asarray(a, np.float64) for a in inputs)
        return relative_error(np.asarray(result, np.float64)[..., rows, :], A[..., rows, :] @ B)

    # -- search -------------------------------------------------------------------------------------
    def seeds(self):
        return [("seed naive", {"strategy": "naive"}), ("seed shared16", {"strategy": "shared16"})]

    def default_params(self, problem) -> dict[str, Any]:
        """The space's defaults (CUDA cores) with fp64's vectors halved, and smaller tiles under 1024 rows and columns;
        at a TF32 precision, the tensor-core configuration that won 4096^3 at both TF32 precisions on the H100
        (smaller tiles likewise); for float16 and bfloat16 its tensor-core counterpart, fed through cp.async. A
        skinny problem takes the gemv kernel (matmul_gemv.defaults), which reads the matrix once where a tile of
        C would be mostly empty."""
        _, M, N, _ = dims(problem.shape)
        if problem.family["skinny"]:
            from ..space import load_space

            splits = load_space("matmul").params["SPLIT_K"].values
            return gemv.defaults(dims(problem.shape), problem.dtype, problem.family, splits)
        params: dict[str, Any] = {"VEC": 2} if problem.dtype == "float64" else {}
        if problem.family["precision"] != "ieee":
            params.update(BM=128, BN=128, BK=32, TM=8, TN=8, MMA=8, A_SMEM="mmajor", UNROLL_K=16, GROUP_M=16)
        if problem.dtype in HALF:
            params.update(BM=128, BN=128, BK=32, TM=8, TN=8, MMA=16, A_SMEM="mmajor", UNROLL_K=16, GROUP_M=16,
                          VEC=4, ASYNC_STAGES=3)
        if max(M, N) < 1024:
            params.update(BM=64, BN=64, BK=16, TM=4, TN=4)
        return params

    def problem_starts(self, start, problem, device, space) -> list[dict[str, Any]]:
        """A tiled starting configuration in the forms that fit this problem, best fit first: the split of K
        that fills the GPU, and clamped edges where M or N is no multiple of the tile.

        A start written for big squares leaves most SMs idle on a skinny or small problem (128x128 tiles of
        8192x128 are 64 blocks for 132 SMs); the forms are the smallest splits (1, unsplit, among them) that reach
        90% of one and of two waves of blocks, as long as each split keeps at least two K tiles, then the start
        as given. A split form (given or found) is tried with each way of combining its slices (SPLIT_ADD; the
        tuner drops the vector one where the dtype has none). Where the tiles overhang M or N, every form is
        tried with ``EDGE: clamp`` first: the 1024^3 winner took 0.063 ms on 1000^3 clamped and 0.082 ms not on
        the H100, and the committed winners of 1000^3 and 127x3000x511 are clamped. A gemv start is split over K
        to fill the GPU likewise (matmul_gemv.starts); a batched problem's blocks count every matrix's."""
        if gemv.is_gemv(start):
            return gemv.starts(start, dims(problem.shape), problem.dtype, problem.family, device.sm_count,
                               space.params["SPLIT_K"].values)
        if not is_tiled(start):
            return []
        _, M, N, _ = dims(problem.shape)
        given = start.get("SPLIT_K", 1)
        splits = [given] if given > 1 else \
            _filling_splits(start, dims(problem.shape), device.sm_count, space.params["SPLIT_K"].values) + [1]
        forms: list[dict[str, Any]] = []
        for split in dict.fromkeys(splits):
            if split == 1:
                forms.append(dict(start))
            else:
                forms += [{**start, "SPLIT_K": split, "SPLIT_ADD": add} for add in ("atomic", "vector", "last_block")]
        if start.get("EDGE") == "interior" and (M % start["BM"] or N % start["BN"]):
            forms = [{**c, "EDGE": "clamp"} for c in forms] + forms
        return forms

    # -- optional -----------------------------------------------------------------------------------
    def peers(self, problem, inputs: Sequence) -> dict[str, Any]:
        """cuBLAS through CuPy and PyTorch in IEEE fp32 (TF32 off), the accuracy of "ieee" and "3xtf32"; for "tf32",
        PyTorch's with TF32 on (CuPy's is set by an environment variable read once, so it is left out); for
        bfloat16, PyTorch's alone (its tensors made from the operands' bits)."""
        found = {}
        tf32 = problem.family["precision"] == "tf32"
        bf16 = problem.dtype == "bfloat16"
        try:
            import cupy

            if not (tf32 or bf16):
                A, B = (cupy.asarray(a) for a in inputs)
                found["cuBLAS (cupy)"] = lambda: A @ B
        except ImportError:
            pass
        try:
            import torch

            if bf16:  # PyTorch imports no bfloat16 array interface: the operands' bits, as int16
                tA, tB = (torch.as_tensor(retyped(a, np.dtype(np.int16)), device="cuda").view(torch.bfloat16)
                          for a in inputs)
            else:
                tA, tB = (torch.as_tensor(a, device="cuda") for a in inputs)

            def torch_matmul():
                torch.backends.cuda.matmul.allow_tf32 = tf32
                return tA @ tB

            found["cuBLAS TF32 (torch)" if tf32 else "cuBLAS (torch)"] = torch_matmul
        except ImportError:
            pass
        return found

    def selftest_cases(self, small: bool):
        """Odd shapes per dtype and layout; on the GPU also stacks (batch: every template that takes one, a stack
        of 1 and one past a block of matrices) and skinny problems (the gemv kernel, both sides)."""
        shapes = [(1, 1, 1), (7, 13, 5), (37, 29, 41), (17, 19, 1), (130, 3, 9), (257, 263, 129), (1000, 1000, 1000)]
        cases = [(dtype, {"layout": layout}, shapes[1:4] if small else shapes)
                 for dtype in self.dtypes[:1 if small else None] for layout in (LAYOUTS[:1] if small else LAYOUTS)]
        if small:
            return cases
        stacks = [(1, 37, 29, 41), (3, 37, 29, 41), (5, 130, 67, 9)]
        skinny = {"n": [(37, 1, 41), (1000, 7, 1000), (3001, 16, 129)], "m": [(1, 37, 41), (7, 1000, 1000)]}
        for dtype in self.dtypes:
            for layout in ("nn", "tt"):  # both forms of the gemv kernel on each side; both transposes of a stack
                cases.append((dtype, {"layout": layout, "batch": "strided"}, stacks))
                cases += [(dtype, {"layout": layout, "skinny": side}, found) for side, found in skinny.items()]
        return cases

    def selftest_extras(self) -> list[dict[str, Any]]:
        """Configurations a covering sample leaves out that the selftest checks too (where they apply): the seed
        kernels, and the TMA-fed wgmma ones, which the random draws of a covering sample (rejection sampling over
        every parameter) practically never reach."""
        tma = {"BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1}
        return [{"strategy": "naive"}, {"strategy": "shared16"}, {**tma, "BM": 64, "BN": 64, "ASYNC_STAGES": 3},
                {**tma, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "GROUP_M": 1}]

    def bench_name(self, problem) -> str:
        layout, precision, out = (problem.family[a] for a in ("layout", "precision", "out_dtype"))
        return "matmul" + ("-batched" if problem.family["batch"] else "") + ("" if layout == "nn" else f"-{layout}") + \
            ("" if problem.dtype == "float32" else f"-{problem.dtype}") + \
            ("" if precision == "ieee" else f"-{precision}") + ("" if out is None else f"-to-{out}")


def _filling_splits(start: Mapping[str, Any], shape: tuple[int, ...], sm_count: int, splits) -> list[int]:
    """The smallest K splits (1 included) that give 90% of one and of two waves of blocks, each split keeping two
    K tiles (``shape``: B x M x N x K, the blocks of every matrix counted).

    A split that just misses a whole wave can beat the next one up, which pays twice the combining for a wave it
    barely fills: 64 tiles split 2 (0.97 of a wave on 132 SMs) won fp32 1024^3 and fp64 1000^3 on the H100, where
    whole waves would start at split 4; and tiles that already fill 90% of a wave are best unsplit (128x256 tiles
    of 2048^3, 128 blocks, won unsplit on the H100). For their tiles, this rule proposes the split of 16 of the 17
    split-K entries in the H100 and H200 databases (none of which splits 8), and 1 for all 20 unsplit ones."""
    batch, M, N, K = shape
    blocks = -(-M // start["BM"]) * -(-N // start["BN"]) * batch
    found: list[int] = []
    for waves in (0.9, 1.8):
        split = next((s for s in splits if blocks * s >= waves * sm_count), None)
        if split and (split == 1 or K >= 2 * start["BK"] * split) and split not in found:
            found.append(split)
    return found


def error_rows(shape: tuple[int, ...]) -> np.ndarray:
    """The rows of C whose error a rounded precision's check measures: all, or up to ERROR_ROWS (fewer where N*K
    is large, to bound the reference's cost) spread over M; of every matrix of a stack."""
    B, M, N, K = dims(shape)
    count = min(M, max(8, min(ERROR_ROWS, (1 << 31) // (B * N * K))))
    return np.unique(np.linspace(0, M - 1, count).astype(np.int64))


def tf32_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 as cvt.rna.tf32.f32 does: to 10 mantissa bits, ties away from zero (adding
    half of the last kept bit to the magnitude's bits and clearing the 13 below); NaN and infinities kept."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), rounded, x)


def fma_chain(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B (float32) as an ieee kernel without split-K computes it: each element one chain of fp32 FMAs over k
    in order. The product of two float32 is exact in float64, so a float64 add rounded to float32 is the FMA
    (but for rare double roundings). Stacks broadcast as np.matmul's."""
    A, B = (np.asarray(x, np.float64) for x in (A, B))
    acc = np.zeros(np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1]), np.float32)
    for k in range(A.shape[-1]):
        acc = (acc + A[..., :, k:k + 1] * B[..., k:k + 1, :]).astype(np.float32)
    return acc


def tensor_core_chain(A: np.ndarray, B: np.ndarray, step: int = 16) -> np.ndarray:
    """A @ B (float32) as the tensor cores sum it: each k16 step's products exactly, added to float32 accumulators
    with truncation (round toward zero), the tensor cores' accumulation (NOTES item 32). On float16 operands of
    1000^3 (standard normal, 64 rows) its relative error is 1.58e-6, the fp32 FMA chain's 0.56e-6; the H100's wgmma
    kernels measured 1.23e-6 (lab/wgmma_check.py)."""
    A, B = (np.asarray(x, np.float64) for x in (A, B))
    acc = np.zeros(np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1]), np.float32)
    for k in range(0, A.shape[-1], step):
        exact = acc + A[..., k:k + step] @ B[..., k:k + step, :]
        acc = exact.astype(np.float32)
        away = np.abs(acc) > np.abs(exact)  # rounded away from zero: one step back towards it
        acc[away] = np.nextafter(acc[away], np.float32(0))
    return acc


def error_bound(precision: str, A: np.ndarray, B: np.ndarray, expected: np.ndarray,
                out_dtype: str = "float32") -> float:
    """The relative error a precision's results may have on A @ B: twice that of its reference on the same data.
    3xtf32 promises fp32-level error: its reference is the ieee kernels' chain of fp32 FMAs (``fma_chain``); tf32
    that of cuBLAS with TF32 on: the TF32-rounded operands' error plus the FMA chain's; fp16 and bf16 (float16,
    bfloat16 operands) NumPy's and cuBLAS's: the FMA chain rounded to the operands' dtype where the result has it
    (a sum kept in float16
    errs far more), and where it is float32 the tensor cores' own truncating sum (``tensor_core_chain``), which
    errs up to 3x more than the FMA chain. At least 2**-22 where the reference happens to be nearly exact (K of 1
    or 2); at 3xtf32 at least 2**-20, since it drops the product of the two small parts and what lies beyond them,
    up to about four 2**-22 of a single product (a 1 x 1 x 1 product once erred 2.51e-7, over 2**-22)."""
    chain = tensor_core_chain if precision in ("fp16", "bf16") and out_dtype == "float32" else fma_chain
    error = relative_error(chain(A, B).astype(out_dtype), expected)
    if precision == "tf32":
        rounded = tf32_round(A).astype(np.float64) @ tf32_round(B).astype(np.float64)
        error += relative_error(rounded, expected)
    return max(2 * error, 2.0 ** -20 if precision == "3xtf32" else 2.0 ** -22)


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) @ B.astype(np.float64)


family = MatmulFamily()
