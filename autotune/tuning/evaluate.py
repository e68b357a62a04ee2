"""The two stages a sampled configuration goes through after validation: compile, then verify and time.

``compile_variant`` runs in a pool of CPU processes ahead of the GPU: it renders the source, asks the real
compiler for registers and spills (nvJitLink, no GPU needed) and, on a GPU machine, compiles the kernel once
so that the code cache (autotune/runtime/code_cache.py) holds it when the GPU worker loads it.
``measure_variant`` runs in the GPU worker process (``worker.py``): it builds the kernel, checks its output with
the family's oracle on NaN-poisoned outputs, and only then times it. Both take a ``Job`` and return a record (``records.py``).
"""
from __future__ import annotations

import time
import traceback
from typing import Any

import numpy as np

from ..core import backend
from ..core.device import gpu_available
from ..core.problem import Problem
from ..core.space import load_space
from ..runtime.build import build_kernel
from .instance import Instance
from .records import CompileResult, Job, Measurement


def _build(job: Job):
    job.problem()  # loads the job's family into this process
    space = load_space(job.family, job.space)
    return build_kernel(job.family, job.params, job.dtype, space=space, **job.args)


def compile_variant(job: Job) -> CompileResult:
    """Compile one variant ahead; registers and spills from the real compiler (no GPU needed)."""
    t0 = time.perf_counter()
    try:
        if backend.simulator():
            _build(job)  # renders and imports the simulator source: what can fail without a GPU
            return CompileResult(ok=True, compile_s=time.perf_counter() - t0)
        from ..runtime.compiler import DEFAULT_CC, compile_ahead_report

        # on a GPU this also stores the compiled code for the GPU worker
        report = compile_ahead_report(_build(job), None if gpu_available() else DEFAULT_CC)
        if job.params.get("MMA") and report.spills:
            return CompileResult(ok=False, stage="pruned", reason=f"mma variant spills ({report.spill_stores} bytes): "
                                 "spilling mma variants have computed wrong results",
                                 compile_s=time.perf_counter() - t0)
        return CompileResult(ok=True, resources=report.as_dict(), compile_s=time.perf_counter() - t0)
    except Exception as exc:  # a variant that does not compile is a failed trial, never a crash of the tuner
        return CompileResult(ok=False, reason=f"compile failed: {type(exc).__name__}: {exc}",
                             detail=traceback.format_exc(limit=3), compile_s=time.perf_counter() - t0)


def compile_for(job: Job, cc: tuple[int, int]) -> CompileResult:
    """Compile one variant for the compute capability ``cc`` with the real compiler, no GPU needed (in a process
    that does not run the simulator: ``worker.compile_for_target``), with the fixed kernels it launches."""
    from ..runtime.compiler import compile_ahead_report

    t0 = time.perf_counter()
    try:
        report = compile_ahead_report(_build(job), cc)
    except Exception as exc:
        return CompileResult(ok=False, reason=f"{type(exc).__name__}: {exc}", detail=traceback.format_exc(limit=3),
                             compile_s=time.perf_counter() - t0)
    return CompileResult(ok=True, resources=report.as_dict(), compile_s=time.perf_counter() - t0)


_instances: dict[str, Instance] = {}


def instance_for(problem: Problem) -> Instance:
    """The problem's device data, made once per worker process from a fresh seed."""
    if problem.key not in _instances:
        _instances.clear()  # one problem's data at a time: large problems fill the device
        _instances[problem.key] = Instance(problem, np.random.default_rng())
    return _instances[problem.key]


def measure_variant(job: Job) -> Measurement:
    """Build, verify, then time one variant on this process's GPU (or the simulator)."""
    simulator = backend.simulator()
    clock = [time.perf_counter()]
    loaded = []
    try:
        kernel = _build(job)
        if not simulator:
            from ..runtime.compiler import load_ahead

            loaded = load_ahead(kernel)  # the code the compile pool stored, or Numba's disk cache
    except Exception as exc:
        return _failed("load", exc)
    clock.append(time.perf_counter())
    try:
        problem = job.problem()
        inst = instance_for(problem)
        error = inst.check(kernel)
    except Exception as exc:
        return _failed("run", exc)
    if error:
        return Measurement(ok=False, stage="verify", reason=f"wrong result: {error}")
    clock.append(time.perf_counter())
    try:
        timing = timed(inst, kernel, job.rep_ms, job.give_up_ms)
    except Exception as exc:
        return _failed("run", exc)
    clock.append(time.perf_counter())
    return Measurement(ok=True, stage="measured", timing=timing.as_dict(), meaningful=timing.meaningful,
                       rate=problem.rate(timing.median_ms / 1e3),
                       measure_s=dict(zip(("load", "check", "time"), _intervals(clock))),
                       cache_hits=_cache_hits(kernel, loaded) if not simulator else None)


def _cache_hits(kernel, loaded: list) -> int | None:
    """How many of the variant's kernels this worker found compiled: loaded from stored code, or from Numba's disk
    cache where their code cannot be cached."""
    from_code = sum(1 for code in loaded if code is not None and code.origin != "compiled")
    if all(code is not None for code in loaded):
        return from_code
    stats = getattr(kernel.entry, "stats", None)
    return from_code + (int(sum(stats.cache_hits.values())) if stats is not None else 0)


def checked_timing(problem: Problem, params: dict[str, Any], rep_ms: float | None = None,
                   give_up_ms: float | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(the timing, None) of ``params`` on fresh data of the problem's shape in this process, after its output was
    checked against the family's oracle (output poisoned first); (None, why) where it is wrong or fails to build or
    run. ``rep_ms``: as ``budget`` takes it; ``give_up_ms``: as ``measure.bench`` takes it."""
    try:
        kernel = build_kernel(problem.family, params, problem.dtype, **problem.args)
        inst = Instance(problem, np.random.default_rng())
        error = inst.check(kernel)
        if error:
            return None, f"is wrong: {error}"
        timing = timed(inst, kernel, rep_ms, give_up_ms)
    except Exception as exc:
        return None, f"failed: {type(exc).__name__}: {exc}"
    return timing.as_dict(), None


def timed(inst: Instance, kernel, rep_ms: float | None, give_up_ms: float | None):
    """``measure.bench`` of the kernel on the instance's timing data, L2 flushed before each run on a GPU."""
    from .measure import bench, l2_flusher

    simulator = backend.simulator()
    return bench(lambda: inst.run(kernel, timing=True), flush=None if simulator else l2_flusher(),
                 simulator=simulator, give_up_ms=give_up_ms, **budget(rep_ms))


def budget(rep_ms: float | None) -> dict[str, float]:
    """``bench``'s budget for a job: its default, or ``rep_ms`` of timed runs after a fifth of that of warm-up, at
    most 100 runs (a cell of a cross-time matrix: a ranking among candidates needs less than a recorded time)."""
    if rep_ms is None:
        return {}
    return {"rep_ms": rep_ms, "warmup_ms": rep_ms / 5, "max_reps": 100}


def _failed(stage: str, exc: Exception) -> Measurement:
    return Measurement(ok=False, stage=stage, reason=f"failed on the device: {type(exc).__name__}: {exc}",
                       detail=traceback.format_exc(limit=3))


def _intervals(clock: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(clock, clock[1:])]
