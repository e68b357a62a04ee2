"""What a matmul configuration implies: which kernel renders it, its threads, shared memory, accumulator and
kernel arguments. Shared by the family (constraints, templates), the kernel object (launches) and the tuner."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...core.constraints import MAX_SHARED_BYTES, MAX_STATIC_SHARED_BYTES
from ...core.dtypes import HALF
from . import gemv

LAYOUTS = ("nn", "tn", "nt", "tt")
PRECISIONS = ("ieee", "3xtf32", "tf32")
MMA_TILES = {"fp64": "dmma_tile", "tf32": "tf32_tile", "3xtf32": "tf32x3_tile", "fp16": "f16_tile",
             "bf16": "bf16_tile"}
WGMMA_ALIGN = 1024  # bytes: wgmma's 128-byte swizzle repeats every 8 rows of 128 bytes, from such a boundary
CP_ASYNC_STAGES = (2, 3, 4)  # the cp.async pipelines' depths (their waits are counted for these)
CP_ASYNC_WGMMA_STAGES = (3, 4)  # the cp.async-fed wgmma kernel's: one stage is read by the running wgmma
TMA_STAGES = (3, 4, 6, 8)  # the TMA-fed wgmma kernel's, its producer behind mbarriers
MIN_C_COLUMNS = 16  # the narrowest piece of C a persistent variant stages: two of the wgmma's 8-column blocks
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


def schedule(p: Mapping[str, Any]) -> str:
    """Which tiles a block computes (SCHEDULE; templates/matmul_wgmma.py.j2): "tile", one, the grid covering C;
    "persistent", a TMA variant's block per SM walking C's tiles; "stream_k", a TMA variant's block per SM taking an
    even share of all tiles' K steps."""
    return p.get("SCHEDULE", "tile") if is_tma(p) else "tile"


def is_persistent(p: Mapping[str, Any]) -> bool:
    """A variant whose blocks, one per SM, walk the work (SCHEDULE persistent or stream_k): a grid of at most one
    block per SM, C's tile (or a part of its columns at a time, c_columns) beside the stages."""
    return schedule(p) != "tile"


def is_pair(p: Mapping[str, Any]) -> bool:
    """A TMA variant of CLUSTER 2: blocks in clusters of two, side by side along N, each copying half of A's rows of
    their tiles for both (templates/matmul_wgmma.py.j2)."""
    return is_tma(p) and p.get("CLUSTER", 1) == 2


def reads_rounded_copies(p: Mapping[str, Any]) -> bool:
    """A TF32 wgmma variant fed by cp.async or the TMA (ASYNC_STAGES > 0, precision tf32): its operands are first
    rounded to TF32 into K-major copies (autotune/families/matmul/tf32_copies.py), which float16's kernel then
    multiplies from shared memory (templates/matmul_wgmma.py.j2 with TF32). With ASYNC_STAGES 0 they are rounded on
    their way through registers (templates/matmul_wgmma_tf32.py.j2)."""
    return is_wgmma_tf32(p) and p.get("ASYNC_STAGES", 0) > 0


def matmul_threads(p: Mapping[str, Any]) -> int:
    if gemv.is_gemv(p):
        return p["BLOCK"]
    if not is_tiled(p):
        return 256
    if is_wgmma(p):
        return 128 * (p["BM"] // 64 + is_tma(p))  # a warpgroup per 64 rows, and the TMA's producer
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def matmul_shared_bytes(p: Mapping[str, Any], itemsize: int, out_itemsize: int | None = None) -> int:
    """Shared memory of a block; ``out_itemsize``: bytes of an element of C (the operands' by default), which a
    persistent variant's tile of C beside the stages takes."""
    if gemv.is_gemv(p):
        return 0  # its groups' sums, static and bounded by gemv.fits, which knows the layout's form
    if not is_tiled(p):
        return 2 * 16 * 16 * itemsize
    if is_wgmma(p):
        return wgmma_shared_bytes(p, itemsize, out_itemsize or itemsize)
    return shared_stages(p) * (a_tile_elements(p, itemsize) + p["BK"] * (p["BN"] + shared_pad(p, itemsize))) * itemsize


def wgmma_shared_bytes(p: Mapping[str, Any], itemsize: int, out_itemsize: int) -> int:
    """The operand tiles (float16 and TF32 read from rounded copies: ASYNC_STAGES of A and B; TF32 otherwise: B
    alone, two buffers of a big and a small part at 3xtf32, three of one part at tf32, whichever is larger, as this
    does not know the precision) or, after them in the same memory, the BM x (BN + 8) tile of C (float32 at most);
    and up to 1024 bytes to the first boundary of the swizzle's atoms. A persistent variant keeps C's tile (of
    ``out_itemsize`` elements), or the c_columns of it that fit (at least MIN_C_COLUMNS), beside the stages, which
    the producer fills for the next tile meanwhile."""
    operands = wgmma_operand_bytes(p, itemsize)
    if is_persistent(p):
        columns = c_columns(p, itemsize, out_itemsize) or MIN_C_COLUMNS  # none fits: the least it needs
        return operands + p["BM"] * (columns + 8) * out_itemsize + WGMMA_ALIGN
    return max(operands, p["BM"] * (p["BN"] + 8) * 4) + WGMMA_ALIGN


def wgmma_operand_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    """Bytes of a wgmma variant's operand tiles in shared memory (see wgmma_shared_bytes)."""
    if is_wgmma_tf32(p) and not reads_rounded_copies(p):
        return 2 * 2 * p["BN"] * p["BK"] * itemsize
    return p["ASYNC_STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * itemsize


def c_columns(p: Mapping[str, Any], itemsize: int, out_itemsize: int) -> int:
    """Columns of C's tile that a persistent variant stages at once beside its operand stages
    (templates/_wgmma.j2 store_c): all BN where the BM x (BN + 8) tile fits the block's shared memory beside them,
    else the widest half, quarter, ... that does, at least MIN_C_COLUMNS; 0 where none does. C then leaves a part of
    its columns after another, so that the deepest pipeline of the widest tiles keeps its stages: 128 x 256 tiles
    take 192 KB in 4 stages, which leaves no room for their 66 KB of C, and 4 stages ran about 1.25x as fast as 3."""
    room = MAX_SHARED_BYTES - static_shared_bytes(p) - WGMMA_ALIGN - wgmma_operand_bytes(p, itemsize)
    columns = p["BN"]
    while columns >= MIN_C_COLUMNS:
        if p["BM"] * (columns + 8) * out_itemsize <= room:
            return columns
        columns //= 2
    return 0


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


def static_shared_bytes(p: Mapping[str, Any]) -> int:
    """Bytes the TMA kernel declares statically: its mbarriers (a full and an empty one, 16 bytes, a stage) and
    Stream-K's answer word, rounded up to 128 bytes. The driver counts them against the same per-block limit as
    the dynamic bytes a launch asks for."""
    return -(-(16 * p.get("ASYNC_STAGES", 0) + 16) // 128) * 128


def shared_stages(p: Mapping[str, Any]) -> int:
    """Shared A and B tiles a tiled matmul keeps: the cp.async pipeline's depth, else two with PREFETCH."""
    return p.get("ASYNC_STAGES", 0) or (2 if p.get("PREFETCH", 1) else 1)


def dynamic_shared_bytes(params: Mapping[str, Any], dtype: str, out_dtype: str | None = None) -> int:
    """Bytes of dynamic shared memory a launch of this variant needs: its tiles, where they exceed what a
    kernel may declare statically; 0 otherwise. ``out_dtype``: C's (the operands' by default)."""
    if not is_tiled(params):
        return 0
    n = matmul_shared_bytes(params, np.dtype(dtype).itemsize, np.dtype(out_dtype or dtype).itemsize)
    return n if n > MAX_STATIC_SHARED_BYTES or is_wgmma(params) else 0


def split_add(params: Mapping[str, Any]) -> str | None:
    """How the K slices of a variant meet in C (its SPLIT_ADD, default atomic), or None where K is not split."""
    if params.get("SPLIT_K", 1) == 1:
        return None
    return params.get("SPLIT_ADD", "atomic")


BATCH_ARGS = ("inner", "a_outer", "a_inner", "b_outer", "b_inner", "c_step")  # templates/_batch.j2
PERSISTENT_BATCH_ARGS = BATCH_ARGS + ("count",)  # a persistent stack's grid has no row per matrix: it counts them


def kernel_args(params: Mapping[str, Any], args: Mapping[str, Any] | None = None,
                dtype: str | None = None) -> tuple[str, ...]:
    """The arguments a variant's kernel takes: only those it uses. The seeds take the operands and their shape;
    tiled variants the K chunk of a slice too, the workspace and tile counters where the last block sums the K
    slices, and the flags that say whether each operand's vectors are aligned where they are read; the gemv kernel
    likewise (``args``, the family arguments, say its form and ``dtype`` its workspace). A batched kernel (``args``
    batch "strided") takes the stack's geometry last (BATCH_ARGS), and a persistent one the count of its matrices
    (its grid walks the tiles of all of them)."""
    if not (args and args.get("batch")):
        return _kernel_args(params, args, dtype)
    return _kernel_args(params, args, dtype) + (PERSISTENT_BATCH_ARGS if is_persistent(params) else BATCH_ARGS)


def _kernel_args(params: Mapping[str, Any], args: Mapping[str, Any] | None, dtype: str | None) -> tuple[str, ...]:
    if gemv.is_gemv(params):
        return gemv_args(params, args or {}, dtype)
    names = ["A", "B", "C"]
    if not is_tiled(params):
        return tuple(names + ["M", "N", "K", "lda", "ldb", "ldc"])
    if is_wgmma(params):
        split = split_add(params) == "last_block"  # its workspace and tile counters, and the K chunk of a slice
        names += ["W", "counters"] if split or schedule(params) == "stream_k" else []
        names += ["maps"] if is_tma(params) else []  # the tensor maps of A and B (the simulator reads A and B)
        names += ["M", "N", "K", "lda", "ldb", "ldc"] + (["k_chunk"] if split else [])
        return tuple(names + (["vec_c"] if is_tma(params) else ["vec_a", "vec_b", "vec_c"]))
    if split_add(params) == "last_block":
        names += ["W", "counters"]
    names += ["M", "N", "K", "lda", "ldb", "ldc", "k_chunk"]
    if params["EDGE"] == "interior":  # one flag, vec_ok, stands for all three
        names += ["vec_a", "vec_b", "vec_c"]
    else:
        vec = params["VEC"]
        mma = params.get("MMA", 0)
        names += ["vec_a", "vec_b"] if vec > 1 else []
        vc = vector_width(vec, 2 if mma else params["TN"])
        names += ["vec_c"] if vc > 1 and split_add(params) != "atomic" else []
    return tuple(names)


def gemv_args(params: Mapping[str, Any], args: Mapping[str, Any], dtype: str | None) -> tuple[str, ...]:
    """The gemv kernel's arguments: the float32 workspace W in C's place where K slices meet there; the vectors'
    alignment flag only where they are read VEC at a time (rows form, K-major vectors)."""
    out = args.get("out_dtype") or dtype
    names = ["A", "B", "W" if gemv.workspace(params, out) else "C", "M", "N", "K", "lda", "ldb", "ldc", "k_chunk"]
    if params["VEC"] > 1:
        matrix, vectors = ("vec_a", "vec_b") if args["skinny"] == "n" else ("vec_b", "vec_a")
        rows_kmajor = gemv.form(args) == "rows" and gemv.vectors_k_major(args)
        names += sorted([matrix] + ([vectors] if rows_kmajor else []))
    return tuple(names)


def vector_width(vec: int, extent: int) -> int:
    """Widest access of at most ``vec`` elements that divides ``extent``."""
    return next(w for w in (4, 2, 1) if w <= vec and extent % w == 0)
