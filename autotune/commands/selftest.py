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

from ..core.problem import Problem
from ..core.registry import family as family_named
from ..core.space import load_space
from ..runtime import arrays
from ..runtime.build import build_kernel
from ..tuning.instance import Instance
from ..tuning.records import COMPILE_TIMEOUT_S

SIMULATOR_VARIANTS = 1  # per family and arguments, in the simulator, where every GPU thread is a Python thread
SKIPPED_STAGES = ("timeout", "pruned")  # compile results that tuning never measures


def plan_for(kinds, dtypes, small: bool, rng: np.random.Generator, device=None) -> list:
    """(kind, dtype, arguments, shapes, sample) for every case of the families asked for; with ``device``, only
    the variants it can run (``KernelFamily.unfit_for``)."""
    plan = []
    for kind in kinds:
        impl = family_named(kind)
        for dtype, args, shapes in impl.selftest_cases(small):
            if dtypes is not None and dtype not in dtypes:
                continue
            space = load_space(kind)
            cheap = _cheap(space) if small else None
            sample, _ = space.covering_sample(dtype=dtype, args=impl.family_args(**args),
                                              seed=int(rng.integers(1 << 30)), cheap=cheap)
            extras = [p for p in impl.selftest_extras()  # those that apply to dtype
                      if space.checked_or_none(p, dtype=dtype, args=impl.family_args(**args)) is not None]
            if small:  # one odd shape: a prime-sized array, or a matrix no tile divides (a family's only shape)
                sample = sample[:SIMULATOR_VARIANTS]
                shapes = shapes[1:2] or shapes[:1]
            variants = [p for p in extras + sample if device is None or not impl.unfit_for(p, device)]
            plan.append((kind, dtype, args, shapes, variants))
    return plan


def plan_part(plan: list, index: int, count: int) -> list:
    """Cases ``index``, ``index + count``, ... (1-based) of the plan: ``count`` parts that together hold every case
    once, each compiled and checked on its own, so that one GPU's long selftest can be spread over several GPUs
    or several shorter runs (a float32 matmul selftest takes over 10 minutes on one H200)."""
    if not 1 <= index <= count:
        raise ValueError(f"--part takes I/N with 1 <= I <= N, got {index}/{count}")
    if count > len(plan):  # a part with nothing to check would pass without checking anything
        raise ValueError(f"--part {index}/{count}: the selftest has only {len(plan)} cases (family, dtype, "
                         f"arguments) here; take N at most {len(plan)}")
    return plan[index - 1::count]


def _cheap(space) -> dict:
    """The smallest value of every integer parameter: small blocks keep the simulator's Python threads few."""
    return {name: (min(p.values),) for name, p in space.params.items() if isinstance(p.values[0], int)}


def selftest(small: bool = False, kinds=None, dtypes=None, out=None,
             compile_timeout_s: float = COMPILE_TIMEOUT_S, part: tuple[int, int] = (1, 1)) -> bool:
    """Check the families ``kinds`` (default: the built-in ones) in ``dtypes`` (default: each family's own);
    True when every check passed. ``part`` (i, n): only the i-th of n interleaved shares of the cases (``plan_part``).

    On the GPU every variant is compiled ahead in parallel; one whose compile takes longer than
    ``compile_timeout_s`` (the tuner's default limit, so tuning never picks it either) is named and not checked.
    """
    out = sys.stdout if out is None else out  # the stdout of the call, not of the import
    from ..core.device import current_device
    from ..core.registry import BUILTIN

    rng = np.random.default_rng()
    kinds = tuple(kinds or BUILTIN)
    plan = plan_part(plan_for(kinds, dtypes, small, rng, None if small else current_device()), *part)
    if part != (1, 1):
        print(f"part {part[0]} of {part[1]}: {len(plan)} cases (family, dtype, arguments)", file=out, flush=True)
    if not small:
        plan = compile_ahead(plan, compile_timeout_s, out)
    return check_plan(plan, rng, out)


def check_plan(plan, rng: np.random.Generator, out=None) -> bool:
    """Check every (kind, dtype, arguments, shapes, sample) of the plan; print failures as they come and a summary."""
    out = sys.stdout if out is None else out  # the stdout of the call, not of the import
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
    as they were before the call. Not where the output's dtype differs from the input's (an int32 sum's int64
    result), which no buffer can be both."""
    if problem.out_dtype != problem.dtype:
        return None

    inst = Instance(problem, rng)
    case, args = inst.cases[0]
    host = case.inputs[0]
    size = int(np.prod(problem.out_shape))
    buffer = arrays.host_to_device(np.concatenate([host.ravel(order="K"),
                                                   np.zeros(max(0, size - host.size), host.dtype)]))
    first = buffer[:host.size]
    if host.flags.c_contiguous or host.flags.f_contiguous:
        first = first.reshape(host.shape, order="F" if np.isfortran(host) else "C")
    else:  # a stack of transposed matrices: its memory order (ravel "K"), viewed as the same stack
        order = arrays.dense_order(host)
        first = arrays.permuted(first.reshape(tuple(host.shape[a] for a in order)),
                                tuple(int(a) for a in np.argsort(order)))
    out = buffer[:size].reshape(problem.out_shape)
    kernel(first, *args[1:], out=out)
    return problem.impl.verify(problem, case, arrays.device_to_host(out), rng)


def compile_ahead(plan, timeout_s: float, out=None) -> list:
    """Compile every variant in parallel CPU processes first (storing their code), as the tuner does; the
    plan without the variants the tuner would never pick, which are named: those whose compile took longer than
    ``timeout_s`` and those the compile step prunes (a spilling tensor-core variant). A variant that fails to
    compile stays in the plan, so that its checks fail."""
    out = sys.stdout if out is None else out  # the stdout of the call, not of the import
    import os
    from concurrent.futures import as_completed

    from ..core.device import selected_gpus
    from ..tuning.records import job_for
    from ..tuning.worker import CompilePool

    jobs = {(i, j): job_for(Problem(kind, shapes[0], dtype, args), params)
            for i, (kind, dtype, args, shapes, sample) in enumerate(plan) for j, params in enumerate(sample)}
    t0, done, spills, dropped = time.time(), 0, 0, set()
    print(f"compiling {len(jobs)} variants ({timeout_s:.0f} s at most each)", file=out, flush=True)
    with CompilePool(max(1, (os.cpu_count() or 2) - 1), devices=selected_gpus()) as pool:
        futures = {pool.submit(compile_within, job, timeout_s): key for key, job in jobs.items()}
        for future in as_completed(futures):
            key, report, done = futures[future], future.result(), done + 1
            if not report.ok:
                j = jobs[key]
                if report.stage in SKIPPED_STAGES:
                    dropped.add(key)
                    print(f"SKIP {j.family} {j.dtype} {j.args} {j.params}: {report.reason}", file=out, flush=True)
                else:  # checked all the same: its checks fail and count
                    print(f"COMPILE FAIL {j.family} {j.dtype} {j.args} {j.params}: {report.reason}", file=out, flush=True)
            elif report.resources and report.resources["spill_stores"]:
                spills += 1
            if done % 25 == 0 or done == len(jobs):
                print(f"compiled {done}/{len(jobs)} in {time.time() - t0:.0f} s", file=out, flush=True)
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s ({spills} spill registers); "
          f"{len(dropped)} skipped (not checked)", file=out, flush=True)
    return [(kind, dtype, args, shapes, [p for j, p in enumerate(sample) if (i, j) not in dropped])
            for i, (kind, dtype, args, shapes, sample) in enumerate(plan)]


class CompileTimeout(BaseException):
    """A compile stopped at its time limit."""


_interrupted = {"numba": False}


def compile_within(job, timeout_s: float):
    """``evaluate.compile_variant`` in a compile process, stopped by an alarm after ``timeout_s`` (the process
    goes on to its next job).

    The alarm stops Numba wherever it is, which can leave its state half-changed: a later compile in the same
    process then failed ("generator raised StopIteration"), and the selftest named a variant that compiles as
    failing. So once a compile was stopped here, this process compiles each later job in a fresh process."""
    import signal

    from ..tuning.evaluate import compile_variant
    from ..tuning.records import CompileResult
    from ..tuning.worker import CompilePool

    if _interrupted["numba"]:
        with CompilePool(1) as pool:
            return pool.submit(compile_within, job, timeout_s).result()

    def stop(signum, frame):
        raise CompileTimeout  # not an Exception: compile_variant and Numba catch those

    timed_out = CompileResult(ok=False, stage="timeout", reason=f"compile took longer than {timeout_s:.0f} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    start = time.monotonic()
    try:
        result = compile_variant(job)
    except CompileTimeout:
        _interrupted["numba"] = True
        return timed_out
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # the alarm can land where code that catches everything swallows it: the clock decides, and this process's
    # Numba state is as suspect as after an interruption
    if time.monotonic() - start > timeout_s:
        _interrupted["numba"] = True
        return timed_out
    return result
