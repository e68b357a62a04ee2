"""The one place that touches numba-cuda's private live-variable analysis: ``compute_live_map`` on bit sets.

numba-cuda finds the variables live at each block's entry by iterating two set equations to a fixed point over
Python sets of names: which variables reach a block, then which are live there. A generated matmul has hundreds
of blocks and thousands of variables, so each pass unions sets of thousands of names per block, the liveness
equations take tens of passes to settle, and the whole analysis runs about nine times per compile (each
post-processing of the IR): about a sixth of a large winner's compile. The replacement iterates the same
equations, in the same order, on integers used as bit sets (one bit per variable) and returns the same sets;
the least fixed point of these equations does not depend on how they are computed.

Installed as ``autotune.numba_guard`` describes, over numba-cuda 0.30.4's function only; ``AUTOTUNE_NUMBA_PATCH``
(``autotune.compiler``) can leave it out. It affects every function the process compiles, by speed only.
"""
from __future__ import annotations

from .numba_guard import install_once, replace_in, source_matches

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


class _Bits:
    """Names numbered in order of first sight, and sets of them as integers."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self.decoded: dict[int, frozenset[str]] = {}

    def of(self, names) -> int:
        positions = []
        for name in names:
            position = self.index.get(name)
            if position is None:
                position = self.index[name] = len(self.names)
                self.names.append(name)
            positions.append(position)
        if not positions:
            return 0
        buffer = bytearray(max(positions) // 8 + 1)
        for position in positions:
            buffer[position >> 3] |= 1 << (position & 7)
        return int.from_bytes(buffer, "little")

    def names_of(self, bits: int) -> set[str]:
        """The names of a bit set, as a new set (blocks often share one: it is decoded once)."""
        known = self.decoded.get(bits)
        if known is None:
            known = self.decoded[bits] = frozenset(self._decode(bits))
        return set(known)

    def _decode(self, bits: int):
        for byte_index, byte in enumerate(bits.to_bytes((bits.bit_length() + 7) // 8, "little")):
            while byte:
                low = byte & -byte
                yield self.names[(byte_index << 3) + low.bit_length() - 1]
                byte ^= low


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """The variables live at the entry of each block: numba-cuda's equations and pass order, on bit sets.

    A variable reaches a block if the block or a predecessor that it reaches uses or defines it; it is live at a
    block's entry if the block uses it, or if it is live at a successor's entry, reaches this block's end and is
    not defined here."""
    bits = _Bits()
    uses = {offset: bits.of(names) for offset, names in var_use_map.items()}
    defs = {offset: bits.of(names) for offset, names in var_def_map.items()}
    successors = {offset: [out for out, _ in cfg.successors(offset)] for offset in var_def_map}

    reach: dict = {}
    changed = True
    while changed:
        changed = False
        for offset in var_def_map:
            here = reach.get(offset, 0) | defs[offset] | uses[offset]
            changed |= here != reach.get(offset, 0)
            reach[offset] = here
            for out in successors[offset]:
                grown = reach.get(out, 0) | here
                changed |= grown != reach.get(out, 0)
                reach[out] = grown

    live = {offset: uses[offset] for offset in blocks.keys()}
    predecessors = {offset: [inc for inc, _ in cfg.predecessors(offset)] for offset in live}
    changed = True
    while changed:
        changed = False
        for offset in live:
            for inc in predecessors[offset]:
                grown = live[inc] | (live[offset] & reach.get(inc, 0) & ~defs[inc])
                changed |= grown != live[inc]
                live[inc] = grown
    return {offset: bits.names_of(value) for offset, value in live.items()}


def install() -> bool:
    """Put the bit-set version in place (once per process) where numba-cuda calls it; False where the guard says
    no."""
    return install_once(_state, original_source_matches,
                        lambda: replace_in((_analysis(), _ir_utils()), "compute_live_map", compute_live_map))
