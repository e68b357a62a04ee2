"""Correctness of the generated kernels on the attached GPU (or, a small sample, in the simulator).

For each kernel family, dtype and set of family arguments (``KernelFamily.selftest_cases``): a covering sample of
the search space (every value of every parameter used at least once) is built, and each variant is checked with
the family's oracle (exact answers on integer data; max and min also on data with infinities and NaN; outputs
poisoned with NaN) on odd shapes, and once more with ``out=`` overlapping its first input. On the GPU this
includes what the simulator cannot run: warp shuffles, vector loads, launch_bounds. In the simulator
(``--simulator``) the sample is small: per family and arguments one cheap variant (and matmul's seed kernels) of
the first dtype on one odd shape, about a minute.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from .build import build_kernel
from .problem import Instance, Problem
from .registry import family as family_named
from .space import load_space

SIMULATOR_VARIANTS = 1  # per family and arguments, in the simulator, where every GPU thread is a Python thread


def plan_for(kinds, dtypes, small: bool, rng: np.random.Generator) -> list:
    """(kind, dtype, arguments, shapes, sample) for every case of the families asked for."""
    plan = []
    for kind in kinds:
        impl = family_named(kind)
        for dtype, args, shapes in impl.selftest_cases(small):
            if dtype not in dtypes:
                continue
            space = load_space(kind)
            cheap = _cheap(space) if small else None
            sample, _ = space.covering_sample(dtype=dtype, family=impl.family_args(**args),
                                              seed=int(rng.integers(1 << 30)), cheap=cheap)
            extras = list(getattr(impl, "selftest_extras", lambda: [])())
            if small:  # one odd shape: a prime-sized array, or a matrix no tile divides
                sample = sample[:SIMULATOR_VARIANTS]
                shapes = shapes[1:2]
            plan.append((kind, dtype, args, shapes, extras + sample))
    return plan


def _cheap(space) -> dict:
    """The smallest value of every integer parameter: small blocks keep the simulator's Python threads few."""
    return {name: (min(p.values),) for name, p in space.params.items() if isinstance(p.values[0], int)}


def selftest(small: bool = False, kinds=None, dtypes=("float32", "float64"), out=sys.stdout) -> bool:
    """Check the families ``kinds`` (default: the built-in ones); True when every check passed."""
    from .registry import BUILTIN

    rng = np.random.default_rng()
    kinds = tuple(kinds or BUILTIN)
    plan = plan_for(kinds, dtypes, small, rng)
    if not small:
        compile_ahead(plan, out)
    return check_plan(plan, rng, out)


def check_plan(plan, rng: np.random.Generator, out=sys.stdout) -> bool:
    """Check every (kind, dtype, arguments, shapes, sample) of the plan; print failures as they come and a summary."""
    failures, checked, t0 = [], 0, time.time()
    for kind, dtype, args, shapes, sample in plan:
        for params in sample:
            kernel = build_kernel(kind, params, dtype, **args)
            for shape in shapes:
                problem = Problem(kind, shape, dtype, args)
                for check in (_check, _check_overlapping):
                    try:
                        error = check(kernel, problem, rng)
                    except Exception as exc:  # a launch failure is a failed check; the rest still run
                        error = f"{type(exc).__name__}: {exc}"
                    checked += 1
                    if error:
                        failures.append(f"{problem.key} {params}: {error}")
                        print(f"FAIL {failures[-1]}", file=out, flush=True)
        print(f"{kind} {dtype} {args}: {len(sample)} variants x {len(shapes)} shapes checked", file=out, flush=True)
    print(f"\nselftest: {checked} checks, {len(failures)} failures, {time.time() - t0:.0f} s", file=out)
    return not failures


def _check(kernel, problem: Problem, rng) -> str | None:
    return Instance(problem, rng).check(kernel)


def _check_overlapping(kernel, problem: Problem, rng) -> str | None:
    """The kernel with ``out=`` starting at its first input's first byte: NumPy's result, computed from the inputs
    as they were before the call."""
    from numba import cuda

    inst = Instance(problem, rng)
    case, args = inst.cases[0]
    host = case.inputs[0]
    size = int(np.prod(problem.out_shape))
    buffer = cuda.to_device(np.concatenate([host.ravel(order="K"), np.zeros(max(0, size - host.size), host.dtype)]))
    first = buffer[:host.size]
    first = first.reshape(host.shape[::-1]).T if np.isfortran(host) and host.ndim > 1 else first.reshape(host.shape)
    out = buffer[:size].reshape(problem.out_shape)
    kernel(first, *args[1:], out=out)
    return problem.impl.verify(problem, case, out.copy_to_host(), rng)


def compile_ahead(plan, out=sys.stdout) -> None:
    """Compile every variant in parallel CPU processes first (filling Numba's disk cache), as the tuner does."""
    import os

    from .evaluate import compile_variant
    from .records import job_for
    from .worker import compile_pool

    jobs = [job_for(Problem(kind, shapes[0], dtype, args), params)
            for kind, dtype, args, shapes, sample in plan for params in sample]
    t0 = time.time()
    with compile_pool(max(1, (os.cpu_count() or 2) - 1)) as pool:
        reports = list(pool.map(compile_variant, jobs))
    spills = sum(1 for r in reports if r.ok and r.resources and r.resources["spill_stores"])
    bad = [(j, r.reason) for j, r in zip(jobs, reports) if not r.ok]
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s ({spills} spill registers); "
          f"{len(bad)} failed to compile", file=out, flush=True)
    for j, reason in bad:
        print(f"COMPILE FAIL {j.kind} {j.dtype} {j.args} {j.params}: {reason}", file=out)
