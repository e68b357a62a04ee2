"""Named constraints between parameters, referenced by search-space files.

A search space never holds code: each of its constraints names one predicate here and gives numeric
arguments or parameter names. A predicate returns None when the configuration is acceptable and a sentence
saying what is wrong otherwise. Hardware limits (HARDWARE_LIMITS) are applied to every space, including a
user's own file, because a configuration breaking them cannot launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED_BYTES = 48 * 1024  # more is dynamic shared memory, opted into at launch
MAX_SHARED_BYTES = 227 * 1024  # the most one block may opt into (sm_90); a GPU with less fails the launch


@dataclass(frozen=True)
class Context:
    """What a predicate may look at besides the parameters."""

    dtype: str
    family: Mapping[str, Any]

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


def matmul_threads(p: Mapping[str, Any]) -> int:
    if p.get("strategy", "tiled") != "tiled":
        return 256
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def matmul_shared_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    if p.get("strategy", "tiled") != "tiled":
        return 2 * 16 * 16 * itemsize
    return shared_stages(p) * (p["BM"] + p["BN"] + 2 * shared_pad(p)) * p["BK"] * itemsize


def shared_pad(p: Mapping[str, Any]) -> int:
    """Elements added to each k row of the shared tiles. With MMA the lanes of a fragment load read 8
    consecutive elements from each of 4 k rows; rows 4 doubles (32 bytes) apart from a multiple of 128 bytes
    fall on distinct banks, where unpadded ones would conflict 4 ways."""
    return 4 if p.get("MMA", 0) else 0


def shared_stages(p: Mapping[str, Any]) -> int:
    """Shared A and B tiles a tiled matmul keeps: the cp.async pipeline's depth, else two with PREFETCH."""
    return p.get("ASYNC_STAGES", 0) or (2 if p.get("PREFETCH", 1) else 1)


def reduce_shared_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    return (2 * p["BLOCK"] + 1) * itemsize


def threads(p: Mapping[str, Any]) -> int:
    return p["BLOCK"] if "BLOCK" in p else matmul_threads(p)


def shared_bytes(p: Mapping[str, Any], itemsize: int) -> int:
    return reduce_shared_bytes(p, itemsize) if "BLOCK" in p else matmul_shared_bytes(p, itemsize)


def _divides(p, ctx, args):
    small, big = args
    if p[big] % p[small]:
        return f"{small}={p[small]} must divide {big}={p[big]}"
    return None


def _threads_between(p, ctx, min, max):
    n = threads(p)
    if not min <= n <= max:
        return f"threads per block = {n} (BM/TM * BN/TN) must lie in [{min}, {max}]"
    return None


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


def _vector_bytes_at_most(p, ctx, max):
    if p["VEC"] * ctx.itemsize > max:
        return f"VEC={p['VEC']} x {ctx.itemsize}-byte {ctx.dtype} exceeds a {max}-byte vector access"
    return None


def _accumulators_at_most(p, ctx, max):
    if p["TM"] * p["TN"] > max:
        return f"TM*TN = {p['TM'] * p['TN']} accumulators per thread exceeds {max}"
    return None


def _accumulator_bytes_at_most(p, ctx, max):
    n = p["TM"] * p["TN"] * ctx.itemsize
    if n > max:
        return f"TM*TN = {p['TM'] * p['TN']} {ctx.dtype} accumulators are {n} bytes per thread, over {max}"
    return None


def _mma_fits(p, ctx):
    k = p["MMA"]
    if not k:
        return None
    if ctx.dtype != "float64":
        return f"MMA={k}: the mma.sync m16n8k{k} used is float64's (fp64 tensor cores), not {ctx.dtype}'s"
    if p["TM"] % 2 or p["TN"] % 2:
        return f"MMA={k}: TM={p['TM']} and TN={p['TN']} must be even (a lane holds 2 x 2 results of each mma)"
    if (p["BM"] // p["TM"]) % 8 or (p["BN"] // p["TN"]) % 4:
        return (f"MMA={k}: a warp's 8 x 4 lanes must tile the BM/TM x BN/TN = {p['BM'] // p['TM']} x "
                f"{p['BN'] // p['TN']} thread grid")
    if p["UNROLL_K"] % k:
        return f"MMA={k} must divide UNROLL_K={p['UNROLL_K']} (whole mma steps per unrolled trip)"
    if p["ASYNC_STAGES"]:
        return (f"MMA={k} with ASYNC_STAGES={p['ASYNC_STAGES']}: mma variants fed by the cp.async pipeline faulted "
                "now and then on the H200 (illegal address, cause not found; benchmarks/NOTES.md item 19)")
    n, blocks = matmul_threads(p), max(p["MIN_BLOCKS"], 1)
    registers, needed = min(255, 65536 // (n * blocks)), 2 * p["TM"] * p["TN"] + 64
    if registers < needed:
        return (f"MMA={k}: {n} threads x {blocks} blocks per SM leave {registers} registers per thread, where "
                f"{p['TM'] * p['TN']} fp64 accumulators and the mma fragments need about {needed} (on the H200 such "
                f"variants failed to compile or spilled and computed wrong results; benchmarks/NOTES.md item 19)")
    return None


def _split_add_fits(p, ctx):
    if p["SPLIT_ADD"] != "vector":
        return None
    if ctx.dtype != "float32":
        return f"SPLIT_ADD=vector: red.global.add has vectors of float32 only, not {ctx.dtype}"
    if p["VEC"] == 1 or p["TN"] % 2:
        return f"SPLIT_ADD=vector needs a thread's columns in vectors (VEC={p['VEC']}, TN={p['TN']})"
    return None


def _shared_bytes_at_most(p, ctx, max):
    n = shared_bytes(p, ctx.itemsize)
    if n > max:
        return f"shared memory {n} bytes per block exceeds {max}"
    return None


PREDICATES: dict[str, tuple[Callable[..., str | None], frozenset[str]]] = {
    # name: (predicate, parameters it reads; the constraint is skipped where one of them does not apply)
    "divides": (_divides, frozenset()),
    "threads_between": (_threads_between, frozenset()),
    "tile_loads_even": (_tile_loads_even, frozenset({"BM", "BN", "BK", "TM", "TN", "VEC"})),
    "warp_grid_fits": (_warp_grid_fits, frozenset({"BM", "BN", "TM", "TN", "WARP_ROWS"})),
    "vector_bytes_at_most": (_vector_bytes_at_most, frozenset({"VEC"})),
    "accumulators_at_most": (_accumulators_at_most, frozenset({"TM", "TN"})),
    "accumulator_bytes_at_most": (_accumulator_bytes_at_most, frozenset({"TM", "TN"})),
    "shared_bytes_at_most": (_shared_bytes_at_most, frozenset()),
    "split_add_fits": (_split_add_fits, frozenset({"SPLIT_ADD", "VEC", "TN"})),
    "mma_fits": (_mma_fits, frozenset({"MMA", "BM", "BN", "TM", "TN", "UNROLL_K", "MIN_BLOCKS", "ASYNC_STAGES"})),
}

HARDWARE_LIMITS: tuple[dict[str, Any], ...] = (
    {"name": "threads_between", "min": 1, "max": MAX_THREADS_PER_BLOCK},
    {"name": "shared_bytes_at_most", "max": MAX_SHARED_BYTES},
    {"name": "vector_bytes_at_most", "max": 16},
)
