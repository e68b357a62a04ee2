"""``autotune coverage``: one family, dtype and arguments measured over a documented shape set, on every GPU given,
so that a rule can be fitted for the shapes nobody tuned (tuning/fit.py, runtime/rules.py).

Two methods, both resumable and splittable over GPUs and hosts:

- ``cross`` (default): the **cross-time matrix**. The candidates are the configurations that won entries of this
  family, dtype and arguments in the GPU model's database files (yours, then the shipped ones), the portfolios of
  their rules and of the rules of other GPU models of the same compute capability, the family's other winners and the
  search space's starting configurations (where they apply), the family's default, and where those are fewer than
  ``--min-candidates`` their one-step neighbours and a sample covering every value of every parameter. Each is fitted
  to each shape (``KernelFamily.fit_config``), every distinct fitted form is compiled once by a pool of CPU processes
  (a compiled kernel serves every shape), and each GPU then checks and briefly times every candidate on the shapes it
  takes (``--rep-ms``, 20 ms of runs a cell; two runs where both are ten times the row's fastest so far). The work
  waits on the GPUs rather than on compiles, so it scales with them.
- ``tune``: a search per shape (``Tuner``, ``--trials`` and ``--budget-s`` each), one shape per GPU at a time, each
  GPU with its share of the compile processes; slower per shape, and the way to find new winners for the matrix.

**Work units and resumption.** A shape is a unit. Units are claimed through an Optuna study (the journal file per
GPU model under ``--state-dir`` by default, or ``--storage URL`` shared by several hosts): a claim is a trial
naming the unit, and the earliest claim of a unit wins, so two GPUs or hosts never measure one shape twice (bar a
race, which only repeats work). A finished unit is a COMPLETE trial holding its row of times; a run that is
stopped or killed loses only the units in flight, which the next run of the same command takes again (a dead
process's claims on this host are released when a run starts on this host; a claim of a host that is gone for good
stays until that host runs again or ``--study`` names a new study). The candidates are fixed in the study when it
is created, so a resumed or a second host's run (of the same code and versions) fills the same columns;
``--study NAME`` starts another. A study's name ends in the digest of what makes its kernels (``provenance.py``:
templates, space, the family's code as it runs, which fits each candidate to each shape, versions): after a change,
the same command measures afresh in a new study.

**Results as they come.** Each finished shape's fastest candidate is written at once as the shape's database entry
(merged: an entry is replaced only by a faster one), and the matrix file (tuning/matrix.py) is rewritten from the
study at the end with every host's rows. ``--time-limit`` stops claiming new shapes once passed. The progress line
of each shape gives the rate in shapes per hour.
"""
from __future__ import annotations

import datetime
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from ..core import backend
from ..core.device import DeviceInfo
from ..core.problem import Problem, shape_text
from ..core.registry import family as family_named
from ..core.space import config_key, load_space
from .matrix import CrossMatrix, file_name, write_matrix
from .records import COMPILE_TIMEOUT_S, Measurement, give_up_after, job_for, owner_dead, owner_here
from .provenance import provenance, tie_study
from .storage import EarlierStudy, earlier_study, journal_path, open_database, open_journal, open_study

METHODS = ("cross", "tune")
optuna.logging.set_verbosity(optuna.logging.WARNING)
UNDECIDED_WAIT_S = 5.0  # how long a claim waits for an earlier trial, asked but not yet named, to say its unit
NOTHING_RAN = 1e30  # a finished unit's value where no candidate ran (Optuna's values are finite)
MIN_CANDIDATES = 24  # fewer known configurations than this are filled up (see _fill)


@dataclass
class CoverageConfig:
    method: str = "cross"
    shape_set: str = "coverage"
    devices: tuple[int, ...] = (0,)
    shapes: int | None = None  # the first N shapes of the set (a spread-out prefix)
    time_limit_s: float | None = None
    storage: str | None = None
    state_dir: Path = Path("autotune-out")
    compile_workers: int = 1
    db: str | None = None
    write_db: bool = True
    matrix: Path | None = None
    rep_ms: float = 20.0
    max_candidates: int = 64
    min_candidates: int = MIN_CANDIDATES
    trials: int = 40
    budget_s: float = 20.0
    study: str | None = None
    job_timeout_s: float = 90.0
    compile_timeout_s: float = COMPILE_TIMEOUT_S
    command: str = ""


@dataclass
class CoverageResult:
    case: str
    total: int  # shapes in the set (or its prefix)
    done: int  # shapes finished, by any process
    done_here: int  # shapes finished by this run
    elapsed_s: float
    matrix: Path | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def shapes_per_hour(self) -> float:
        return 3600.0 * self.done_here / self.elapsed_s if self.elapsed_s > 0 else 0.0


def default_compile_workers(gpus: int) -> int:
    """Every CPU but one per GPU thread: the matrix compiles ahead of the GPUs, and a host with more GPUs usually
    has more CPUs (no cap of 16 here, unlike a single-shape search)."""
    return max(1, (os.cpu_count() or 2) - gpus)


def case_shapes(family: str, dtype: str, args: dict[str, Any], shape_set: str, count: int | None) -> list[tuple]:
    shapes = family_named(family).shape_set(shape_set, dtype, args)
    return shapes[:count] if count else shapes


# -- candidates -----------------------------------------------------------------------------------------
def gather_candidates(problems: list[Problem], device: DeviceInfo, files: list, limit: int,
                      least: int = MIN_CANDIDATES, same_cc: list = ()) -> list[dict[str, Any]]:
    """The configurations to time on every shape (module docstring), in this order: the database's winners of this
    family, dtype and arguments in ``files`` (this GPU model's), the portfolios of their rules, the portfolios of the
    rules for the case in ``same_cc`` (files of other GPU models of the same compute capability: configurations a
    coverage on the same architecture kept), the family's other winners (other dtypes and arguments, less the
    parameters that do not apply here), the space's starts (likewise), the family's default; then, where that makes
    fewer than ``least``, the one-step neighbours of those, a sample covering every value of every parameter and
    seeded random valid configurations. Each is valid here and runnable on the device; two that fit every shape to
    the same forms count once; at most ``limit``."""
    first = problems[0]
    impl, space = first.impl, load_space(first.family)
    same = (first.family, first.dtype, dict(first.args))
    own, others = [], []
    for db_file in files:
        for e in db_file.entries:
            if e.problem.family == first.family:
                mine = (e.problem.family, e.problem.dtype, dict(e.problem.args)) == same
                (own if mine else others).append(e.params)
    portfolios = [p for db_file in [*files, *same_cc] for r in db_file.rules
                  if r.serves(first.family, first.dtype, first.args, first.shape) for p in r.portfolio]
    raw = own + portfolios + others + list(space.starts) + [impl.default_params(p) for p in problems[:1]]
    found, signatures = [], set()

    def add(params: dict[str, Any]) -> None:
        config = space.checked_or_none(params, dtype=first.dtype, args=first.args)
        if config is None:  # another case's configuration: without the parameters that do not apply here
            try:
                config = space.restrict(params, dtype=first.dtype, args=first.args)
            except ValueError:
                return
        if impl.unfit_for(config, device):
            return
        signature = tuple(config_key(impl.fit_config(config, p, device, space)) for p in problems)
        if signature not in signatures:
            signatures.add(signature)
            found.append(config)

    for params in raw:
        if len(found) >= limit:
            return found
        add(params)
    if len(found) < min(least, limit):
        for params in _fill(space, first, list(found), least):
            if len(found) >= min(least, limit):
                break
            add(params)
    return found


def _fill(space, problem: Problem, known: list[dict[str, Any]], least: int):
    """Configurations to add where the known ones are few: the known ones' one-step neighbours (near what won),
    then a sample covering every value of every parameter, then seeded random valid configurations."""
    for config in known:
        yield from space.neighbours(config, dtype=problem.dtype, args=problem.args)
    yield from space.covering_sample(dtype=problem.dtype, args=problem.args, seed=0)[0]
    rng = random.Random(0)
    for _ in range(4 * least):
        config = space.random_valid(rng, dtype=problem.dtype, args=problem.args)
        if config is not None:
            yield config


def candidates_digest(candidates: list[dict[str, Any]]) -> str:
    """A short digest of the candidate list, kept with each row: a row is used only with the columns it measured."""
    import hashlib

    return hashlib.sha256("|".join(config_key(c) for c in candidates).encode()).hexdigest()[:16]


# -- claiming units through the study -------------------------------------------------------------------
class Units:
    """The shapes of one coverage study: which are done, and claims on the others (module docstring)."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self.owner = owner_here()
        self.lock = threading.Lock()

    def release_dead(self) -> int:
        """Fail the claims that dead processes of this host left RUNNING; returns how many."""
        count = 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if owner_dead(str(t.user_attrs.get("owner", ""))):
                self.study.tell(t.number, state=TrialState.FAIL)
                count += 1
        return count

    def finished(self) -> dict[str, optuna.trial.FrozenTrial]:
        """Unit -> its first COMPLETE trial."""
        done: dict[str, optuna.trial.FrozenTrial] = {}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            done.setdefault(str(t.user_attrs.get("unit")), t)
        return done

    def taken(self) -> set[str]:
        """Units finished or claimed by a live process."""
        return {str(t.user_attrs.get("unit")) for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)) if "unit" in t.user_attrs}

    def claim(self, unit: str) -> optuna.Trial | None:
        """A trial that owns ``unit``, or None where an earlier claim (finished or running) has it."""
        with self.lock:
            trial = self.study.ask()
            trial.set_user_attr("owner", self.owner)
            trial.set_user_attr("unit", unit)
        deadline = time.monotonic() + UNDECIDED_WAIT_S
        while True:
            earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < trial.number
                       and t.state in (TrialState.RUNNING, TrialState.COMPLETE)]
            if any(t.user_attrs.get("unit") == unit for t in earlier):
                trial.set_user_attr("lost_claim", True)
                self.study.tell(trial, state=TrialState.FAIL)
                return None
            undecided = any(t.state == TrialState.RUNNING and "unit" not in t.user_attrs for t in earlier)
            if not undecided or time.monotonic() > deadline:
                return trial
            time.sleep(0.05)

    def complete(self, trial: optuna.Trial, value: float, attrs: dict[str, Any]) -> None:
        with self.lock:
            for key, item in attrs.items():
                trial.set_user_attr(key, item)
            self.study.tell(trial, value)

    def give_back(self, trial: optuna.Trial) -> None:
        """An unfinished claim (the run is stopping): failed, so the unit is free for the next run."""
        with self.lock:
            self.study.tell(trial, state=TrialState.FAIL)


def unit_of(shape: tuple[int, ...]) -> str:
    return shape_text(shape)


# -- the run --------------------------------------------------------------------------------------------
class CoverageRun:
    """One coverage run of one family, dtype and arguments over a list of shapes (module docstring)."""

    def __init__(self, family: str, dtype: str, args: dict[str, Any], shapes: list[tuple[int, ...]],
                 config: CoverageConfig, device: DeviceInfo, report: Callable[[str], None] | None = None):
        self.problems = [Problem(family, s, dtype, args) for s in shapes]
        self.first = self.problems[0]
        self.config = config
        self.device = device
        self.report = report or (lambda line: print(line, file=sys.stderr, flush=True))
        self.space = load_space(family)
        self.case = f"{family}/{self.first.dtype}/{self.first.impl.key_tag(self.first.args)}"
        storage = open_database(config.storage) if config.storage else \
            open_journal(journal_path(config.state_dir, device.slug), self.report)
        self.provenance = provenance(self.first)
        base = config.study or f"coverage/{self.case}/{config.shape_set}/{config.method}@{device.slug}"
        name = f"{base}#{self.provenance.digest}"
        older = earlier_study(storage, base, name)
        self.study = open_study(storage, name, optuna.samplers.RandomSampler(seed=0), url=config.storage)
        self._tie_to_provenance(older)
        self.units = Units(self.study)
        self.candidates: list[dict[str, Any]] = []
        self.columns = ""  # candidates_digest of the study's candidates
        self.failures: list[str] = []
        self._done_here = 0
        self._count_lock = threading.Lock()
        self._start = time.monotonic()
        self._claimed: dict[int, optuna.Trial] = {}  # claims in flight, by trial number
        self._stopping = threading.Event()

    def _tie_to_provenance(self, older: EarlierStudy | None) -> None:
        """Record on a new study what its kernels are made with, and say so where an older study of the case
        measured kernels made otherwise (its rows are not used: a candidate's cell is the time of the kernel that
        the templates and the family's fitting made of it then)."""
        changed = tie_study(self.study, self.provenance, older)
        if changed is None:
            return
        self.report(f"{self.case}: the kernels changed since the study {older.name!r} measured {older.trials} "
                    f"shape(s) ({changed}): its rows are not used; starting {self.study.study_name!r} (the old one "
                    f"stays in the storage)")

    # -- candidates, fixed in the study ------------------------------------------------------------
    def fix_candidates(self, files: list, same_cc: list = ()) -> list[dict[str, Any]]:
        """The study's candidates: those it was created with, else gathered now and stored in it."""
        stored = self.study.user_attrs.get("candidates")
        if not stored:
            found = gather_candidates(self.problems, self.device, files, self.config.max_candidates,
                                      self.config.min_candidates, same_cc)
            self.study.set_user_attr("candidates", found)
            of = ", ".join(sorted({str(f.device.get("name")) for f in same_cc}))
            also = f" (also {of}'s: the same compute capability)" if of else ""
            self.report(f"{self.case}: {len(found)} candidates (database winners, rule portfolios{also}, the "
                        f"space's starts, the default)")
        stored = self.study.user_attrs["candidates"]  # two hosts starting at once: the one the study kept
        self.candidates = [self.space.validate(c, dtype=self.first.dtype, args=self.first.args) for c in stored]
        self.columns = candidates_digest(self.candidates)
        self.report(f"{self.case}: {len(self.candidates)} candidates, as the study holds them")
        return self.candidates

    # -- shared bookkeeping -----------------------------------------------------------------------
    def pending(self) -> list[Problem]:
        taken = self.units.taken()
        return [p for p in self.problems if unit_of(p.shape) not in taken]

    def next_problem(self, deadline: float | None) -> tuple[Problem, optuna.Trial] | None:
        """Claim the next shape no one has; None when none is left or the time limit has passed."""
        while True:
            if deadline is not None and time.monotonic() > deadline:
                return None
            left = self.pending()
            if not left or self._stopping.is_set():
                return None
            for problem in left:
                trial = self.units.claim(unit_of(problem.shape))
                if trial is not None:
                    with self._count_lock:
                        self._claimed[trial.number] = trial
                    return problem, trial

    def _complete(self, trial: optuna.Trial, value: float, attrs: dict[str, Any]) -> bool:
        """Record a finished unit, unless the run is being stopped (its claim was given back)."""
        with self._count_lock:
            if self._stopping.is_set() or self._claimed.pop(trial.number, None) is None:
                return False
        self.units.complete(trial, value, attrs)
        return True

    def _give_back_all(self) -> None:
        """The run is interrupted: every claim in flight is failed, so the next run takes those shapes again."""
        self._stopping.set()
        with self._count_lock:
            claimed, self._claimed = list(self._claimed.values()), {}
        for trial in claimed:
            self.units.give_back(trial)

    def _run_threads(self, threads: list[threading.Thread], on_stop: Callable[[], None]) -> None:
        """Start the GPU threads and wait for them; on Ctrl-C (or an error here) give the claims back first."""
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except BaseException:
            self._give_back_all()
            on_stop()
            raise

    def _finished_one(self, problem: Problem, line: str) -> None:
        with self._count_lock:
            self._done_here += 1
            done = len(self.units.finished())
            hours = (time.monotonic() - self._start) / 3600
            rate = self._done_here / hours if hours > 0 else 0.0
        self.report(f"[{done}/{len(self.problems)}] {problem.key}: {line} | {rate:.0f} shapes/h")

    def result(self) -> CoverageResult:
        return CoverageResult(case=self.case, total=len(self.problems), done=len(self.units.finished()),
                              done_here=self._done_here, elapsed_s=time.monotonic() - self._start,
                              failures=self.failures[:20])

    # -- writing ----------------------------------------------------------------------------------
    def write_entry(self, problem: Problem, params: dict[str, Any], timing: dict[str, Any], trials: int,
                    resources: dict[str, Any] | None = None) -> None:
        """Write a shape's fastest candidate, with the hash of the GPU source it measured (``source_hash``), as a
        tuning run writes its winner (report.write_results)."""
        from ..runtime.db import db_dir, db_path, parse_entry, write_entries
        from .report import measured_record

        record = measured_record(problem, params, timing, self.device, trials, resources=resources)
        path = db_path(db_dir(self.config.db), self.device.name)
        for note in write_entries(path, self.device.as_dict(), [parse_entry(record)]):
            self.report(f"  {note}")

    def matrix(self) -> CrossMatrix:
        """The matrix of every finished shape of the study (every host's), in the set's order."""
        finished = self.units.finished()
        shapes, rows, failed = [], [], {}
        for problem in self.problems:
            trial = finished.get(unit_of(problem.shape))
            if trial is None:
                continue
            cells = trial.user_attrs.get("cells", [])
            if trial.user_attrs.get("columns") != self.columns or len(cells) != len(self.candidates):
                continue  # a row measured against another candidate list
            row = len(shapes)
            shapes.append(problem.shape)
            rows.append([c if isinstance(c, (int, float)) else None for c in cells])
            failed.update({(row, i): c for i, c in enumerate(cells) if isinstance(c, str)})
        return CrossMatrix(device=self.device.as_dict(), family=self.first.family, dtype=self.first.dtype,
                           args=dict(self.first.args), shapes=shapes, candidates=self.candidates, ms=rows,
                           failed=failed, shape_set=self.config.shape_set, command=self.config.command,
                           date=datetime.date.today().isoformat())

    def matrix_path(self) -> Path:
        return self.config.matrix or Path("benchmarks") / "coverage" / file_name(self.device.slug, self.case,
                                                                                self.config.shape_set)

    # -- the cross-time matrix --------------------------------------------------------------------
    def run_cross(self, files: list, same_cc: list = ()) -> CoverageResult:
        from .worker import CompilePool, Worker

        cfg = self.config
        released = self.units.release_dead()
        if released:
            self.report(f"resumed: {released} shape(s) a stopped run had claimed are free again")
        self.fix_candidates(files, same_cc)
        pending = self.pending()
        forms = {p.shape: self._forms(p) for p in pending}
        distinct = {config_key(f): f for row in forms.values() for f in row if f is not None}
        self.report(f"{self.case}: {len(pending)} of {len(self.problems)} shapes left, {len(distinct)} distinct "
                    f"fitted configurations to compile, {len(cfg.devices)} GPU(s), {cfg.compile_workers} compile "
                    f"processes")
        deadline = time.monotonic() + cfg.time_limit_s if cfg.time_limit_s else None
        from .evaluate import compile_variant

        with CompilePool(cfg.compile_workers, warm=True, devices=cfg.devices) as pool:
            futures = {key: pool.submit(compile_variant, job_for(self.first, params))
                       for key, params in distinct.items()}
            workers = [Worker(device=d, timeout_s=cfg.job_timeout_s, simulator=backend.simulator())
                       for d in cfg.devices]
            threads = [threading.Thread(target=self._cross_loop, args=(w, futures, deadline), daemon=True)
                       for w in workers]
            try:
                self._run_threads(threads, lambda: [w.stop() for w in workers])
            finally:
                for w in workers:
                    w.close()
                pool.stop()
        return self._finish()

    def _forms(self, problem: Problem) -> list[dict[str, Any] | None]:
        """Each candidate fitted to the problem; None where the fitted form is not valid or cannot run here."""
        out = []
        for c in self.candidates:
            form = problem.impl.fit_config(c, problem, self.device, self.space)
            ok = self.space.checked_or_none(form, dtype=problem.dtype, args=problem.args)
            out.append(ok if ok is not None and problem.impl.unfit_for(ok, self.device) is None else None)
        return out

    def _cross_loop(self, worker, futures: dict[str, Any], deadline: float | None) -> None:
        while True:
            claimed = self.next_problem(deadline)
            if claimed is None:
                return
            problem, trial = claimed
            cells, best = self._measure_row(worker, problem, futures)
            times = [c for c in cells if isinstance(c, float)]
            if not self._complete(trial, min(times) if times else NOTHING_RAN,
                                  {"cells": cells, "columns": self.columns, "shape": list(problem.shape)}):
                return
            if best is None:
                self.failures.append(f"{problem.key}: no candidate ran")
                self._finished_one(problem, "no candidate ran")
                continue
            index, params, measurement = best
            self._finished_one(problem, f"fastest #{index} {measurement.timing['median_ms']:.4g} ms "
                                        f"({len(times)} of {len(cells)} candidates ran)")
            if self.config.write_db:
                self.write_entry(problem, params, measurement.timing, trials=len(times))

    def _measure_row(self, worker, problem: Problem, futures: dict[str, Any]):
        """Every candidate's fitted form checked and timed on the problem: a time (ms) or the stage where it
        failed per candidate, and the fastest (index, params, measurement) or None. A candidate far behind the
        row's fastest so far is timed by two runs (``records.give_up_after``)."""
        cells: list[float | str] = []
        best = None
        for index, form in enumerate(self._forms(problem)):
            if form is None:
                cells.append("pruned")
                continue
            future = futures.get(config_key(form))
            stage = self._compiled(future)
            if stage:
                cells.append(stage)
                continue
            fastest = best[2].timing["median_ms"] if best else None
            m: Measurement = worker.run(job_for(problem, form, rep_ms=self.config.rep_ms,
                                                give_up_ms=give_up_after(fastest)))
            if not m.ok:
                cells.append(m.stage)
                continue
            cells.append(float(m.timing["median_ms"]))
            if best is None or m.timing["median_ms"] < best[2].timing["median_ms"]:
                best = (index, form, m)
        return cells, best

    def _compiled(self, future) -> str | None:
        """None where the form compiled, else the stage to record ('compile', 'pruned', 'timeout')."""
        if future is None:
            return "compile"
        try:
            built = future.result(timeout=self.config.compile_timeout_s)
        except Exception:
            return "timeout"
        return None if built.ok else built.stage

    def _finish(self) -> CoverageResult:
        result = self.result()
        matrix = self.matrix()
        if matrix.shapes:
            path = self.matrix_path()
            write_matrix(path, matrix)
            result.matrix = path
        return result

    # -- a search per shape ------------------------------------------------------------------------
    def run_tune(self) -> CoverageResult:
        from ..runtime.db import database_folders, db_dir, db_path
        from ..runtime.lookup import tuning_starts
        from .report import write_results
        from .settings import TuneConfig
        from .tuner import Tuner
        from .worker import CompilePools

        cfg = self.config
        released = self.units.release_dead()
        if released:
            self.report(f"resumed: {released} shape(s) a stopped run had claimed are free again")
        target = db_path(db_dir(cfg.db), self.device.name)
        start_files = [target] + [db_path(f, self.device.name) for f in database_folders(cfg.db)
                                  if f != target.parent]
        deadline = time.monotonic() + cfg.time_limit_s if cfg.time_limit_s else None
        share = max(1, cfg.compile_workers // len(cfg.devices))
        self.report(f"{self.case}: {len(self.pending())} of {len(self.problems)} shapes left; a search of "
                    f"{cfg.trials} trials and at most {cfg.budget_s:g} s per shape, {len(cfg.devices)} GPU(s) with "
                    f"{share} compile processes each")

        def loop(device: int) -> None:
            with CompilePools(share, devices=(device,)) as pools:
                while True:
                    claimed = self.next_problem(deadline)
                    if claimed is None:
                        return
                    problem, trial = claimed
                    tune = TuneConfig(trials=cfg.trials, timeout_s=cfg.budget_s, devices=(device,),
                                      storage=cfg.storage, state_dir=cfg.state_dir, compile_workers=share,
                                      job_timeout_s=cfg.job_timeout_s, compile_timeout_s=cfg.compile_timeout_s)
                    incumbent, neighbours = tuning_starts(start_files, problem)
                    found = Tuner(problem, tune, self.device, incumbent=incumbent, neighbours=neighbours,
                                  report=lambda line: None).run(pools)
                    value = found.timing["median_ms"] if found.timing else NOTHING_RAN
                    if not self._complete(trial, value, {"best": found.best, "shape": list(problem.shape)}):
                        return
                    if found.best and cfg.write_db:
                        for line in write_results([found], self.device, cfg.db, tune)[:-1]:
                            self.report(f"  {line}")
                    self._finished_one(problem, f"{value:.4g} ms after {found.measured} measured "
                                                f"({found.per_minute:.0f}/min)" if found.best else "nothing ran")

        threads = [threading.Thread(target=loop, args=(d,), daemon=True) for d in cfg.devices]
        self._run_threads(threads, lambda: None)
        return self.result()


__all__ = ["CoverageConfig", "CoverageResult", "CoverageRun", "gather_candidates", "case_shapes",
           "default_compile_workers", "METHODS", "Units"]
