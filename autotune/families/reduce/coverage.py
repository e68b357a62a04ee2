"""The reduction family's shape sets (``ReduceFamily.shape_set``): the coverage set that ``autotune coverage``
measures and rules are fitted on, and the held-out set that only the bench sees; one per axis form.

**The distribution**: the number of elements is 2**t with t uniform in [10, 28] (1 Ki to 256 Mi elements, at most
1 GiB of float32), split over the dimensions log-uniformly: a whole-array reduction is one size; a 2-D shape
(axis 0 or 1) gives rows the fraction u of t (u uniform in [0, 1]) and columns the rest; a 3-D shape (axis -2, the
middle of (outer, R, inner)) splits t at two uniform cuts. Each dimension is rounded to a multiple of 1, 8 or 64
chosen with equal odds (``core/shapesets.rounded``; small ones stay odd or multiples of 8). A draw with a dimension
below 2 or fewer than 512 elements is refused.

**The coverage set**: designed shapes (whole arrays: ``half_octaves(10, 28)``; 2-D: squares 2**5..2**14, 64 rows or
columns of 2**10, 2**14 and 2**18, and (tokens, hidden) activations of models, tokens 512 and 8192 by hidden 768,
1024, 4096, 5120 and 8192; 3-D: (64, 1024, 1024), (8, 4096, 512) and (1024, 64, 256)), then draws with seed 0:
40 of whole arrays, 100 of 2-D and of 3-D shapes: a rule fitted on a 2-D or 3-D set still chose better the more
shapes it held at 40 draws, a whole array's no longer did (benchmarks/NOTES.md item 64), and a draw costs seconds of
one GPU. The first 40 draws of each are those the set held before it grew: a matrix measured then is part of it.
**The held-out set**: 32 draws with seed 1, none in the coverage set. Both are put in ``spread_order``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ...core.shapesets import COVERAGE_SEED, HELD_OUT_SEED, draw_shapes, half_octaves, rounded, spread_order, unique

MIN_LOG2, MAX_LOG2 = 10, 28
HIDDEN = (768, 1024, 4096, 5120, 8192)
DRAWS = {1: 40, 2: 100, 3: 100}  # per rank (the module docstring says why)
HELD_OUT = 32
SIMULATOR = {1: ((4099,), (1000,), (70,)), 2: ((33, 31), (130, 7), (5, 200)), 3: ((3, 33, 31), (2, 40, 9), (5, 6, 70))}


def rank_of(args: Mapping[str, Any]) -> int:
    axis = args.get("axis")
    return 1 if axis is None else 3 if axis == -2 else 2


def draw(rng, rank: int) -> tuple[int, ...]:
    t = rng.uniform(MIN_LOG2, MAX_LOG2)
    if rank == 1:
        return (rounded(rng, t),)
    if rank == 2:
        u = rng.uniform(0, 1)
        return rounded(rng, t * u), rounded(rng, t * (1 - u))
    a, b = sorted(rng.uniform(0, 1, size=2))
    return rounded(rng, t * a), rounded(rng, t * (b - a)), rounded(rng, t * (1 - b))


def fits(shape: tuple[int, ...]) -> bool:
    return 2 ** MIN_LOG2 // 2 <= math.prod(shape) <= 2 ** MAX_LOG2 and min(shape) >= 2


def designed(rank: int) -> list[tuple[int, ...]]:
    if rank == 1:
        return [(n,) for n in half_octaves(MIN_LOG2, MAX_LOG2)]
    if rank == 2:
        squares = [(2 ** k, 2 ** k) for k in range(5, 15)]
        thin = [s for k in (10, 14, 18) for s in ((64, 2 ** k), (2 ** k, 64))]
        models = [(tokens, hidden) for tokens in (512, 8192) for hidden in HIDDEN]
        return unique(squares + thin + models)
    return [(64, 1024, 1024), (8, 4096, 512), (1024, 64, 256)]


def shape_set(name: str, dtype: str, args: Mapping[str, Any]) -> list[tuple[int, ...]]:
    rank = rank_of(args)
    if name == "simulator":
        return list(SIMULATOR[rank])
    accept = lambda rng: (lambda s: s if fits(s) else None)(draw(rng, rank))  # noqa: E731
    fixed = [s for s in designed(rank) if fits(s)]
    coverage = unique(fixed + draw_shapes(accept, DRAWS[rank], COVERAGE_SEED, exclude=fixed))
    if name == "coverage":
        return spread_order(coverage)
    if name == "held-out":
        return spread_order(draw_shapes(accept, HELD_OUT, HELD_OUT_SEED, exclude=coverage))
    raise ValueError(f"reduce has the shape sets coverage, held-out and simulator, not {name!r}")


def rule_text() -> str:
    return __doc__.split("\n\n", 1)[1].strip()
