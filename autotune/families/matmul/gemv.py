"""The matmul family's kernel for skinny products: a long matrix times at most about 16 vectors (``GEMV: 1``,
templates/matmul_gemv.py.j2). Geometry, defaults, starts and rules; the template renders it.

A problem is skinny where M or N is at most SKINNY (family argument ``skinny``, which the shape sets: "n" where
N is the small side, else "m"). Then C has a long side L (M where N is small, N where M is) and a short one S, and
the product is a matrix ("the matrix": A where N is small, B where M is; L x K) times S vectors of K ("the
vectors": the other operand). Its cost is reading the matrix once: the kernel is built around that read, 16-byte
loads of the matrix's contiguous dimension, every element read by one thread only, with the vectors (S x K, small)
read through the L1 cache by every thread that needs them. Two forms, as the layout stores the matrix:

- "rows": the matrix's rows run along K (A row-major, or B given transposed). KT adjacent lanes of a warp share a
  row: each reads VEC-wide pieces of its K range at a stride of KT pieces (a warp's load is whole 16-byte pieces of
  KT-piece runs), multiplies them by the S vectors' matching pieces and the KT partial sums meet by warp shuffles.
- "cols": the matrix's rows run along C's long side (B row-major, or A given transposed). A thread reads VEC
  adjacent elements of a k row (KT threads at different k of the same columns are adjacent lanes, so a warp reads
  KT runs of BLOCK / KT * VEC elements), multiplies them by the S vectors' element k and the KT sums meet by
  shuffles.

KW groups of warps of a block (BLOCK / KW threads each) share a K range as well, interleaved KT pieces (rows) or
KT rows (cols) at a time, and their lanes' totals meet in shared memory: more threads per column group inside one
launch. Each thread keeps TL such pieces (rows, or VEC-wide column groups) at once, spread BLOCK / (KT x KW)
apart, and TS of the S vectors (a larger S is taken TS at a time). Where the long side still makes too few blocks
to keep every SM busy, K is split over SPLIT_K blocks (grid y): their sums meet in C by atomic adds (C zeroed
first), or, where C is float16 or bfloat16 (rounded once from the float32 sum), in a float32 workspace that a
second kernel rounds into C, a memset and a second launch that KW spares a short long side.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...core.constraints import MAX_STATIC_SHARED_BYTES, SM_REGISTERS

SKINNY = 16  # M or N up to this: a skinny problem, where the gemv kernel applies
FILL_THREADS = 132 * 2048  # resident threads of an H100 (132 SMs x 2048): the default's target when no GPU is known
MAX_ACCUMULATORS = 128  # per thread, as the tiled kernels' limit
MAX_PRODUCTS = 512  # multiply-adds per unrolled trip: bounds the generated source (compile time grows with it)
MAX_UNROLL = 8  # K steps per trip: each holds a thread's loads in registers until the trip's multiply-adds


def skinny_side(M: int, N: int) -> str | None:
    """Which side of C is small enough for the gemv kernel: "n" where N <= SKINNY (N no larger than M), else "m"
    where M <= SKINNY; None for neither."""
    if N <= SKINNY and N <= M:
        return "n"
    return "m" if M <= SKINNY else None


def is_gemv(p: Mapping[str, Any]) -> bool:
    return p.get("GEMV", 0) == 1


def form(args: Mapping[str, Any]) -> str:
    """'rows' where the matrix's rows run along K, 'cols' where they run along C's long side."""
    layout = args["layout"]
    if args["skinny"] == "n":
        return "rows" if layout[0] == "n" else "cols"
    return "rows" if layout[1] == "t" else "cols"


def vectors_k_major(args: Mapping[str, Any]) -> bool:
    """Whether the vectors' rows run along K (B given transposed where N is small, A row-major where M is): then a
    vector's pieces along K are adjacent and the rows form reads them VEC at a time."""
    layout = args["layout"]
    return layout[1] == "t" if args["skinny"] == "n" else layout[0] == "n"


def long_per_thread(p: Mapping[str, Any], shape_form: str) -> int:
    """Elements of C's long side one thread computes: TL rows, or TL groups of VEC columns."""
    return p["TL"] * (p["VEC"] if shape_form == "cols" else 1)


def k_lanes(p: Mapping[str, Any]) -> int:
    """Threads of a block that share one K range: KT lanes of a warp in each of KW groups."""
    return p["KT"] * p.get("KW", 1)


def long_per_block(p: Mapping[str, Any], shape_form: str) -> int:
    return p["BLOCK"] // k_lanes(p) * long_per_thread(p, shape_form)


def accumulators(p: Mapping[str, Any], shape_form: str) -> int:
    return long_per_thread(p, shape_form) * p["TS"]


def registers(p: Mapping[str, Any], shape_form: str, dtype: str) -> int:
    """About the registers a thread needs: its sums (float32 for 16-bit operands, two words each for float64), the
    values one unrolled trip loads (per K step TL x VEC of the matrix, and TS x VEC (rows) or TS (cols) of the
    vectors; 16-bit ones two to a register) and 32 for indices and addresses."""
    words = 2 if dtype == "float64" else 1
    loads = p["UNROLL_K"] * (p["TL"] * p["VEC"] + p["TS"] * (p["VEC"] if shape_form == "rows" else 1))
    return words * accumulators(p, shape_form) + -(-loads * np.dtype(dtype).itemsize // 4) + 32


def k_step(p: Mapping[str, Any], shape_form: str) -> int:
    """K elements between one thread's consecutive loads: KT x KW pieces of VEC (rows) or rows (cols)."""
    return k_lanes(p) * (p["VEC"] if shape_form == "rows" else 1)


def shared_bytes(p: Mapping[str, Any], shape_form: str, itemsize: int) -> int:
    """The block's shared memory: where KW > 1, a slot per sum of each long-side lane of groups 1 to KW - 1 (the
    sums float64 for float64 operands, else float32)."""
    groups = p.get("KW", 1) - 1
    return groups * (p["BLOCK"] // k_lanes(p)) * accumulators(p, shape_form) * (8 if itemsize == 8 else 4)


def launch_shape(p: Mapping[str, Any], args: Mapping[str, Any], M: int, N: int, K: int) -> tuple[tuple, int, int]:
    """(grid, block, k_chunk) of one matrix: blocks along the long side, K slices of k_chunk (a multiple of a
    thread's K step, so that every slice's vector loads start aligned) along y."""
    shape_form = form(args)
    long = M if args["skinny"] == "n" else N
    step = k_step(p, shape_form)
    per_split = -(-K // p["SPLIT_K"])
    k_chunk = -(-per_split // step) * step
    return (-(-long // long_per_block(p, shape_form)), -(-K // k_chunk)), p["BLOCK"], k_chunk


def workspace(p: Mapping[str, Any], out_dtype: str) -> bool:
    """Whether K slices meet in a float32 workspace (rounded into C by the finish kernel): split K where C has no
    atomic add of its own precision (float16, bfloat16)."""
    return p.get("SPLIT_K", 1) > 1 and out_dtype in ("float16", "bfloat16")


def fill_split(p: Mapping[str, Any], dims: Sequence[int], shape_form: str, side: str, threads: int,
               splits: Sequence[int]) -> int:
    """The smallest K split that gives ``threads`` threads (about the GPU's resident ones: a memory-bound kernel
    needs every SM full of loads in flight), each slice keeping a whole unrolled trip per thread; 1 where the long
    side fills the GPU alone."""
    batch, M, N, K = dims
    long = M if side == "n" else N
    blocks = -(-long // long_per_block(p, shape_form)) * batch
    trip = k_step(p, shape_form) * p["UNROLL_K"]
    found = 1
    for split in sorted(splits):
        if blocks * found * p["BLOCK"] >= threads or K < 2 * trip * split:
            break
        found = split
    return found


def fill_groups(p: Mapping[str, Any], dims: Sequence[int], shape_form: str, side: str, threads: int,
                itemsize: int) -> int:
    """The smallest KW (groups of whole warps, their sums within the static shared memory) that gives ``threads``
    threads in one launch, each thread keeping a whole unrolled trip; the largest that fits where none gives as
    many; 1 where the long side fills the GPU alone."""
    batch, M, N, K = dims
    long = M if side == "n" else N
    found = 1
    for kw in (2, 4, 8, 16):
        group = {**p, "KW": found}
        blocks = -(-long // long_per_block(group, shape_form)) * batch
        if blocks * p["BLOCK"] >= threads:
            break
        wider = {**p, "KW": kw}
        if ((p["BLOCK"] // kw) % 32 or K < 2 * k_step(wider, shape_form) * p["UNROLL_K"]
                or shared_bytes(wider, shape_form, itemsize) > MAX_STATIC_SHARED_BYTES):
            break
        found = kw
    return found


def short_pass(dims: Sequence[int], side: str) -> int:
    """TS that takes C's short side in one pass: the power of two at or above it, at most 16."""
    _, M, N, _ = dims
    short = N if side == "n" else M
    return 1 << max(0, min(4, (short - 1).bit_length()))


def fitted(p: Mapping[str, Any], dims: Sequence[int], dtype: str, args: Mapping[str, Any], threads: int,
           splits: Sequence[int], groups: bool = False) -> dict[str, Any]:
    """``p`` fitted to a problem: TS taking its short side in one pass (halved while the sums or the registers
    exceed their limits), and K split to give ``threads`` threads; with ``groups``, K shared by KW groups of
    warps first (``fill_groups``), split over blocks only for what they leave short."""
    shape_form = form(args)
    found = {**p, "TS": short_pass(dims, args["skinny"])}
    while found["TS"] > 1 and (accumulators(found, shape_form) > MAX_ACCUMULATORS or
                               registers(found, shape_form, dtype) > min(255, SM_REGISTERS // found["BLOCK"])):
        found["TS"] //= 2
    if groups:
        found["KW"] = fill_groups(found, dims, shape_form, args["skinny"], threads, np.dtype(dtype).itemsize)
    found["SPLIT_K"] = fill_split(found, dims, shape_form, args["skinny"], threads, splits)
    return found


def defaults(dims: Sequence[int], dtype: str, args: Mapping[str, Any], splits: Sequence[int],
             threads: int = FILL_THREADS) -> dict[str, Any]:
    """An untuned gemv configuration: 256 threads, 16-byte loads; rows: a warp per row where K gives every lane
    pieces (fewer lanes for a short K), two pieces in flight per lane; cols: 8 lanes per column group (a warp reads
    four runs of 4 x 16 bytes), four rows in flight; fitted to the problem (``fitted``)."""
    K = dims[3]
    vec = 16 // np.dtype(dtype).itemsize
    if form(args) == "rows":
        kt = 1 << max(0, min(5, max(K // vec, 1).bit_length() - 1))
        params = {"BLOCK": 256, "KT": kt, "TL": 1, "TS": 1, "VEC": vec, "UNROLL_K": 2, "SPLIT_K": 1}
    else:
        params = {"BLOCK": 256, "KT": 8, "TL": 1, "TS": 1, "VEC": vec, "UNROLL_K": 4, "SPLIT_K": 1}
    return {"GEMV": 1, **fitted(params, dims, dtype, args, threads, splits)}


def starts(start: Mapping[str, Any], dims: Sequence[int], dtype: str, args: Mapping[str, Any], sm_count: int,
           splits: Sequence[int]) -> list[dict[str, Any]]:
    """A gemv start in the forms that fit this problem: fitted to it (2048 threads per SM to fill) by K split,
    then by KW groups first (one launch where the split would need a zeroed C or a workspace), then as given."""
    found = [fitted(start, dims, dtype, args, sm_count * 2048, splits, groups) for groups in (False, True)]
    found.append(dict(start))
    return [p for i, p in enumerate(found) if p not in found[:i]]


def fits(p: Mapping[str, Any], ctx) -> str | None:
    """Constraint: a thread's accumulators, loads in flight and an unrolled trip's multiply-adds within bounds."""
    if not ctx.args.get("skinny"):
        return None  # the search space's GEMV applies to skinny problems alone
    if p["UNROLL_K"] > MAX_UNROLL:
        return (f"gemv: UNROLL_K={p['UNROLL_K']} K steps in flight per thread exceeds {MAX_UNROLL} (each holds its "
                f"loads in registers)")
    shape_form = form(ctx.args)
    count = accumulators(p, shape_form)
    if count > MAX_ACCUMULATORS:
        return (f"gemv: TL * TS{' * VEC' if shape_form == 'cols' else ''} = {count} accumulators per thread exceeds "
                f"{MAX_ACCUMULATORS}")
    products = count * p["UNROLL_K"] * (p["VEC"] if shape_form == "rows" else 1)
    if products > MAX_PRODUCTS:
        return f"gemv: {products} multiply-adds per unrolled trip exceeds {MAX_PRODUCTS} (UNROLL_K={p['UNROLL_K']})"
    needed, available = registers(p, shape_form, ctx.dtype), min(255, SM_REGISTERS // p["BLOCK"])
    if needed > available:
        return (f"gemv: {p['BLOCK']} threads leave {available} registers per thread, where {count} sums and one "
                f"trip's loads need about {needed}")
    kw = p.get("KW", 1)
    if kw > 1 and (p["BLOCK"] // kw) % 32:
        return f"gemv: KW={kw} groups of {p['BLOCK']} threads are not whole warps (a group's lanes meet by shuffles)"
    shared = shared_bytes(p, shape_form, np.dtype(ctx.dtype).itemsize)
    if shared > MAX_STATIC_SHARED_BYTES:
        return f"gemv: KW={kw} groups' sums take {shared} bytes of shared memory, over {MAX_STATIC_SHARED_BYTES}"
    return None


def template_context(p: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """What templates/matmul_gemv.py.j2 sees besides the parameters."""
    return {"FORM": form(args), "SIDE": args["skinny"], "V_KMAJOR": vectors_k_major(args)}
