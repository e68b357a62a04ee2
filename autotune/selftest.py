"""Correctness of the generated kernels on the attached GPU (or the simulator, with a small sample).

For each kernel family, dtype and layout/op/axis: a covering sample of the search space (every value of every
parameter used at least once) is built, and each variant is checked with ``Instance.check`` (exact answers
on integer data, NaN-poisoned outputs) on odd shapes. On the GPU this includes what the simulator cannot run:
warp shuffles, vector loads, launch_bounds.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from .build import build_kernel
from .problem import Instance, Problem
from .space import load_space

MATMUL_SHAPES = [(1, 1, 1), (7, 13, 5), (37, 29, 41), (17, 19, 1), (130, 3, 9), (257, 263, 129), (1000, 1000, 1000)]
REDUCE_1D = [1, 31, 32, 33, 1023, 1025, 4_000_037]
REDUCE_2D = [(1, 1), (3, 1025), (33, 31), (130, 7), (1031, 2053)]


def cases(small: bool, kinds=("matmul", "reduce"), dtypes=("float32", "float64")):
    """(kind, dtype, family, shapes) for every family the templates cover."""
    for dtype in dtypes[:1] if small else dtypes:
        if "matmul" in kinds:
            for layout in (("nn",) if small else ("nn", "tn", "nt", "tt")):
                yield "matmul", dtype, {"layout": layout}, MATMUL_SHAPES[1:4] if small else MATMUL_SHAPES
        if "reduce" in kinds:
            for op in ("sum", "max", "min", "dot"):
                yield "reduce", dtype, {"op": op, "axis": None}, REDUCE_1D[:5] if small else REDUCE_1D
                for axis in (0, 1):
                    yield "reduce", dtype, {"op": op, "axis": axis}, REDUCE_2D[:3] if small else REDUCE_2D


def selftest(small: bool = False, kinds=("matmul", "reduce"), dtypes=("float32", "float64"), out=sys.stdout) -> bool:
    rng = np.random.default_rng()
    plan = []
    for kind, dtype, family, shapes in cases(small, kinds, dtypes):
        sample, _ = load_space(kind).covering_sample(dtype=dtype, family=family, seed=int(rng.integers(1 << 30)))
        if kind == "matmul":
            sample = [{"strategy": "naive"}, {"strategy": "shared16"}] + sample
        plan.append((kind, dtype, family, shapes, sample))
    if not small:
        compile_ahead(plan, out)
    return check_plan(plan, rng, out)


def check_plan(plan, rng: np.random.Generator, out=sys.stdout) -> bool:
    """Check every (kind, dtype, family, shapes, sample) of the plan; print failures as they come and a summary."""
    failures, checked, t0 = [], 0, time.time()
    for kind, dtype, family, shapes, sample in plan:
        for params in sample:
            kernel = build_kernel(kind, params, dtype, **family)
            for shape in shapes:
                problem = Problem(kind, shape, dtype, family)
                try:
                    error = Instance(problem, rng).check(kernel)
                except Exception as exc:  # a launch failure is a failed check; the rest still run
                    error = f"{type(exc).__name__}: {exc}"
                checked += 1
                if error:
                    failures.append(f"{problem.key} {params}: {error}")
                    print(f"FAIL {failures[-1]}", file=out, flush=True)
        print(f"{kind} {dtype} {family}: {len(sample)} variants x {len(shapes)} shapes checked", file=out, flush=True)
    print(f"\nselftest: {checked} checks, {len(failures)} failures, {time.time() - t0:.0f} s", file=out)
    return not failures


def compile_ahead(plan, out=sys.stdout) -> None:
    """Compile every variant in parallel CPU processes first (filling Numba's disk cache), as the tuner does."""
    import os

    from .evaluate import compile_variant, job
    from .worker import compile_pool

    jobs = [job(Problem(kind, shapes[0], dtype, family), params)
            for kind, dtype, family, shapes, sample in plan for params in sample]
    t0 = time.time()
    with compile_pool(max(1, (os.cpu_count() or 2) - 1)) as pool:
        reports = list(pool.map(compile_variant, jobs))
    spills = sum(1 for r in reports if r["ok"] and r["resources"] and r["resources"]["spill_stores"])
    bad = [(j, r["reason"]) for j, r in zip(jobs, reports) if not r["ok"]]
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s ({spills} spill registers); "
          f"{len(bad)} failed to compile", file=out, flush=True)
    for j, reason in bad:
        print(f"COMPILE FAIL {j['kind']} {j['dtype']} {j['family']} {j['params']}: {reason}", file=out)
