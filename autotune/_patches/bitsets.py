"""Sets of hashable items as Python integers, for the replacements of Numba's set-heavy analyses."""
from __future__ import annotations

import numpy as np


class BitSets:
    """Items numbered in order of first sight, and sets of them as Python integers (bit i: item i): a union or an
    intersection is one operation on machine words, where Python sets visit every item."""

    def __init__(self) -> None:
        self.index: dict = {}
        self.items: list = []
        self.decoded: dict[int, frozenset] = {}

    def of(self, items) -> int:
        """The bit set of ``items``, numbering those not seen before."""
        positions = []
        for item in items:
            position = self.index.get(item)
            if position is None:
                position = self.index[item] = len(self.items)
                self.items.append(item)
            positions.append(position)
        if not positions:
            return 0
        buffer = bytearray(max(positions) // 8 + 1)
        for position in positions:
            buffer[position >> 3] |= 1 << (position & 7)
        return int.from_bytes(buffer, "little")

    def items_of(self, bits: int) -> set:
        """The items of a bit set, as a new set (equal bit sets are common: each is decoded once)."""
        known = self.decoded.get(bits)
        if known is None:
            known = self.decoded[bits] = frozenset(self._decode(bits))
        return set(known)

    def _decode(self, bits: int) -> list:
        if not bits:
            return []
        raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), dtype=np.uint8)
        items = self.items
        return [items[i] for i in np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()]
