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
    return shared_stages(p) * (p["BM"] + p["BN"]) * p["BK"] * itemsize


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
}

HARDWARE_LIMITS: tuple[dict[str, Any], ...] = (
    {"name": "threads_between", "min": 1, "max": MAX_THREADS_PER_BLOCK},
    {"name": "shared_bytes_at_most", "max": MAX_SHARED_BYTES},
    {"name": "vector_bytes_at_most", "max": 16},
)
