"""What crosses process boundaries between the tuner, the compile pool and the GPU workers: small frozen records.

Each failure carries the stage where it happened, set there, so nobody has to match on its reason's text:
``compile`` (rendering or compiling failed, or the tuner's wait for a compile ran out), ``pruned`` (compiled, but
a rule rejects it: more registers than a multiprocessor has for its block, a spilling tensor-core variant),
``load`` (the kernel could not be built or loaded in the GPU process), ``verify`` (a wrong result), ``run`` (an
error or crash while running), ``timeout`` (the worker stopped answering and was restarted, or the selftest
stopped a compile at its limit).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

STAGES = ("compile", "pruned", "load", "verify", "run", "timeout")
#: Seconds a variant may take to compile before it is a failed trial ("timeout"): tune's and selftest's default.
#: The largest register tiles, fully unrolled, take minutes on a busy machine: a limit that ends only real hangs.
COMPILE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Job:
    """One configuration of one problem, as a fresh process can rebuild it. ``source`` loads the family there
    (its name for built-in and installed families, else the path or module it was registered from)."""

    source: str
    family: str
    shape: tuple[int, ...]
    dtype: str
    args: dict[str, Any]
    params: dict[str, Any]
    space: str | None = None
    #: the timing budget in ms (None: ``measure.bench``'s default); a cross-time matrix times many cells briefly
    rep_ms: float | None = None
    #: two first runs slower than this end the timing there (``measure.bench``): far behind the best known already
    give_up_ms: float | None = None

    def problem(self):
        from ..core.problem import Problem
        from ..core.registry import load_family

        load_family(self.source)
        return Problem(self.family, self.shape, self.dtype, self.args)


def job_for(problem, params: dict[str, Any], space_path: str | None = None, rep_ms: float | None = None,
            give_up_ms: float | None = None) -> Job:
    return Job(source=problem.impl.source or problem.family, family=problem.family, shape=tuple(problem.shape),
               dtype=problem.dtype, args=dict(problem.args), params=dict(params), space=space_path, rep_ms=rep_ms,
               give_up_ms=give_up_ms)


#: A candidate whose first two timed runs are this many times the best time known for its problem is not timed
#: further.
GIVE_UP_FACTOR = 10.0


def give_up_after(best_ms: float | None) -> float | None:
    """The ``give_up_ms`` of a job when ``best_ms`` is the best time known for its problem (None: none known)."""
    return None if best_ms is None else GIVE_UP_FACTOR * best_ms


@dataclass(frozen=True)
class CompileResult:
    """A variant compiled ahead on the CPU: its resources (registers, spills; None in the simulator) or why not."""

    ok: bool
    reason: str = ""
    resources: dict[str, Any] | None = None
    compile_s: float | None = None
    detail: str = ""
    stage: str = "compile"


@dataclass(frozen=True)
class Measurement:
    """A variant checked and timed on a GPU (or the simulator), or the stage where it failed and why."""

    ok: bool
    stage: str
    reason: str = ""
    timing: dict[str, Any] | None = None
    rate: float | None = None
    meaningful: bool = True
    measure_s: dict[str, float] | None = None
    cache_hits: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    """What the tuner tells the study about one trial: the measurement with what compiling it found."""

    ok: bool
    stage: str
    reason: str = ""
    timing: dict[str, Any] | None = None
    rate: float | None = None
    resources: dict[str, Any] | None = None
    compile_s: float | None = None
    cache_hits: int | None = None
    measure_s: dict[str, float] | None = None
    gpu: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    detail: str = ""  # a failure's traceback, logged at DEBUG; not kept in the study

    def attrs(self) -> dict[str, Any]:
        """The study's user attributes for this trial (None values left out)."""
        keys = ("stage", "resources", "timing", "rate", "reason", "compile_s", "cache_hits", "measure_s", "gpu")
        values = {k: getattr(self, k) for k in keys}
        values["reason"] = values["reason"] or None
        return {k: v for k, v in values.items() if v is not None}


def owner_here() -> str:
    """This process as the owner of a claim (a tuner's trial, a coverage run's unit): ``host:pid``, which
    ``owner_dead`` reads back."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_dead(owner: str) -> bool:
    """Whether the claim of ``owner`` (``host:pid``, as ``owner_here`` writes it) was left by a process of this host
    that no longer runs, so that it may be taken back. A process of another host cannot be checked from here, and
    an owner not of that form was not written by ``owner_here``: neither is dead."""
    host, _, pid = owner.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not process_alive(int(pid))


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (a trial or shape claimed by a dead one is taken back)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
