"""The search: an Optuna study per problem and device, fed by a compile pool and drained by GPU workers.

    sample (Optuna) -> validate (search space) -> duplicate? -> compile (CPU pool) -> verify + time (GPU worker)

A trial's outcome is always told to the study: COMPLETE with the median time, PRUNED when the configuration
breaks a constraint or a device limit (no GPU time spent), FAIL with a reason when it does not compile,
gives a wrong result, crashes or hangs its worker. Studies live in Optuna storage (a journal file by default),
so a run that is killed resumes where it stopped: trials it left running are failed and queued again.

Study parameters are indices into the search space's value lists for integer parameters (so TPE and CMA-ES
see them as ordered) and the names themselves for the others; the user attribute ``config`` holds the values.
"""
from __future__ import annotations

import importlib.util
import os
import random
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna
from optuna.trial import TrialState

from ..core import backend
from ..core.device import DeviceInfo
from ..core.log import logger
from ..core.problem import Problem
from ..core.space import SearchSpace, config_key, load_space
from ..core.timing import Timing
from .compile_queue import CompileQueue, Compiling
from .evaluate import compile_variant
from .records import COMPILE_TIMEOUT_S, Outcome, job_for
from .storage import journal_path, open_database, open_journal, open_study
from .worker import CompilePool, CompilePools, Worker, default_compile_workers

SAMPLERS = ("tpe", "random", "grid", "cmaes")
optuna.logging.set_verbosity(optuna.logging.WARNING)
MAX_REGISTERS_PER_BLOCK = 65536
STOP_JOIN_S = 30.0  # how long an interrupted run waits for a GPU thread to leave the job it was on
UNDECIDED_WAIT_S = 30.0  # a process killed between ask and writing its configuration holds others this long


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


def study_name(problem: Problem, device: DeviceInfo) -> str:
    return f"{problem.key}@{device.slug}"


def open_storage(config: TuneConfig, device: DeviceInfo, report: Callable[[str], None] = print):
    """The study storage: ``--storage URL`` (e.g. PostgreSQL), else a journal file per GPU model."""
    if config.storage:
        return open_database(config.storage)
    return open_journal(journal_path(config.state_dir, device.slug), report)


def make_sampler(name: str, seed: int, startup_trials: int = 10) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                              n_startup_trials=startup_trials)
    if name == "random" or name == "grid":  # grid: configurations are enqueued in order (see _grid)
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if importlib.util.find_spec("cmaes") is None:  # Optuna would fail only at its first sample, in a trial
            raise ValueError("the cmaes sampler needs the cmaes package: pip install \"autotune[cmaes]\"")
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


def study_params(space: SearchSpace, config: dict[str, Any]) -> dict[str, Any]:
    """The Optuna parameters that stand for a configuration (indices for integers)."""
    out = {}
    for name, value in config.items():
        values = space.params[name].values
        out[name] = values.index(value) if isinstance(values[0], int) else value
    return out


def suggest(trial: optuna.Trial, space: SearchSpace, family: dict[str, Any]) -> dict[str, Any]:
    """A configuration sampled parameter by parameter; conditional ones only where they apply."""
    chosen: dict[str, Any] = {}
    for param in space.params.values():
        if not space.applies(param, chosen, family):
            continue
        if isinstance(param.values[0], int):
            chosen[param.name] = param.values[trial.suggest_int(param.name, 0, len(param.values) - 1)]
        else:
            chosen[param.name] = trial.suggest_categorical(param.name, list(param.values))
    return chosen


class Tuner:
    """Tunes one problem on one or more GPUs of one model into one study."""

    def __init__(self, problem: Problem, config: TuneConfig, device: DeviceInfo,
                 report: Callable[[str], None] | None = None, incumbent: dict[str, Any] | None = None,
                 neighbours: list[dict[str, Any]] | None = None, name: str | None = None, storage=None):
        """``incumbent``: the database's current winner for this problem, measured first so that the run's best
        is compared with it under the same conditions (its recorded time may come from older code).
        ``neighbours``: the winners of nearby shapes, measured next. ``name``: the study's name (default: the
        problem's key at the GPU model); ``storage``: an Optuna storage to use instead of the configured one."""
        self.problem = problem
        self.incumbent = incumbent
        self.neighbours = list(neighbours or [])
        self.config = config
        self.device = device
        self.space = load_space(problem.family, config.space_path).for_dtype(problem.dtype, problem.args)
        self.report = report or logger.info
        self.name = name or study_name(problem, device)
        self.study = open_study(storage or open_storage(config, device, self.report), self.name,
                                make_sampler(config.sampler, config.seed, config.startup_trials),
                                url=None if storage else config.storage)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._flight: dict[int, tuple[optuna.Trial, dict[str, Any]]] = {}  # asked, not yet told: trial, config
        self._stopping = threading.Event()
        self._grid: Iterator[dict[str, Any]] | None = None
        self._baseline: dict[str, Any] | None = None  # the seed kernel's measurement, by a GPU thread
        self._reasons: dict[str, int] = {}  # each failure reason reported in full once: the first trial with it
        self._rng = random.Random(config.seed)
        self._barren: set = set()  # first-parameter values random_valid found no valid configuration for

    # -- bookkeeping over the study -------------------------------------------------------------
    def _counts(self) -> tuple[int, int, int]:
        trials = self.study.get_trials(deepcopy=False)
        measured = sum(t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs for t in trials)
        failed = sum(t.state == TrialState.FAIL and "stage" in t.user_attrs for t in trials)
        pruned = sum(t.state == TrialState.PRUNED for t in trials)
        return measured, failed, pruned

    def recover_interrupted(self) -> int:
        """Fail and re-queue the trials a killed run of this host left RUNNING; returns how many."""
        host = socket.gethostname()
        count = 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = str(t.user_attrs.get("owner", ""))
            owner_host, _, pid = owner.rpartition(":")
            if owner_host != host or not pid.isdigit() or _alive(int(pid)):
                continue
            self._requeue_left(t.number, t.params)
            count += 1
        return count

    def _requeue_left(self, number: int, params: dict[str, Any]) -> None:
        """Fail an unmeasured trial without a stage (so it counts neither as measured nor as a failure) and queue
        its parameters again, where it had any."""
        self.study.tell(number, state=TrialState.FAIL)
        if params:
            self.study.enqueue_trial(params, skip_if_exists=False)

    def _index_seen(self) -> None:
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            if "config" in t.user_attrs and "stage" in t.user_attrs:
                self._seen.setdefault(config_key(t.user_attrs["config"]), t.number)

    # -- sampling -------------------------------------------------------------------------------------
    def ask(self) -> tuple[optuna.Trial, dict[str, Any]] | None:
        """The next trial that needs compiling and measuring (invalid and repeated ones are told here).

        Every sampler proposal is told to the study, so the sampler learns which regions are invalid or done.
        After three rejected proposals in a row, a random valid configuration not yet measured is enqueued, so
        a sampler that keeps proposing the same point cannot stall the search.
        """
        rejected = 0
        for _ in range(500):
            with self._lock:
                if self.config.sampler == "grid":
                    self._enqueue_next_grid_point()
                elif self._refinement_due() and self._enqueue_neighbour_of_fastest():
                    pass  # the neighbour is the trial asked for next
                elif rejected and rejected % 3 == 0 and not self._enqueue_random_unseen():
                    return None
                trial = self.study.ask()
                trial.set_user_attr("owner", self.owner)
                config = suggest(trial, self.space, self.problem.args)
                trial.set_user_attr("config", config)
                problem = self._prune_reason(config)
                if problem:
                    trial.set_user_attr("reason", problem)
                    self.study.tell(trial, state=TrialState.PRUNED)
                    rejected += 1
                    continue
                earlier = self._seen.get(config_key(config))
                if earlier is None and self.config.storage:
                    earlier = self._seen_elsewhere(config, trial.number)
                if earlier is not None:
                    self._repeat(trial, earlier)
                    rejected += 1
                    continue
                self._seen[config_key(config)] = trial.number
                return trial, config
        return None

    def _refinement_due(self) -> bool:
        """Two of every three trials after the start-up ones, once the queue (starts, re-queued trials) is
        empty. Counted over the configurations the study holds, so a resumed run keeps the rhythm."""
        handed = len(self._seen)
        return (self.config.refine and handed >= self.config.startup_trials and handed % 3 != 0
                and not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def _enqueue_neighbour_of_fastest(self) -> bool:
        """Queue the first unmeasured valid neighbour (one parameter one step away, ``SearchSpace.neighbours``)
        of the fastest trial whose neighbourhood is not yet measured, if there is one."""
        done = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if "duplicate_of" not in t.user_attrs and "timing" in t.user_attrs]
        for t in sorted(done, key=lambda t: _timing(t).median_ms):
            for config in self.space.neighbours(t.user_attrs["config"], dtype=self.problem.dtype,
                                                args=self.problem.args):
                if config_key(config) not in self._seen and not self._prune_reason(config):
                    self.study.enqueue_trial(study_params(self.space, config))
                    return True
        return False

    def _seen_elsewhere(self, config: dict[str, Any], number: int) -> int | None:
        """A trial of another process sharing the storage that took the same configuration first.

        Another process may have asked for an earlier trial and not yet written its configuration; the
        answer waits for those (each is written right after its ask), else both processes would measure it.
        """
        key = config_key(config)
        deadline = time.monotonic() + UNDECIDED_WAIT_S
        while True:
            earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < number]
            for t in earlier:
                if key == config_key(t.user_attrs.get("config", {})) and \
                        (t.state == TrialState.RUNNING or "stage" in t.user_attrs):
                    return t.number
            undecided = any(t.state == TrialState.RUNNING and "config" not in t.user_attrs for t in earlier)
            if not undecided or time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def _enqueue_random_unseen(self) -> bool:
        """Queue a valid configuration not yet seen: a random draw (``SearchSpace.random_valid``: the strategy
        first, so that tiled configurations come up where few of them are valid), else a one-step neighbour of a
        configuration seen (in random order), the guarantee where draws keep finding seen ones. False only when
        neither finds one."""
        for _ in range(1000):
            config = self.space.random_valid(self._rng, dtype=self.problem.dtype, args=self.problem.args,
                                             barren=self._barren)
            if config is None:
                break
            if config_key(config) not in self._seen:
                self.study.enqueue_trial(study_params(self.space, config))
                return True
        return self._enqueue_unseen_neighbour()

    def _enqueue_unseen_neighbour(self) -> bool:
        seen = [t.user_attrs["config"] for t in self.study.get_trials(deepcopy=False)
                if "config" in t.user_attrs and config_key(t.user_attrs["config"]) in self._seen]
        self._rng.shuffle(seen)
        for config in seen:
            for neighbour in self.space.neighbours(config, dtype=self.problem.dtype, args=self.problem.args):
                if config_key(neighbour) not in self._seen and not self._prune_reason(neighbour):
                    self.study.enqueue_trial(study_params(self.space, neighbour))
                    return True
        return False

    def _prune_reason(self, config: dict[str, Any]) -> str | None:
        try:
            self.space.validate(config, dtype=self.problem.dtype, args=self.problem.args, fill_defaults=False)
        except ValueError as exc:
            return str(exc)
        return self.problem.impl.unfit_for(config, self.device)

    def _repeat(self, trial: optuna.Trial, earlier: int) -> None:
        """A configuration measured before (or being measured by another process): answered from the study,
        not run again."""
        before = self.study.trials[earlier]
        trial.set_user_attr("duplicate_of", earlier)
        if before.state == TrialState.RUNNING:
            trial.set_user_attr("reason", f"same configuration as trial {earlier}, still running elsewhere")
            self.study.tell(trial, state=TrialState.PRUNED)
        elif before.state == TrialState.COMPLETE:
            self.study.tell(trial, before.value)
        else:
            trial.set_user_attr("reason", f"same configuration as trial {earlier}, which failed")
            self.study.tell(trial, state=TrialState.FAIL)

    def _enqueue_starts(self) -> None:
        """The database's current winner first, then its nearby shapes' winners and the search space's starting
        configurations (those valid for this problem and not in the study yet), so the sampler begins from
        known-good regions; on resume nothing is added twice.

        Each start is first tried in the form its family fits best to this problem (e.g. split-K where its tiles
        leave SMs idle), one per start, then in its other forms; all of them together take at most half of the
        trials, so that the sampler and the refinement around the fastest get the rest (the refinement reaches
        the other forms as one-step neighbours)."""
        if self.config.sampler == "grid":
            return
        own = list(self.space.starts) if self.config.starts else []
        first, later = [], []
        for start in self.neighbours + own:
            variants = self._start_variants(start)
            first += variants[:1]
            later += variants[1:]
        incumbent = [c for c in [self._validated(self.incumbent)] if c] if self.incumbent else []
        queued: set[str] = set()
        for config in incumbent + first + later:
            key = config_key(config)
            if len(queued) >= max(1, self.config.trials // 2):
                break
            if key not in self._seen and key not in queued:
                self.study.enqueue_trial(study_params(self.space, config), skip_if_exists=True)
                queued.add(key)

    def _validated(self, start: dict[str, Any]) -> dict[str, Any] | None:
        return self.space.checked_or_none(start, dtype=self.problem.dtype, args=self.problem.args)

    def _start_variants(self, start: dict[str, Any]) -> list[dict[str, Any]]:
        """A start in the forms its family fits to this problem, best fit first (e.g. split-K for a matmul too
        small to fill the GPU), the start as given among them or last; only those valid for the problem."""
        config = self._validated(start)
        if config is None:
            return []
        forms = self.problem.impl.problem_starts(config, self.problem, self.device, self.space)
        return [c for c in forms if not self._prune_reason(c)] + ([] if config in forms else [config])

    def _enqueue_next_grid_point(self) -> None:
        if self._grid is None:
            self._grid = iter(self.space.configurations(self.problem.args))
        for config in self._grid:
            if config_key(config) in self._seen or self._prune_reason(config):
                continue
            self.study.enqueue_trial(study_params(self.space, config))
            return

    # -- the pipeline --------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Before the first ask: re-queue what a killed run left, learn what the study holds, queue the starts."""
        recovered = self.recover_interrupted()
        if recovered:
            self.report(f"resumed: {recovered} interrupted trial(s) queued again")
        self._index_seen()
        self._enqueue_starts()

    def run(self, pools: CompilePools | None = None) -> TuneResult:
        """Tune the problem: compiles in ``pools``' warmed pool (kept for the next problem when none is left
        running), else in a pool of its own."""
        cfg = self.config
        self.prepare()
        start = time.monotonic()
        measured_before, _, _ = self._counts()
        deadline = start + cfg.timeout_s if cfg.timeout_s else None
        simulator = backend.simulator()
        workers = [Worker(device=d, timeout_s=cfg.job_timeout_s, simulator=simulator) for d in cfg.devices]
        pool = pools.get() if pools else CompilePool(cfg.compile_workers)
        compiles = CompileQueue(lambda job: pool.submit(compile_variant, job), cfg.compile_workers + len(workers),
                                cfg.compile_timeout_s)
        if cfg.baseline:
            self._submit_seed(compiles)
        threads = [threading.Thread(target=self._gpu_loop, args=(w, compiles), daemon=True) for w in workers]
        for t in threads:
            t.start()
        try:
            self._feed(compiles, deadline)
        except BaseException:
            self._stop_now(pool, workers, compiles)
            raise
        finally:
            compiles.close(len(threads))
            for t in threads:
                t.join(STOP_JOIN_S if self._stopping.is_set() else None)
            for w in workers:
                w.close()
            if pools:
                pools.release(pool)
            else:
                pool.stop()
            if self._stopping.is_set():
                self._requeue_in_flight()
        measured, _, _ = self._counts()
        return self.result(self._baseline, time.monotonic() - start, measured - measured_before)

    def _feed(self, compiles: CompileQueue, deadline: float | None) -> None:
        asks = 0
        while True:
            if deadline and time.monotonic() > deadline:
                self.report("time limit reached; measuring what is compiled, queueing the rest for later")
                self._requeue_waiting(compiles)
                self._wait_for_flight()
                return
            with self._lock:
                measured, failed, _ = self._counts()
                busy = len(self._flight)
            if measured + failed + busy >= self.config.trials:
                if busy == 0:
                    return
                time.sleep(0.05)
                continue
            if not compiles.reserve(timeout_s=0.2):  # as many in flight as allowed: look at the clock again
                continue
            asked = self.ask()
            asks += 1
            if asked is None or asks > 50 * self.config.trials:
                compiles.release()
                self.report("the search space is exhausted (every sample was invalid or seen already)")
                self._wait_for_flight()
                return
            trial, config = asked
            with self._lock:
                self._flight[trial.number] = (trial, config)
            the_job = job_for(self.problem, config, self.config.space_path)
            compiles.submit((trial, config, the_job), the_job)

    def _wait_for_flight(self) -> None:
        """Until the GPU threads have told (or queued again) every trial in flight."""
        while True:
            with self._lock:
                if not self._flight:
                    return
            time.sleep(0.05)

    def _requeue_waiting(self, compiles: CompileQueue) -> None:
        """Trials compiled or compiling but not yet measured: failed without a stage (so they count neither as
        measured nor as failures) and enqueued again, so the next run measures them first."""
        for payload in compiles.take_waiting():
            if isinstance(payload, Seed):  # not a trial: the run's result goes without the seed's time
                continue
            trial, config, _ = payload
            with self._lock:
                self._requeue(trial, config)

    def _requeue(self, trial: optuna.Trial, config: dict[str, Any]) -> None:
        """``_requeue_left`` for a trial of this run, which is then neither seen nor in flight. Called under the
        lock."""
        self._requeue_left(trial.number, trial.params)
        self._seen.pop(config_key(config), None)
        self._flight.pop(trial.number, None)

    def _stop_now(self, pool, workers: list[Worker], compiles: CompileQueue) -> None:
        """The run is being interrupted (Ctrl-C, or an error of ours): no outcome is told from here on, the
        compiles and the measurement in progress are ended, and the compiled variants waiting for a GPU are
        dropped, so that the GPU threads see the end of the queue at once."""
        self._stopping.set()
        compiles.take_waiting()
        pool.stop()
        for w in workers:
            w.stop()

    def _requeue_in_flight(self) -> None:
        """After an interruption: every trial of this process asked but not told (in flight, or cut short in
        ``ask``) is queued again, to be measured first when the run is resumed; nothing half-done is recorded
        as a failure."""
        with self._lock:
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if t.user_attrs.get("owner") == self.owner:
                    self._requeue_left(t.number, t.params)
            self._flight.clear()

    def _gpu_loop(self, worker: Worker, compiles: CompileQueue) -> None:
        while True:
            item = compiles.get()
            if item is None:
                return
            try:
                if isinstance(item.payload, Seed):
                    self._baseline = self._measure_seed(worker, item)
                else:
                    self._measure_and_tell(worker, item)
            finally:
                compiles.release()

    def _measure_and_tell(self, worker: Worker, item: Compiling) -> None:
        trial, config, the_job = item.payload
        try:
            outcome = self._evaluate(worker, the_job, item)
        except BaseException as exc:  # a bug of ours must not leave the trial running or the count wrong
            outcome = Outcome(ok=False, stage="run", reason=f"tuner error: {type(exc).__name__}: {exc}")
        with self._lock:  # told and no longer in flight in one step, as _feed reads both under the lock
            if self._stopping.is_set():  # what an interruption cut short is not an outcome
                return
            if outcome is None:  # the run stopped while it compiled: measured first next run
                self._requeue(trial, config)
                return
            try:
                self.tell(trial, replace(outcome, gpu=worker.device))
            finally:
                self._flight.pop(trial.number, None)

    def _evaluate(self, worker: Worker, the_job, item: Compiling) -> Outcome | None:
        """The trial's outcome; None where its compile was cancelled because the run stopped (nothing to tell)."""
        if item.timed_out:
            return Outcome(ok=False, stage="compile", compile_s=self.config.compile_timeout_s,
                           reason=f"compile took longer than {self.config.compile_timeout_s:.0f} s")
        if item.future.cancelled():
            return None
        try:
            built = item.future.result()
        except Exception as exc:  # the compile process itself died
            return Outcome(ok=False, stage="compile", reason=f"compile process failed: {exc}")
        if not built.ok:
            return Outcome(ok=False, stage=built.stage, reason=built.reason, compile_s=built.compile_s,
                           detail=built.detail)
        resources = built.resources
        if resources:
            threads = self.problem.impl.threads(the_job.params)
            if resources["registers"] * threads > MAX_REGISTERS_PER_BLOCK:
                return Outcome(ok=False, stage="pruned", resources=resources, compile_s=built.compile_s,
                               reason=f"{resources['registers']} registers x {threads} threads exceed the "
                                      f"{MAX_REGISTERS_PER_BLOCK} registers of a multiprocessor")
        m = worker.run(the_job)
        return Outcome(ok=m.ok, stage=m.stage, reason=m.reason, timing=m.timing, rate=m.rate, resources=resources,
                       compile_s=built.compile_s, cache_hits=m.cache_hits, measure_s=m.measure_s, detail=m.detail)

    def tell(self, trial: optuna.Trial, outcome: Outcome) -> None:
        for key, value in outcome.attrs().items():
            trial.set_user_attr(key, value)
        if outcome.ok:
            self.study.tell(trial, outcome.timing["median_ms"])
        elif outcome.stage == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        self._progress(trial.number, outcome)

    def _progress(self, number: int, outcome: Outcome) -> None:
        measured, failed, _ = self._counts()
        best = self.best_trial()
        best_text = f"best {best.user_attrs['timing']['median_ms']:.4g} ms (#{best.number})" if best else "best -"
        bar = _bar(measured + failed, self.config.trials)
        if outcome.ok:
            what = f"{outcome.timing['median_ms']:.4g} ms {outcome.rate:.4g} {self.problem.unit}"
        else:
            what = self._failure_text(number, outcome)
        self.report(f"{bar} {measured + failed}/{self.config.trials} #{number} {what} | {best_text}")

    def _failure_text(self, number: int, outcome: Outcome) -> str:
        """A failed trial's reason, in full the first time it is seen in this run and as a reference to that trial
        after (a template error fails every variant alike); its traceback at DEBUG (``-v``)."""
        reason = f"{outcome.stage}: {outcome.reason or 'failed'}"
        first = self._reasons.setdefault(reason, number)
        if first != number:
            return f"{outcome.stage}: the same failure as #{first}"
        if outcome.detail:
            logger.debug(outcome.detail)
        return reason if len(reason) <= 400 else reason[:400] + "..."

    def _submit_seed(self, compiles: CompileQueue) -> None:
        """Queue the seed kernel's compile before any variant's: it compiles beside theirs, and a GPU thread times
        it when it is ready, as it would a variant (``_measure_seed``). Nothing where the family has no seed."""
        params = self._baseline_params()
        if params is not None and compiles.reserve(timeout_s=0):
            the_job = job_for(self.problem, params, None)
            compiles.submit(Seed(params, the_job), the_job)

    def _measure_seed(self, worker: Worker, item: Compiling) -> dict[str, Any] | None:
        """The seed kernel's timing, its compile and measurement judged as a variant's (``_evaluate``); None (said)
        where it fails, None where the run stopped while it compiled. Never raises: the GPU thread must go on to
        the variants, or the feed would wait on a full queue."""
        if self._stopping.is_set():
            return None
        params = item.payload.params
        try:
            outcome = self._evaluate(worker, item.payload.job, item)
        except Exception as exc:
            outcome = Outcome(ok=False, stage="run", reason=f"{type(exc).__name__}: {exc}")
        if outcome is None:
            return None
        if not outcome.ok:
            self.report(f"baseline {params} failed: {outcome.reason or outcome.stage + ' failed'}")
            return None
        return {"params": params, **outcome.timing, "rate": outcome.rate}

    def _baseline_params(self) -> dict[str, Any] | None:
        """The seed kernel's configuration (parameters the family does not use are left out); None where the
        family has none."""
        if not self.problem.impl.baseline:
            return None
        return load_space(self.problem.family).restrict(dict(self.problem.impl.baseline), dtype=self.problem.dtype, args=self.problem.args)

    # -- the outcome ---------------------------------------------------------------------------------
    def best_trial(self) -> optuna.trial.FrozenTrial | None:
        """The earliest trial that no later one beats by more than the measured noise."""
        best = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "duplicate_of" in t.user_attrs or "timing" not in t.user_attrs:
                continue
            if best is None or _timing(t).faster_than(_timing(best)):
                best = t
        return best

    def result(self, baseline=None, elapsed: float = 0.0, measured_now: int = 0) -> TuneResult:
        measured, failed, pruned = self._counts()
        best = self.best_trial()
        failures = [f"#{t.number} {t.user_attrs.get('stage')}: {t.user_attrs.get('reason', '')[:160]}"
                    for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                    if "stage" in t.user_attrs]
        return TuneResult(
            problem=self.problem, study_name=self.name,
            best=best.user_attrs["config"] if best else None,
            timing=best.user_attrs["timing"] if best else None,
            rate=best.user_attrs["rate"] if best else None,
            resources=best.user_attrs.get("resources") if best else None,
            baseline=baseline, measured=measured, failed=failed, pruned=pruned,
            per_minute=60.0 * measured_now / elapsed if elapsed > 0 else 0.0,
            meaningful=not backend.simulator(), failures=failures,
            incumbent_measured=self._incumbent_measured())

    def _incumbent_measured(self) -> bool:
        if not self.incumbent:
            return False
        try:
            key = config_key(self.space.validate(self.incumbent, dtype=self.problem.dtype, args=self.problem.args))
        except ValueError:
            return False
        return any(t.state == TrialState.COMPLETE and config_key(t.user_attrs.get("config", {})) == key
                   for t in self.study.get_trials(deepcopy=False))


@dataclass(frozen=True)
class Seed:
    """The seed kernel's compile in the queue (its payload), told apart from a trial's."""

    params: dict[str, Any]
    job: Any


def _timing(t: optuna.trial.FrozenTrial) -> Timing:
    return Timing.from_dict(t.user_attrs["timing"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = min(width, int(width * done / max(total, 1)))
    return "[" + "#" * filled + "." * (width - filled) + "]"
