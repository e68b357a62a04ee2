"""The matmul family's own constraint predicates, named in its search space (``constraints:``)."""
from __future__ import annotations

import numpy as np

from ...core.constraints import MAX_SHARED_BYTES, SM_REGISTERS, Predicate
from ...core.dtypes import HALF
from . import gemv
from .config import (
    CP_ASYNC_STAGES,
    CP_ASYNC_WGMMA_STAGES,
    MIN_C_COLUMNS,
    TMA_STAGES,
    static_shared_bytes,
    accumulator_dtype,
    c_columns,
    is_tma,
    is_wgmma,
    matmul_shared_bytes,
    matmul_threads,
    reads_rounded_copies,
    split_add,
)


def spelled(values, last: str = "or") -> str:
    """Allowed values as a message names them: "2, 3 or 4"."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


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
    precision = ctx.args.get("precision", "ieee")
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
    registers, needed = min(255, SM_REGISTERS // (n * blocks)), words * accumulators + 64
    if registers < needed:
        return (f"MMA={k}: {n} threads x {blocks} blocks per SM leave {registers} registers per thread, where "
                f"{accumulators} {ctx.dtype} accumulators and the mma fragments need about {needed} (such "
                f"variants fail to compile, or spill and compute wrong results)")
    return None


def _pipeline_depth_fits(p, ctx):
    """The deeper pipelines (ASYNC_STAGES 6 and 8) are the TMA-fed wgmma kernel's, whose producer keeps that many
    stages in flight behind mbarriers; the cp.async kernels wait on commit groups counted for 2 to 4."""
    if p["ASYNC_STAGES"] > max(CP_ASYNC_STAGES) and not (is_wgmma(p) and is_tma(p)):
        return (f"ASYNC_STAGES={p['ASYNC_STAGES']} is a depth of the TMA-fed wgmma kernel (WGMMA=1, TMA=1); the "
                f"cp.async pipelines take {spelled(CP_ASYNC_STAGES)}")
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
    precision = ctx.args.get("precision", "ieee")
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
    available = min(255, SM_REGISTERS // threads)
    if needed > available:
        return (f"WGMMA=1 at {precision}: {threads} threads leave {available} registers per thread, "
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
    if p["ASYNC_STAGES"] not in (TMA_STAGES if is_tma(p) else CP_ASYNC_WGMMA_STAGES):
        deeper = [s for s in TMA_STAGES if s not in CP_ASYNC_WGMMA_STAGES]
        allowed = spelled(TMA_STAGES) if is_tma(p) else \
            f"{spelled(CP_ASYNC_WGMMA_STAGES)} ({spelled(deeper, 'and')} with TMA=1)"
        return (f"WGMMA=1 keeps one tile's multiply running while the next is copied: ASYNC_STAGES must be "
                f"{allowed}, not {p['ASYNC_STAGES']}")
    registers = SM_REGISTERS // matmul_threads(p)
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


def _wgmma_split_fits(p, ctx):
    """A wgmma kernel's K slices meet in a float32 workspace, summed in slice order by each tile's last block
    (templates/_wgmma.j2 gather_slices), in the cp.async and TMA kernels (matmul_wgmma.py.j2)."""
    if not is_wgmma(p):
        return None
    if p["SPLIT_ADD"] != "last_block":
        return (f"WGMMA=1 splits K with SPLIT_ADD=last_block only (its slices' partial tiles meet in a float32 "
                f"workspace), not {p['SPLIT_ADD']}")
    if not p["ASYNC_STAGES"]:
        return "WGMMA=1 splits K in the cp.async and TMA kernels (ASYNC_STAGES 3 or more), not with A from registers"
    return None


def _schedule_fits(p, ctx):
    """A block per SM (SCHEDULE persistent, stream_k) walks the work (persistent: the tiles of every matrix of a
    stack; stream_k: the K steps of one matrix's tiles), K unsplit by SPLIT_K (Stream-K splits it its own way), C's
    tile, or at least MIN_C_COLUMNS of its columns at a time, beside the stages in
    shared memory, with the kernel's static shared arrays."""
    if p["SCHEDULE"] == "tile":
        return None
    if p["SPLIT_K"] != 1:
        return f"SCHEDULE={p['SCHEDULE']} takes K unsplit by SPLIT_K: SPLIT_K must be 1, not {p['SPLIT_K']}"
    if ctx.args.get("batch") and p["SCHEDULE"] == "stream_k":
        return "SCHEDULE=stream_k shares the K steps of one matrix's tiles: a batched problem takes tile or persistent"
    out = np.dtype(ctx.args.get("out_dtype") or ctx.dtype).itemsize
    if not c_columns(p, ctx.itemsize, out):
        need = matmul_shared_bytes(p, ctx.itemsize, out) + static_shared_bytes(p)
        return (f"SCHEDULE={p['SCHEDULE']} keeps {MIN_C_COLUMNS} or more of C's columns beside the "
                f"{p['ASYNC_STAGES']} stages of {p['BM']} x {p['BN']} tiles: {need} bytes of shared memory exceed "
                f"{MAX_SHARED_BYTES}")
    return None



def _cluster_fits(p, ctx):
    """CLUSTER 2 (templates/matmul_wgmma.py.j2): two blocks of one tile schedule, adjacent along N, share A's rows
    through multicast copies of half of them each: A read K-major (its rows along K, as stored in layouts nn and
    nt), K unsplit, 16-bit operands (not TF32's rounded copies)."""
    if p["CLUSTER"] == 1:
        return None
    if p["SCHEDULE"] != "tile":
        return f"CLUSTER=2 pairs blocks of one tile each: SCHEDULE must be tile, not {p['SCHEDULE']}"
    if p["SPLIT_K"] != 1:
        return f"CLUSTER=2 takes K unsplit: SPLIT_K must be 1, not {p['SPLIT_K']}"
    if ctx.args.get("layout", "nn")[0] == "t":
        return "CLUSTER=2 shares A's rows along K: A must be stored as is (layout nn or nt), not transposed"
    if reads_rounded_copies(p):
        return "CLUSTER=2 multicasts 16-bit operands, not TF32's rounded copies"
    return None


def _split_add_fits(p, ctx):
    if ctx.dtype in HALF and split_add(p) == "atomic" and ctx.args.get("out_dtype") in (None, "input"):
        return f"SPLIT_ADD=atomic: {ctx.dtype} results are rounded once, from the float32 sum: use last_block"
    if p["SPLIT_ADD"] != "vector":
        return None
    if ctx.dtype != "float32":
        return f"SPLIT_ADD=vector: red.global.add has vectors of float32 only, not {ctx.dtype}"
    if p["VEC"] == 1 or p["TN"] % 2:
        return f"SPLIT_ADD=vector needs a thread's columns in vectors (VEC={p['VEC']}, TN={p['TN']})"
    return None


def _batch_copies_fit(p, ctx):
    """A batched problem's kernels index each operand's matrices from one flat array, or (TMA) through tensor maps
    of the whole stack: not those multiplying copies of one matrix rounded first (tf32 wgmma on copies)."""
    if ctx.args.get("batch") and reads_rounded_copies(p):
        return ("WGMMA=1 with ASYNC_STAGES > 0 at tf32 multiplies copies of one matrix rounded first: a batched "
                "problem takes ASYNC_STAGES 0 (rounded on the way through registers) or mma.sync")
    return None


PREDICATES = {
    "batch_copies_fit": Predicate(_batch_copies_fit, frozenset({"WGMMA"})),
    "gemv_fits": Predicate(gemv.fits, frozenset({"BLOCK", "KT", "KW", "TL", "TS", "VEC", "UNROLL_K"})),
    "tile_loads_even": Predicate(_tile_loads_even, frozenset({"BM", "BN", "BK", "TM", "TN", "VEC"})),
    "warp_grid_fits": Predicate(_warp_grid_fits, frozenset({"BM", "BN", "TM", "TN", "WARP_ROWS"})),
    "accumulators_at_most": Predicate(_accumulators_at_most, frozenset({"TM", "TN"}), ("max",)),
    "accumulator_bytes_at_most": Predicate(_accumulator_bytes_at_most, frozenset({"TM", "TN"}), ("max",)),
    "split_add_fits": Predicate(_split_add_fits, frozenset({"SPLIT_ADD", "SPLIT_K", "VEC", "TN"})),
    "schedule_fits": Predicate(_schedule_fits, frozenset({"SCHEDULE", "SPLIT_K", "BM", "BN", "BK", "ASYNC_STAGES"})),
    "wgmma_split_fits": Predicate(_wgmma_split_fits, frozenset({"WGMMA", "SPLIT_ADD", "ASYNC_STAGES"})),
    "wgmma_fits": Predicate(_wgmma_fits, frozenset({"BM", "BN", "BK"})),
    "cluster_fits": Predicate(_cluster_fits, frozenset({"CLUSTER", "SCHEDULE", "SPLIT_K"})),
    # MMA too (it applies wherever ASYNC_STAGES does): a rule on ASYNC_STAGES alone would be applied to each value
    # by itself when a tuner's space is narrowed to a dtype (SearchSpace.for_dtype), dropping 6 and 8 everywhere
    "pipeline_depth_fits": Predicate(_pipeline_depth_fits, frozenset({"ASYNC_STAGES", "MMA"})),
    "mma_fits": Predicate(_mma_fits, frozenset({"MMA", "BM", "BN", "TM", "TN", "UNROLL_K", "MIN_BLOCKS",
                                                "ASYNC_STAGES"})),
}
