"""Compile kernels of every family with numba-cuda's singly-assigned-variable pass and autotune's linear one.

Run by tests/test_numba_lowering.py in its own process (the real compiler, not the simulator). For each variant,
while it is lowered, both passes run on every function and their sets are compared; then its PTX is made once with
each pass in place. Prints one JSON object: whether the replacement was installed, and per variant the number of
functions and variables compared, whether every set was equal and whether the PTX was identical.
"""
import json
import re

from numba.cuda import lowering

from autotune import numba_lowering
from autotune.build import build_kernel
from autotune.compiler import ptx_of

TILED = {"strategy": "tiled", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 8}
VARIANTS = {
    "matmul float32 tiled, K unrolled 8": ("matmul", "float32", {"layout": "nn"}, TILED),
    "matmul float32 split-K last block, tn": ("matmul", "float32", {"layout": "tn"},
                                              {**TILED, "SPLIT_K": 2, "SPLIT_ADD": "last_block", "PREFETCH": 1}),
    "matmul float64 mma": ("matmul", "float64", {"layout": "nn"},
                           {"strategy": "tiled", "BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 2, "VEC": 2, "MMA": 16,
                            "UNROLL_K": 16, "MIN_BLOCKS": 2}),
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


def synthetic_cases(original) -> dict:
    """A small function's IR, edited so that each exclusion of the rule decides: a variable assigned twice in its
    block, and one that the alloca analysis claims. Per case: both passes agree and the variable was excluded."""
    import copy
    from types import SimpleNamespace

    from numba.cuda.compiler import run_frontend

    def f(a, b):
        c = a + b
        d = c * 2
        return d

    def both(func_ir):
        lower = SimpleNamespace(func_ir=func_ir, blocks=func_ir.blocks)
        original(lower)
        return lower._singly_assigned_vars, numba_lowering.singly_assigned_variables(lower)

    plain = run_frontend(f)
    expected, got = both(plain)
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


def main():
    kernels = {name: build_kernel(kind, params, dtype, **args) for name, (kind, dtype, args, params) in
               VARIANTS.items()}  # loading a kernel installs the linear pass
    Lower = lowering.Lower
    linear = Lower._find_singly_assigned_variable
    installed = linear is not getattr(linear, "__wrapped__", linear)
    out = {"installed": installed, "source_matches": numba_lowering.original_source_matches(), "variants": {}}
    if not installed:
        print(json.dumps(out))
        return
    original = linear.__wrapped__
    out["synthetic"] = synthetic_cases(original)
    for name, kernel in kernels.items():
        seen = {"functions": 0, "variables": 0, "equal": True}

        def both(self):
            original(self)
            expected = self._singly_assigned_vars
            seen["functions"] += 1
            seen["variables"] += len(expected)
            seen["equal"] &= numba_lowering.singly_assigned_variables(self) == expected

        try:
            Lower._find_singly_assigned_variable = both
            ptx(kernel)
            Lower._find_singly_assigned_variable = original
            before = ptx(kernel)
        finally:
            Lower._find_singly_assigned_variable = linear
        seen["same_ptx"] = ptx(kernel) == before
        out["variants"][name] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    main()
