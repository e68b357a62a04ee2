"""The command line and the lookup as a new user meets them: one lookup order for every command, merges that land
where lookups read, clear messages for wrong arguments and a missing GPU, help that lists what a family takes."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.runtime import db
from autotune.runtime.lookup import TunedKernelWarning, get_best_kernel

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"
TIME = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 10}


def cli(*args, cwd, simulator=True, timeout=300, env=None):
    env = {**{k: v for k, v in os.environ.items() if k != "AUTOTUNE_DB"}, "PYTHONPATH": str(ROOT), **(env or {})}
    if not simulator:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


def entry(kind, shape, params, **family):
    problem = Problem(kind, shape, "float32", family)
    full = load_space(kind).validate(params, dtype="float32", args=problem.args)
    return db.parse_entry(db.entry_record(problem, full, time=TIME))


def shipped(kind, shape, **family):
    problem = Problem(kind, shape, "float32", family)
    return next(e for e in db.load_file(ROOT / "tuned_db" / "nvidia-h100-80gb-hbm3.yaml").entries
                if e.problem.key == problem.key)


def test_your_folder_comes_first_and_the_shipped_database_serves_what_it_lacks(tmp_path, monkeypatch):
    """After a tuning run writes ./tuned_db/<gpu>.yaml, the shipped entries still serve every other problem."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    mine = entry("reduce", (1 << 20,), {"BLOCK": 32, "WAVES": 1})
    db.write_entries(tmp_path / "tuned_db" / "nvidia-h100-80gb-hbm3.yaml", {"name": H100, "cc": "9.0"}, [mine])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedKernelWarning)  # both exact: no fallback, no warning
        assert get_best_kernel("reduce", (1 << 20,), device=H100).params == mine.params
        assert get_best_kernel("reduce", (1 << 24,), device=H100).params == shipped("reduce", (1 << 24,)).params
    out = cli("show", "--device", "h100", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    first, second = str(tmp_path / "tuned_db"), str(ROOT / "tuned_db")
    assert out.stdout.splitlines()[0] == f"reading, in this order: {first}, {second}"
    assert out.stdout.index(f"{first}/nvidia-h100-80gb-hbm3.yaml") < out.stdout.index(f"{second}/nvidia-h100")


def test_merge_writes_the_file_of_the_gpu_model_the_incoming_file_declares(tmp_path):
    other = tmp_path / "from-colleague.yaml"
    db.write_entries(other, {"name": "NVIDIA Test GPU", "cc": "9.0"}, [entry("reduce", (1000,), {"BLOCK": 64})])
    out = cli("db", "merge", str(other), "--db", str(tmp_path / "db"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    target = tmp_path / "db" / "nvidia-test-gpu.yaml"
    assert f"merged into {target} (the file of NVIDIA Test GPU)" in out.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedKernelWarning)
        assert get_best_kernel("reduce", (1000,), device="NVIDIA Test GPU", db=tmp_path / "db").params["BLOCK"] == 64
    other.write_text(other.read_text() + "rules:\n- {family: mykernel, dtype: float32, rank: 1, portfolio: [{}], "
                                          "tree: {use: [0]}}\n")  # a rule of a family not registered here
    out = cli("db", "merge", str(other), "--db", str(tmp_path / "db"), cwd=tmp_path)
    assert out.returncode == 0 and "(not merged: 1 rules of families not registered here: mykernel;" in out.stdout, \
        out.stdout + out.stderr


def test_show_and_check_read_the_shipped_database_outside_a_checkout(tmp_path):
    for command in (["show"], ["db", "check"]):
        out = cli(*command, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert str(ROOT / "tuned_db" / "nvidia-h200.yaml") in out.stdout
        assert "empty" not in out.stdout and "no database files" not in out.stdout
    shipped = len(db.load_file(ROOT / "tuned_db" / "nvidia-h200.yaml", strict=True).entries)
    assert shipped > 30 and f"{shipped} valid entries" in cli("db", "check", cwd=tmp_path).stdout


def test_a_missing_folder_and_an_unreadable_file_are_reported_the_same_way_by_show_and_check(tmp_path):
    (tmp_path / "a-file").write_text("schema: 1\n")
    for command in (["show"], ["db", "check"]):
        out = cli(*command, "--db", str(tmp_path / "nonexistent"), cwd=tmp_path)
        assert out.returncode == 2 and "no such folder" in out.stderr and "Traceback" not in out.stderr
        out = cli(*command, cwd=tmp_path, env={"AUTOTUNE_DB": str(tmp_path / "a-file")})
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert f"AUTOTUNE_DB={tmp_path / 'a-file'}: not a database folder (a file, not a folder" in out.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "broken.yaml").write_text("schema: 1\ndevice: [oops\n")
    for command in (["show"], ["db", "check"]):
        out = cli(*command, "--db", str(tmp_path / "mine"), cwd=tmp_path)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert "broken.yaml" in out.stdout and "nvidia-h200.yaml" in out.stdout  # reported, and the rest shown


def test_bench_without_a_gpu_says_so_and_suggests_a_dry_run_that_exists(tmp_path):
    out = cli("bench", "matmul", cwd=tmp_path, simulator=False)
    assert out.returncode == 3 and "no CUDA GPU is visible" in out.stderr
    assert "autotune bench --family matmul --simulator" in out.stderr


def test_the_bench_puts_each_installed_peer_library_on_the_gpu_it_times(monkeypatch):
    """``bench --device 1``: PyTorch's and CuPy's current device become GPU 1 too, so their arrays and calls do not
    default to GPU 0 while the events time GPU 1."""
    import importlib.util
    import sys
    import types

    from autotune.commands import bench

    calls = []
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True,
                                                             set_device=lambda i: calls.append(("torch", i))))
    device = types.SimpleNamespace(use=lambda: calls.append(("cupy", "use")))
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda i: calls.append(("cupy", i)) or device))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name in ("torch", "cupy") else None)
    bench.select_peer_device(1)
    assert calls == [("torch", 1), ("cupy", 1), ("cupy", "use")]
    calls.clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    bench.select_peer_device(1)
    assert calls == []


def test_a_bench_report_names_the_measuring_command_without_its_output_folder():
    from autotune.commands.bench import measuring_arguments

    argv = ["bench", "matmul", "--out", "/tmp/x", "--shape", "8x8x8", "--out=/tmp/y", "--dtype", "float16"]
    assert measuring_arguments(argv) == ["bench", "matmul", "--shape", "8x8x8", "--dtype", "float16"]


@pytest.mark.parametrize("args, message", [
    (["reduce", "--trials", "0"], "must be at least 1"),
    (["reduce", "--trials", "-1"], "must be at least 1"),
    (["reduce", "--timeout", "0"], "must be more than 0"),
    (["reduce", "--time-limit", "-1"], "must be 0 or more"),
    (["reduce", "--time-limit", "nan"], "'nan' is not a number"),
    (["reduce", "--shape", "0"], "at least 1"),
    (["matmul", "--shape=-4x4x4"], "is not of the form"),
    (["reduce", "--dtype", "uint8"], "dtype 'uint8' is not supported by reduce"),
    (["matmul", "--dtype", "int32"], "dtype 'int32' is not supported by matmul"),
    (["matmul", "--op", "max"], "unrecognized arguments: --op"),
    (["tune", "--family", "nonexistent_family"], "cannot load kernel family 'nonexistent_family'"),
])
def test_wrong_arguments_get_one_clear_line(tmp_path, args, message):
    out = cli(*args, "--simulator", "--no-db", "--state-dir", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_library_use_without_a_gpu_says_what_is_missing_and_how_to_use_the_simulator(tmp_path):
    from autotune.core.device import gpu_available

    if gpu_available():
        pytest.skip("a GPU is visible here")
    code = ("import numpy as np\nfrom autotune import build_kernel, get_best_kernel\n"
            "for call in (lambda: get_best_kernel('reduce', (1000,)), "
            "lambda: build_kernel('reduce', {})(np.ones(8, np.float32))):\n"
            "    try:\n        call()\n    except Exception as exc:\n        print(type(exc).__name__, exc)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("NoGPUError")]
    assert len(lines) == 2 and all("NUMBA_ENABLE_CUDASIM=1" in line for line in lines), out.stdout + out.stderr


def test_help_lists_each_familys_own_options_and_parameters(tmp_path):
    matmul = cli("matmul", "--help", cwd=tmp_path).stdout
    assert "--layout" in matmul and "--op" not in matmul and "--axis" not in matmul
    reduce = cli("reduce", "--help", cwd=tmp_path).stdout
    assert "--op" in reduce and "--axis" in reduce and "--layout" not in reduce
    render = cli("render", "matmul", "--help", cwd=tmp_path).stdout
    assert "parameters of matmul" in render and "BM: 16 32 64 128* 256" in render
    top = cli("--help", cwd=tmp_path).stdout
    for command in ("selftest", "render", "show", "db", "warm", "tune", "bench"):
        assert command in top
    for command in (["selftest"], ["show"], ["db"], ["warm"]):
        text = cli(*command, "--help", cwd=tmp_path).stdout
        assert len(text.split("\n\n")[1].strip()) > 40, command  # a description, not just usage


def test_warm_compiles_a_small_database_for_a_compute_capability_without_a_gpu(tmp_path):
    """`autotune warm --cc 9.0` on a database file: each entry compiled to a cubin for sm_90 on the CPU (a tf32
    entry on rounded copies with the copy kernels it launches first), with its registers, spills and compile
    seconds printed."""
    path = tmp_path / "gpu.yaml"
    copies = {"BM": 64, "BN": 64, "BK": 32, "MMA": 8, "WGMMA": 1, "ASYNC_STAGES": 3}  # and its two copy kernels
    db.write_entries(path, {"name": "Some GPU", "cc": "9.0"},
                     [entry("reduce", (1000,), {"BLOCK": 64}), entry("reduce", (1000,), {"BLOCK": 128}, op="max"),
                      entry("matmul", (64, 64, 64), copies, precision="tf32")])
    out = cli("warm", "--db", str(path), "--cc", "9.0", "--jobs", "2", cwd=tmp_path, simulator=False, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("ok")]
    assert len(lines) == 3 and all("registers" in line and "spill bytes    0" in line for line in lines)
    assert "3 of 3 compiled" in out.stdout
    none = cli("warm", cwd=tmp_path, simulator=False)
    assert none.returncode == 3 and "--cc" in none.stderr


def test_a_compile_past_the_limit_is_timed_out_even_where_the_alarm_is_swallowed(monkeypatch):
    """Code that catches everything can swallow the alarm that stops a compile; the clock still decides."""
    import time

    from autotune.commands import selftest
    from autotune.tuning import evaluate
    from autotune.tuning.records import CompileResult

    def swallowing(job):
        try:
            time.sleep(0.5)
        except BaseException:  # as a library's catch-all would
            pass
        return CompileResult(ok=True)

    monkeypatch.setattr(evaluate, "compile_variant", swallowing)
    monkeypatch.setitem(selftest._interrupted, "numba", False)
    result = selftest.compile_within(None, 0.1)
    assert not result.ok and result.stage == "timeout" and selftest._interrupted["numba"]
    monkeypatch.setitem(selftest._interrupted, "numba", False)
    assert selftest.compile_within(None, 5.0).ok


def test_selftest_names_and_skips_a_variant_whose_compile_runs_past_the_limit():
    """The selftest's compile pass stops a compile at the limit, names the variant and leaves it out of the checks;
    the variants that compiled in time stay in the plan (the real compiler, in a compile process)."""
    import io

    from autotune.commands.selftest import compile_ahead

    long_one = {"strategy": "tiled", "BM": 64, "BN": 64, "BK": 32, "TM": 8, "TN": 8, "VEC": 4, "UNROLL_K": 32}
    plan = [("matmul", "float32", {"layout": "nn"}, [(7, 13, 5)], [{"strategy": "naive"}, long_one]),
            ("reduce", "float32", {"op": "max", "axis": None}, [(31,)], [{"BLOCK": 64}])]
    out = io.StringIO()
    previous = os.environ.pop("NUMBA_ENABLE_CUDASIM")  # the compile processes inherit the real compiler
    try:
        kept = compile_ahead(plan, 8.0, out)
    finally:
        os.environ["NUMBA_ENABLE_CUDASIM"] = previous
    assert [sample for *_, sample in kept] == [[{"strategy": "naive"}], [{"BLOCK": 64}]], out.getvalue()
    assert "SKIP matmul float32" in out.getvalue() and "compile took longer than 8 s" in out.getvalue()
    assert "1 skipped (not checked)" in out.getvalue() and "COMPILE FAIL" not in out.getvalue()


def test_after_a_stopped_compile_the_next_ones_run_in_a_fresh_process(monkeypatch):
    """A compile stopped by the selftest's alarm may leave Numba half-changed in its process (in CI a later
    compile there failed with "generator raised StopIteration"), so the jobs after it compile in a fresh process:
    here this process's compile_variant is broken, and the job compiles all the same."""
    from autotune.commands import selftest
    from autotune.core.problem import Problem
    from autotune.tuning import evaluate
    from autotune.tuning.records import job_for

    def broken(job):
        raise AssertionError("compiled in the process whose compile was stopped")

    monkeypatch.setattr(evaluate, "compile_variant", broken)
    monkeypatch.setitem(selftest._interrupted, "numba", True)
    job = job_for(Problem("reduce", (31,), "float32", {"op": "max", "axis": None}), {"BLOCK": 64})
    report = selftest.compile_within(job, 60.0)
    assert report.ok, report


def test_a_time_limit_is_shared_among_the_shapes_left(tmp_path, monkeypatch):
    """Each shape may take the time left over the shapes left (the first of several twice that: it compiles the
    starts cold), so one that ends early leaves its time to the rest; the standard suite on a GPU has a limit
    unless told otherwise, given shapes have none."""
    import argparse
    from types import SimpleNamespace

    import autotune.commands.cli as cli_module
    import autotune.tuning.tuner as tuner_module

    clock, given = [1000.0], []

    class Recorder(tuner_module.Tuner):
        def run(self, pools=None):
            given.append(self.config.timeout_s)
            clock[0] += {40: 120, 41: 30}.get(self.problem.shape[0], 0)
            return self.result()

    monkeypatch.setattr(tuner_module, "Tuner", Recorder)
    # cli's own clock only: the time module's monotonic stopped for the whole process froze the compile pool's
    # manager thread, which spun in a poll that never timed out while the pool's stop waited 10 s for it
    monkeypatch.setattr(cli_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    shapes = ["--shape", "40", "--shape", "41", "--shape", "42"]
    cli_module.main(["reduce", "--simulator", *shapes, "--time-limit", "300", "--no-db", "--state-dir", str(tmp_path)])
    assert given == [150, 90, 150]  # 300 * 2 / 4; (300 - 120) / 2; 300 - 150
    given.clear()
    cli_module.main(["reduce", "--simulator", *shapes, "--timeout", "20", "--time-limit", "300", "--no-db",
                     "--state-dir", str(tmp_path)])
    assert given == [20, 20, 20]
    args = lambda **kw: argparse.Namespace(**{"time_limit": None, "shape": None, "simulator": False,  # noqa: E731
                                              "record_sweep": None, **kw})
    assert cli_module.run_time_limit(args()) == cli_module.SUITE_TIME_LIMIT_S <= 15 * 60
    assert cli_module.run_time_limit(args(shape=["40"])) is None
    assert cli_module.run_time_limit(args(time_limit=0.0)) is None
    assert cli_module.run_time_limit(args(shape=["40"], time_limit=60.0)) == 60.0


def test_an_error_raised_while_ctrl_c_is_handled_ends_as_the_interrupt(monkeypatch, capsys):
    """Optuna's journal lock, cut short by Ctrl-C, raises an OSError from its clean-up (seen in CI: the lock file's
    rename not found); the command then ends as interrupted (130), not as an error (2). An OSError of its own
    stays an error."""
    from autotune.commands import cli as cli_module

    def cut_short(argv):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise FileNotFoundError(2, "No such file or directory", "study.journal.lock1234.rename")

    monkeypatch.setattr(cli_module, "preload_families", cut_short)
    assert cli_module.main(["reduce"]) == 130
    assert "interrupted" in capsys.readouterr().err

    def fails(argv):
        raise FileNotFoundError(2, "No such file or directory", "somewhere")

    monkeypatch.setattr(cli_module, "preload_families", fails)
    assert cli_module.main(["reduce"]) == 2
    assert "autotune: error:" in capsys.readouterr().err


def test_selftest_checks_the_tma_variants_where_they_apply(monkeypatch):
    """The TMA-fed wgmma variants, which a covering sample's random draws rarely reach, are in the selftest of
    every bfloat16 (and float16) layout, stacks included (as extras), the persistent ones (for stacks, not the
    Stream-K ones), and not in float64's (they do not apply there). The covering samples are left empty here: the variants counted are the extras alone (drawing the
    samples of these 20 cases took a minute of this test's CPU)."""
    import numpy as np

    from autotune.commands.selftest import plan_for
    from autotune.core.space import SearchSpace

    monkeypatch.setattr(SearchSpace, "covering_sample", lambda self, **kwargs: ([], set()))
    plan = plan_for(["matmul"], ["bfloat16", "float64"], False, np.random.default_rng(0))
    assert {dtype for _, dtype, *_ in plan} == {"bfloat16", "float64"}
    for kind, dtype, args, shapes, variants in plan:
        tma = [v for v in variants if v.get("TMA")]
        applies = dtype in ("float16", "bfloat16")
        assert (len(tma) >= 2) if applies else not tma, (dtype, args, tma)
        persistent = [v for v in tma if v.get("SCHEDULE", "tile") != "tile"]
        walks = {"persistent": 3, "stream_k": 0 if args.get("batch") else 2}
        assert len(persistent) == (sum(walks.values()) if applies else 0), (dtype, args, persistent)
    assert any(args.get("batch") and dtype == "bfloat16" for _, dtype, args, *_ in plan)


def test_selftest_overlapping_check_takes_bfloat16(rng):
    """The selftest's check with ``out=`` over its first input moves bfloat16 as its bits (Numba's copies take no
    ml_dtypes buffer: on the GPU every such check failed with "cannot include dtype 'E' in a buffer")."""
    from autotune.commands.selftest import _check_overlapping
    from autotune.core.problem import Problem
    from autotune.runtime.build import build_kernel

    kernel = build_kernel("matmul", {"strategy": "shared16"}, "bfloat16")
    assert _check_overlapping(kernel, Problem("matmul", (37, 29, 41), "bfloat16", {"layout": "nn"}), rng) is None


@pytest.mark.parametrize("option, make, message", [
    ("--db", lambda p: p.write_text(""), "--db: .*out: not a folder; a database is a folder"),
    ("--db", lambda p: (p / "cuda-simulator.yaml").mkdir(parents=True), "cuda-simulator.yaml: not a regular file"),
    ("--record-sweep", lambda p: p.mkdir(), "--record-sweep .*out: is a folder; name the sweep file"),
])
def test_where_results_go_is_checked_before_anything_is_measured(tmp_path, monkeypatch, capsys, option, make,
                                                                 message):
    """`--db` naming a file and `--record-sweep` naming a folder used to fail after the whole run; now the run
    stops with one line before its first measurement."""
    import re

    import autotune.tuning.tuner as tuner_module
    from autotune.commands.cli import main

    class NoTuning(tuner_module.Tuner):
        def __init__(self, *args, **kwargs):
            raise AssertionError("a tuner was made before the destination was checked")

    monkeypatch.setattr(tuner_module, "Tuner", NoTuning)
    make(tmp_path / "out")
    extra = ["--write-db"] if option == "--db" else []
    code = main(["reduce", "--simulator", "--shape", "41", "--compile-workers", "1", "--state-dir",
                 str(tmp_path / "state"), option, str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and re.search(message, err) and "nothing was measured" in err, err


MINIMAL = ROOT / "tests" / "minimal_family"


def test_a_family_given_by_path_goes_through_every_command_with_the_same_flag(tmp_path, monkeypatch, capsys):
    """tests/minimal_family (a layernorm with a float argument, eps), named by its path with --family in every
    command: tuned in the simulator into a database, rendered with its argument, benched in the simulator,
    self-tested through its oracle, shown, checked, warmed for sm_90 with the real compiler, its studies listed;
    each command's output says what it did for this family."""
    from autotune.commands import cli as cli_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    family = ["--family", str(MINIMAL)]
    space = tmp_path / "narrow.yaml"  # threads the simulator runs quickly
    space.write_text("family: layernorm\nparams:\n  BLOCK: {values: [32, 64]}\n")

    def run(*args) -> str:
        code = cli_module.main([*args])
        out = capsys.readouterr()
        assert code == 0, f"autotune {' '.join(args)}:\n{out.out[-2000:]}\n{out.err[-2000:]}"
        return out.out + out.err

    text = run("tune", *family, "--simulator", "--shape", "3x41", "--eps", "0.001", "--trials", "2",
               "--space", str(space), "--compile-workers", "1", "--write-db", "--db", "db")
    entries = db.load_file(tmp_path / "db" / "cuda-simulator.yaml", strict=True).entries
    assert [e.problem.key for e in entries] == ["layernorm/float32/0.001/3x41"] and "database: db" in text
    assert "float32(0.5)" in run("render", *family, "-p", "BLOCK=64", "--eps", "0.5")
    text = run("bench", *family, "--simulator", "--shape", "3x41", "--eps", "0.001", "--db", "db", "--out", "b")
    report = (tmp_path / "b" / "cuda-simulator-layernorm-0.001.md").read_text()
    assert "layernorm/float32/0.001/3x41" in report and "| autotune " in report and "| seed " in report
    assert "0 failures" in run("selftest", *family, "--simulator")
    assert "layernorm/float32/0.001/3x41" in run("show", *family, "--db", "db")
    assert "ok   " in run("db", "check", *family, "--db", "db")
    text = run("warm", "--cc", "9.0", *family, "--db", "db", "--jobs", "1")
    assert "ok " in text and "1 of 1 compiled" in text and "registers" in text
    assert "layernorm/float32/0.001/3x41@cuda-simulator" in run("studies", "list", *family)
    with pytest.raises(SystemExit):
        cli_module.main(["tune", *family, "--help"])
    text = capsys.readouterr().out
    assert "--eps FLOAT" in text and "BLOCK: 32 64 128* 256 512 1024" in text and "M x N" in text


def test_the_fallback_hint_is_a_command_that_works_as_written(tmp_path, monkeypatch, capsys):
    """A lookup with no entry warns at the caller's line and names a command that tunes exactly that problem
    into the folder the lookup reads; run as written, it makes the same lookup exact."""
    import re
    import shlex
    import warnings

    import numpy as np

    from autotune.commands import cli as cli_module
    from autotune.core.registry import register_family

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    register_family(str(MINIMAL))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_best_kernel("layernorm", (3, 7), eps=0.25, db=tmp_path / "mine")
    ours = [w for w in caught if issubclass(w.category, TunedKernelWarning)]
    assert ours and all(w.filename == __file__ for w in ours)  # this test's line, not autotune's
    (warning,) = [w for w in ours if "autotune tune " in str(w.message)]  # the other: db= is no database folder
    command = shlex.split(re.search(r"`(autotune tune [^`]+)`", str(warning.message)).group(1))
    assert command[3] == str(MINIMAL) and "--eps" in command and "0.25" in command and "--simulator" in command
    assert cli_module.main(command[1:] + ["--trials", "1", "--compile-workers", "1"]) == 0
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedKernelWarning)
        kernel = get_best_kernel("layernorm", (3, 7), eps=0.25, db=tmp_path / "mine")
    x = np.arange(21, dtype=np.float32).reshape(3, 7)
    assert np.allclose(kernel(x), (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 0.25),
                       atol=1e-5)


def test_shapes_are_refused_in_the_familys_own_terms(tmp_path):
    out = cli("tune", "--family", str(MINIMAL), "--simulator", "--shape", "3by41", "--no-db", "--state-dir",
              str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and "layernorm: M x N: M rows of N" in out.stderr and "matmul" not in out.stderr


def test_version_names_the_versions_and_the_replacements(tmp_path):
    out = cli("--version", cwd=tmp_path)
    assert out.returncode == 0
    for name in ("autotune 0.", "numba 0.", "numba-cuda 0.", "CUDA driver:", "compile-time replacements"):
        assert name in out.stdout, name
    from autotune.core.yamlfast import parser_name

    parser = [line for line in out.stdout.splitlines() if line.startswith("pyyaml ")]
    assert len(parser) == 1 and (", parser: libyaml" in parser[0]) == (parser_name() == "libyaml"), parser


def test_version_says_when_pyyaml_has_no_libyaml(monkeypatch):
    from autotune.commands import version
    from autotune.core import yamlfast

    monkeypatch.setattr(yamlfast, "libyaml_usable", lambda: False)
    assert "pure-Python parser" in version.yaml_parser() and "only-binary" in version.yaml_parser()


def test_quiet_keeps_progress_off_and_verbose_adds_details(tmp_path):
    args = ["render", "--family", "reduce", "-p", "BLOCK=32"]
    assert cli(*args, "-q", cwd=tmp_path).stderr == ""
    quiet = cli("tune", "--family", "reduce", "--simulator", "--shape", "33", "--trials", "1", "--no-db",
                "--compile-workers", "1", "--state-dir", str(tmp_path), "-q", cwd=tmp_path)
    assert quiet.returncode == 0 and "tuning reduce" not in quiet.stderr and "| reduce/float32" in quiet.stdout


def test_studies_are_listed_shown_and_deleted_only_when_asked(tmp_path, capsys):
    """Two studies in a state folder's journal: listed with their trials by state and fastest time, one shown
    trial by trial, deleted by pattern only with --yes (without it they are listed and kept, exit 1)."""
    import optuna

    from autotune.commands import cli as cli_module
    from autotune.tuning.storage import journal_path, open_journal

    storage = open_journal(journal_path(tmp_path, "gpu-x"), print)
    for name, values in (("reduce/float32/sum/all/1000@gpu-x", [3.0, 2.0]), ("matmul/float32/nn/8x8x8@gpu-x", [5.0])):
        study = optuna.create_study(storage=storage, study_name=name)
        for value in values:
            trial = study.ask()
            trial.suggest_int("BLOCK", 32, 64)
            study.tell(trial, value)
        failed = study.ask()
        failed.set_user_attr("stage", "compile")
        failed.set_user_attr("reason", "compile failed: something")
        study.tell(failed, state=optuna.trial.TrialState.FAIL)

    def run(*args):
        code = cli_module.main(["studies", *args, "--state-dir", str(tmp_path)])
        return code, capsys.readouterr().out

    code, text = run("list")
    assert code == 0 and "| reduce/float32/sum/all/1000@gpu-x | 2        | 1      |" in text and "| 2 " in text
    code, text = run("show", "reduce/float32/sum/all/1000@gpu-x")
    assert code == 0 and "2 measured, 1 failed" in text and "compile failed: something" in text
    assert cli_module.main(["studies", "show", "nonexistent", "--state-dir", str(tmp_path)]) == 2
    capsys.readouterr()
    code, text = run("delete", "reduce/*")
    assert code == 1 and "would delete reduce/float32/sum/all/1000@gpu-x" in text and "nothing deleted" in text
    code, text = run("delete", "reduce/*", "--yes")
    assert code == 0 and "deleted reduce/float32/sum/all/1000@gpu-x" in text
    code, text = run("list")
    assert "reduce/" not in text and "matmul/float32/nn/8x8x8@gpu-x" in text


def test_an_interrupt_claims_kept_measurements_only_for_commands_that_keep_studies(monkeypatch, capsys):
    """Ctrl-C ends any command with status 130; only a command with studies (``--state-dir``) says its
    measurements are kept for the next run (selftest once said so, then started afresh)."""
    from autotune.commands import cli

    def interrupt(args):
        raise KeyboardInterrupt

    real_parse = cli.parse

    def parse(argv):
        args = real_parse(argv)
        args.run = interrupt
        return args

    monkeypatch.setattr(cli, "parse", parse)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # main sets it for --simulator; restored after the test
    assert cli.main(["selftest", "--simulator"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    assert cli.main(["studies", "list", "--state-dir", "nowhere"]) == 130  # has --state-dir, measures nothing
    assert capsys.readouterr().err.strip() == "interrupted"
    for command in (["reduce", "--simulator", "--shape", "41", "--no-db"],
                    ["coverage", "reduce", "--simulator", "--no-db"], ["met", "tune", "--simulator"]):
        assert cli.main(command) == 130, command
        assert "everything measured so far is in the study" in capsys.readouterr().err, command


def test_selftest_parts_hold_every_case_once(capsys):
    """``--part I/N``: the N parts of a selftest plan are disjoint and together the whole plan, in its order; a part
    outside 1..N is refused on the command line."""
    from autotune.commands.cli import main
    from autotune.commands.selftest import plan_for, plan_part

    plan = plan_for(("matmul", "reduce"), ("float32",), True, np.random.default_rng(0))
    whole = [(kind, dtype, repr(args)) for kind, dtype, args, _, _ in plan]
    assert len(whole) > 8 and len(set(whole)) == len(whole)
    for count in (1, 2, 3, 4, len(plan)):
        parts = [[(k, d, repr(a)) for k, d, a, _, _ in plan_part(plan, i, count)] for i in range(1, count + 1)]
        assert sorted(c for p in parts for c in p) == sorted(whole)
        assert all(p == [c for c in whole if c in p] for p in parts)  # each in the plan's order
    for index, count in ((0, 2), (3, 2), (1, len(plan) + 1)):  # the last would leave a part with nothing to check
        with pytest.raises(ValueError, match="--part"):
            plan_part(plan, index, count)
    for bad in ("3/2", "0/1", "a/b", "2"):
        with pytest.raises(SystemExit):
            main(["selftest", "--simulator", "--part", bad])
        assert "takes I/N" in capsys.readouterr().err


def test_selftest_runs_the_part_asked_for(monkeypatch, capsys):
    """``autotune selftest --part 2/3`` checks the second share of the plan (the one ``plan_part`` gives)."""
    from autotune.commands import cli, selftest

    seen = []
    monkeypatch.setattr(selftest, "check_plan", lambda plan, rng, out=None: seen.append(plan) or True)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert cli.main(["selftest", "--simulator", "--family", "reduce", "--dtype", "float32", "--part", "2/3"]) == 0
    whole = selftest.plan_for(("reduce",), ("float32",), True, np.random.default_rng(0))
    assert [c[:3] for c in seen[0]] == [c[:3] for c in whole[1::3]]
    assert "part 2 of 3" in capsys.readouterr().out
