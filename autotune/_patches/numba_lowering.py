"""The one place that touches numba-cuda's private lowering: a linear ``Lower._find_singly_assigned_variable``.

numba-cuda's lowering asks, for every variable defined and used in one block only, whether the block assigns it
once; it answers by rescanning all of the block's assignments per variable, which is quadratic in the block's
length. A generated matmul's unrolled K loop is one block of thousands of statements, so this pass alone took
about a quarter of the compile of a large winner, and more for the longest unrolls. The replacement counts each
block's assignment targets once and returns the same set.

It is installed only over the exact function it was written against (``KNOWN_SOURCE_SHA256``, numba-cuda 0.30.4):
any other version keeps its own. ``AUTOTUNE_NUMBA_PATCH`` (``autotune.runtime.compiler``) can leave it out. Installation
is process-wide and affects every kernel this process lowers, autotune's or not, by speed only.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "c3b499f76517288510a5188fbb59bb96f7ca7d619b0cf4245b5f66a8bd90bbe4"

_state = {"installed": False}


def _lowering():
    from numba.cuda import lowering

    return lowering


def original_source_matches() -> bool:
    """True when numba-cuda's method is the one the replacement was written against."""
    return source_matches(_lowering().Lower._find_singly_assigned_variable, KNOWN_SOURCE_SHA256)


def singly_assigned_variables(lower) -> set[str]:
    """Variables defined in one block, used only there, not alloca'd, and assigned once in it: numba-cuda's rule."""
    lowering = _lowering()
    blocks = lower.func_ir.blocks
    if lower.func_ir.func_id.is_generator:
        return set()
    use_defs = lowering.compute_use_defs(blocks)
    alloca_vars = lowering.must_use_alloca(blocks)
    defined_in, used_in = defaultdict(set), defaultdict(set)
    for blk, names in use_defs.defmap.items():
        for name in names:
            defined_in[name].add(blk)
    for blk, names in use_defs.usemap.items():
        for name in names:
            used_in[name].add(blk)
    counts: dict = {}
    found = set()
    for name, where in defined_in.items():
        if name in alloca_vars or len(where) != 1 or used_in.get(name):
            continue
        [blk] = where
        if blk not in counts:
            counts[blk] = Counter(stmt.target.name for stmt in lower.blocks[blk].find_insts(lowering.ir.assign_types))
        if counts[blk][name] == 1:
            found.add(name)
    return found


def _find_singly_assigned_variable(self) -> None:
    """``Lower._find_singly_assigned_variable``, the linear way."""
    self._singly_assigned_vars = singly_assigned_variables(self)
    self._blk_local_varmap = {}


def install() -> bool:
    """Put the linear version in place (once per process); False where the guard says no."""
    return install_once(_state, original_source_matches,
                        lambda: replace_in((_lowering().Lower,), "_find_singly_assigned_variable",
                                           _find_singly_assigned_variable))
