"""The two stages a sampled configuration goes through after validation: compile, then verify and time.

``compile_variant`` runs in a pool of CPU processes ahead of the GPU: it renders the source, asks the real
compiler for registers and spills (nvJitLink, no GPU needed) and, on a GPU machine, compiles the kernel once
so that Numba's disk cache holds it when the GPU worker loads it. ``measure_variant`` runs in the GPU worker
process (``worker.py``): it builds the kernel, checks its output against float64 NumPy on NaN-poisoned
outputs, and only then times it. Both take and return plain dicts, so they cross process boundaries.
"""
from __future__ import annotations

import time
import traceback
from typing import Any

import numpy as np

from .build import build_kernel
from .device import gpu_available, simulator_active
from .problem import Instance, Problem
from .space import load_space


def job(problem: Problem, params: dict[str, Any], space_path: str | None = None) -> dict[str, Any]:
    return {"kind": problem.kind, "shape": list(problem.shape), "dtype": problem.dtype,
            "family": dict(problem.family), "params": dict(params), "space": space_path}


def problem_of(job: dict[str, Any]) -> Problem:
    return Problem(job["kind"], tuple(job["shape"]), job["dtype"], job["family"])


_spaces: dict[tuple, Any] = {}


def _build(job: dict[str, Any]):
    key = (job["kind"], job["space"])
    if key not in _spaces:
        _spaces[key] = load_space(job["kind"], job["space"])
    return build_kernel(job["kind"], job["params"], job["dtype"], space=_spaces[key], **job["family"])


def compile_variant(job: dict[str, Any]) -> dict[str, Any]:
    """Compile report of one variant: {"ok": True, "resources": {...}} or {"ok": False, "reason": ...}."""
    t0 = time.perf_counter()
    try:
        if simulator_active():
            _build(job)  # renders and imports the simulator source: what can fail without a GPU
            return {"ok": True, "resources": None, "compile_s": time.perf_counter() - t0}
        from .compiler import ResourceReport, resource_report
        from .device import current_device

        kernel = _build(job)
        if gpu_available():
            kernel.kernel.compile(kernel.signature)  # also fills Numba's disk cache for the GPU worker
            report = ResourceReport.from_dispatcher(kernel.kernel, current_device().cc)
        else:
            report = resource_report(kernel.kernel, kernel.signature, cc=(9, 0))
        if job["params"].get("MMA") and report.spills:
            return {"ok": False, "reason": f"mma variant spills ({report.spill_stores} bytes): on the H200 two "
                    "such variants failed their checks, all others passed (benchmarks/NOTES.md item 19)"}
        return {"ok": True, "resources": report.as_dict(), "compile_s": time.perf_counter() - t0}
    except Exception as exc:  # a variant that does not compile is a failed trial, never a crash of the tuner
        return {"ok": False, "reason": f"compile failed: {type(exc).__name__}: {exc}",
                "detail": traceback.format_exc(limit=3)}


_instances: dict[tuple, Instance] = {}


def instance_for(problem: Problem) -> Instance:
    """The problem's device data, made once per worker process from a fresh seed."""
    key = (problem.key,)
    if key not in _instances:
        _instances.clear()  # one problem's data at a time: large problems fill the device
        _instances[key] = Instance(problem, np.random.default_rng())
    return _instances[key]


def measure_variant(job: dict[str, Any]) -> dict[str, Any]:
    """Build, verify, then time one variant on this process's GPU (or the simulator)."""
    from .timing import bench

    try:
        clock = [time.perf_counter()]
        kernel = _build(job)
        if not simulator_active():
            kernel.kernel.compile(kernel.signature)  # from Numba's disk cache when the compile pool filled it
        clock.append(time.perf_counter())
        problem = problem_of(job)
        inst = instance_for(problem)
        error = inst.check(kernel)
        if error:
            return {"ok": False, "reason": f"wrong result: {error}"}
        clock.append(time.perf_counter())
        flusher = None if simulator_active() else _flusher()
        timing = bench(lambda: inst.run(kernel, timing=True), flush=flusher)
        clock.append(time.perf_counter())
        result = {"ok": True, "timing": timing.as_dict(), "meaningful": timing.meaningful,
                  "rate": problem.rate(timing.median_ms / 1e3),
                  "measure_s": dict(zip(("load", "check", "time"), _intervals(clock)))}
        stats = getattr(kernel.kernel, "stats", None)
        if stats is not None:
            result["cache_hits"] = int(sum(stats.cache_hits.values()))
        return result
    except Exception as exc:
        return {"ok": False, "reason": f"failed on the device: {type(exc).__name__}: {exc}",
                "detail": traceback.format_exc(limit=3)}


def _intervals(clock: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(clock, clock[1:])]


_flusher_instance = None


def _flusher():
    global _flusher_instance
    if _flusher_instance is None:
        from .timing import L2Flusher

        _flusher_instance = L2Flusher()
    return _flusher_instance

