"""Sweeps and their replay: the file round-trips and refuses what is wrong, the random baseline is exact, the
tuner's search replayed against a synthetic sweep counts, charges and scores as documented, and the committed
sweeps load and replay."""
import itertools
import json
import math
import re
from pathlib import Path

import pytest

from autotune.commands.cli import main
from autotune.core.device import DeviceInfo
from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.core.timing import Timing
from autotune.tuning.replay import Settings, fraction_at, random_fraction, replay, replay_once, score_replays
from autotune.tuning.sweep import Sweep, SweepError, SweepRow, load_sweep, valid_configurations, write_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = [p for p in sorted((ROOT / "benchmarks" / "sweeps").glob("*.yaml")) if not p.name.endswith(".space.yaml")]
SPACE = """kernel: reduce
params:
  BLOCK: {values: [64, 128, 256]}
  ITEMS: {values: [1, 2]}
  VEC: {values: [4]}
  BLOCK_REDUCE: {values: [shuffle]}
  COMBINE: {values: [atomic, last_block]}
  WAVES: {values: [1, 2]}
"""
PROBLEM = Problem("reduce", (1 << 20,), "float32", {"op": "sum"})
DEVICE = DeviceInfo(name="Test GPU", cc=(9, 0), sm_count=132, l2_bytes=50 << 20)


def synthetic_time(config) -> float:
    """A made-up landscape with one best configuration (256 threads, 2 items, atomic, 2 waves)."""
    return (1.0 + abs(math.log2(config["BLOCK"] / 256)) * 0.3 + (config["ITEMS"] == 1) * 0.2
            + (config["COMBINE"] == "last_block") * 0.05 + (config["WAVES"] == 1) * 0.4)


def synthetic_sweep(tmp_path, fail=(), prune=(), measure_s=0.5, compile_s=4.0) -> Path:
    space_file = tmp_path / "narrow.space.yaml"
    space_file.write_text(SPACE)
    rows = []
    for i, config in enumerate(valid_configurations(load_space("reduce", space_file), PROBLEM)):
        if i in fail or i in prune:
            rows.append(SweepRow(config, "verify" if i in fail else "pruned", None, compile_s, 0.0, "recorded"))
        else:
            t = synthetic_time(config)
            rows.append(SweepRow(config, "ok", Timing(t, t, t, 100), compile_s, measure_s))
    path = tmp_path / "sweeps" / "synthetic.yaml"
    write_sweep(path, Sweep(PROBLEM, DEVICE, space_file, 2, {"date": "2026-11-24", "command": "synthetic"},
                            tuple(rows)))
    return path


def test_a_sweep_file_round_trips(tmp_path):
    path = synthetic_sweep(tmp_path, fail=(3,), prune=(5,))
    sweep = load_sweep(path)
    assert len(sweep.rows) == 24 and sweep.space_path.name == "narrow.space.yaml"
    assert "space: ../narrow.space.yaml" in path.read_text()  # named relative to the sweep file
    assert [r.stage for r in sweep.rows].count("verify") == 1 and [r.stage for r in sweep.rows].count("pruned") == 1
    best = sweep.best
    assert (best.config["BLOCK"], best.config["ITEMS"], best.config["COMBINE"], best.config["WAVES"]) == \
        (256, 2, "atomic", 2)
    assert sweep.problem == PROBLEM and sweep.device.sm_count == 132


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("sweep: 1", "sweep: 7"), "not a sweep file"),
    (lambda t: re.sub(r"\], ok, [0-9.e-]+,", "], ok, 99.0,", t, count=1), "row 1: needs p20_ms"),
    (lambda t: t.replace("[[64, 1, 4,", "[[48, 1, 4,", 1), "row 1: the configuration is not valid"),
    (lambda t: t.replace("[[64, 1, 4, shuffle, atomic, 2,", "[[64, 1, 4, shuffle, atomic, 1,", 1),
     "row 2: the same configuration as row 1"),
    (lambda t: t.replace("], ok,", "], great,", 1), "row 1: stage must be"),
    (lambda t: t.replace("params: [BLOCK, ITEMS", "params: [BLOCKS, ITEMS"), "params must name"),
    (lambda t: t.replace("params: [BLOCK, ITEMS", "params: [ITEMS, BLOCK"), "row 1: the configuration is not valid"),
    (lambda t: t.replace("compile_s, measure_s, reason]", "compile_s, reason]"), "columns must be"),
    (lambda t: t.replace(", 100, 4.0, 0.5]", ", 100, -4.0, 0.5]", 1), "compile_s must be a finite number"),
])
def test_a_damaged_sweep_is_refused_with_file_and_row(tmp_path, edit, message):
    path = synthetic_sweep(tmp_path)
    text = path.read_text()
    damaged = edit(text)
    assert damaged != text, "the edit did not apply"
    path.write_text(damaged)
    with pytest.raises(SweepError, match=message) as err:
        load_sweep(path)
    assert str(path) in str(err.value)


def test_random_fraction_is_the_exact_expectation_over_all_draws(tmp_path):
    """Against brute force: every n-subset of the rows, the best fraction each finds, averaged."""
    sweep = load_sweep(synthetic_sweep(tmp_path, fail=(0, 7)))
    counted = [r for r in sweep.rows if r.stage != "pruned"]
    optimum = sweep.best.timing.median_ms
    for n in (1, 2, 3, 23, 24):
        subsets = list(itertools.combinations(counted, n))
        brute = sum(max((optimum / r.timing.median_ms if r.ok else 0.0) for r in s) for s in subsets) / len(subsets)
        assert random_fraction(sweep, n) == pytest.approx(brute, rel=1e-12), n
    assert random_fraction(sweep, 0) == 0.0


def test_the_grid_replayed_reaches_the_optimum_and_counts_as_the_tuner_does(tmp_path):
    """Failures count as trials, configurations pruned after compiling do not; the clock charges the slower of
    compile (shared by the workers) and measure."""
    sweep = load_sweep(synthetic_sweep(tmp_path, fail=(1,), prune=(2,), measure_s=0.5, compile_s=4.0))
    steps = replay_once(sweep, Settings("grid", trials=23), seed=0)
    assert [s.trials for s in steps] == list(range(1, 24))  # 24 rows, one pruned
    assert steps[-1].clock_s == pytest.approx(24 * max(4.0 / 2, 0.5))
    assert fraction_at(steps, sweep.best.timing.median_ms)[0] == 1.0
    assert fraction_at(steps, sweep.best.timing.median_ms, trials=1)[0] < 1.0
    faster = replay_once(sweep, Settings("grid", trials=23, compile_workers=16), seed=0)
    assert faster[-1].clock_s == pytest.approx(22 * 0.5 + 2 * 4.0 / 16)  # the failed and pruned: no measuring


def test_scores_grow_with_the_budget_and_random_scores_near_zero(tmp_path):
    sweep = load_sweep(synthetic_sweep(tmp_path))
    runs = replay(sweep, Settings("random", trials=12, starts=False, refine=False), range(40))
    scores = {s.trials: s for s in score_replays(sweep, runs, budgets=(3, 12), minutes=[])}
    assert scores[3].median_fraction <= scores[12].median_fraction <= 1.0
    assert scores[3].p10_fraction <= scores[3].median_fraction
    mean3 = sum(fraction_at(r, sweep.best.timing.median_ms, trials=3)[0] for r in runs) / len(runs)
    assert abs(mean3 - random_fraction(sweep, 3)) < 0.05  # random search replayed is random search


def test_a_configuration_the_sweep_lacks_is_named(tmp_path):
    path = synthetic_sweep(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line for line in lines if "[[256, 2, 4, shuffle, atomic, 2," not in line) + "\n")
    with pytest.raises(SweepError, match="the sweep has no row for .*record it again"):
        replay_once(load_sweep(path), Settings("grid", trials=23), seed=0)


def test_replay_command_prints_json_budgets(tmp_path, capsys):
    path = synthetic_sweep(tmp_path)
    assert main(["replay", str(path), "--sampler", "tpe", "--trials", "12", "--seeds", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    budgets = [b for b in doc["budgets"] if "minutes" not in b]
    assert [b["trials"] for b in budgets] == [10, 20, 50, 100]
    for b in doc["budgets"]:
        assert set(b) >= {"trials", "median_fraction", "p10_fraction", "score"}
        assert 0 < b["p10_fraction"] <= b["median_fraction"] <= 1


def test_replay_command_refuses_what_is_no_sweep(tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\n")
    assert main(["replay", str(path)]) == 2
    assert "not a sweep file" in capsys.readouterr().err


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_the_committed_sweeps_load_and_replay(path):
    sweep = load_sweep(path)
    assert sweep.recorded["command"].startswith("autotune ") and sweep.device.name
    steps = replay_once(sweep, Settings("tpe", trials=12), seed=0)
    assert len(steps) == 12 and 0 < fraction_at(steps, sweep.best.timing.median_ms)[0] <= 1


def test_record_sweep_in_the_simulator_writes_a_sweep_replay_reads(tmp_path, capsys):
    space = tmp_path / "two.space.yaml"
    space.write_text(SPACE.replace("[64, 128, 256]", "[64]").replace("ITEMS: {values: [1, 2]}", "ITEMS: {values: [1]}")
                     .replace("[atomic, last_block]", "[atomic]"))  # two configurations: WAVES 1 and 2
    out = tmp_path / "out" / "s.yaml"
    assert main(["reduce", "--simulator", "--shape", "300", "--space", str(space), "--state-dir", str(tmp_path),
                 "--record-sweep", str(out)]) == 0
    sweep = load_sweep(out)
    assert len(sweep.rows) == 2 and all(r.ok for r in sweep.rows)
    assert sweep.space_path.resolve() == space.resolve()
    assert sweep.recorded["command"].startswith("autotune reduce --simulator --shape 300")


def test_refinement_measures_the_neighbours_of_the_fastest_so_far(tmp_path):
    """After the start-up trials, two in three trials are the first unmeasured neighbour of the fastest
    configuration that has one (``SearchSpace.neighbours``); the others are the sampler's."""
    import optuna

    from autotune.core.space import config_key
    from autotune.tuning.settings import TuneConfig
    from autotune.tuning.tuner import Tuner

    sweep = load_sweep(synthetic_sweep(tmp_path))
    tuner = Tuner(PROBLEM, TuneConfig(trials=20, seed=3, baseline=False, space_path=str(sweep.space_path),
                                      startup_trials=4, starts=False), DEVICE, report=lambda line: None,
                  name="t", storage=optuna.storages.InMemoryStorage())
    tuner.prepare()
    measured: list[tuple[float, dict]] = []
    refined = 0
    for handed in range(20):
        trial, config = tuner.ask()
        if handed >= 4 and handed % 3 != 0:
            expected = next(n for _, c in sorted(measured, key=lambda m: m[0])
                            for n in tuner.space.neighbours(c, dtype="float32", args=PROBLEM.args)
                            if config_key(n) not in {config_key(m) for _, m in measured})
            assert config == expected, handed
            refined += 1
        tuner.tell(trial, sweep.row_of(config).outcome(PROBLEM))
        measured.append((sweep.row_of(config).timing.median_ms, config))
    assert refined == 11


def test_refinement_finds_what_tpe_alone_misses_on_the_fp32_1024_sweep():
    """On the recorded 1024^3 sweep, TPE from the start list ended at a local optimum (0.946 of the best, no split
    of K) in 6 of seeds 0-9; with refinement every seed reaches 0.95 within 50 trials."""
    sweep = load_sweep(ROOT / "benchmarks" / "sweeps" / "matmul-1024.yaml")
    runs = replay(sweep, Settings("tpe", trials=50), range(10))
    assert min(fraction_at(r, sweep.best.timing.median_ms)[0] for r in runs) >= 0.95
