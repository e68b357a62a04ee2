"""Compile kernels of every family with autotune's replacements of Numba and numba-cuda passes and with the originals.

Run by tests/test_numba_replacements.py in its own process (the real compiler, not the simulator). For each
variant, one compile runs every replacement next to its original on each call (the original on a copy where it
mutates) and compares the results; then the PTX is made once with every original and once with every replacement
in place. A few small functions check cases the kernels do not reach. Prints one JSON object: per replacement,
whether it was installed, whether the source guard matched, what it saw per variant and the small cases' results;
per variant, whether the PTX was identical.
"""
import copy
import json
import re
from types import SimpleNamespace

from numba.core.target_extension import get_local_target
from numba.core.types.functions import BaseFunction
from numba.cuda import lowering
from numba.cuda.compiler import run_frontend
from numba.cuda.core import analysis, controlflow, ir, ir_utils, ssa, untyped_passes
from numba.cuda.core.typed_passes import PreLowerStripPhis

from autotune._patches import numba_dominators, numba_liveness, numba_lowering, numba_scopes, numba_ssa, numba_typing
from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import ptx_of

TILED = {"strategy": "tiled", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 8}
VARIANTS = {
    "matmul float32 tiled, K unrolled 8": ("matmul", "float32", {"layout": "nn"}, TILED),
    "matmul float32 split-K last block, tn": ("matmul", "float32", {"layout": "tn"},
                                              {**TILED, "SPLIT_K": 2, "SPLIT_ADD": "last_block", "PREFETCH": 1}),
    "matmul float64 mma": ("matmul", "float64", {"layout": "nn"},
                           {"strategy": "tiled", "BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 2, "VEC": 2, "MMA": 16,
                            "UNROLL_K": 16, "MIN_BLOCKS": 2}),
    "matmul float32 clamped edges, cp.async": ("matmul", "float32", {"layout": "nn"},
                                               {**TILED, "BM": 32, "BN": 32, "UNROLL_K": 2, "EDGE": "clamp",
                                                "ASYNC_STAGES": 2, "THREAD_LAYOUT": "contiguous"}),
    "matmul naive": ("matmul", "float32", {"layout": "nn"}, {"strategy": "naive"}),
    "reduce max": ("reduce", "float32", {"op": "max", "axis": None}, {}),
    "reduce dot axis 1": ("reduce", "float64", {"op": "dot", "axis": 1}, {"VEC": 2}),
}


def ptx(kernel) -> str:
    """The kernel's PTX with the names Numba numbers per process (functions, shared arrays) numbered from 0."""
    text = ptx_of(kernel.entry, kernel.signature)
    for pattern in (r"B\d+v\d+B", r"_cudapy_smem_\d+"):
        names: dict[str, str] = {}
        text = re.sub(pattern, lambda m: names.setdefault(m.group(0), f"<{pattern}#{len(names)}>"), text)
    return text


def listing(blocks) -> list:
    """Each block's label and statements as text: the names, the phi nodes and their incoming values."""
    return [(label, [str(stmt) for stmt in block.body]) for label, block in blocks.items()]


def scopes(blocks) -> list:
    """Each block's scope as its defined names and variables, in order."""
    return [[(name, str(var)) for name, var in block.scope.localvars._con.items()] for block in blocks.values()]


class Check:
    """One replacement: ``ours`` is what is installed, ``original()`` Numba's own, ``use`` puts either in place,
    ``both(seen)`` a stand-in that runs both and records in ``seen``, ``small_cases()`` checks of its own."""

    def original(self):
        return self.ours.__wrapped__

    def small_cases(self) -> dict:
        return {}


class Lowering(Check):
    """numba_lowering: the set of singly assigned variables of each function lowered."""
    module = numba_lowering

    def __init__(self):
        self.ours = lowering.Lower._find_singly_assigned_variable
        self.installed = self.ours is not getattr(self.ours, "__wrapped__", self.ours)

    def use(self, function):
        lowering.Lower._find_singly_assigned_variable = function

    def both(self, seen):
        original = self.original()
        seen.update(functions=0, variables=0, equal=True)

        def both(lower):
            original(lower)
            expected = lower._singly_assigned_vars
            seen["functions"] += 1
            seen["variables"] += len(expected)
            seen["equal"] &= numba_lowering.singly_assigned_variables(lower) == expected
        return both

    def small_cases(self) -> dict:
        """A small function's IR, edited so that each exclusion of the rule decides: a variable assigned twice in
        its block, and one that the alloca analysis claims. Per case: both passes agree and it was excluded."""
        original = self.original()

        def f(a, b):
            c = a + b
            d = c * 2
            return d

        def both(func_ir):
            lower = SimpleNamespace(func_ir=func_ir, blocks=func_ir.blocks)
            original(lower)
            return lower._singly_assigned_vars, numba_lowering.singly_assigned_variables(lower)

        expected, got = both(run_frontend(f))
        [c_name] = [v for v in expected if v == "c" or v.startswith("c.")] or ["c"]
        out = {"plain": expected == got and c_name in expected}
        twice = run_frontend(f)
        block = twice.blocks[min(twice.blocks)]
        at = next(i for i, stmt in enumerate(block.body) if isinstance(stmt, lowering.ir.Assign)
                  and stmt.target.name == c_name)
        block.body.insert(at + 1, copy.copy(block.body[at]))
        expected, got = both(twice)
        out["assigned twice"] = expected == got and c_name not in expected
        saved = lowering.must_use_alloca
        lowering.must_use_alloca = lambda blocks: {c_name}
        try:
            expected, got = both(run_frontend(f))
        finally:
            lowering.must_use_alloca = saved
        out["alloca"] = expected == got and c_name not in expected
        return out


class Ssa(Check):
    """numba_ssa: SSA reconstruction and phi stripping, compared statement by statement with their names."""
    module = numba_ssa

    def __init__(self):
        self.ours = (ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes)
        self.installed = self.ours == (numba_ssa.run_ssa, numba_ssa.strip_phi_nodes)

    def use(self, functions):
        ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes = functions

    def original(self):
        return tuple(function.__wrapped__ for function in self.ours)

    def both(self, seen):
        (indexed, strip), (original, original_strip) = self.ours, self.original()
        seen.update(functions=0, violators=0, phis=0, equal=True, stripped_equal=True)

        def both_ssa(blocks):
            theirs = original(copy.deepcopy(blocks))
            ours = indexed(blocks)
            seen["functions"] += 1
            seen["violators"] += len(ssa._find_defs_violators(blocks, ssa.compute_cfg_from_blocks(blocks)))
            seen["equal"] &= listing(ours) == listing(theirs)
            return ours

        def both_strip(pass_, func_ir):
            clone = copy.copy(func_ir)
            clone.blocks = copy.deepcopy(func_ir.blocks)
            seen["phis"] += sum(1 for block in func_ir.blocks.values() for stmt in block.body
                                if getattr(getattr(stmt, "value", None), "op", None) == "phi")
            theirs = original_strip(pass_, clone)
            ours = strip(pass_, func_ir)
            seen["stripped_equal"] &= listing(ours.blocks) == listing(theirs.blocks)
            return ours
        return both_ssa, both_strip

    def small_cases(self) -> dict:
        """A function whose variable is read on a path that never assigned it: the pass's warning path."""
        def f(a, flag):
            if flag:
                x = a + 1
            return x  # noqa: F821 (assigned on one path only, on purpose)

        blocks = run_frontend(f).blocks
        theirs = self.original()[0](copy.deepcopy(blocks))
        return {"uninitialised": listing(self.ours[0](blocks)) == listing(theirs)}


class Liveness(Check):
    """numba_liveness: the live variables at each block's entry."""
    module = numba_liveness

    def __init__(self):
        self.ours = analysis.compute_live_map
        self.installed = self.ours is numba_liveness.compute_live_map and ir_utils.compute_live_map is self.ours

    def use(self, function):
        analysis.compute_live_map = ir_utils.compute_live_map = function

    def both(self, seen):
        ours, theirs = self.ours, self.original()
        seen.update(calls=0, variables=0, blocks=0, equal=True)

        def both(cfg, blocks, var_use_map, var_def_map):
            expected = theirs(cfg, blocks, var_use_map, var_def_map)
            found = ours(cfg, blocks, var_use_map, var_def_map)
            seen["calls"] += 1
            seen["variables"] = max(seen["variables"], len(set().union(*var_def_map.values(), *var_use_map.values())))
            seen["blocks"] = max(seen["blocks"], len(blocks))
            seen["equal"] &= found == expected and list(found) == list(expected)
            return found
        return both

class Dominators(Check):
    """numba_dominators: each node's dominators and post-dominators."""
    module = numba_dominators

    def __init__(self):
        self.ours = controlflow.CFGraph._find_dominators_internal
        self.installed = self.ours is numba_dominators.find_dominators_internal

    def use(self, function):
        controlflow.CFGraph._find_dominators_internal = function

    def both(self, seen):
        ours, theirs = self.ours, self.original()
        seen.update(calls=0, posts=0, nodes=0, equal=True)

        def both(graph, post=False):
            expected = theirs(graph, post)
            found = ours(graph, post)
            seen["calls"] += 1
            seen["posts"] += bool(post)
            seen["nodes"] = max(seen["nodes"], len(graph._nodes))
            seen["equal"] &= found == expected
            return found
        return both


class Scopes(Check):
    """numba_scopes: the variables each block's scope defines, in order."""
    module = numba_scopes

    def __init__(self):
        self.ours = untyped_passes.fixup_var_define_in_scope
        self.installed = (self.ours is numba_scopes.fixup_var_define_in_scope
                          and ir_utils.fixup_var_define_in_scope is self.ours)

    def use(self, function):
        ir_utils.fixup_var_define_in_scope = untyped_passes.fixup_var_define_in_scope = function

    def both(self, seen):
        ours, theirs = self.ours, self.original()
        seen.update(calls=0, blocks=0, variables=0, equal=True)

        def both(blocks):
            clone = copy.deepcopy(blocks)
            theirs(clone)
            ours(blocks)
            seen["calls"] += 1
            seen["blocks"] = max(seen["blocks"], len(blocks))
            seen["variables"] = max(seen["variables"], max(len(s) for s in scopes(blocks)))
            seen["equal"] &= scopes(blocks) == scopes(clone)
        return both

    def small_cases(self) -> dict:
        """The kernels' blocks share one scope that defines everything already; here every other block of a small
        function gets a fresh empty scope, so the repair defines variables, in two scopes."""
        def f(a, flag):
            if flag:
                x = a + 1
            else:
                x = a - 1
            return x

        blocks = run_frontend(f).blocks
        labels = list(blocks)
        fresh = ir.Scope(parent=None, loc=blocks[labels[0]].loc)
        for label in labels[1::2]:
            blocks[label].scope = fresh
        clone = copy.deepcopy(blocks)
        before = sum(len(s) for s in scopes(clone))
        self.original()(clone)
        self.ours(blocks)
        return {"split scopes": {"blocks": len(blocks), "defined": sum(len(s) for s in scopes(clone)) - before,
                                 "equal": scopes(blocks) == scopes(clone)}}


class Typing(Check):
    """numba_typing: the signature and implementation key of every call typed."""
    module = numba_typing

    def __init__(self):
        self.ours = BaseFunction.get_call_type
        self.installed = getattr(self.ours, "__wrapped__", None) is not None

    def use(self, function):
        BaseFunction.get_call_type = function

    def both(self, seen):
        ours, theirs = self.ours, self.original()
        seen.update(questions=0, remembered=0, equal=True)

        def both(function, context, args, kws):
            key = (function, context, get_local_target(context), tuple(args), tuple(sorted(kws.items())))
            seen["remembered"] += key in numba_typing._answers
            expected = theirs(function, context, args, kws)
            expected_impl = function._impl_keys[expected.args]
            function._impl_keys[expected.args] = None
            found = ours(function, context, args, kws)
            seen["questions"] += 1
            seen["equal"] &= found == expected and function._impl_keys[found.args] == expected_impl
            return found
        return both


def main():
    kernels = {name: build_kernel(kind, params, dtype, **args) for name, (kind, dtype, args, params) in
               VARIANTS.items()}  # loading a kernel installs the replacements
    checks = {"lowering": Lowering(), "ssa": Ssa(), "liveness": Liveness(), "scopes": Scopes(), "typing": Typing(),
              "dominators": Dominators()}
    out = {name: {"installed": check.installed, "source_matches": check.module.original_source_matches(),
                  "variants": {}} for name, check in checks.items()}
    checks = {name: check for name, check in checks.items() if check.installed}
    out["same_ptx"] = {}
    for variant, kernel in kernels.items():
        try:
            for name, check in checks.items():
                out[name]["variants"][variant] = seen = {}
                check.use(check.both(seen))
            ptx(kernel)
            for check in checks.values():
                check.use(check.original())
            before = ptx(kernel)
        finally:
            for check in checks.values():
                check.use(check.ours)
        out["same_ptx"][variant] = ptx(kernel) == before
    for name, check in checks.items():
        out[name]["small"] = check.small_cases()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
