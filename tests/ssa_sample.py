"""Compile kernels of every family with numba-cuda's SSA passes and autotune's indexed ones.

Run by tests/test_numba_ssa.py in its own process (the real compiler, not the simulator). For each variant, every
function's IR goes through both versions of SSA reconstruction and of phi stripping (numba-cuda's on a deep copy)
and the results are compared statement by statement, with the names each gave; then the variant's PTX is made once
with each version in place. Prints one JSON object: whether the replacement was installed, and per variant the
functions, SSA violators and phi nodes seen, whether every IR was equal and whether the PTX was identical.
"""
import copy
import json

from lowering_sample import VARIANTS, ptx  # tests/ is the first entry of sys.path when run as a script
from numba.cuda.core import ssa
from numba.cuda.core.typed_passes import PreLowerStripPhis

from autotune import numba_ssa
from autotune.build import build_kernel


def listing(blocks) -> list:
    """Each block's label and statements as text: the names, the phi nodes and their incoming values."""
    return [(label, [str(stmt) for stmt in block.body]) for label, block in blocks.items()]


def uninitialised_use():
    """A function whose variable is read on a path that never assigned it: the pass's warning path."""

    def f(a, flag):
        if flag:
            x = a + 1
        return x  # noqa: F821 (assigned on one path only, on purpose)

    return f


def main():
    kernels = {name: build_kernel(kind, params, dtype, **args) for name, (kind, dtype, args, params) in
               VARIANTS.items()}  # loading a kernel installs the replacement
    indexed, strip = ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes
    installed = indexed is numba_ssa.run_ssa and strip is numba_ssa.strip_phi_nodes
    out = {"installed": installed, "source_matches": numba_ssa.original_source_matches(), "variants": {}}
    if not installed:
        print(json.dumps(out))
        return
    original, original_strip = indexed.__wrapped__, strip.__wrapped__
    for name, kernel in kernels.items():
        seen = {"functions": 0, "violators": 0, "phis": 0, "equal": True, "stripped_equal": True}

        def both(blocks):
            theirs = original(copy.deepcopy(blocks))
            ours = indexed(blocks)
            seen["functions"] += 1
            seen["violators"] += len(ssa._find_defs_violators(blocks, ssa.compute_cfg_from_blocks(blocks)))
            seen["equal"] &= listing(ours) == listing(theirs)
            return ours

        def both_strip(self, func_ir):
            clone = copy.copy(func_ir)
            clone.blocks = copy.deepcopy(func_ir.blocks)
            seen["phis"] += sum(1 for block in func_ir.blocks.values() for stmt in block.body
                                if getattr(getattr(stmt, "value", None), "op", None) == "phi")
            theirs = original_strip(self, clone)
            ours = strip(self, func_ir)
            seen["stripped_equal"] &= listing(ours.blocks) == listing(theirs.blocks)
            return ours

        try:
            ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes = both, both_strip
            ptx(kernel)
            ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes = original, original_strip
            before = ptx(kernel)
        finally:
            ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes = indexed, strip
        seen["same_ptx"] = ptx(kernel) == before
        out["variants"][name] = seen
    from numba.cuda.compiler import run_frontend

    func_ir = run_frontend(uninitialised_use())
    theirs = original(copy.deepcopy(func_ir.blocks))
    out["uninitialised"] = listing(indexed(func_ir.blocks)) == listing(theirs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
