"""The tuner end to end in the CUDA simulator: failures recorded, duplicates answered, pruning, resume."""
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from autotune.core.device import current_device
from autotune.core.problem import Problem
from autotune.tuning.settings import TuneConfig
from autotune.tuning.tuner import Tuner

HERE = Path(__file__).parent


def journal(state_dir):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(Path(state_dir) / "studies" / "cuda-simulator.journal")))


def test_failures_are_recorded_and_the_study_completes(tmp_path, monkeypatch):
    """Compile failure, crash, hang and wrong result each become a FAIL trial with its reason."""
    monkeypatch.setenv("AUTOTUNE_TEMPLATES", str(HERE / "faulty_templates"))
    config = TuneConfig(trials=5, sampler="grid", state_dir=tmp_path, space_path=str(HERE / "faulty_space.yaml"),
                        compile_workers=1, job_timeout_s=20, baseline=False)
    result = Tuner(Problem("reduce", (37,), "float32", {"op": "sum"}), config, current_device(),
                   report=lambda line: None).run()
    assert result.best == {"BLOCK": 32, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "serial", "COMBINE": "atomic",
                           "WAVES": 1}
    assert (result.measured, result.failed) == (1, 4)
    reasons = {t.user_attrs["config"]["BLOCK"]: (t.user_attrs["stage"], t.user_attrs["reason"])
               for t in optuna.load_study(study_name=result.study_name, storage=journal(tmp_path)).trials
               if t.state == TrialState.FAIL}
    assert reasons[64][0] == "compile" and "SyntaxError" in reasons[64][1]
    assert reasons[128][0] == "run" and "worker process died (exit code 3" in reasons[128][1]
    assert reasons[256][0] == "timeout" and "timed out after 20 s" in reasons[256][1]
    assert reasons[512][0] == "verify" and "differ from the float64 reference" in reasons[512][1]


def reduce_tuner(tmp_path, space_text: str, trials: int, **kwargs) -> Tuner:
    """A tuner for a max over 33 elements in the simulator, in a small space written for the test."""
    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    config = TuneConfig(trials=trials, sampler="random", state_dir=tmp_path, space_path=str(space),
                        compile_workers=1, baseline=False)
    return Tuner(Problem("reduce", (33,), "float32", {"op": "max"}), config, current_device(), report=lambda l: None,
                 **kwargs)


def test_invalid_and_repeated_samples_cost_no_measurement(tmp_path):
    """A space with two valid configurations: VEC 4 (16 bytes against a limit of 8) is never offered, the sampler's
    other proposals are pruned (invalid, or the same as one in flight) or answered from the study, and each valid
    configuration is measured exactly once."""
    tuner = reduce_tuner(tmp_path, "family: reduce\nparams:\n  BLOCK: {values: [32, 64]}\n  ITEMS: {values: [1]}\n"
                         "  VEC: {values: [1, 2, 4]}\n  WAVES: {values: [1], when: {axis: [all, 1]}}\n"
                         "constraints:\n  - {name: vector_bytes_at_most, max: 8}\n"
                         "  - {name: divides, args: [VEC, ITEMS]}\n", trials=2)
    result = tuner.run()
    trials = tuner.study.trials
    measured = [t.user_attrs["config"] for t in trials if t.state == TrialState.COMPLETE
                and "duplicate_of" not in t.user_attrs]
    assert sorted(c["BLOCK"] for c in measured) == [32, 64] and all(c["VEC"] == 1 for c in measured)
    assert result.measured == 2
    assert all(t.user_attrs["config"]["VEC"] in (1, 2) for t in trials)
    assert all("must divide" in t.user_attrs["reason"] or "same configuration as trial" in t.user_attrs["reason"]
               for t in trials if t.state == TrialState.PRUNED)


def test_the_seed_kernel_is_timed_beside_the_search_and_its_failure_is_said(tmp_path, monkeypatch):
    """The seed kernel is compiled in the pool with the variants and timed by the GPU thread: the result carries
    its timing and it is no trial of the study; a seed that fails to compile is reported and the run goes on."""
    space = "family: reduce\nparams:\n  BLOCK: {values: [32, 64]}\n  ITEMS: {values: [1]}\n  VEC: {values: [1]}\n" \
            "  WAVES: {values: [1], when: {axis: [all, 1]}}\n"
    lines: list[str] = []
    tuner = reduce_tuner(tmp_path, space, trials=2)
    tuner.config = replace(tuner.config, baseline=True)
    tuner.report = lines.append
    result = tuner.run()
    assert result.baseline["params"] == tuner._baseline_params() and result.baseline["median_ms"] > 0
    measured = [t.user_attrs["config"]["BLOCK"] for t in tuner.study.trials
                if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]  # repeats are answered
    assert result.measured == 2 and sorted(measured) == [32, 64]  # the seed's BLOCK 256 is no trial

    (tmp_path / "broken").mkdir()
    broken = reduce_tuner(tmp_path / "broken", space, trials=1)
    broken.config = replace(broken.config, baseline=True)
    broken.report = lines.append
    monkeypatch.setattr(broken, "_baseline_params", lambda: {**tuner._baseline_params(), "BLOCK_REDUCE": "bogus"})
    result = broken.run()
    assert result.baseline is None and result.measured == 1
    assert any(line.startswith("baseline {") and "failed" in line for line in lines)


def test_a_search_where_few_configurations_are_valid_is_not_called_exhausted(tmp_path, monkeypatch):
    """bfloat16 matmul takes only tensor-core tiles; where random draws keep landing on configurations seen (here
    always the two strategies without parameters: the draws are patched to do so), once those and one tile are
    seen the tuner still queues an unseen valid configuration, a neighbour of one seen, instead of ending the
    search as exhausted, which it did after 15 of 40 trials on the H100."""
    from autotune.core.device import DeviceInfo
    from autotune.core.space import SearchSpace, config_key
    from autotune.tuning.policy import suggest

    h100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, l2_bytes=50 << 20)
    tuner = Tuner(Problem("matmul", (8192, 128, 8192), "bfloat16", {}), TuneConfig(state_dir=tmp_path, baseline=False),
                  h100, report=lambda line: None)
    family = tuner.problem.args
    tile = next(c for start in tuner.space.starts for c in tuner.policy._start_variants(start) if c["strategy"] == "tiled")
    seen = [tuner.space.validate({"strategy": name}, dtype="bfloat16", args=family) for name in ("naive", "shared16")]
    for config in seen + [tile]:
        trial = tuner.study.ask()
        trial.set_user_attr("config", config)
        tuner.study.tell(trial, 1.0)
        tuner.policy._seen[config_key(config)] = trial.number
    monkeypatch.setattr(SearchSpace, "random_valid", lambda self, rng, **kw: dict(seen[rng.randrange(2)]))
    assert tuner.policy._enqueue_random_unseen()
    config = suggest(tuner.study.ask(), tuner.space, family)
    assert config["strategy"] == "tiled" and config_key(config) not in tuner.policy._seen
    assert tuner.policy.prune_reason(config) is None


def test_starting_configurations_are_measured_first_where_valid(tmp_path):
    tuner = reduce_tuner(tmp_path, "family: reduce\nparams:\n  BLOCK: {values: [32, 64, 128]}\n  ITEMS: {values: [1]}\n"
                         "  VEC: {values: [1, 2]}\n  WAVES: {values: [1], when: {axis: [all, 1]}}\n"
                         "constraints:\n  - {name: divides, args: [VEC, ITEMS]}\n"
                         "starts:\n  - {BLOCK: 128, VEC: 2}\n  - {BLOCK: 64}\n", trials=1)
    tuner.run()
    first = tuner.study.trials[0]
    assert first.state == TrialState.COMPLETE and first.user_attrs["config"]["BLOCK"] == 64
    tuner.run()  # a second run on the same study adds the start again only if it is missing
    assert sum(t.user_attrs.get("config", {}).get("BLOCK") == 64 and "duplicate_of" not in t.user_attrs
               for t in tuner.study.trials) == 1


def test_nearby_shapes_winners_are_measured_right_after_the_incumbent(tmp_path):
    neighbours = [{"BLOCK": 64, "VEC": 4}, {"BLOCK": 128}]  # the first is not in this space
    tuner = reduce_tuner(tmp_path, "family: reduce\nparams:\n  BLOCK: {values: [32, 64, 128]}\n  ITEMS: {values: [1]}\n"
                         "  VEC: {values: [1]}\n  WAVES: {values: [1], when: {axis: [all, 1]}}\n"
                         "starts:\n  - {BLOCK: 64}\n", trials=6, incumbent={"BLOCK": 32}, neighbours=neighbours)
    tuner.run()
    assert [t.user_attrs["config"]["BLOCK"] for t in tuner.study.trials[:3]] == [32, 128, 64]


def test_the_database_winner_is_measured_first_and_a_fair_result_replaces_it(tmp_path):
    """The current entry's configuration is re-measured in the run, so the run's best replaces the entry even
    when the entry records a lower time (from older code); a run that did not measure it cannot."""
    import yaml

    from autotune.runtime.db import db_path
    from autotune.tuning import report

    space = tmp_path / "space.yaml"
    space.write_text("family: reduce\nparams:\n  BLOCK: {values: [32, 64, 128]}\n  ITEMS: {values: [1]}\n"
                     "  VEC: {values: [1]}\n  WAVES: {values: [1], when: {axis: [all, 1]}}\n")
    problem = Problem("reduce", (33,), "float32", {"op": "max"})
    device = current_device()
    incumbent = {"BLOCK": 128, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "shuffle", "COMBINE": "last_block", "WAVES": 1}

    def tune(state, incumbent):
        config = TuneConfig(trials=1, sampler="random", state_dir=tmp_path / state, space_path=str(space),
                            compile_workers=1, baseline=False)
        return Tuner(problem, config, device, report=lambda l: None, incumbent=incumbent).run()

    fair = tune("a", incumbent)
    assert fair.incumbent_measured and fair.best == incumbent
    unfair = tune("b", None)
    assert not unfair.incumbent_measured

    db = tmp_path / "db"
    report.write_results([unfair], device, str(db), None)
    path = db_path(db, device.name)
    data = yaml.safe_load(path.read_text())
    data["entries"][0]["time"]["median_ms"] = 1e-9  # recorded by an older, faster-looking measurement
    path.write_text(yaml.safe_dump(data))
    assert "kept" in report.write_results([unfair], device, str(db), None)[0]
    assert "replaced" in report.write_results([fair], device, str(db), None)[0]
    assert yaml.safe_load(path.read_text())["entries"][0]["params"]["BLOCK"] == 128


def test_matmul_starts_are_fitted_to_the_problem(tmp_path):
    """A start is tried with the smallest splits of K (unsplit included) that make 90% of one and of two waves
    of blocks, in that order, each split's slices combined each way, then as written; where its tiles overhang M
    or N, each of these clamped first; with too little K to split, as written."""
    start = {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4, "VEC": 4}
    config = TuneConfig(state_dir=tmp_path, baseline=False)
    h100 = replace(current_device(), sm_count=132)

    def variants(shape):
        tuner = Tuner(Problem("matmul", shape, "float32"), config, h100, report=lambda l: None)
        return [(c["SPLIT_K"], c["EDGE"][0]) for c in tuner.policy._start_variants(start)
                if c.get("SPLIT_ADD", "atomic") == "atomic"]

    def added(shape, dtype):
        tuner = Tuner(Problem("matmul", shape, dtype), config, h100, report=lambda l: None)
        return [(c["SPLIT_K"], c.get("SPLIT_ADD")) for c in tuner.policy._start_variants({**start, "VEC": 2})]

    # 64 x 2 = 128 blocks: already 0.97 of a wave of 132 SMs, so unsplit first; split 2 makes 1.94 waves
    assert variants((8192, 128, 8192)) == [(1, "i"), (2, "i")]
    ways = ("atomic", "vector", "last_block")
    assert added((8192, 128, 8192), "float32") == [(1, None)] + [(s, w) for s in (2,) for w in ways]
    assert added((8192, 128, 8192), "float64") == [(1, None)] + [(s, w) for s in (2,) for w in ways if w != "vector"]
    # 128x128 tiles of 1024^3: 64 blocks; split 2 makes 0.97 of a wave (the sweep's winner), 4 makes 1.94
    tuner = Tuner(Problem("matmul", (1024, 1024, 1024), "float32"), config, h100, report=lambda l: None)
    assert [c["SPLIT_K"] for c in tuner.policy._start_variants({**start, "BN": 128, "TN": 8})
            if c.get("SPLIT_ADD", "atomic") == "atomic"] == [2, 4, 1]
    tuner = Tuner(Problem("matmul", (127, 3000, 511), "float32"), config, h100, report=lambda l: None)
    assert [(c["SPLIT_K"], c["SPLIT_ADD"]) for c in tuner.policy._start_variants({**start, "SPLIT_K": 4, "EDGE": "clamp"})
            ] == [(4, "atomic"), (4, "vector"), (4, "last_block")]  # a split entry: its other ways next
    # 47 blocks; 511 / 8 still holds two 16-deep tiles; 127 rows overhang the 128-row tile
    assert variants((127, 3000, 511)) == [(4, "c"), (8, "c"), (1, "c"), (4, "i"), (8, "i"), (1, "i")]
    assert variants((4096, 4096, 4096)) == [(1, "i")]                          # 2048 whole tiles
    assert variants((127, 3000, 40)) == [(1, "c"), (1, "i")]                  # K too short to split
    assert variants((4096, 4096 - 8, 100)) == [(1, "c"), (1, "i")]            # N overhangs
    clamped = {**start, "EDGE": "clamp"}
    tuner = Tuner(Problem("matmul", (1000, 1000, 1000), "float32"), config, h100, report=lambda l: None)
    # already clamped: 8 x 16 = 128 blocks fill 0.97 of a wave, 2 makes 1.94 waves; no second clamped copy
    assert [(c["SPLIT_K"], c["EDGE"]) for c in tuner.policy._start_variants(clamped)
            if c.get("SPLIT_ADD", "atomic") == "atomic"] == [(1, "clamp"), (2, "clamp")]


def test_starts_take_at_most_half_the_trials_each_in_its_best_fitted_form_first(tmp_path):
    """1000^3 has dozens of start forms (split-K ways, clamped edges); the queue holds the incumbent, then the
    first form of each start in order, then the other forms, cut at half the trials."""
    from autotune.tuning.policy import study_params

    h100 = replace(current_device(), sm_count=132)
    incumbent = {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4, "VEC": 4, "EDGE": "clamp", "SPLIT_K": 2,
                 "SPLIT_ADD": "vector"}
    tuner = Tuner(Problem("matmul", (1000, 1000, 1000), "float32"), TuneConfig(trials=60, state_dir=tmp_path,
                  baseline=False), h100, report=lambda l: None, incumbent=incumbent)
    tuner.prepare()
    queued = [t.system_attrs["fixed_params"] for t in tuner.study.get_trials(states=(TrialState.WAITING,))]
    forms = [tuner.policy._start_variants(s) for s in tuner.space.starts]
    expected = []
    for config in [tuner.space.validate(incumbent, dtype="float32", args=tuner.problem.args)] + \
            [f[0] for f in forms if f] + [c for f in forms for c in f[1:]]:
        if study_params(tuner.space, config) not in expected:
            expected.append(study_params(tuner.space, config))
    assert len(expected) > 60 and queued == expected[:30]


def run_cli(args, cwd, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    return subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)


def trials_of(state_dir, states=(TrialState.COMPLETE,)):
    try:
        studies = optuna.get_all_study_summaries(journal(state_dir))
    except Exception:
        return []
    if not studies:
        return []
    study = optuna.load_study(study_name=studies[0].study_name, storage=journal(state_dir))
    return [t for t in study.trials if t.state in states]


def complete_trials(state_dir):
    return trials_of(state_dir)


def child_pids(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def outliving(pids: list[int], wait_s: float = 20.0) -> list[int]:
    """Those of ``pids`` still alive after up to ``wait_s`` (children notice their parent's end within ~1 s)."""
    deadline = time.time() + wait_s
    while any(alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def test_killed_run_resumes_without_losing_measurements(tmp_path):
    args = ["reduce", "--simulator", "--shape", "41", "--trials", "7", "--sampler", "random", "--compile-workers",
            "1", "--state-dir", str(tmp_path / "state"), "--db", str(tmp_path / "db"), "--write-db"]
    first = run_cli(args, tmp_path)
    deadline = time.time() + 240
    while len(complete_trials(tmp_path / "state")) < 2 and time.time() < deadline and first.poll() is None:
        time.sleep(0.5)
    children = child_pids(first.pid)
    assert children  # the compile pool and the GPU worker
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not outliving(children), "worker processes outlived the killed tuner"
    before = {t.number: t.value for t in complete_trials(tmp_path / "state")}
    assert len(before) >= 2
    second = run_cli(args, tmp_path)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    after = {t.number: t.value for t in complete_trials(tmp_path / "state")}
    assert all(after[n] == v for n, v in before.items())  # nothing measured was lost or re-measured
    measured = [t for t in complete_trials(tmp_path / "state") if "duplicate_of" not in t.user_attrs]
    assert len(measured) == 7
    assert "SIMULATOR DRY RUN" in out and "timings are meaningless" in out
    assert (tmp_path / "db" / "cuda-simulator.yaml").exists()


def test_a_run_killed_while_recording_an_outcome_keeps_it_or_measures_it_again(tmp_path):
    """A killed run leaves RUNNING trials: one whose outcome was wholly written (its stage is written last) is
    finished with it, one killed before the stage is failed without one and queued again. Before, a trial killed
    between its stage and the study's tell counted as a failure, and the resumed run measured one trial too few."""
    from autotune.tuning.records import Outcome

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = f"{__import__('socket').gethostname()}:{ended.pid}"
    tuner = reduce_tuner(tmp_path, "family: reduce\nparams:\n  BLOCK: {values: [32, 64, 128]}\n  ITEMS: {values: [1]}\n"
                         "  VEC: {values: [1]}\n  WAVES: {values: [1], when: {axis: [all, 1]}}\n", trials=3)
    timing = {"median_ms": 0.25 + np.random.default_rng().random(), "p20_ms": 0.2, "p80_ms": 0.3, "reps": 5}
    whole = Outcome(ok=True, stage="measured", timing=timing, rate=1.0).attrs()
    recorded, half = tuner.study.ask({"BLOCK": optuna.distributions.CategoricalDistribution([32, 64, 128])}), \
        tuner.study.ask({"BLOCK": optuna.distributions.CategoricalDistribution([32, 64, 128])})
    for trial, attrs in ((recorded, whole), (half, {k: v for k, v in whole.items() if k != "stage"})):
        trial.set_user_attr("owner", dead)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
    assert tuner.recover_interrupted() == 1
    settled = {t.number: t for t in tuner.study.trials}
    assert settled[recorded.number].state == TrialState.COMPLETE
    assert settled[recorded.number].value == timing["median_ms"]
    assert settled[half.number].state == TrialState.FAIL and "stage" not in settled[half.number].user_attrs
    assert tuner.policy.counts() == (1, 0, 0)  # the half record counts neither as measured nor as failed
    assert [t.system_attrs["fixed_params"] for t in tuner.study.trials if t.state == TrialState.WAITING] \
        == [half.params]


def test_a_claim_is_dead_only_where_its_process_of_this_host_has_ended():
    """The rule the tuner's recover_interrupted and the coverage run's release_dead share (records.owner_dead)."""
    import socket

    from autotune.tuning.records import owner_dead, owner_here

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = socket.gethostname()
    assert owner_here() == f"{host}:{os.getpid()}" and not owner_dead(owner_here())
    assert owner_dead(f"{host}:{ended.pid}")
    assert not owner_dead(f"another-{host}:{ended.pid}")  # another host's process cannot be checked from here
    assert not any(owner_dead(owner) for owner in ("", host, f"{host}:", f"{host}:-1", f"{host}:12a"))


def test_ctrl_c_stops_the_run_at_once_and_records_nothing_half_done(tmp_path):
    """Ctrl-C reaches the whole process group: the run ends within seconds (compiles and the measurement in
    progress stopped, no traceback), the trials it cut short are queued again rather than recorded as
    failures, and the next run completes the count without re-measuring anything."""
    args = ["reduce", "--simulator", "--shape", "41", "--trials", "8", "--sampler", "random", "--compile-workers",
            "2", "--state-dir", str(tmp_path / "state"), "--no-db"]
    # A job started in the background by a non-interactive shell inherits SIGINT ignored, and Python then keeps it
    # ignored: the tuner is started with the default action, as a terminal's Ctrl-C finds it.
    first = run_cli(args, tmp_path, start_new_session=True,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while len(complete_trials(tmp_path / "state")) < 2 and time.time() < deadline and first.poll() is None:
        time.sleep(0.2)
    children = child_pids(first.pid)
    assert children
    os.killpg(first.pid, signal.SIGINT)
    start = time.time()
    out, _ = first.communicate(timeout=90)
    assert time.time() - start < 45, out
    assert first.returncode == 130, out
    assert "interrupted; everything measured so far is in the study" in out and "Traceback" not in out, out
    assert not outliving(children), "worker processes outlived the interrupted tuner"
    left = trials_of(tmp_path / "state", (TrialState.RUNNING, TrialState.FAIL))
    assert not [t for t in left if t.state == TrialState.RUNNING or "stage" in t.user_attrs], \
        [(t.number, t.state, t.user_attrs) for t in left]
    before = {t.number: t.value for t in complete_trials(tmp_path / "state")}
    second = run_cli(args, tmp_path)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    after = {t.number: t.value for t in complete_trials(tmp_path / "state")}
    assert all(after[n] == v for n, v in before.items())
    # the tuner counts a failed variant as a trial (in the simulator under load, e.g. one past --job-timeout)
    measured = [t for t in complete_trials(tmp_path / "state") if "duplicate_of" not in t.user_attrs]
    failed = [t for t in trials_of(tmp_path / "state", (TrialState.FAIL,)) if "stage" in t.user_attrs]
    assert len(measured) + len(failed) == 8 and len(measured) >= 2, [t.user_attrs for t in failed]


def test_a_stopped_worker_measures_nothing_more():
    """After ``stop()`` (a run being interrupted) a GPU thread that got its compile just before must not spawn a
    fresh worker and measure: on the H100 that race held an interrupted run open for 17-45 s."""
    from autotune.tuning.worker import Worker

    worker = Worker(device=None, simulator=True)
    worker.stop()
    got = worker.run(object())  # returns before the job is looked at
    assert not got.ok and got.stage == "run" and "stopped" in got.reason
    assert worker._process is None


def test_a_worker_stopped_mid_job_says_it_was_stopped_not_that_it_died():
    """Ctrl-C ends the worker while it measures (the seed kernel, at the start of a run): its job's answer says the
    worker was stopped, never that it died (exit -9) as if the variant had crashed it."""
    import threading

    from autotune.tuning.records import job_for
    from autotune.tuning.worker import STOPPED, Worker

    worker = Worker(device=None, simulator=True)
    answers = []
    job = job_for(Problem("reduce", (1 << 18,), "float32"), {"BLOCK": 32})  # seconds in the simulator: still running
    thread = threading.Thread(target=lambda: answers.append(worker.run(job)))
    thread.start()
    deadline = time.monotonic() + 60
    while (worker._process is None or not worker._process.is_alive()) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the child runs the job: the stop comes mid-job, not before it starts
    time.sleep(0.5)
    worker.stop()
    thread.join(30)
    assert answers and not answers[0].ok and answers[0].reason == STOPPED, answers


def test_an_interruption_while_the_seed_is_measured_is_not_reported_as_its_failure(tmp_path):
    import concurrent.futures as cf

    from autotune.tuning.compile_queue import Compiling
    from autotune.tuning.records import CompileResult, Measurement
    from autotune.tuning.tuner import Seed

    lines = []
    tuner = Tuner(Problem("reduce", (33,), "float32"), TuneConfig(state_dir=tmp_path, baseline=False),
                  current_device(), report=lines.append)

    class InterruptedWorker:
        def run(self, job):
            tuner._stopping.set()  # Ctrl-C arrives while the seed is measured; the run ends the worker
            return Measurement(ok=False, stage="run", reason="worker process died (exit code -9: crash or ...)")

    built = cf.Future()
    built.set_result(CompileResult(ok=True))
    assert tuner._measure_seed(InterruptedWorker(), Compiling(Seed(tuner._baseline_params(), None), built, 0.0)) \
        is None
    assert lines == []


def test_stopping_the_compile_pool_ends_running_compiles():
    """``CompilePool.stop`` ends a compile that is running, not only those waiting: an interrupted H100 run sat
    15-45 s at exit while the interpreter joined the pool's manager thread until the last long compile ended."""
    from autotune.tuning.worker import CompilePool

    pool = CompilePool(1)
    running = pool.submit(time.sleep, 120)
    waiting = pool.submit(time.sleep, 120)
    deadline = time.time() + 60
    while not running.running() and time.time() < deadline:
        time.sleep(0.1)
    assert running.running()
    processes = list(pool._processes.values())
    start = time.time()
    pool.stop()
    assert time.time() - start < 15
    assert waiting.done()  # cancelled, or failed with the pool it was queued in
    for process in processes:
        process.join(5)
        assert not process.is_alive()


def test_problems_share_a_warm_compile_pool_until_one_leaves_a_compile_running(tmp_path):
    """A run's problems compile in the same warmed processes (started at once, each warmed first), so the second
    problem's first compiles wait for no start-up; a problem that ends with a compile still running stops that
    pool, and the next problem gets a fresh one."""
    from autotune.tuning.worker import CompilePools

    space = "family: reduce\nparams:\n  BLOCK: {values: [32, 64]}\n  ITEMS: {values: [1]}\n  VEC: {values: [1]}\n"
    with CompilePools(2) as pools:
        first = pools.get()
        pids = set(first._processes)
        assert len(pids) == 2  # both started before any variant was asked for
        submitted, submit = [], first.submit
        first.submit = lambda fn, *args: submitted.append(fn.__name__) or submit(fn, *args)
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            result = reduce_tuner(tmp_path / name, space, trials=2).run(pools)
            assert result.measured == 2
            assert pools.get() is first and not first.stopped
        assert set(first._processes) == pids and submitted == ["compile_variant"] * 4  # both problems' compiles
        first.submit(time.sleep, 120)  # a compile that outlives its problem
        pools.release(first)
        assert first.stopped and pools.get() is not first
    assert pools._pool is None


def numba_error_scheme() -> tuple[str | None, str]:
    """In a child: the highlighting setting and the colour scheme Numba's errors use."""
    from numba.core import errors

    return os.environ.get("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"), type(errors.termcolor()).__name__


def test_compile_processes_make_numba_errors_without_markup():
    """Where colorama is installed, Numba marks up every error a compile raises and catches (thousands); the
    compile processes turn that off before Numba loads."""
    from autotune.tuning.worker import CompilePool

    before = os.environ.get("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING")
    with CompilePool(1) as pool:
        assert pool.submit(numba_error_scheme).result(timeout=120) == ("1", "NOPColorScheme")
    assert os.environ.get("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING") == before  # this process is left as it was


def gpus_seen() -> str | None:
    """In a child: the GPUs CUDA lets it see."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def test_compile_processes_see_only_the_gpus_of_their_command(monkeypatch):
    """A compile process compiles for the GPU it sees first and keeps a context there; without this every one of
    them sat on GPU 0, whatever --device said (four runs at once on one host ran GPU 0 out of memory). Our GPU
    indices count within our own CUDA_VISIBLE_DEVICES, so a child is given that list's entry."""
    from autotune.tuning.worker import CompilePool, CompilePools, visible_names

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_names((1, 3)) == ("1", "3")
    assert visible_names(()) == ()
    with CompilePool(1, devices=(3,)) as pool:
        assert pool.submit(gpus_seen).result(timeout=120) == "3"
    with CompilePool(1) as pool:  # no devices: every GPU, as the parent
        assert pool.submit(gpus_seen).result(timeout=120) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5d2f, GPU-77aa,GPU-0c1e")
    assert visible_names((1,)) == ("GPU-77aa",) and visible_names((0, 2)) == ("GPU-5d2f", "GPU-0c1e")
    with CompilePools(2, devices=(0, 2)) as pools:
        seen = {pools.get().submit(gpus_seen).result(timeout=120) for _ in range(8)}
        assert seen and seen <= {"GPU-5d2f", "GPU-0c1e"}


def test_no_gpu_says_so(tmp_path):
    proc = run_cli(["matmul", "--device", "0"], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3
    assert "no CUDA GPU is visible" in out and "autotune matmul --simulator" in out


def test_a_rival_trial_asked_first_but_not_yet_described_is_waited_for(tmp_path):
    """Another process asked trial n and writes its configuration a moment later: trial n+1 with the same
    configuration must be found a repeat, not measured a second time (a race two PostgreSQL runs once hit)."""
    import threading

    config = TuneConfig(trials=1, sampler="random", state_dir=tmp_path, storage=f"sqlite:///{tmp_path}/s.db",
                        compile_workers=1, baseline=False)
    tuner = Tuner(Problem("reduce", (33,), "float32", {"op": "max"}), config, current_device(), report=lambda l: None)
    rival = optuna.load_study(study_name=tuner.name, storage=config.storage).ask()
    chosen = {"BLOCK": 64, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "tree", "COMBINE": "atomic", "WAVES": 1}
    late = threading.Timer(0.5, rival.set_user_attr, ("config", chosen))
    late.start()
    try:
        assert tuner.policy._seen_elsewhere(chosen, rival.number + 1) == rival.number
        assert tuner.policy._seen_elsewhere({**chosen, "BLOCK": 128}, rival.number + 1) is None
    finally:
        late.join()


def sqlite_tuner(tmp_path, lines: list[str]) -> Tuner:
    """A tuner on an SQLite study, as two processes share one with --storage; its report lines go to ``lines``."""
    config = TuneConfig(trials=2, sampler="random", state_dir=tmp_path, storage=f"sqlite:///{tmp_path}/s.db",
                        compile_workers=1, baseline=False)
    return Tuner(Problem("reduce", (33,), "float32", {"op": "max"}), config, current_device(), report=lines.append)


def test_a_trial_another_tuner_popped_and_told_first_is_dropped_not_fatal(tmp_path):
    """SQLite has no row locks, so two tuners can both pop one queued trial: the one that tells it second drops its
    outcome and says so (it crashed the run, or its GPU thread, before), whether the other told it before this one's
    writes to it or between them and its tell; a re-queue leaves it alone; and a trial finished elsewhere between
    the pop and this process marking it as its own is passed over for the next one."""
    from autotune.tuning.records import Outcome

    lines = []
    tuner = sqlite_tuner(tmp_path, lines)
    tuner.prepare()
    rival = optuna.load_study(study_name=tuner.name, storage=tuner.config.storage)
    trial, config = tuner.ask()
    rival.tell(trial.number, 1.0)
    tuner.tell(trial, Outcome(ok=False, stage="run", reason="measured second"))
    assert trial.number not in tuner._measured_here
    assert lines and f"trial {trial.number} was told by another tuner of this study first" in lines[-1]
    assert rival.trials[trial.number].value == 1.0 and "stage" not in rival.trials[trial.number].user_attrs
    waiting = len(rival.get_trials(states=(TrialState.WAITING,)))
    tuner._requeue_left(trial.number, trial.params)  # an interruption's re-queue passes over it too
    assert len(rival.get_trials(states=(TrialState.WAITING,))) == waiting

    # the rival tells it between this tuner's last write to it and its tell
    trial, config = tuner.ask()
    write = trial.set_user_attr

    def then_the_rival_tells(key, value):
        write(key, value)
        if key == "stage":
            rival.tell(trial.number, 2.0)

    trial.set_user_attr = then_the_rival_tells
    tuner.tell(trial, Outcome(ok=False, stage="run", reason="measured second"))
    assert trial.number not in tuner._measured_here and rival.trials[trial.number].value == 2.0
    assert f"trial {trial.number} was told by another tuner of this study first" in lines[-1]

    ask = tuner.study.ask
    taken = []

    def popped_twice():
        got = ask()
        if not taken:  # the first pop: the rival finishes it before this tuner writes its owner
            taken.append(got.number)
            rival.tell(got.number, state=TrialState.FAIL)
        return got

    tuner.study.ask = popped_twice
    trial, config = tuner.ask()
    assert taken and trial.number != taken[0] and trial.user_attrs["owner"] == tuner.owner


def test_a_gpu_thread_that_fails_ends_the_run_with_its_error(tmp_path, monkeypatch):
    """An error escaping a GPU thread (a bug of ours, the storage failing) ends the run with that error at once:
    the thread used to die alone, and the run waited for its measurements forever."""
    import threading

    def broken(self, worker, item):
        raise OSError("the storage went away")

    monkeypatch.setattr(Tuner, "_measure_and_tell", broken)
    tuner = sqlite_tuner(tmp_path, [])
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, tuner.run)), daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the run hung"
    assert errors and "a GPU thread failed: OSError: the storage went away" in str(errors[0].value)


def two_tuners_share_one_study(tmp_path, storage_args: list[str], storage) -> None:
    """Two tuners started together on one study: every trial ends, no configuration is measured twice, both
    measured. Both walk the same grid, so without the check for configurations another process took, they
    measure the same ones. ``storage``: the storage to read afterwards (a URL, or a function making it once the
    run has made its file)."""
    from autotune.core.space import config_key

    base = "reduce/float32/sum/all/37@cuda-simulator"
    for old in optuna.get_all_study_names(storage) if isinstance(storage, str) else []:
        if old.startswith(base):
            optuna.delete_study(study_name=old, storage=storage)  # left by an earlier run on this server
    args = ["reduce", "--simulator", "--shape", "37", "--trials", "6", "--sampler", "grid",
            "--compile-workers", "1", "--no-db", *storage_args]
    procs = [run_cli(args, tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    storage = storage if isinstance(storage, str) else storage()
    names = [n for n in optuna.get_all_study_names(storage) if n == base or n.startswith(base + "#")]
    assert len(names) == 1, names
    trials = optuna.load_study(study_name=names[0], storage=storage).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    measured = [t for t in trials if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    # Each process stops asking at 6 but finishes what it has in flight: one trial on its GPU worker and at most
    # compile_workers + 1 queued behind it.
    assert 6 <= len(measured) <= 6 + 2 * 3
    keys = [config_key(t.user_attrs["config"]) for t in measured]
    assert len(set(keys)) == len(keys), sorted(keys)  # no configuration was measured twice
    assert len({t.user_attrs["owner"] for t in measured}) == 2  # both processes measured


@pytest.mark.parametrize("storage", ["journal", "sqlite"])
def test_two_tuners_on_the_default_journal_or_sqlite_measure_each_configuration_once(tmp_path, storage):
    """The check for configurations measured by another process holds for every storage, not only --storage
    URLs: two tuners on one journal (the default) measured 22 trials of 17 configurations."""
    if storage == "journal":
        two_tuners_share_one_study(tmp_path, ["--state-dir", str(tmp_path / "state")],
                                   lambda: journal(tmp_path / "state"))
    else:
        url = f"sqlite:///{tmp_path}/studies.db"
        two_tuners_share_one_study(tmp_path, ["--storage", url], url)


def test_two_processes_share_one_study_through_postgresql(tmp_path, postgres_url):
    """Two tuners on one study in a real PostgreSQL."""
    two_tuners_share_one_study(tmp_path, ["--storage", postgres_url], postgres_url)


def test_a_trial_left_undescribed_by_a_killed_process_is_not_waited_for(tmp_path, monkeypatch):
    """A trial asked for but never described (its process killed between the two writes) stays RUNNING without a
    configuration; once older than UNDECIDED_WAIT_S, no ask waits for it again (before, every ask of every later
    run waited UNDECIDED_WAIT_S)."""
    import autotune.tuning.policy as policy_module

    monkeypatch.setattr(policy_module, "UNDECIDED_WAIT_S", 1.5)
    config = TuneConfig(trials=1, sampler="random", state_dir=tmp_path, compile_workers=1, baseline=False)
    tuner = Tuner(Problem("reduce", (33,), "float32", {"op": "max"}), config, current_device(), report=lambda l: None)
    abandoned = tuner.study.ask()
    chosen = {"BLOCK": 64, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "tree", "COMBINE": "atomic", "WAVES": 1}
    start = time.monotonic()
    assert tuner.policy._seen_elsewhere(chosen, abandoned.number + 1) is None
    assert time.monotonic() - start >= 1.0  # a fresh one is waited for
    time.sleep(0.6)
    start = time.monotonic()
    assert tuner.policy._seen_elsewhere(chosen, abandoned.number + 1) is None
    assert time.monotonic() - start < 0.5  # an old one is not


def test_a_seed_compile_past_its_timeout_is_said_and_a_cancelled_one_is_not_measured(tmp_path):
    """The seed kernel comes through the compile queue like a variant: past the compile timeout its failure is
    reported, cancelled (the run stopped) it is dropped without a word; neither reaches the GPU worker."""
    import concurrent.futures as cf

    from autotune.tuning.compile_queue import Compiling
    from autotune.tuning.tuner import Seed

    lines = []
    config = TuneConfig(state_dir=tmp_path, baseline=False, compile_timeout_s=0.6)
    tuner = Tuner(Problem("reduce", (33,), "float32"), config, current_device(), report=lines.append)

    class NoWorker:
        def run(self, job):
            raise AssertionError("measured a seed that did not compile")

    seed = Seed(tuner._baseline_params(), None)
    late = Compiling(seed, cf.Future(), 0.0, timed_out=True)
    assert tuner._measure_seed(NoWorker(), late) is None
    assert len(lines) == 1 and lines[0].startswith("baseline {") and "longer than 1 s" in lines[0]
    cancelled = cf.Future()
    cancelled.cancel()
    assert tuner._measure_seed(NoWorker(), Compiling(seed, cancelled, 0.0)) is None and len(lines) == 1


def test_configurations_the_gpu_lacks_instructions_for_are_pruned(tmp_path):
    """wgmma variants are pruned, not compiled, on a GPU other than Hopper (an A100 here, a B200 too)."""
    from autotune.core.device import DeviceInfo

    config = TuneConfig(trials=1, state_dir=tmp_path, baseline=False)
    wgmma = {"strategy": "tiled", "BM": 128, "BN": 256, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 0, "ASYNC_STAGES": 4,
             "GROUP_M": 8, "SPLIT_K": 1}
    problem = Problem("matmul", (256, 256, 256), "float16", {})
    for cc, pruned in (((9, 0), False), ((8, 0), True), ((10, 0), True)):
        device = DeviceInfo(name=f"GPU {cc}", cc=cc, sm_count=132, l2_bytes=50 << 20)
        reason = Tuner(problem, config, device, report=lambda line: None).policy.prune_reason(wgmma)
        assert (reason is not None) == pruned and (not pruned or "Hopper" in reason), (cc, reason)


def test_past_its_time_limit_a_run_queues_the_compiles_still_running_for_the_next(tmp_path, monkeypatch):
    """--timeout bounds the run: a variant whose compile has not finished is queued again (measured first next
    time), not waited for up to the compile timeout."""
    monkeypatch.setenv("AUTOTUNE_TEMPLATES", str(HERE / "faulty_templates"))
    space = tmp_path / "space.yaml"
    space.write_text((HERE / "faulty_space.yaml").read_text().replace("[32, 64, 128, 256, 512]", "[1024]"))
    config = TuneConfig(trials=1, sampler="grid", state_dir=tmp_path, space_path=str(space), compile_workers=1,
                        timeout_s=2, compile_timeout_s=60, baseline=False)
    start = time.monotonic()
    result = Tuner(Problem("reduce", (37,), "float32", {"op": "sum"}), config, current_device(),
                   report=lambda line: None).run()
    assert time.monotonic() - start < 30
    assert (result.measured, result.failed) == (0, 0)
    trials = optuna.load_study(study_name=result.study_name, storage=journal(tmp_path)).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]  # no stage: not counted as failed
    assert "stage" not in trials[0].user_attrs and trials[1].system_attrs["fixed_params"] == trials[0].params


#: A reduce template of the simplest kind (one thread adds every element), whose last statement a test replaces.
SUM_TEMPLATE = """{%- import "_common.j2" as c with context -%}
{{ c.header("templates/reduce.py.j2") }}


@cuda.jit
def reduce_all({{ ARGS | join(", ") }}):
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0:
        s = {{ dtype }}(0)
        for i in range(n):
            s += X[i]
LAST


{{ c.fill_kernel() }}
"""


def template_tuning(tmp_path, monkeypatch, last: str) -> list[str]:
    """Write the test's reduce template ending in ``last`` where templates of your own are read from
    ($AUTOTUNE_TEMPLATES), and return the arguments that tune a sum of 33 with it in the simulator, one variant,
    writing tmp_path/db."""
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    (folder / "reduce.py.j2").write_text(SUM_TEMPLATE.replace("LAST", last))
    monkeypatch.setenv("AUTOTUNE_TEMPLATES", str(folder))
    space = tmp_path / "space.yaml"
    space.write_text((HERE / "faulty_space.yaml").read_text().replace("[32, 64, 128, 256, 512]", "[32]"))
    return ["reduce", "--simulator", "--shape", "33", "--trials", "1", "--sampler", "grid", "--compile-workers", "1",
            "--state-dir", str(tmp_path / "state"), "--db", str(tmp_path / "db"), "--write-db", "--space", str(space)]


def test_a_changed_kernel_starts_a_fresh_study_and_nothing_wrong_reaches_the_database(tmp_path, monkeypatch, capsys):
    """Tune, then edit the template so that it computes a wrong result, then tune again with --write-db: the old
    study's trials measured another kernel, so a fresh study is started (said, naming the old one), its variant
    fails its check and nothing is written; the entry written first is announced as stale by a lookup and by
    `autotune db check`. Before, the second run reused the old trials, reported success and rewrote the entry."""
    import warnings

    from autotune.commands.cli import main
    from autotune.runtime.lookup import TunedKernelWarning, get_best_kernel

    args = template_tuning(tmp_path, monkeypatch, "        out[0] = s")
    assert main(args) == 0, capsys.readouterr().err
    written = (tmp_path / "db" / "cuda-simulator.yaml").read_bytes()
    assert b"source_hash: " in written
    capsys.readouterr()
    template_tuning(tmp_path, monkeypatch, "        out[0] = s + 1")
    code, err = main(args), capsys.readouterr().err
    assert code == 1, err
    assert "the kernel changed since the study 'reduce/float32/sum/all/33@cuda-simulator#" in err, err
    assert "(templates)" in err and "starting a fresh study" in err and "wrong result" in err, err
    assert (tmp_path / "db" / "cuda-simulator.yaml").read_bytes() == written
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_best_kernel("reduce", (33,), db=tmp_path / "db")
    stale = [str(w.message) for w in caught if issubclass(w.category, TunedKernelWarning)]
    assert len(stale) == 1 and "reduce/float32/sum/all/33: the kernel its parameters render to changed" in stale[0]
    assert main(["db", "check", "--db", str(tmp_path / "db")]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "entry reduce/float32/sum/all/33: the kernel its parameters render to changed" in out


def test_a_winner_measured_by_an_earlier_run_is_checked_again_with_the_current_code(tmp_path, monkeypatch):
    """What the provenance of a study cannot see (here: made invisible) is caught before anything is written: a
    winner measured by an earlier run is verified again with the code as it is now; failing, it is set aside for
    good and no winner is reported."""
    import autotune.tuning.tuner as tuner_module

    template_tuning(tmp_path, monkeypatch, "        out[0] = s")
    config = TuneConfig(trials=1, sampler="grid", state_dir=tmp_path, space_path=str(tmp_path / "space.yaml"),
                        compile_workers=1, baseline=False)
    problem = Problem("reduce", (33,), "float32", {"op": "sum"})
    first = Tuner(problem, config, current_device(), report=lambda line: None).run()
    assert first.best and first.best["BLOCK"] == 32
    unchanged = tuner_module.provenance(problem, config.space_path)
    monkeypatch.setattr(tuner_module, "provenance", lambda *args: unchanged)
    template_tuning(tmp_path, monkeypatch, "        out[0] = s + 1")
    lines = []
    second = Tuner(problem, config, current_device(), report=lines.append).run()
    assert second.best is None and second.study_name == first.study_name
    assert any(line.startswith("set aside #0 ") and "wrong result" in line for line in lines), lines
    assert Tuner(problem, config, current_device(), report=lambda line: None).policy.best_trial() is None


def test_a_simulator_run_writes_only_what_compiles_for_a_real_gpu(tmp_path, monkeypatch, capsys):
    """The simulator runs Python: a list in a kernel passes there, and the real compiler refuses it (it needs
    Numba's runtime). A simulator run with --write-db compiles its winner for sm_90 first and writes nothing that
    does not compile, saying so."""
    from autotune.commands.cli import main

    args = template_tuning(tmp_path, monkeypatch, "        pair = [s, s]\n        out[0] = pair[0]")
    code, err = main(args), capsys.readouterr().err
    assert code == 1, err
    assert "#0 " in err and "does not compile for sm_90a" in err, err
    assert not (tmp_path / "db" / "cuda-simulator.yaml").exists()


def test_a_failure_every_variant_shares_is_reported_in_full_once_with_its_traceback_at_debug(tmp_path, monkeypatch,
                                                                                            caplog):
    """A template that renders broken Python for every configuration fails each variant alike: the first trial's
    line gives the reason (the template and the rendered line), later ones refer to it; the traceback is logged
    at DEBUG (``-v``)."""
    import logging

    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "reduce.py.j2").write_text('{%- import "_common.j2" as c with context -%}\n'
                                            '{{ c.header("reduce.py.j2") }}\nthis line is not Python\n')
    monkeypatch.setenv("AUTOTUNE_TEMPLATES", str(templates))
    space = tmp_path / "space.yaml"
    space.write_text((HERE / "faulty_space.yaml").read_text().replace("[32, 64, 128, 256, 512]", "[32, 64, 128]"))
    config = TuneConfig(trials=3, sampler="grid", state_dir=tmp_path, space_path=str(space), compile_workers=1,
                        baseline=False)
    lines = []
    with caplog.at_level(logging.DEBUG, logger="autotune"):
        result = Tuner(Problem("reduce", (37,), "float32", {"op": "sum"}), config, current_device(),
                       report=lines.append).run()
    assert (result.measured, result.failed) == (0, 3)
    failures = [line for line in lines if " compile: " in line]
    assert len(failures) == 3, lines
    assert "reduce.py.j2 rendered Python that does not compile" in failures[0] and "this line is not" in failures[0]
    first = int(failures[0].split(" #")[1].split()[0])
    assert all(f"the same failure as #{first}" in line for line in failures[1:])
    assert any("Traceback" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


def test_a_trial_is_timed_with_a_give_up_time_ten_times_the_studys_best(tmp_path):
    """Once the study has a best, a trial's job carries ``give_up_ms`` (records.give_up_after): two first runs far
    behind it are the trial's whole timing; before any best there is none, and the seed never has one."""
    import concurrent.futures as cf

    from autotune.tuning.compile_queue import Compiling
    from autotune.tuning.records import GIVE_UP_FACTOR, CompileResult, Measurement, job_for

    space = "family: reduce\nparams:\n  BLOCK: {values: [32, 64]}\n  ITEMS: {values: [1]}\n  VEC: {values: [1]}\n"
    tuner = reduce_tuner(tmp_path, space, trials=2)
    asked = []

    class Recording:
        def run(self, job):
            asked.append(job.give_up_ms)
            return Measurement(ok=False, stage="run", reason="not run")

    built = cf.Future()
    built.set_result(CompileResult(ok=True))
    the_job = job_for(tuner.problem, {"BLOCK": 32, "ITEMS": 1, "VEC": 1})
    tuner._evaluate(Recording(), the_job, Compiling(None, built, 0.0))
    result = tuner.run()
    tuner._evaluate(Recording(), the_job, Compiling(None, built, 0.0))
    assert result.timing and asked == [None, GIVE_UP_FACTOR * result.timing["median_ms"]]
    from autotune.tuning.tuner import Seed

    tuner._measure_seed(Recording(), Compiling(Seed(the_job.params, the_job), built, 0.0))  # a resumed study's seed
    assert asked[-1] is None  # timed in full: its time is the recorded baseline
