"""Time numba-cuda's front-end passes on a kernel of one long unrolled block. Needs numba-cuda only, no GPU.

    python compile_passes.py [--tile 8] [--steps 8] [--guard none|step|each] [--ptx FILE]

The kernel is what a register-tiled matrix multiply unrolled over K looks like to Numba: a loop over K whose
body, one basic block, updates a tile of TILE x TILE accumulators STEPS times (``c = c + a * b``, so each
accumulator is assigned STEPS times per trip and carried around the loop). ``--guard step`` puts each step under
an ``if``, ``--guard each`` each multiply-add (a block per statement, as bounds-checked edge code makes). After a
tiny kernel has warmed Numba up, the kernel is compiled to PTX for sm_90 once (Numba front end, NVVM); each
function below is timed around its outermost calls, so the table shows what each costs in that one compile. Times
are CPU seconds of the compiling thread, which other load on the machine changes little. ``--ptx FILE`` writes the
PTX, to compare a patched numba-cuda's output with the original's.
"""
from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict

from numba import cuda, float32  # noqa: F401 (the generated kernel's globals)
from numba.core.types import functions as types_functions
from numba.cuda import lowering
from numba.cuda.core import analysis, controlflow, ir_utils, ssa, typed_passes, untyped_passes

SPENT: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def kernel_source(tile: int, steps: int, guard: str) -> str:
    """A TILE x TILE register tile updated STEPS times per trip of a loop over K, in one block unless guarded."""
    lines = ["def tile_kernel(A, B, C, n):", "    tx = cuda.threadIdx.x", "    ty = cuda.threadIdx.y"]
    lines += [f"    c{i}_{j} = float32(0.0)" for i in range(tile) for j in range(tile)]
    lines.append(f"    for k0 in range(0, n, {steps}):")
    for k in range(steps):
        pad = "        "
        if guard == "step":
            lines.append(f"        if k0 + {k} < n:")
            pad = "            "
        lines += [f"{pad}a{i} = A[k0 + {k}, ty * {tile} + {i}]" for i in range(tile)]
        lines += [f"{pad}b{j} = B[k0 + {k}, tx * {tile} + {j}]" for j in range(tile)]
        for i in range(tile):
            for j in range(tile):
                if guard == "each":
                    lines.append(f"{pad}if k0 + {k} < n - {i * tile + j}:")
                    lines.append(f"{pad}    c{i}_{j} = c{i}_{j} + a{i} * b{j}")
                else:
                    lines.append(f"{pad}c{i}_{j} = c{i}_{j} + a{i} * b{j}")
    lines += [f"    C[ty * {tile} + {i}, tx * {tile} + {j}] = c{i}_{j}" for i in range(tile) for j in range(tile)]
    return "\n".join(lines) + "\n"


def timed(name: str, function):
    """``function``, adding the time of its outermost calls to SPENT[name]."""
    depth = [0]

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if depth[0]:
            return function(*args, **kwargs)
        depth[0] += 1
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[name] += time.thread_time() - start
            CALLS[name] += 1
            depth[0] -= 1
    return wrapper


def time_passes() -> None:
    """Wrap each function of interest where numba-cuda calls it."""
    lowering.Lower._find_singly_assigned_variable = timed(
        "Lower._find_singly_assigned_variable", lowering.Lower._find_singly_assigned_variable)
    ssa._run_ssa = timed("ssa._run_ssa", ssa._run_ssa)
    strip = typed_passes.PreLowerStripPhis._strip_phi_nodes
    typed_passes.PreLowerStripPhis._strip_phi_nodes = timed("PreLowerStripPhis._strip_phi_nodes", strip)
    live = timed("analysis.compute_live_map", analysis.compute_live_map)
    analysis.compute_live_map = ir_utils.compute_live_map = live
    scopes = timed("ir_utils.fixup_var_define_in_scope", ir_utils.fixup_var_define_in_scope)
    ir_utils.fixup_var_define_in_scope = untyped_passes.fixup_var_define_in_scope = scopes
    controlflow.CFGraph._find_dominators_internal = timed(
        "CFGraph._find_dominators_internal", controlflow.CFGraph._find_dominators_internal)
    types_functions.BaseFunction.get_call_type = timed(
        "BaseFunction.get_call_type", types_functions.BaseFunction.get_call_type)


def compiled(source: str) -> str:
    """The PTX of the kernel in ``source``, for sm_90."""
    namespace = {"cuda": cuda, "float32": float32}
    exec(compile(source, "<tile_kernel>", "exec"), namespace)
    ptx, _ = cuda.compile_ptx(namespace["tile_kernel"], "void(float32[:, :], float32[:, :], float32[:, :], int64)",
                              cc=(9, 0))
    return ptx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tile", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--guard", choices=("none", "step", "each"), default="none")
    parser.add_argument("--ptx", help="write the PTX here")
    args = parser.parse_args()
    time_passes()
    compiled(kernel_source(1, 1, args.guard))  # Numba's first compile types and loads much once
    SPENT.clear()
    CALLS.clear()
    source = kernel_source(args.tile, args.steps, args.guard)
    start = time.thread_time()
    ptx = compiled(source)
    total = time.thread_time() - start
    print(f"tile {args.tile}x{args.tile}, {args.steps} steps, guard {args.guard}: "
          f"{source.count(chr(10))} source lines, compile to PTX {total:.2f} s")
    for name in sorted(SPENT, key=SPENT.get, reverse=True):
        print(f"  {name:40s} {SPENT[name]:7.2f} s  {CALLS[name]:6d} calls")
    if args.ptx:
        with open(args.ptx, "w") as f:
            f.write(ptx)


if __name__ == "__main__":
    main()
