"""Helpers for the shape sets a family documents (``KernelFamily.shape_set``): seeded draws of sizes spread evenly on
a log scale, rounded as real sizes are, and an order in which any prefix of a set is spread out too.

A family's coverage set is what ``autotune coverage`` measures and rules are fitted on; its held-out set is drawn
by the same rule with another seed, never tuned, and only benched (``autotune bench --held-out``). Drawing both
from one distribution is what makes the held-out quality an honest forecast for the shapes users bring.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

Shape = tuple[int, ...]
QUANTA = (1, 8, 64)  # a drawn size is rounded to one of these, equally often: odd sizes, multiples of 8 and of 64

SHAPE_SETS = ("coverage", "held-out", "simulator")
COVERAGE_SEED = 0
HELD_OUT_SEED = 1


def log_size(rng: np.random.Generator, low_log2: float, high_log2: float) -> int:
    """A size drawn log-uniformly from [2**low_log2, 2**high_log2], then ``rounded``."""
    return rounded(rng, rng.uniform(low_log2, high_log2))


def rounded(rng: np.random.Generator, log2: float) -> int:
    """2**log2 rounded to a multiple of a quantum drawn from QUANTA, at most two thirds of the size (so that small
    sizes stay odd or multiples of 8), at least 1."""
    value = 2.0 ** log2
    quantum = int(rng.choice(QUANTA))
    while quantum > 1 and quantum * 1.5 > value:
        quantum //= 8
    return max(1, int(round(value / quantum)) * quantum)


def half_octaves(low_log2: int, high_log2: int) -> list[int]:
    """round(2**(k/2)) from 2**low_log2 to 2**high_log2: 64, 91, 128, 181, 256, 362, ..."""
    return [int(round(2.0 ** (k / 2))) for k in range(2 * low_log2, 2 * high_log2 + 1)]


def draw_shapes(draw: Callable[[np.random.Generator], Shape | None], count: int, seed: int,
                exclude: Iterable[Shape] = (), tries: int = 100_000) -> list[Shape]:
    """``count`` distinct shapes from ``draw`` (which returns None to reject a draw) with a generator seeded by
    ``seed``, none of them in ``exclude``; ValueError if the draws keep being rejected."""
    rng = np.random.default_rng(seed)
    seen = set(exclude)
    found: list[Shape] = []
    for _ in range(tries):
        if len(found) == count:
            return found
        shape = draw(rng)
        if shape is not None and shape not in seen:
            seen.add(shape)
            found.append(shape)
    if len(found) == count:
        return found
    raise ValueError(f"drew only {len(found)} of {count} shapes in {tries} tries; the distribution is too narrow")


def spread_order(shapes: list[Shape]) -> list[Shape]:
    """The shapes reordered so that every prefix is spread out: first the one nearest the middle (in log2 of each
    dimension), then each time the one farthest from those taken (sum of |log2| ratios; the earlier one on a
    tie). ``autotune coverage --shapes N`` takes such a prefix."""
    if not shapes:
        return []
    logs = np.array([[math.log2(d) for d in s] for s in shapes])
    middle = logs.mean(axis=0)
    first = int(np.argmin(np.abs(logs - middle).sum(axis=1)))
    taken = [first]
    distance = np.abs(logs - logs[first]).sum(axis=1)
    while len(taken) < len(shapes):
        distance[taken] = -1.0
        nxt = int(np.argmax(distance))
        taken.append(nxt)
        distance = np.minimum(distance, np.abs(logs - logs[nxt]).sum(axis=1))
    return [shapes[i] for i in taken]


def unique(shapes: Iterable[Shape]) -> list[Shape]:
    return list(dict.fromkeys(tuple(int(d) for d in s) for s in shapes))


__all__ = ["log_size", "rounded", "half_octaves", "draw_shapes", "spread_order", "unique", "SHAPE_SETS",
           "COVERAGE_SEED", "HELD_OUT_SEED", "QUANTA"]
