"""Bad input is refused clearly, fast and by one rule: database files, search spaces, shapes and dtypes."""
import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from autotune.core.problem import Problem
from autotune.core.space import SpaceError, load_space
from autotune.runtime import db
from autotune.runtime.lookup import TunedKernelWarning, get_best_kernel

ROOT = Path(__file__).resolve().parent.parent
SIM = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
TIME = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 10}


def reduce_record(n=1000, block=64, **changes):
    problem = Problem("reduce", (n,), "float32", {"op": "sum"})
    params = load_space("reduce").validate({"BLOCK": block, "WAVES": 1}, dtype="float32", args=problem.args)
    return {**db.entry_record(problem, params, time=TIME, baseline={"median_ms": 2.0, "p20_ms": 2.0, "p80_ms": 2.0},
                              trials=3), **changes}


def write_db(path: Path, records, device=SIM):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"schema": 1, "device": device, "entries": records}, sort_keys=False))
    return path


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"})


def alias_bomb(levels=9) -> str:
    """A YAML value of about 1 KB that stands for 10**levels nodes (nested anchors and aliases)."""
    lines = ["&l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels):
        lines.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "[" + ", ".join(lines) + "]"


@pytest.mark.parametrize("field", ["shape", "params"])
def test_an_alias_bomb_in_a_database_is_refused_in_well_under_a_second(tmp_path, field):
    path = write_db(tmp_path / "cuda-simulator.yaml", [reduce_record()])
    text = path.read_text().replace("  shape:\n  - 1000\n", f"  shape: {alias_bomb()}\n") if field == "shape" else \
        path.read_text().replace("  params:\n", f"  params: {alias_bomb()}\n  unused:\n")
    path.write_text(text)
    assert len(text) < 2000
    t0 = time.perf_counter()
    with pytest.raises(db.DatabaseError) as err:
        db.load_file(path)
    assert time.perf_counter() - t0 < 1.0
    assert str(path) in str(err.value) and "expands to more than" in str(err.value) and len(str(err.value)) < 400
    out = cli("db", "check", "--db", str(tmp_path))
    assert out.returncode == 1 and "expands to more than" in out.stdout and "Traceback" not in out.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_best_kernel("reduce", (1000,), db=tmp_path)  # the file is skipped, with a warning
    assert any("cannot be used" in str(w.message) and str(path) in str(w.message) for w in caught)


def test_an_alias_bomb_in_a_search_space_is_refused(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(f"family: reduce\nparams:\n  BLOCK: {{values: [32], doc: {alias_bomb()}}}\n")
    t0 = time.perf_counter()
    with pytest.raises(SpaceError, match="expands to more than") as err:
        load_space("reduce", path)
    assert time.perf_counter() - t0 < 1.0 and str(path) in str(err.value)


@pytest.mark.parametrize("change, field", [
    ({"time": {"median_ms": int("1" + "0" * 400), "p20_ms": 1.0, "p80_ms": 1.0}}, "field 'time'"),
    ({"time": {"median_ms": float("nan"), "p20_ms": 1.0, "p80_ms": 1.0}}, "field 'time'"),
    ({"baseline": [1, 2]}, "field 'baseline' must be a mapping"),
    ({"rate": -3.0}, "field 'rate'"),
    ({"resources": {"registers": "many"}}, "field 'resources'"),
    ({"trials": 2.5}, "field 'trials'"),
])
def test_what_db_check_accepts_every_command_handles(tmp_path, change, field):
    """One validation: a value show or merge could not handle is refused by the check, with the field named."""
    path = write_db(tmp_path / "cuda-simulator.yaml", [reduce_record(**change), reduce_record(n=2000)])
    loaded = db.load_file(path)
    assert len(loaded.entries) == 1 and field in loaded.problems[0] and "entry #1" in loaded.problems[0]
    check = cli("db", "check", "--db", str(tmp_path))
    assert check.returncode == 1 and field in check.stdout
    show = cli("show", "--db", str(tmp_path))
    assert "Traceback" not in show.stderr and "reduce/float32/sum/all/2000" in show.stdout
    merge = cli("db", "merge", str(path), "--db", str(tmp_path / "other"))
    assert merge.returncode == 2 and "Traceback" not in merge.stderr and field in merge.stderr


def test_duplicate_entries_are_reported_and_the_first_is_used_by_a_stated_rule(tmp_path):
    path = write_db(tmp_path / "cuda-simulator.yaml", [reduce_record(block=64), reduce_record(block=128)])
    loaded = db.load_file(path)
    assert [e.params["BLOCK"] for e in loaded.entries] == [64]
    assert "a second entry for reduce/float32/sum/all/1000 (entry #1 is the one used)" in loaded.problems[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert get_best_kernel("reduce", (1000,), db=tmp_path).params["BLOCK"] == 64
    before = path.read_text()
    with pytest.raises(db.DatabaseError, match="fix or remove"):
        db.write_entries(path, SIM, [db.parse_entry(reduce_record(n=5000))])
    assert path.read_text() == before  # a merge never changes an entry it was not asked to change
    assert cli("db", "check", "--db", str(tmp_path)).returncode == 1


def test_a_key_given_twice_in_one_entry_is_an_error_with_its_line(tmp_path):
    path = write_db(tmp_path / "cuda-simulator.yaml", [reduce_record()])
    path.write_text(path.read_text().replace("  dtype: float32\n", "  dtype: float32\n  dtype: float64\n"))
    with pytest.raises(db.DatabaseError, match=r"line \d+: key 'dtype' is given twice") as err:
        db.load_file(path)
    assert str(path) in str(err.value)


def test_a_binary_file_is_named_and_the_check_goes_on(tmp_path):
    (tmp_path / "a-broken.yaml").write_bytes(b"\xff\xfe\x00garbage\x80")
    write_db(tmp_path / "cuda-simulator.yaml", [reduce_record()])
    out = cli("db", "check", "--db", str(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"FAIL {tmp_path / 'a-broken.yaml'}: cannot read" in out.stdout and "not UTF-8" in out.stdout
    assert "ok   " + str(tmp_path / "cuda-simulator.yaml") in out.stdout


def test_a_bad_file_of_another_gpu_model_does_not_break_the_fallback(tmp_path):
    write_db(tmp_path / "other-gpu.yaml", [reduce_record(block=32)], {"name": "Other GPU", "cc": "9.0"})
    (tmp_path / "newer-gpu.yaml").write_text("schema: 2\ndevice: {name: Newer GPU, cc: '9.0'}\nentries: []\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = get_best_kernel("reduce", (1000,), db=tmp_path)
    assert kernel.params["BLOCK"] == 32
    notes = [str(w.message) for w in caught]
    assert any("newer-gpu.yaml" in n and "schema" in n for n in notes)
    assert any("Other GPU, same compute capability" in n for n in notes)


@pytest.mark.parametrize("body, message", [
    ("family: reduce\nparams:\n  BLOCK: {values: [48]}\n", "values [48] are unknown to the built-in space"),
    ("family: reduce\nparams:\n  ITEMS: {values: [100000]}\n", "values [100000] are unknown to the built-in space"),
    ("family: reduce\nparams:\n  BLOCK: {values: [32], when: {NOPE: [1]}}\n", "'when' names 'NOPE'"),
    ("family: reduce\nparams:\n  ROW_MODE: {values: [warp], when: {axis: [0, 1]}}\n", "may only narrow"),
    ("family: reduce\nparams: {}\nconstraints: [{name: divides}]\n", "'args' must list 2 parameter names"),
    ("family: reduce\nparams: {}\nconstraints: [{name: divides, args: [BLOCK]}]\n", "must list 2"),
    ("family: reduce\nparams: {}\nconstraints: [{name: divides, args: [BLOCK, NOPE]}]\n", "must list 2"),
    ("family: reduce\nparams: {}\nconstraints: [{name: vector_bytes_at_most, max: 0}]\n", "at least 1"),
    ("family: reduce\nparams: {}\nconstraints: [{name: threads_between, min: 1}]\n", "needs the integer argument 'max'"),
    ("family: reduce\nparams: {}\nconstraints: [{name: threads_between, min: 1, max: 9, step: 2}]\n", "takes no argument 'step'"),
    ("family: reduce\nparams: {}\nextra: 1\n", "unknown key 'extra'"),
])
def test_a_space_of_your_own_only_narrows_and_bad_constraints_are_refused_at_load(tmp_path, body, message):
    path = tmp_path / "space.yaml"
    path.write_text(body)
    with pytest.raises(SpaceError) as err:
        load_space("reduce", path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_shapes_and_dtypes_as_numpy_users_write_them(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TunedKernelWarning)
        a = get_best_kernel("reduce", (np.int64(1000),), dtype=np.float32, db=tmp_path)
        b = get_best_kernel("reduce", np.int64(1000), dtype="f4", db=tmp_path)
        c = get_best_kernel("reduce", [1000], dtype=np.dtype("float32"), db=tmp_path)
    assert a is b is c and a.dtype == "float32"
    for shape, message in (((0,), "at least 1"), ((-4, 4, 4), "at least 1"), ((2.5,), "must be integers"),
                           ((10**23,), "above 2\\*\\*48"), ((4096, 4096, 2**48 + 1), "no GPU holds")):
        with pytest.raises(ValueError, match=message):
            get_best_kernel("matmul" if len(shape) == 3 else "reduce", shape, db=tmp_path)
    with pytest.raises(ValueError, match="dtype 'uint8' is not supported by reduce; supported: float32, float64, "
                                         "float16, bfloat16, int32, int64"):
        get_best_kernel("reduce", (1000,), dtype=np.uint8, db=tmp_path)


@pytest.mark.parametrize("text", ["100000000000000000000000", "10**23", "1<<60", "4096x4096x" + "9" * 30,
                                  "9" * 5000])
def test_a_shape_no_gpu_could_hold_is_refused_when_it_is_read(text):
    """``--shape 100000000000000000000000`` used to be accepted and fail only when the device refused it (or, of
    more than 4300 digits, with Python's own error); it is refused as it is parsed, with what the limit is."""
    from autotune.core.problem import MAX_DIMENSION, parse_shape

    with pytest.raises(ValueError, match=r"above 2\*\*48|characters; no shape") as err:
        parse_shape(text)
    assert len(str(err.value)) < 200
    assert parse_shape(str(MAX_DIMENSION)) == (MAX_DIMENSION,)


def test_a_dtype_mismatch_suggests_only_what_exists():
    from autotune import build_kernel

    kernel = build_kernel("reduce", {}, op="sum")
    with pytest.raises(TypeError) as err:
        kernel(np.ones(8, np.uint8))
    assert "convert the input to float32 or float64 or float16 or bfloat16 or int32 or int64" in str(err.value)
    assert "dtype='uint8'" not in str(err.value)
    for dtype in ("float64", "int32"):
        with pytest.raises(TypeError, match=f"build the kernel with dtype='{dtype}'"):
            kernel(np.ones(8, dtype))


def test_f_ordered_and_strided_numpy_input_follow_the_same_rule(rng):
    """NumPy and device input alike must have the layout the kernel needs; the error names the copy to make."""
    from autotune import build_kernel

    kernel = build_kernel("reduce", {}, op="sum", axis=1)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="must be C-contiguous"):
        kernel(np.asfortranarray(x))
    with pytest.raises(ValueError, match="strided view"):
        kernel(x[:, ::2])
    np.testing.assert_allclose(kernel(np.ascontiguousarray(x[:, ::2])), x[:, ::2].sum(axis=1), rtol=1e-6)


def test_database_writes_keep_the_files_mode(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "cuda-simulator.yaml"
        db.write_entries(path, SIM, [db.parse_entry(reduce_record())])
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o640)
        db.write_entries(path, SIM, [db.parse_entry(reduce_record(n=2000))])
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    finally:
        os.umask(old)


BAD_SCALARS = ["date: 2026-13-45", "date: 2026-02-30", "trials: " + "9" * 4400, "trials: !!int abc",
               "trials: !!int ''", "rate: !!float ''", "template_hash: !!bool maybe", "date: !!timestamp xyz"]


@pytest.mark.parametrize("line", BAD_SCALARS, ids=lambda line: line[:24])
def test_a_scalar_pyyaml_cannot_build_skips_its_database_file_with_the_file_and_line_named(tmp_path, line):
    """Dates that do not exist, huge integers, explicit tags on text they cannot read: PyYAML raises ValueError,
    KeyError or IndexError from inside its constructors. The file is refused naming the file and the line, a
    lookup skips it with a warning and still works, and the check names it."""
    path = write_db(tmp_path / "cuda-simulator.yaml", [reduce_record()])
    path.write_text(path.read_text().replace("  trials: 3\n", f"  trials: 3\n  {line}\n".replace(
        "  trials: 3\n  trials:", "  trials:")))
    with pytest.raises(db.DatabaseError) as err:
        db.load_file(path)
    assert str(err.value).startswith(f"{path}: cannot read: line ") and len(str(err.value)) < 400
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = get_best_kernel("reduce", (1000,), db=tmp_path)
    assert kernel.params == load_space("reduce").validate(  # the default's, the file skipped
        Problem("reduce", (1000,)).impl.default_params(Problem("reduce", (1000,))), dtype="float32",
        args=Problem("reduce", (1000,)).args)
    assert any("cannot be used" in str(w.message) and str(path) in str(w.message) for w in caught)


def test_a_database_folder_with_bad_scalars_and_a_fifo_is_checked_and_shown_to_the_end(tmp_path):
    """One file with a date that does not exist and one FIFO named like a database file, beside a good file:
    ``db check`` names both (and returns, where a FIFO used to block it), ``show`` lists the good file, and
    ``autotune.sum`` works with a warning for each."""
    import autotune

    write_db(tmp_path / "good-gpu.yaml", [reduce_record()], {"name": "Good GPU", "cc": "8.0"})
    bad = write_db(tmp_path / "dated-gpu.yaml", [reduce_record()], {"name": "Dated GPU", "cc": "8.0"})
    bad.write_text(bad.read_text() + "  date: 2026-02-30\n")
    fifo = tmp_path / "c-fifo.yaml"
    os.mkfifo(fifo)
    check = cli("db", "check", "--db", str(tmp_path))
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stderr
    assert f"FAIL {bad}: cannot read: line" in check.stdout and "'2026-02-30' is not a valid timestamp" in check.stdout
    assert f"FAIL {fifo}: cannot read: not a regular file (a FIFO)" in check.stdout
    assert f"ok   {tmp_path / 'good-gpu.yaml'}" in check.stdout
    show = cli("show", "--db", str(tmp_path))
    assert "Traceback" not in show.stderr and "reduce/float32/sum/all/1000" in show.stdout
    x = np.random.default_rng(5).standard_normal(100).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.environ["AUTOTUNE_DB"] = str(tmp_path)
        try:
            total = autotune.sum(x)
        finally:
            del os.environ["AUTOTUNE_DB"]
    assert total == pytest.approx(x.astype(np.float64).sum(), rel=1e-5, abs=1e-5)
    notes = " ".join(str(w.message) for w in caught)
    assert str(bad) in notes and str(fifo) in notes


def test_a_sweep_or_neighbours_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, capsys):
    """``replay`` on a sweep whose device says ``sm_count: .inf`` (int() of it overflows) or with
    ``--neighbours`` naming a database file with a date that does not exist: one line that names the file."""
    from autotune.commands.cli import main

    sweeps = ROOT / "benchmarks" / "sweeps"
    for name in ("matmul-4096x4096x256.yaml", "matmul-4096x4096x256.space.yaml"):
        (tmp_path / name).write_text((sweeps / name).read_text())
    sweep = tmp_path / "matmul-4096x4096x256.yaml"
    neighbours = write_db(tmp_path / "n.yaml", [reduce_record()])
    neighbours.write_text(neighbours.read_text() + "  date: 2026-13-45\n")
    assert main(["replay", str(sweep), "--seeds", "1", "--neighbours", str(neighbours)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autotune: error: {neighbours}: cannot read: line") and "month must be in 1..12" in err
    sweep.write_text(sweep.read_text().replace("sm_count: 132", "sm_count: .inf"))
    assert main(["replay", str(sweep), "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{sweep}: device must give" in err and "sm_count must be a whole number" in err and "inf" in err


def test_a_search_space_with_a_bad_scalar_stops_the_tuning_run_with_one_line(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("family: reduce\nparams:\n  BLOCK: {values: [!!int abc]}\n")
    out = cli("tune", "--family", "reduce", "--simulator", "--shape", "33", "--space", str(space), "--no-db",
              "--state-dir", str(tmp_path / "state"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{space}: line 3: 'abc' is not a valid int" in out.stderr
