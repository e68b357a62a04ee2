"""The one place that touches numba-cuda's private live-variable analysis: ``compute_live_map`` on bit sets.

numba-cuda finds the variables live at each block's entry by iterating two set equations to a fixed point over
Python sets of names: which variables reach a block, then which are live there. A generated matmul has hundreds
of blocks and thousands of variables, so each pass unions sets of thousands of names per block, the liveness
equations take tens of passes to settle, and the whole analysis runs about nine times per compile (each
post-processing of the IR): about a sixth of a large winner's compile, and most of the minute a matmul variant
with a thousand blocks took. The replacement solves the same equations on integers used as bit sets (one bit per
variable), visiting again only the blocks whose inputs changed, and returns the same sets: the least fixed point
of these equations does not depend on the order they are solved in.

Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's function only; ``AUTOTUNE_NUMBA_PATCH``
(``autotune.runtime.compiler``) can leave it out. It affects every function the process compiles, by speed only.
"""
from __future__ import annotations

from collections import deque

from .bitsets import BitSets
from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "cdb51290c1658e9296610f99cb7c5bd51fbc2610822b3cedab72c4d86b4fc7c2"

_state = {"installed": False}


def _analysis():
    from numba.cuda.core import analysis

    return analysis


def _ir_utils():
    from numba.cuda.core import ir_utils

    return ir_utils


def original_source_matches() -> bool:
    """True when numba-cuda's function is the one the replacement was written against."""
    return source_matches(_analysis().compute_live_map, KNOWN_SOURCE_SHA256)


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """The variables live at the entry of each block: numba-cuda's equations, on bit sets, solved by worklist.

    A variable reaches a block if the block or a predecessor that it reaches uses or defines it; it is live at a
    block's entry if the block uses it, or if it is live at a successor's entry, reaches this block's end and is
    not defined here. numba-cuda sweeps every block until nothing changes, and a sweep in program order carries
    liveness back by one block only, so a graph of a thousand blocks (a matmul with guarded edges) took hundreds
    of sweeps; here only the blocks whose inputs changed are visited again, the first visits in the order that
    settles a chain in one go (forward for reach, backward for liveness)."""
    bits = BitSets()
    uses = {offset: bits.of(names) for offset, names in var_use_map.items()}
    defs = {offset: bits.of(names) for offset, names in var_def_map.items()}
    successors = {offset: [out for out, _ in cfg.successors(offset)] for offset in var_def_map}

    reach = {offset: defs[offset] | uses[offset] for offset in var_def_map}
    for offset, outs in successors.items():
        for out in outs:
            if out not in reach:  # numba-cuda's sweep gives such a block what flows in and never sweeps it
                reach[out] = 0
    _settle(list(var_def_map), successors, lambda offset, out: reach[out] | reach[offset], reach)

    live = {offset: uses[offset] for offset in blocks.keys()}
    predecessors = {offset: [inc for inc, _ in cfg.predecessors(offset)] for offset in live}
    _settle(list(reversed(live)), predecessors,
            lambda offset, inc: live[inc] | (live[offset] & reach.get(inc, 0) & ~defs[inc]), live)
    return {offset: bits.items_of(value) for offset, value in live.items()}


def _settle(order, edges, grown, values) -> None:
    """Visit blocks from a worklist seeded with ``order``: each edge ``offset -> other`` sets ``values[other]`` to
    ``grown(offset, other)`` (which only ever adds bits), and an ``other`` that changed is visited again (if it
    has edges of its own). Ends at the least fixed point, the one the sweeps reach."""
    waiting = deque(order)
    queued = set(order)
    while waiting:
        offset = waiting.popleft()
        queued.discard(offset)
        for other in edges[offset]:
            value = grown(offset, other)
            if value != values[other]:
                values[other] = value
                if other in edges and other not in queued:
                    waiting.append(other)
                    queued.add(other)


def install() -> bool:
    """Put the bit-set version in place (once per process) where numba-cuda calls it; False where the guard says
    no."""
    return install_once(_state, original_source_matches,
                        lambda: replace_in((_analysis(), _ir_utils()), "compute_live_map", compute_live_map))
