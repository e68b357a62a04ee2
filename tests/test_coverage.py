"""Coverage of untuned shapes: the documented shape sets, the coverage run (claims, resumption, the matrix) in the
simulator, the record of shapes met without an entry, tuning on first use, and the bench's JSON rows."""
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest

from autotune.core.problem import Problem
from autotune.core.registry import family
from autotune.core.shapesets import draw_shapes, spread_order
from autotune.core.timing import Timing
from autotune.runtime import db, met
from autotune.runtime.lookup import TunedKernelWarning, get_best_kernel, set_first_use
from autotune.tuning.coverage import CoverageConfig, CoverageRun, Units
from autotune.tuning.matrix import read_matrix

ROOT = Path(__file__).resolve().parents[1]
MATMUL = {"layout": "nn", "precision": "ieee", "out_dtype": None}
TIME = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 10}


# -- shape sets -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, args", [("float32", MATMUL), ("float16", MATMUL),
                                         ("float32", {**MATMUL, "precision": "3xtf32"})])
def test_matmul_sets_cover_the_documented_ranges(dtype, args):
    impl = family("matmul")
    coverage, held_out = impl.shape_set("coverage", dtype, args), impl.shape_set("held-out", dtype, args)
    assert coverage == impl.shape_set("coverage", dtype, args)  # seeded: the same every time
    assert len(held_out) >= 30 and not set(coverage) & set(held_out)
    assert not set(held_out) & {tuple(int(d) for d in s.split("x")) for s in impl.suite}
    dims = [d for s in coverage for d in s]
    assert min(dims) <= 64 and max(dims) >= 16384
    assert any(d & (d - 1) for d in dims)  # non-powers of two
    assert any(s[0] <= 256 <= 4096 <= min(s[1:]) for s in coverage)  # skinny M
    assert any(s[1] <= 256 <= 4096 <= min(s[0], s[2]) for s in coverage)  # skinny N
    assert any(s[2] >= 8 * max(s[:2]) for s in coverage) and any(s[2] <= 256 <= 4096 <= min(s[:2]) for s in coverage)
    assert (4096, 4096, 4096) in coverage and any(s[1:] == (11008, 4096) for s in coverage)  # a cube, Llama's MLP
    from autotune.families.matmul.coverage import MAX_OPERAND, work_bound

    suite = {tuple(int(d) for d in s.split("x")) for s in impl.suite}
    assert suite <= set(coverage)  # the suite is measured whatever its size
    for s in coverage + held_out:
        if s not in suite:
            assert math.prod(s) <= work_bound(dtype, args) and max(s[0] * s[2], s[2] * s[1]) <= MAX_OPERAND
        Problem("matmul", s, dtype, args)


@pytest.mark.parametrize("axis, rank", [(None, 1), (0, 2), (1, 2), (-2, 3)])
def test_reduction_sets_per_axis(axis, rank):
    impl, args = family("reduce"), {"op": "sum", "axis": axis}
    coverage, held_out = impl.shape_set("coverage", "float32", args), impl.shape_set("held-out", "float32", args)
    assert len(held_out) >= 30 and not set(coverage) & set(held_out)
    assert {len(s) for s in coverage + held_out} == {rank}
    assert len(coverage) >= (40 if rank == 1 else 100)
    sizes = [math.prod(s) for s in coverage]
    assert min(sizes) <= 2 ** 11 and max(sizes) >= 2 ** 26 and max(sizes) <= 2 ** 28
    for s in coverage + held_out:
        Problem("reduce", s, "float32", args)


def test_spread_order_prefixes_are_spread_out(rng):
    shapes = [tuple(int(d) for d in rng.integers(1, 5000, size=3)) for _ in range(60)]
    ordered = spread_order(shapes)
    assert sorted(ordered) == sorted(shapes)
    def gap(order: list, k: int) -> float:
        logs = np.log2(np.array(order[:k], dtype=float))
        return min(np.abs(logs[i] - logs[j]).sum() for i in range(k) for j in range(i))

    assert gap(ordered, 8) > gap(shapes, 8)  # the first few are farther apart than the drawn order's first few


def test_draws_refuse_a_too_narrow_distribution():
    with pytest.raises(ValueError, match="too narrow"):
        draw_shapes(lambda rng: (int(rng.integers(1, 3)),), 5, seed=0, tries=200)


def test_the_list_command_prints_the_set_and_its_rule(tmp_path):
    out = subprocess.run([sys.executable, "-m", "autotune", "coverage", "reduce", "--axis", "-2", "--list",
                          "--set", "held-out"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    shapes = [line.strip() for line in out.stdout.splitlines() if line.startswith("  ")]
    expected = family("reduce").shape_set("held-out", "float32", {"op": "sum", "axis": -2})
    assert shapes == ["x".join(map(str, s)) for s in expected] and "seed 1" in out.stdout


# -- claims and the run ------------------------------------------------------------------------------
def test_the_earliest_claim_of_a_shape_wins(tmp_path):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j")))
    study = optuna.create_study(storage=storage, study_name="s")
    first, second = Units(study), Units(study)
    claim = first.claim("64x64x64")
    assert claim is not None and second.claim("64x64x64") is None
    assert second.taken() == {"64x64x64"}
    first.complete(claim, 1.5, {"cells": [1.5]})
    assert set(second.finished()) == {"64x64x64"} and second.claim("64x64x64") is None
    other = second.claim("128x128x128")
    second.give_back(other)  # an interrupted run frees its shape
    assert "128x128x128" not in first.taken() and first.claim("128x128x128") is not None


def test_a_coverage_run_in_the_simulator_resumes_and_writes_its_matrix(tmp_path, monkeypatch):
    """Two shapes and two candidates of a reduction in the simulator (meaningless times, real pipeline): every
    cell measured after its output was checked, the matrix written, a second run measuring nothing again, and
    after a change of the code that makes the kernels, a third measuring afresh and saying why."""
    args = {"op": "sum", "axis": None}
    shapes = family("reduce").shape_set("simulator", "float32", args)[1:3]
    config = CoverageConfig(devices=(0,), state_dir=tmp_path / "state", db=str(tmp_path / "db"), write_db=True,
                            matrix=tmp_path / "m.json", max_candidates=2, rep_ms=1.0)
    from autotune.core.device import current_device

    lines = []
    run = CoverageRun("reduce", "float32", args, shapes, config, current_device(), report=lines.append)
    result = run.run_cross([])
    assert result.done == result.done_here == 2 and result.shapes_per_hour > 0
    matrix = read_matrix(tmp_path / "m.json")
    assert matrix.shapes == shapes and len(matrix.candidates) == 2
    assert all(t is not None and t > 0 for row in matrix.ms for t in row)
    written = db.load_file(db.db_path(tmp_path / "db", current_device().name))
    assert sorted(e.problem.shape for e in written.entries) == sorted(shapes)
    assert all(db.stale_note(e) is None and e.record.get("source_hash") for e in written.entries)  # judged later
    again = CoverageRun("reduce", "float32", args, shapes, config, current_device(), report=lines.append)
    assert again.run_cross([]).done_here == 0 and read_matrix(tmp_path / "m.json").ms == matrix.ms
    assert any("as the study holds them" in line for line in lines)
    from autotune.tuning import coverage, provenance

    now = provenance.provenance(Problem("reduce", shapes[0], "float32", args))
    changed = provenance.Provenance({**now.parts, "family code": "edited"})
    monkeypatch.setattr(coverage, "provenance", lambda problem: changed)
    lines.clear()
    afresh = CoverageRun("reduce", "float32", args, shapes, config, current_device(), report=lines.append)
    assert afresh.run_cross([]).done_here == 2 and afresh.study.study_name.endswith("#" + changed.digest)
    assert any("the kernels changed since the study" in line and "(family code)" in line for line in lines), lines


# -- shapes met without an entry ------------------------------------------------------------------------
def test_shapes_met_are_recorded_once_and_read_back_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(met, "_recorded", set())
    a = Problem("reduce", (1000,), "float32", {"op": "max"})
    b = Problem("matmul", (7, 13, 5), "float32", {"layout": "tn"})
    for problem in (a, b, a):
        met.record(problem, "Some GPU")
    path = met.met_path("Some GPU")
    with open(path, "a") as f:
        f.write('{"family": "reduce", "dtype": "float32", "shape": [0], "args": {}}\nnot json\n')
    found = met.read_met(path)
    assert [p.key for p in found.problems] == [a.key, b.key] and found.skipped == 2
    monkeypatch.setenv("AUTOTUNE_RECORD_MET", "0")
    met.record(Problem("reduce", (77,), "float32"), "Some GPU")
    assert len(met.read_met(path).problems) == 2


def test_the_record_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(met, "_recorded", set())
    monkeypatch.setattr(met, "MAX_BYTES", 400)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(2, 40):
            met.record(Problem("reduce", (n,), "float32"), "Bounded GPU")
    assert met.met_path("Bounded GPU").stat().st_size <= 400
    assert sum("not recording more shapes" in str(w.message) for w in caught) == 1


def test_a_fifo_where_the_record_lives_is_never_waited_on(tmp_path, monkeypatch):
    """Recording must not break a lookup, nor reading the record hang: a FIFO (or a device) at the record's path is
    named, once, and skipped; reading it is refused naming it."""
    import threading

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(met, "_recorded", set())
    monkeypatch.setattr(met, "_full_said", set())
    path = met.met_path("Piped GPU")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    caught = []

    def record():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            met.record(Problem("reduce", (1000,), "float32"), "Piped GPU")
        caught.extend(str(w.message) for w in seen)

    worker = threading.Thread(target=record, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and any("not recording" in c and str(path) in c for c in caught), caught
    with pytest.raises(OSError, match="not a regular file \\(a FIFO\\)"):
        met.read_met(path)


def test_coverage_refuses_a_dtype_the_family_lacks_before_drawing_its_shapes():
    """The shape sets are drawn per dtype; an unknown one was a KeyError there (a traceback), now the refusal the
    other commands give."""
    from autotune.commands import cli
    from autotune.commands.coverage import run_coverage

    for dtype in ("int8", "float128"):
        with pytest.raises(ValueError, match=f"dtype '{dtype}' is not supported by matmul"):
            run_coverage(cli.parse(["coverage", "--family", "matmul", "--dtype", dtype, "--list"]))


def test_a_lookup_without_an_entry_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(met, "_recorded", set())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TunedKernelWarning)
        get_best_kernel("reduce", (1001,), db=tmp_path / "empty", op="min")
    assert [p.key for p in met.read_met(met.met_path("CUDA simulator")).problems] == ["reduce/float32/min/all/1001"]


def cli(*args, cwd, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("AUTOTUNE_DB", None)
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_met_tune_tunes_exactly_the_recorded_shapes(tmp_path):
    env = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")}
    record = ("import warnings; warnings.simplefilter('ignore'); from autotune import get_best_kernel; "
              "get_best_kernel('reduce', (70,), db='db', op='min')")
    subprocess.run([sys.executable, "-c", record], cwd=tmp_path, check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    listed = cli("met", "list", cwd=tmp_path, env=env)
    assert "reduce/float32/min/all/70" in listed.stdout
    out = cli("met", "tune", "--simulator", "--write-db", "--db", "db", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    entries = db.load_file(db.db_path(tmp_path / "db", "CUDA simulator")).entries
    assert [e.problem.key for e in entries] == ["reduce/float32/min/all/70"]
    assert not (tmp_path / "cache" / "met" / "cuda-simulator.jsonl").exists()  # cleared once tuned


def test_rule_commands_fit_show_check_score_and_adopt(tmp_path):
    fixture = ROOT / "tests" / "data" / "synthetic-matrix.json"
    out = cli("rule", "fit", str(fixture), "--db", "db", "--max-portfolio", "4", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "on held-out shapes (cross-validated)" in out.stdout and "added the rule for matmul/float32/nn" in out.stdout
    shown = cli("rule", "show", "--db", "db", cwd=tmp_path).stdout
    ours = shown.split("synthetic-gpu.yaml: ", 1)[1].split(".yaml: ", 1)[0]  # the shipped rules follow
    assert ours.startswith("matmul/float32/nn (Synthetic GPU)") and "#3:" in ours and "#4:" not in ours, shown
    assert "1 valid rules" in cli("db", "check", "--db", "db", cwd=tmp_path).stdout
    scored = cli("rule", "score", str(fixture), "--db", "db", cwd=tmp_path)
    assert scored.returncode == 0 and "geometric mean" in scored.stdout, scored.stderr
    # another model of the same compute capability and multiprocessor count adopts the rule; one of another refuses
    fitted = db.load_file(db.db_path(tmp_path / "db", "Synthetic GPU"))
    for name, change in (("Sibling GPU", {}), ("Bigger GPU", {"sm_count": fitted.device["sm_count"] + 1})):
        db.write_entries(db.db_path(tmp_path / "other", name), dict(fitted.device, name=name, **change), [])
    adopted = cli("rule", "adopt", str(fitted.path), "other/sibling-gpu.yaml", "matmul/float32/nn", cwd=tmp_path)
    assert adopted.returncode == 0 and "added the rule for matmul/float32/nn" in adopted.stdout, adopted.stderr
    assert "fitted on the coverage of Synthetic GPU" in cli("rule", "show", "--db", "other", cwd=tmp_path).stdout
    refused = cli("rule", "adopt", str(fitted.path), "other/bigger-gpu.yaml", "matmul/float32/nn", cwd=tmp_path)
    assert refused.returncode == 1 and "differ in sm_count" in refused.stderr and not \
        db.load_file(db.db_path(tmp_path / "other", "Bigger GPU")).rules


def test_candidates_take_the_rule_portfolios_of_models_of_the_same_compute_capability(tmp_path):
    """A model without coverage measures what another model of its architecture kept (its rules' portfolios), after
    its own winners and before the space's starts; a model of another compute capability gives nothing."""
    from autotune.core.device import DeviceInfo
    from autotune.core.rule import parse_rule
    from autotune.core.space import config_key, load_space
    from autotune.tuning.coverage import gather_candidates
    from autotune.tuning.fit import FitSettings, fit_rule
    from autotune.tuning.matrix import CrossMatrix

    space, here = load_space("matmul"), {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
    problems = [Problem("matmul", s, "float32") for s in ((96, 80, 64), (300, 200, 100), (64, 500, 700))]
    args = problems[0].args
    own, kept, far = ([space.validate(c, dtype="float32", args=args) for c in group] for group in (
        [{"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 2, "VEC": 2}],
        [{"BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 4}, {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "TN": 4}],
        [{"BM": 16, "BN": 64, "BK": 16, "TM": 2, "TN": 4, "VEC": 2}]))
    starts = {config_key(space.checked_or_none(c, dtype="float32", args=args) or {}) for c in space.starts}
    assert not {config_key(c) for c in [*kept, *far]} & starts

    def rule_file(name: str, cc: str, configs: list) -> Path:
        device = {"name": name, "cc": cc, "sm_count": 2}
        ms = [[1.0 if j == i % len(configs) else 2.0 for j in range(len(configs))] for i in range(len(problems))]
        matrix = CrossMatrix(device, "matmul", "float32", dict(args), [p.shape for p in problems], configs, ms)
        path = db.db_path(tmp_path, name)
        db.write_rules(path, device, [parse_rule(fit_rule(matrix, FitSettings(model="tree")).record)])
        return path

    rule_file("Sibling GPU", "9.0", kept)
    rule_file("Older GPU", "8.0", far)
    mine = db.db_path(tmp_path, here["name"])
    db.write_entries(mine, here, [db.parse_entry(db.entry_record(problems[0], own[0], time=TIME))])
    same_cc, unread = db.same_cc_files([tmp_path], here["name"], (9, 0))
    assert [f.device["name"] for f in same_cc] == ["Sibling GPU"] and unread == []
    device, files = DeviceInfo.from_record(here), [db.load_file(mine)]
    found = [config_key(c) for c in gather_candidates(problems, device, files, 64, 0, same_cc)]
    assert found[:3] == [config_key(c) for c in (*own, *kept)] and config_key(far[0]) not in found
    alone = [config_key(c) for c in gather_candidates(problems, device, files, 64, 0)]
    assert not {config_key(c) for c in kept} & set(alone) and alone[0] == config_key(own[0])
    (tmp_path / "damaged.yaml").write_text("entries: [")
    assert "damaged.yaml" in db.same_cc_files([tmp_path], here["name"], (9, 0))[1][0]


# -- tuning on first use ------------------------------------------------------------------------------
def test_tuning_on_first_use_keeps_a_checked_winner(tmp_path, monkeypatch, rng):
    from autotune.tuning.first_use import tune_on_first_use
    from autotune.tuning.instance import Instance

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "db"
    tune_on_first_use(candidates=2, budget_s=60, rep_ms=1.0, db=folder)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kernel = get_best_kernel("reduce", (301,), db=folder, op="nanmax")
            get_best_kernel("reduce", (299,), db=folder, op="nanmax")
    finally:
        set_first_use(None)
    notes = [str(w.message) for w in caught if issubclass(w.category, TunedKernelWarning)]
    assert sum("tuning on first use is on" in n for n in notes) == 1  # told once
    assert sum("on first use: timed" in n for n in notes) == 2
    entries = db.load_file(db.db_path(folder, "CUDA simulator")).entries
    assert sorted(e.problem.key for e in entries) == ["reduce/float32/nanmax/all/299",
                                                      "reduce/float32/nanmax/all/301"]
    kept = next(e for e in entries if e.problem.shape == (301,))
    assert kept.params == kernel.params and kept.record["trials"] >= 1
    assert all(e.record.get("source_hash") and db.stale_note(e) is None for e in entries)  # judged, and current
    problem = Problem("reduce", (301,), "float32", {"op": "nanmax"})
    assert Instance(problem, rng).check(kernel) is None  # NaN planted, poisoned output, float64 reference


def test_the_environment_variable_is_checked(monkeypatch):
    from autotune.tuning.first_use import enable_from_environment

    monkeypatch.setenv("AUTOTUNE_TUNE_ON_FIRST_USE", "maybe")
    with pytest.raises(ValueError, match="AUTOTUNE_TUNE_ON_FIRST_USE"):
        enable_from_environment()
    monkeypatch.setenv("AUTOTUNE_TUNE_ON_FIRST_USE", "0")
    enable_from_environment()
    from autotune.runtime import lookup

    assert lookup._first_use is None


def test_the_switch_is_read_in_one_place_and_import_autotune_obeys_it(monkeypatch):
    """``first_use_switch.first_use_requested`` is the one reading of AUTOTUNE_TUNE_ON_FIRST_USE: ``import autotune``
    turns tuning on first use on by it, refuses a misspelt value, and with the switch off loads nothing more (not
    even NumPy)."""
    from autotune.tuning.first_use_switch import first_use_requested

    for value, on in ((" 1 ", True), ("Yes", True), ("on", True), ("", False), ("0", False), ("OFF", False)):
        monkeypatch.setenv("AUTOTUNE_TUNE_ON_FIRST_USE", value)
        assert first_use_requested() is on, value
    code = ("import sys, autotune; lookup = sys.modules.get('autotune.runtime.lookup'); "
            "print(lookup is not None and lookup._first_use is not None, 'numpy' in sys.modules)")
    for value, expected in (("yes", "True True"), ("false", "False False")):
        env = {**os.environ, "AUTOTUNE_TUNE_ON_FIRST_USE": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
        assert out.stdout.strip() == expected, (value, out.stderr)
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "AUTOTUNE_TUNE_ON_FIRST_USE": "maybe"},
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "AUTOTUNE_TUNE_ON_FIRST_USE='maybe'" in out.stderr


# -- the bench's JSON rows -----------------------------------------------------------------------------
def timing(ms):
    return Timing(ms, ms * 0.99, ms * 1.01, 50)


def test_bench_rows_and_the_held_out_summary(tmp_path):
    from autotune.commands.bench_json import merged, problem_rows, read_rows, summary, write_rows

    rows = [{"name": "autotune", "timing": timing(2.0), "chosen_by": "rule"},
            {"name": "autotune tuned for the shape", "timing": timing(1.8), "tuned": True},
            {"name": "seed naive", "timing": timing(9.0)},
            {"name": "cuBLAS (cupy)", "timing": timing(1.6), "peer": True},
            {"name": "cuBLAS (torch)", "timing": timing(2.2), "peer": True},
            {"name": "broken", "error": "wrong"}]
    out = problem_rows("matmul/float32/nn/100x200x300", rows)
    assert [r["kernel"] for r in out] == ["autotune", "autotune tuned", "seed naive", "cuBLAS (cupy)",
                                          "cuBLAS (torch)"]
    assert all(set(r) >= {"problem", "kernel", "ms", "peer", "vs_peer"} for r in out)
    assert out[0]["peer"] == "cuBLAS (cupy)" and out[0]["vs_peer"] == pytest.approx(0.8)
    assert out[0]["chosen_by"] == "rule"
    path = tmp_path / "gpu-held-out.json"
    write_rows(path, out)
    second = problem_rows("matmul/float32/nn/64x64x64", [{"name": "autotune", "timing": timing(1.0)},
                                                          {"name": "cuBLAS (cupy)", "timing": timing(1.1),
                                                           "peer": True}])
    all_rows = merged(read_rows(path), second)
    assert len(all_rows) == 7 and merged(all_rows, second) == all_rows  # a rerun replaces its own rows
    text = summary(all_rows)
    line = next(x for x in text.splitlines() if "vs cuBLAS (cupy)" in x)
    assert "| 2 " in line and f"{math.sqrt(0.8 * 1.1):.3f}x" in line and "0.800x" in line
    assert "0.900x" in next(x for x in text.splitlines() if "vs autotune tuned" in x)
    path.write_text(json.dumps({"problem": 1}))
    with pytest.raises(ValueError, match="bench rows"):
        read_rows(path)


def row_text(**change) -> str:
    return json.dumps([{"problem": "reduce/float32/sum/all/1024", "kernel": "autotune", "ms": 1.0, "peer": None,
                        "vs_peer": None, **change}])


@pytest.mark.parametrize("text, words", [
    (row_text(problem=1), "row #1 has no problem"),
    (row_text(chosen_by=["x"]), "row #1 has a chosen_by"),
    (row_text(peer=3), "row #1 has a peer"),
    (row_text(ms=1e308), "row #1 has no time"),
    (row_text(ms=5e-324), "row #1 has no time"),
    (row_text(vs_peer=float("inf")).replace("Infinity", "1e999"), "vs_peer"),
    ("[" * 100000 + "]" * 100000, "RecursionError"),
    ('[{"problem": "a/b", "kernel": "autotune", "ms": 1' + "0" * 5000 + "}]", "digits"),
])
def test_a_damaged_bench_file_is_refused_naming_it_and_the_row(tmp_path, text, words):
    """The held-out file is read at the end of a bench run and summarised: a row it cannot use is named, with the
    file, before anything trips over it (a list as chosen_by was 'unhashable type' with no file named)."""
    from autotune.commands.bench_json import read_rows

    path = tmp_path / "held-out.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=words) as caught:
        read_rows(path)
    assert str(path) in str(caught.value)


def test_a_fifo_as_the_bench_file_is_refused_not_waited_on(tmp_path):
    from autotune.commands.bench_json import read_rows

    os.mkfifo(tmp_path / "held-out.json")
    with pytest.raises(ValueError, match="not a regular file"):
        read_rows(tmp_path / "held-out.json")


def test_a_rule_below_the_quality_floor_is_reported_and_not_written(tmp_path):
    """A rule fitted on a matrix whose candidates mostly failed (as a run with a broken compile path makes) would
    serve unseen shapes far from their best: `rule fit` reports it, writes nothing and exits 1; a lower
    --min-quality writes it."""
    import json

    doc = json.loads((ROOT / "tests" / "data" / "synthetic-matrix.json").read_text())
    rng = __import__("random").Random(7)
    for r, row in enumerate(doc["ms"]):
        kept = rng.randrange(len(row))
        for c in range(len(row)):
            if c != kept and row[c] is not None:
                row[c] = None
                doc["failed"].append([r, c, "compile"])
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(doc))
    out = cli("rule", "fit", str(damaged), "--db", "db", cwd=tmp_path)
    assert out.returncode == 1 and "not written" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "db").exists() or "rules:" not in "".join(p.read_text() for p in (tmp_path / "db").iterdir())
    out = cli("rule", "fit", str(damaged), "--db", "db", "--min-quality", "0.0001", cwd=tmp_path)
    assert out.returncode == 0 and "added the rule" in out.stdout, out.stdout + out.stderr


def test_first_use_candidates_are_timed_with_a_give_up_time_ten_times_the_fastest(tmp_path, monkeypatch):
    from autotune.tuning import first_use
    from autotune.tuning.records import GIVE_UP_FACTOR

    asked, times = [], iter([3.0, 1.0, 2.0])

    def timed(problem, params, rep_ms, give_up_ms=None):
        asked.append(give_up_ms)
        ms = next(times)
        return {"median_ms": ms, "p20_ms": ms, "p80_ms": ms, "reps": 10}

    candidates = [{"BLOCK": 32}, {"BLOCK": 64}, {"BLOCK": 128}]
    monkeypatch.setattr(first_use, "time_candidate", timed)
    monkeypatch.setattr(first_use, "candidates_for", lambda *a: (candidates, "test"))
    monkeypatch.setattr(first_use, "keep", lambda *a: tmp_path / "kept.yaml")
    hook = first_use.FirstUse(first_use.FirstUseSettings(candidates=3, budget_s=60))
    monkeypatch.setattr(hook, "_tell_once", lambda category: None)
    params, note = hook(Problem("reduce", (301,), "float32", {"op": "sum", "axis": None}), [tmp_path], None)
    assert params == {"BLOCK": 64} and "timed 3 of 3" in note
    assert asked == [None, GIVE_UP_FACTOR * 3.0, GIVE_UP_FACTOR * 1.0]


COMMITTED_MATRICES = sorted((ROOT / "benchmarks" / "coverage").glob("*.json"))


@pytest.mark.parametrize("path", COMMITTED_MATRICES, ids=lambda p: p.name)
def test_committed_matrices_measure_shapes_of_their_current_sets(path):
    """A shape set may grow (its earlier draws kept), never drop or change what a committed matrix measured: every
    row's shape is still in the set the matrix names, so rules fitted on it are fitted on that set."""
    matrix = read_matrix(path)
    current = set(family(matrix.family).shape_set(matrix.shape_set or "coverage", matrix.dtype, matrix.args))
    assert set(matrix.shapes) <= current, sorted(set(matrix.shapes) - current)[:5]
