"""The one place that touches numba-cuda's private scope repair: ``fixup_var_define_in_scope`` once per scope.

After inlining closures, numba-cuda makes sure every variable the function uses is defined in the scope of every
block: it lists the used variables once, then, for each block, checks each of them against the block's scope.
The blocks of a function nearly always share one scope, so that check runs blocks x variables times where one
pass per distinct scope gives the same definitions in the same order (a variable defined in a scope by the
first of its blocks is found there by all the others): for a large matmul winner, hundreds of blocks times
thousands of variables, about 7% of its compile.

Installed as ``autotune._patches.guard`` describes, over numba-cuda 0.30.4's function only; ``AUTOTUNE_NUMBA_PATCH``
(``autotune.runtime.compiler``) can leave it out. It affects every function the process compiles, by speed only.
"""
from __future__ import annotations

from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "19e4d8d64a2fb063a62c4760097e977c81f84b5782e3dadebe2b10bee844536c"

_state = {"installed": False}


def _ir_utils():
    from numba.cuda.core import ir_utils

    return ir_utils


def _untyped_passes():
    from numba.cuda.core import untyped_passes

    return untyped_passes


def original_source_matches() -> bool:
    """True when numba-cuda's function is the one the replacement was written against."""
    return source_matches(_ir_utils().fixup_var_define_in_scope, KNOWN_SOURCE_SHA256)


def fixup_var_define_in_scope(blocks) -> None:
    """Define every variable the blocks use in every scope the blocks have, in numba-cuda's order."""
    used_var = {}
    for blk in blocks.values():
        for inst in blk.body:
            for var in inst.list_vars():
                used_var[var] = inst
    done = set()
    for blk in blocks.values():
        scope = blk.scope
        if id(scope) in done:
            continue
        done.add(id(scope))
        for var in used_var:
            if var.name not in scope.localvars:
                scope.localvars.define(var.name, var)


def install() -> bool:
    """Put the once-per-scope version in place (once per process) where numba-cuda calls it; False where the guard
    says no."""
    modules = (_ir_utils(), _untyped_passes())
    return install_once(_state, original_source_matches,
                        lambda: replace_in(modules, "fixup_var_define_in_scope", fixup_var_define_in_scope))
