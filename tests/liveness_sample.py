"""Compile kernels of every family with numba-cuda's live-variable analysis and autotune's bit-set one.

Run by tests/test_numba_liveness.py in its own process (the real compiler, not the simulator). For each variant,
while it compiles, both versions run on every call and their live maps are compared; then its PTX is made once
with each version in place. Prints one JSON object: whether the replacement was installed, and per variant the
calls compared, the most variables and blocks seen, whether every map was equal and whether the PTX was identical.
"""
import json

from lowering_sample import VARIANTS, ptx  # tests/ is the first entry of sys.path when run as a script
from numba.cuda.core import analysis, ir_utils

from autotune import numba_liveness
from autotune.build import build_kernel


def use(function) -> None:
    analysis.compute_live_map = ir_utils.compute_live_map = function


def main():
    kernels = {name: build_kernel(kind, params, dtype, **args) for name, (kind, dtype, args, params) in
               VARIANTS.items()}  # loading a kernel installs the replacement
    ours = analysis.compute_live_map
    installed = ours is numba_liveness.compute_live_map and ir_utils.compute_live_map is ours
    out = {"installed": installed, "source_matches": numba_liveness.original_source_matches(), "variants": {}}
    if not installed:
        print(json.dumps(out))
        return
    theirs = ours.__wrapped__
    for name, kernel in kernels.items():
        seen = {"calls": 0, "variables": 0, "blocks": 0, "equal": True}

        def both(cfg, blocks, var_use_map, var_def_map):
            expected = theirs(cfg, blocks, var_use_map, var_def_map)
            found = ours(cfg, blocks, var_use_map, var_def_map)
            seen["calls"] += 1
            seen["variables"] = max(seen["variables"], len(set().union(*var_def_map.values(), *var_use_map.values())))
            seen["blocks"] = max(seen["blocks"], len(blocks))
            seen["equal"] &= found == expected and list(found) == list(expected)
            return found

        try:
            use(both)
            ptx(kernel)
            use(theirs)
            before = ptx(kernel)
        finally:
            use(ours)
        seen["same_ptx"] = ptx(kernel) == before
        out["variants"][name] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    main()
