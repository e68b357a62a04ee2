"""The runner: one problem tuned on one or more GPUs, its variants compiled by a pool of CPU processes and checked
and timed by a worker process per GPU, the search policy (tuning/policy.py) deciding what to measure.

    policy.ask -> compile (CPU pool, ahead) -> verify + time (GPU worker) -> policy.tell

A trial's outcome is always told to the study: COMPLETE with the median time, PRUNED when the configuration
breaks a constraint or a device limit (no GPU time spent), FAIL with a reason when it does not compile,
gives a wrong result, crashes or hangs its worker. Studies live in Optuna storage (a journal file by default),
so a run that is killed resumes where it stopped: trials it left running are failed and queued again, and an
interrupted run records nothing half-done.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from ..core import backend
from ..core.constraints import SM_REGISTERS
from ..core.device import DeviceInfo
from ..core.log import logger
from ..core.problem import Problem
from ..core.space import load_space
from ..runtime.compiler import arch
from .compile_queue import CompileQueue, Compiling
from .evaluate import compile_variant
from .policy import SearchPolicy, make_sampler
from .provenance import provenance, tie_study
from .records import Outcome, give_up_after, job_for, owner_dead, owner_here
from .settings import TuneConfig, TuneResult
from .storage import EarlierStudy, earlier_study, journal_path, open_database, open_journal, open_study
from .worker import CompilePool, CompilePools, Worker, compile_for_target

CONFIRM_TRIES = 3  # best configurations tried in turn before a run gives up on a confirmed winner
LASTING_STAGES = ("compile", "load", "verify")  # failures a confirmation remembers for the study's later runs
STOP_JOIN_S = 30.0  # how long an interrupted run waits for a GPU thread to leave the job it was on


def study_name(problem: Problem, device: DeviceInfo) -> str:
    """The base of the study names of ``problem`` on a GPU model; a study's name adds its provenance's digest."""
    return f"{problem.key}@{device.slug}"


def open_storage(config: TuneConfig, device: DeviceInfo, report: Callable[[str], None] = print):
    """The study storage: ``--storage URL`` (e.g. PostgreSQL), else a journal file per GPU model."""
    if config.storage:
        return open_database(config.storage)
    return open_journal(journal_path(config.state_dir, device.slug), report)


class Tuner:
    """Tunes one problem on one or more GPUs of one model into one study."""

    def __init__(self, problem: Problem, config: TuneConfig, device: DeviceInfo,
                 report: Callable[[str], None] | None = None, incumbent: dict[str, Any] | None = None,
                 neighbours: list[dict[str, Any]] | None = None, name: str | None = None, storage=None):
        """``incumbent``: the database's current winner for this problem, measured first so that the run's best
        is compared with it under the same conditions (its recorded time may come from older code).
        ``neighbours``: the winners of nearby shapes, measured next. ``name``: the base of the study's name
        (default: the problem's key at the GPU model), to which the digest of what the study measures with is
        added (``provenance.py``): a changed kernel opens a fresh study; ``storage``: an Optuna storage to use
        instead of the configured one."""
        self.problem = problem
        self.config = config
        self.device = device
        self.space = load_space(problem.family, config.space_path).for_dtype(problem.dtype, problem.args)
        self.report = report or logger.info
        self.provenance = provenance(problem, config.space_path)
        base = name or study_name(problem, device)
        self.name = f"{base}#{self.provenance.digest}"
        url = None if storage else config.storage
        storage = storage or open_storage(config, device, self.report)
        older = earlier_study(storage, base, self.name)
        self.study = open_study(storage, self.name, make_sampler(config.sampler, config.seed, config.startup_trials),
                                url=url)
        self._tie_to_provenance(older)
        self.owner = owner_here()
        self.policy = SearchPolicy(problem, config, device, self.study, self.space, self.owner, incumbent=incumbent,
                                   neighbours=neighbours)
        self._lock = self.policy.lock  # the policy's state and the trials in flight change together under it
        self._flight: dict[int, tuple[optuna.Trial, dict[str, Any]]] = {}  # asked, not yet told: trial, config
        self._stopping = threading.Event()
        self._thread_error: BaseException | None = None  # what a GPU thread died of, raised by the feeding thread
        self._baseline: dict[str, Any] | None = None  # the seed kernel's measurement, by a GPU thread
        self._measured_here: set[int] = set()  # trials this run measured (with the code the study is tied to)
        self._reasons: dict[str, int] = {}  # each failure reason reported in full once: the first trial with it

    def _tie_to_provenance(self, older: EarlierStudy | None) -> None:
        """Record on a new study what it measures with, and say so where it replaces an older study of the same
        problem (whose trials measured another kernel and are not used)."""
        changed = tie_study(self.study, self.provenance, older)
        if changed is None:
            return
        self.report(f"the kernel changed since the study {older.name!r} measured {older.trials} trial(s) ({changed}): "
                    f"they are not used; starting a fresh study {self.name!r} (the old one stays in the storage)")

    # -- bookkeeping over the study -------------------------------------------------------------
    def recover_interrupted(self) -> int:
        """Settle the trials a killed run of this host left RUNNING; returns how many were queued again.

        One whose outcome was fully recorded (it has a stage, written last) is finished with it, so nothing
        measured is measured again or counted as a failure; the others are failed without a stage and re-queued."""
        count = 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if not owner_dead(str(t.user_attrs.get("owner", ""))):
                continue
            if "stage" in t.user_attrs:
                self.policy.finish_recorded(t.number, t.user_attrs)
            else:
                self._requeue_left(t.number, t.params)
                count += 1
        return count

    def _requeue_left(self, number: int, params: dict[str, Any]) -> None:
        """Fail an unmeasured trial without a stage (so it counts neither as measured nor as a failure) and queue
        its parameters again, where it had any."""
        if self.policy.tell_own(number, state=TrialState.FAIL) and params:  # not where another tuner told it
            self.study.enqueue_trial(params, skip_if_exists=False)

    # -- the policy's view ------------------------------------------------------------------------------
    def ask(self) -> tuple[optuna.Trial, dict[str, Any]] | None:
        """The next trial to compile and measure (``SearchPolicy.ask``)."""
        return self.policy.ask()

    # -- the pipeline --------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Before the first ask: re-queue what a killed run left, learn what the study holds, queue the starts."""
        recovered = self.recover_interrupted()
        if recovered:
            self.report(f"resumed: {recovered} interrupted trial(s) queued again")
        self.policy.prepare()

    def run(self, pools: CompilePools | None = None) -> TuneResult:
        """Tune the problem: compiles in ``pools``' warmed pool (kept for the next problem when none is left
        running), else in a pool of its own."""
        cfg = self.config
        self.prepare()
        start = time.monotonic()
        measured_before, _, _ = self.policy.counts()
        deadline = start + cfg.timeout_s if cfg.timeout_s else None
        simulator = backend.simulator()
        workers = [Worker(device=d, timeout_s=cfg.job_timeout_s, simulator=simulator) for d in cfg.devices]
        pool = pools.get() if pools else CompilePool(cfg.compile_workers, devices=cfg.devices)
        compiles = CompileQueue(lambda job: pool.submit(compile_variant, job), cfg.compile_workers + len(workers),
                                cfg.compile_timeout_s)
        if cfg.baseline:
            self._submit_seed(compiles)
        threads = [threading.Thread(target=self._gpu_loop, args=(w, compiles), daemon=True) for w in workers]
        for t in threads:
            t.start()
        try:
            self._feed(compiles, deadline)
            self._end_gpu_threads(compiles, threads)
            self._raise_thread_error()  # one that failed after the last trial in flight was told
            best = self._confirmed_best(workers[0])
        except BaseException:
            self._stop_now(pool, workers, compiles)
            raise
        finally:
            self._end_gpu_threads(compiles, threads)
            for w in workers:
                w.close()
            if pools:
                pools.release(pool)
            else:
                pool.stop()
            if self._stopping.is_set():
                self._requeue_in_flight()
        measured, _, _ = self.policy.counts()
        return self.result(self._baseline, time.monotonic() - start, measured - measured_before, best=best)

    def _end_gpu_threads(self, compiles: CompileQueue, threads: list[threading.Thread]) -> None:
        """Tell the GPU threads still running that no more variants come, and wait for them."""
        alive = [t for t in threads if t.is_alive()]
        compiles.close(len(alive))
        for t in alive:
            t.join(STOP_JOIN_S if self._stopping.is_set() else None)

    def _feed(self, compiles: CompileQueue, deadline: float | None) -> None:
        asks = 0
        while True:
            self._raise_thread_error()
            if deadline and time.monotonic() > deadline:
                self.report("time limit reached; measuring what is compiled, queueing the rest for later")
                self._requeue_waiting(compiles)
                self._wait_for_flight()
                return
            with self._lock:
                measured, failed, _ = self.policy.counts()
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
            self._raise_thread_error()
            with self._lock:
                if not self._flight:
                    return
            time.sleep(0.05)

    def _raise_thread_error(self) -> None:
        """End the run with the error a GPU thread died of, if one did."""
        if self._thread_error is not None:
            raise RuntimeError(f"a GPU thread failed: {type(self._thread_error).__name__}: "
                               f"{self._thread_error}") from self._thread_error

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
        self.policy.forget(config)
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
        """Measure what the compile queue hands over until it ends. An error that escapes (a bug of ours, or the
        storage failing) is kept for the feeding thread, which ends the run with it: a GPU thread that died
        silently would leave the run waiting for measurements forever."""
        try:
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
        except BaseException as exc:
            self._thread_error = exc

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
                if not self.tell(trial, replace(outcome, gpu=worker.device)):
                    self.policy.forget(config)  # measured elsewhere or queued again there: it may come back
            finally:
                self._flight.pop(trial.number, None)

    def _evaluate(self, worker: Worker, the_job, item: Compiling, give_up: bool = True) -> Outcome | None:
        """The trial's outcome; None where its compile was cancelled because the run stopped (nothing to tell).
        ``give_up``: a trial far behind the study's best is timed by two runs (``records.give_up_after``); the seed
        is timed in full, as its time is recorded as the baseline, whenever it comes (a resumed study has a best)."""
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
            if resources["registers"] * threads > SM_REGISTERS:
                return Outcome(ok=False, stage="pruned", resources=resources, compile_s=built.compile_s,
                               reason=f"{resources['registers']} registers x {threads} threads exceed the "
                                      f"{SM_REGISTERS} registers of a multiprocessor")
        give_up_ms = give_up_after(self._best_ms()) if give_up else None
        m = worker.run(the_job if give_up_ms is None else replace(the_job, give_up_ms=give_up_ms))
        return Outcome(ok=m.ok, stage=m.stage, reason=m.reason, timing=m.timing, rate=m.rate, resources=resources,
                       compile_s=built.compile_s, cache_hits=m.cache_hits, measure_s=m.measure_s, detail=m.detail)

    def tell(self, trial: optuna.Trial, outcome: Outcome) -> bool:
        """Tell the policy (and so the study) the outcome, and print the run's progress; False where another
        tuner of the study told the trial first, and this outcome is dropped."""
        if not self.policy.tell(trial, outcome):
            self.report(f"trial {trial.number} was told by another tuner of this study first (both took it from "
                        f"the queue, which SQLite cannot lock); this run's outcome of it is dropped")
            return False
        self._measured_here.add(trial.number)
        self._progress(trial.number, outcome)
        return True

    def _progress(self, number: int, outcome: Outcome) -> None:
        measured, failed, _ = self.policy.counts()
        best = self.policy.best_trial()
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
        where it fails, None (unsaid) where the run stopped while it compiled or ran: an interruption ends the
        worker mid-job, which is no failure of the seed. Never raises: the GPU thread must go on to the variants,
        or the feed would wait on a full queue."""
        if self._stopping.is_set():
            return None
        params = item.payload.params
        try:
            outcome = self._evaluate(worker, item.payload.job, item, give_up=False)
        except Exception as exc:
            outcome = Outcome(ok=False, stage="run", reason=f"{type(exc).__name__}: {exc}")
        if outcome is None or self._stopping.is_set():
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
        return load_space(self.problem.family).restrict(dict(self.problem.impl.baseline), dtype=self.problem.dtype,
                                                        args=self.problem.args)

    # -- the winner, confirmed -------------------------------------------------------------------------
    def _best_ms(self) -> float | None:
        """The study's best median so far (ms), which a trial far behind need not match in full timing."""
        best = self.policy.best_trial()
        return best.user_attrs["timing"]["median_ms"] if best else None

    def _confirmed_best(self, worker: Worker) -> optuna.trial.FrozenTrial | None:
        """The study's best trial once it holds with the code as it is now; None where no trial does.

        A trial measured in this run was verified by the code the study is tied to, unless that code changed
        during the run: then nothing of the run is trusted (a fresh study measures the new kernel next time). A
        trial of an earlier run or another process is verified again here (the study's provenance cannot cover
        everything a kernel depends on). With ``target_cc`` (a simulator run that writes the database) the winner
        must also compile for that real target. A trial that fails is set aside (``SearchPolicy.set_aside``) and
        the next best is tried, CONFIRM_TRIES times at most."""
        now = provenance(self.problem, self.config.space_path)
        if now.digest != self.provenance.digest:
            self.report(f"the kernel changed during this run ({now.changes_from(self.provenance.parts)}): its "
                        f"measurements may be of either version, so none is used; run again to measure the new "
                        f"kernel in a fresh study")
            return None
        for _ in range(CONFIRM_TRIES):
            best = self.policy.best_trial()
            if best is None:
                return None
            problem, lasting = self._confirmation_problem(worker, best)
            if problem is None:
                return best
            self.report(f"set aside #{best.number} {best.user_attrs['config']}: {problem}")
            self.policy.set_aside(best.number, problem, lasting=lasting)
        self.report(f"{CONFIRM_TRIES} best configurations in a row failed their confirmation; no winner this run")
        return None

    def _confirmation_problem(self, worker: Worker, best: optuna.trial.FrozenTrial) -> tuple[str | None, bool]:
        """Why ``best`` cannot be the winner with the current code (None where it can), and whether that lasts
        (a wrong result or a compile error does; a timeout or a crash of the process may not)."""
        job = job_for(self.problem, best.user_attrs["config"], self.config.space_path)
        if best.number not in self._measured_here:
            self.report(f"checking #{best.number}, measured by an earlier run or another tuner, with the current "
                        f"code")
            m = worker.run(job)
            if not m.ok:
                return f"fails with the current code ({m.stage}: {m.reason[:300]})", m.stage in LASTING_STAGES
        if self.config.target_cc:
            cc = self.config.target_cc
            self.report(f"compiling #{best.number} for {arch(cc)} with the real compiler (the simulator runs "
                        f"kernels the compiler refuses)")
            built = compile_for_target(job, cc, self.config.compile_timeout_s)
            if not built.ok:
                return f"does not compile for {arch(cc)} ({built.reason[:300]})", built.stage in LASTING_STAGES
        return None, False

    # -- the outcome ---------------------------------------------------------------------------------
    def result(self, baseline=None, elapsed: float = 0.0, measured_now: int = 0,
               best: optuna.trial.FrozenTrial | None | object = ...) -> TuneResult:
        """The run's result; ``best``: the confirmed winner (``_confirmed_best``), by default the study's best."""
        measured, failed, pruned = self.policy.counts()
        best = self.policy.best_trial() if best is ... else best
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
            incumbent_measured=self.policy.incumbent_measured())


@dataclass(frozen=True)
class Seed:
    """The seed kernel's compile in the queue (its payload), told apart from a trial's."""

    params: dict[str, Any]
    job: Any


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = min(width, int(width * done / max(total, 1)))
    return "[" + "#" * filled + "." * (width - filled) + "]"
