"""How a tuning run is set up (``TuneConfig``) and what it finds per problem (``TuneResult``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.problem import Problem
from .records import COMPILE_TIMEOUT_S
from .worker import default_compile_workers


@dataclass
class TuneConfig:
    trials: int = 60
    timeout_s: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    storage: str | None = None
    state_dir: Path = Path("autotune-out")
    devices: tuple[int, ...] = (0,)
    space_path: str | None = None
    compile_workers: int = default_compile_workers()
    job_timeout_s: float = 90.0
    compile_timeout_s: float = COMPILE_TIMEOUT_S
    baseline: bool = True
    startup_trials: int = 10  # TPE's random trials before it models the results
    starts: bool = True  # measure the search space's starting configurations first
    refine: bool = True  # after the start-up trials, two in three measure neighbours of the fastest so far
    #: a compute capability the winner must compile for with the real compiler before it counts (a simulator run
    #: that writes the database: the simulator runs kernels the compiler refuses)
    target_cc: tuple[int, int] | None = None


@dataclass
class TuneResult:
    problem: Problem
    study_name: str
    best: dict[str, Any] | None
    timing: dict[str, Any] | None
    rate: float | None
    resources: dict[str, Any] | None
    baseline: dict[str, Any] | None
    measured: int
    failed: int
    pruned: int
    per_minute: float
    meaningful: bool = True
    failures: list[str] = field(default_factory=list)
    incumbent_measured: bool = False
