"""The search policy: which configuration of a problem to measure next, and which measured one wins.

    sample (Optuna) -> validate (search space) -> duplicate? -> queue for compiling and measuring

A ``SearchPolicy`` owns one Optuna study's point of view: the starts (the database's incumbent, the nearest shapes'
winners and the space's starting configurations, each first in the form its family fits best to the problem), the
sampler's proposals, and after the start-up trials the refinement (two in three trials measure the first unmeasured
one-step neighbour of the fastest configuration). Invalid and repeated proposals are told to the study here, so
the sampler learns which regions are invalid or done, and a configuration measured once (by this process or another
sharing the storage) is never measured again. ``best_trial`` is the earliest trial that no later one beats by more
than the measured noise. The policy runs no GPU work: the runner (tuning/tuner.py) and the sweep replay
(tuning/replay.py) feed it outcomes through ``tell``.

Study parameters are indices into the search space's value lists for integer parameters (so TPE and CMA-ES see them
as ordered) and the names themselves for the others; the user attribute ``config`` holds the values.
"""
from __future__ import annotations

import datetime
import importlib.util
import random
import threading
import time
import warnings
from typing import Any, Iterator

import optuna
from optuna.trial import TrialState

from ..core.device import DeviceInfo
from ..core.problem import Problem
from ..core.space import SearchSpace, config_key
from ..core.timing import Timing
from .records import Outcome
from .settings import TuneConfig

SAMPLERS = ("tpe", "random", "grid", "cmaes")
optuna.logging.set_verbosity(optuna.logging.WARNING)
SET_ASIDE_ATTR = "set_aside"  # the study's user attribute: trial number -> why it failed its confirmation
UNDECIDED_WAIT_S = 30.0  # a process killed between ask and writing its configuration holds others this long


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


class SearchPolicy:
    """What to measure next for one problem in one study, and which measurement wins."""

    def __init__(self, problem: Problem, config: TuneConfig, device: DeviceInfo, study: optuna.Study,
                 space: SearchSpace, owner: str, incumbent: dict[str, Any] | None = None,
                 neighbours: list[dict[str, Any]] | None = None):
        """``incumbent``: the database's current winner for this problem, measured first so that the run's best
        is compared with it under the same conditions (its recorded time may come from older code).
        ``neighbours``: the winners of nearby shapes, measured next. ``owner``: this process (host:pid), written on
        each trial it asks for."""
        self.problem = problem
        self.config = config
        self.device = device
        self.study = study
        self.space = space
        self.owner = owner
        self.incumbent = incumbent
        self.neighbours = list(neighbours or [])
        self.lock = threading.Lock()  # held while asking; a runner holds it too while it changes what is in flight
        self._seen: dict[str, int] = {}
        self._grid: Iterator[dict[str, Any]] | None = None
        self._rng = random.Random(config.seed)
        self._barren: set = set()  # first-parameter values random_valid found no valid configuration for
        #: measured trials that failed their confirmation with the current code (``set_aside``), by number
        self._set_aside: dict[int, str] = _set_aside_in(study)

    def prepare(self) -> None:
        """Before the first ask: learn what the study holds, queue the starts."""
        self.index_seen()
        self._enqueue_starts()

    def forget(self, config: dict[str, Any]) -> None:
        """A configuration handed out but not measured (its trial was queued again): it may be asked for again."""
        self._seen.pop(config_key(config), None)

    def counts(self) -> tuple[int, int, int]:
        trials = self.study.get_trials(deepcopy=False)
        measured = sum(t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs for t in trials)
        failed = sum(t.state == TrialState.FAIL and "stage" in t.user_attrs for t in trials)
        pruned = sum(t.state == TrialState.PRUNED for t in trials)
        return measured, failed, pruned

    def index_seen(self) -> None:
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            if "config" in t.user_attrs and "stage" in t.user_attrs:
                self._seen.setdefault(config_key(t.user_attrs["config"]), t.number)

    def ask(self) -> tuple[optuna.Trial, dict[str, Any]] | None:
        """The next trial that needs compiling and measuring (invalid and repeated ones are told here).

        Every sampler proposal is told to the study, so the sampler learns which regions are invalid or done.
        After three rejected proposals in a row, a random valid configuration not yet measured is enqueued, so
        a sampler that keeps proposing the same point cannot stall the search.
        """
        rejected = 0
        for _ in range(500):
            with self.lock:
                if self.config.sampler == "grid":
                    self._enqueue_next_grid_point()
                elif self._refinement_due() and self._enqueue_neighbour_of_fastest():
                    pass  # the neighbour is the trial asked for next
                elif rejected and rejected % 3 == 0 and not self._enqueue_random_unseen():
                    return None
                trial = self.study.ask()
                try:
                    config = self._claim(trial)
                except optuna.exceptions.UpdateFinishedTrialError:  # another tuner popped it too, and told it
                    rejected += 1
                    continue
                if config is None:
                    rejected += 1
                    continue
                self._seen[config_key(config)] = trial.number
                return trial, config
        return None

    def _claim(self, trial: optuna.Trial) -> dict[str, Any] | None:
        """The configuration of a trial just asked, marked as this process's; None where it was told here at once
        (invalid, or a repeat). Raises optuna's UpdateFinishedTrialError where another tuner on the same study
        finished it meanwhile: SQLite has no row locks, so two processes can both pop one queued trial."""
        trial.set_user_attr("owner", self.owner)
        config = suggest(trial, self.space, self.problem.args)
        trial.set_user_attr("config", config)
        problem = self.prune_reason(config)
        if problem:
            trial.set_user_attr("reason", problem)
            self.tell_own(trial.number, state=TrialState.PRUNED)
            return None
        earlier = self._seen.get(config_key(config))
        if earlier is None:  # another tuner on the same study (any storage) may have taken it
            earlier = self._seen_elsewhere(config, trial.number)
        if earlier is not None:
            self._repeat(trial, earlier)
            return None
        return config

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
                if "duplicate_of" not in t.user_attrs and "timing" in t.user_attrs and t.number not in self._set_aside]
        for t in sorted(done, key=lambda t: _timing(t).median_ms):
            for config in self.space.neighbours(t.user_attrs["config"], dtype=self.problem.dtype,
                                                args=self.problem.args):
                if config_key(config) not in self._seen and not self.prune_reason(config):
                    self.study.enqueue_trial(study_params(self.space, config))
                    return True
        return False

    def _seen_elsewhere(self, config: dict[str, Any], number: int) -> int | None:
        """A trial of another process sharing the study (a journal file, SQLite, PostgreSQL) that took the same
        configuration first.

        Another process may have asked for an earlier trial and not yet written its configuration; the
        answer waits for those (each is written right after its ask), else both processes would measure it.
        A trial asked more than UNDECIDED_WAIT_S ago that still has no configuration was left by a process
        killed between the two writes: it is not waited for.
        """
        key = config_key(config)
        deadline = time.monotonic() + UNDECIDED_WAIT_S
        while True:
            earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < number]
            for t in earlier:
                if key == config_key(t.user_attrs.get("config", {})) and \
                        (t.state == TrialState.RUNNING or "stage" in t.user_attrs):
                    return t.number
            if not any(_undecided(t) for t in earlier) or time.monotonic() > deadline:
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
                if config_key(neighbour) not in self._seen and not self.prune_reason(neighbour):
                    self.study.enqueue_trial(study_params(self.space, neighbour))
                    return True
        return False

    def prune_reason(self, config: dict[str, Any]) -> str | None:
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
            self.tell_own(trial.number, state=TrialState.PRUNED)
        elif before.state == TrialState.COMPLETE:
            self.tell_own(trial.number, before.value)
        else:
            trial.set_user_attr("reason", f"same configuration as trial {earlier}, which failed")
            self.tell_own(trial.number, state=TrialState.FAIL)

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
        return [c for c in forms if not self.prune_reason(c)] + ([] if config in forms else [config])

    def _enqueue_next_grid_point(self) -> None:
        if self._grid is None:
            self._grid = iter(self.space.configurations(self.problem.args))
        for config in self._grid:
            if config_key(config) in self._seen or self.prune_reason(config):
                continue
            self.study.enqueue_trial(study_params(self.space, config))
            return

    def best_trial(self) -> optuna.trial.FrozenTrial | None:
        """The earliest trial that no later one beats by more than the measured noise (trials set aside left
        out)."""
        best = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "duplicate_of" in t.user_attrs or "timing" not in t.user_attrs or t.number in self._set_aside:
                continue
            if best is None or _timing(t).faster_than(_timing(best)):
                best = t
        return best

    def set_aside(self, number: int, reason: str, *, lasting: bool = True) -> None:
        """A measured trial that failed its confirmation with the current code (tuning/tuner.py): it is not the
        best again in this run and, where the failure is ``lasting`` (a wrong result, a compile error; not a
        timeout, which a busy machine may cause), in no later run on the same study (the study remembers it)."""
        self._set_aside[number] = reason
        if lasting:
            lasting_ones = {str(n): r for n, r in _set_aside_in(self.study).items()}
            self.study.set_user_attr(SET_ASIDE_ATTR, {**lasting_ones, str(number): reason})

    def incumbent_measured(self) -> bool:
        if not self.incumbent:
            return False
        try:
            key = config_key(self.space.validate(self.incumbent, dtype=self.problem.dtype, args=self.problem.args))
        except ValueError:
            return False
        return any(t.state == TrialState.COMPLETE and config_key(t.user_attrs.get("config", {})) == key
                   for t in self.study.get_trials(deepcopy=False))

    def tell(self, trial: optuna.Trial, outcome: Outcome) -> bool:
        """Record the outcome on the trial and tell the study: COMPLETE with the median, PRUNED, or FAIL; False
        where another tuner on the same study finished the trial first (both popped it from the queue, which
        SQLite cannot lock), and this outcome is dropped.

        The stage is written last, so that a trial holding one holds its whole record: a run killed between the
        writes leaves a RUNNING trial that ``finish_recorded`` completes, or one without a stage that is measured
        again, never a half record counted as a failure."""
        attrs = outcome.attrs()
        stage = attrs.pop("stage")
        try:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            trial.set_user_attr("stage", stage)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False
        return self.finish_recorded(trial.number, {**attrs, "stage": stage})

    def finish_recorded(self, number: int, attrs: dict[str, Any]) -> bool:
        """Tell the study how a trial whose outcome is recorded in ``attrs`` ended: COMPLETE with the median,
        PRUNED, or FAIL (``tell_own``)."""
        if attrs["stage"] == "measured":
            return self.tell_own(number, attrs["timing"]["median_ms"])
        if attrs["stage"] == "pruned":
            return self.tell_own(number, state=TrialState.PRUNED)
        return self.tell_own(number, state=TrialState.FAIL)

    def tell_own(self, number: int, value: float | None = None, state: TrialState | None = None) -> bool:
        """Tell the study how trial ``number`` ended; False, and nothing told, where another tuner on the same
        study finished it first. Both may hold it: SQLite has no row locks, so two processes can pop one queued
        trial, and optuna's check that a trial is still running and its write are two steps."""
        try:
            self.study.tell(number, value, state=state)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            if not self._finished(number):
                raise
            return False
        return True

    def _finished(self, number: int) -> bool:
        return self.study.get_trials(deepcopy=False)[number].state.is_finished()


def _set_aside_in(study: optuna.Study) -> dict[int, str]:
    """The trials the study remembers as set aside (what is not a trial number and a reason is ignored)."""
    recorded = study.user_attrs.get(SET_ASIDE_ATTR)
    if not isinstance(recorded, dict):
        return {}
    return {int(n): str(r) for n, r in recorded.items() if str(n).isdigit()}


def _undecided(t: optuna.trial.FrozenTrial) -> bool:
    """A trial another process asked for and has not yet described (its configuration comes right after)."""
    if t.state != TrialState.RUNNING or "config" in t.user_attrs:
        return False
    started = t.datetime_start
    return started is None or (datetime.datetime.now() - started).total_seconds() < UNDECIDED_WAIT_S


def _timing(t: optuna.trial.FrozenTrial) -> Timing:
    return Timing.from_dict(t.user_attrs["timing"])
