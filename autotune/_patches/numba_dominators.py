"""The one place that touches numba-cuda's private dominator analysis: ``CFGraph._find_dominators_internal`` on
bit sets.

numba-cuda finds each block's dominators (and, run backwards, its post-dominators) by starting every block from
the set of all blocks and intersecting its predecessors' sets until nothing changes. The sets are Python sets, so
each intersection visits every item: for a matmul variant with guarded edges (a thousand blocks) the two runs
per control-flow graph took a sixth of its compile. The replacement runs the same worklist, in the same order,
on integers used as bit sets and returns the same sets.

Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's method only; ``AUTOTUNE_NUMBA_PATCH``
(``autotune.runtime.compiler``) can leave it out. It affects every function the process compiles, by speed only.
"""
from __future__ import annotations

import functools
import operator

from .bitsets import BitSets
from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "752d59ebcc4aa39c16278367e1c7d3a2a9a4943a4217642647f81a7ad3854982"

_state = {"installed": False}


def _cfgraph():
    from numba.cuda.core.controlflow import CFGraph

    return CFGraph


def original_source_matches() -> bool:
    """True when numba-cuda's method is the one the replacement was written against."""
    return source_matches(_cfgraph()._find_dominators_internal, KNOWN_SOURCE_SHA256)


def find_dominators_internal(self, post=False):
    """Each node's dominators (``post``: post-dominators, from the exit points over reversed edges), as sets:
    numba-cuda's worklist on bit sets. Nodes that are only entries (the dummy exit of post-dominators) are sets of
    their own, as in numba-cuda."""
    if post:
        entries = set(self._exit_points)
        preds_table = self._succs
        succs_table = self._preds
    else:
        entries = set([self._entry_point])
        preds_table = self._preds
        succs_table = self._succs

    if not entries:
        raise RuntimeError("no entry points: dominator algorithm cannot be seeded")

    bits = BitSets()
    every = bits.of(self._nodes)
    doms = {e: bits.of([e]) for e in entries}
    todo = []
    for n in self._nodes:
        if n not in entries:
            doms[n] = every
            todo.append(n)

    while todo:
        n = todo.pop()
        if n in entries:
            continue
        new_doms = 1 << bits.index[n]
        preds = preds_table[n]
        if preds:
            new_doms |= functools.reduce(operator.and_, [doms[p] for p in preds])
        if new_doms != doms[n]:
            doms[n] = new_doms
            todo.extend(succs_table[n])
    return {n: bits.items_of(value) for n, value in doms.items()}


def install() -> bool:
    """Put the bit-set version in place (once per process) as the method numba-cuda calls; False where the guard
    says no."""
    return install_once(_state, original_source_matches,
                        lambda: replace_in((_cfgraph(),), "_find_dominators_internal", find_dominators_internal))
