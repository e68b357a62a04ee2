"""get_best_kernel: lookup order with its warnings, results against NumPy, the generated-source cache."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import yaml

from autotune import get_best_kernel
from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.runtime import db
from autotune.runtime.compiler import source_path
from autotune.runtime.lookup import TunedKernelWarning, tuning_starts
from autotune.tuning.instance import Instance

TIME = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 10}
SIM = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
MATMUL_A = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 2, "VEC": 2, "UNROLL_K": 4}
MATMUL_B = {"BM": 64, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "SPLIT_K": 2}


def write_db(folder, device, entries):
    records = []
    for kind, shape, family, params in entries:
        problem = Problem(kind, shape, "float32", family)
        full = load_space(kind).validate(params, dtype="float32", args=problem.args)
        records.append(db.parse_entry(db.entry_record(problem, full, time=TIME)))
    db.write_entries(folder / f"{db.device_slug(device['name'])}.yaml", device, records)


@pytest.fixture
def folder(tmp_path):
    write_db(tmp_path, SIM, [("matmul", (64, 64, 64), {"layout": "nn"}, MATMUL_A),
                             ("matmul", (4096, 4096, 4096), {"layout": "nn"}, MATMUL_B),
                             ("reduce", (1000,), {"op": "max"}, {"BLOCK": 64, "WAVES": 1})])
    return tmp_path


def lookup(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = get_best_kernel(*args, **kwargs)
    return k, [str(w.message) for w in caught if issubclass(w.category, TunedKernelWarning)]


def test_exact_entry_is_used_silently(folder):
    k, notes = lookup("matmul", (64, 64, 64), db=folder)
    assert notes == [] and all(k.params[n] == v for n, v in MATMUL_A.items())


def test_nearest_shape_on_a_log_scale_fitted_to_the_shape(folder, rng):
    """The nearest entry's configuration, with its split-K and edges fitted to the shape as a rule's choice is."""
    from autotune.tuning.instance import Instance

    fitted = ("SPLIT_K", "SPLIT_ADD", "EDGE")
    k, notes = lookup("matmul", (100, 90, 80), db=folder)
    assert all(k.params[n] == v for n, v in MATMUL_A.items() if n not in fitted)
    assert k.params["EDGE"] == "clamp" and "nearest entry, shape 64x64x64" in notes[0]  # 100 rows: 32-row tiles overhang
    assert Instance(Problem("matmul", (100, 90, 80), "float32"), rng).check(k) is None
    k, notes = lookup("matmul", (3000, 3000, 5000), db=folder)
    assert all(k.params[n] == v for n, v in MATMUL_B.items() if n not in fitted)
    assert k.params["SPLIT_K"] == 1 and "nearest entry, shape 4096x4096x4096" in notes[0]  # tiles fill the GPU
    assert notes[0].endswith(", fitted to this shape")


def test_a_fitted_nearest_entry_is_judged_stale_by_its_own_render(folder, monkeypatch):
    """The kernel of a fitted choice renders other parameters than the entry's: whether the entry is stale is
    decided on the entry's own render (on a GPU the kernel's source was compared and every fit was called stale)."""
    from types import SimpleNamespace

    from autotune.runtime import lookup as lk
    from autotune.runtime.render import source_hash

    chosen = lk.choice(Problem("matmul", (3000, 3000, 5000), "float32"), [folder])
    assert chosen.entry is not None and chosen.params != dict(chosen.entry.params)
    monkeypatch.setattr(lk.backend, "simulator", lambda: False)
    fitted_kernel = SimpleNamespace(source="the render of the fitted parameters", args=chosen.entry.problem.args)
    chosen.entry.record["source_hash"] = source_hash(db.current_source(chosen.entry))  # fresh as tuned
    assert lk._stale(chosen, fitted_kernel) is None
    chosen.entry.record["source_hash"] = "0" * 16  # the templates changed since
    assert "changed since it was tuned" in lk._stale(chosen, fitted_kernel)


def test_a_transposed_layout_with_nothing_tuned_takes_layout_nns_choice(folder, tmp_path, rng, monkeypatch):
    """A layout with no entry or rule of its own (here nt and tt) takes layout nn's choice for the shape, fitted
    and valid for it, and says so; its results are right; the nn entry is judged stale by its own render, not by
    the transposed kernel's. A layout with an entry of its own keeps the nearest of those; where nn has nothing
    either, the default."""
    from types import SimpleNamespace

    from autotune.runtime import lookup as lk
    from autotune.runtime.render import source_hash

    k, notes = lookup("matmul", (64, 64, 64), db=folder, layout="nt")
    assert len(notes) == 1 and all(k.params[n] == v for n, v in MATMUL_A.items())
    assert "no rule or entry of another shape for nt; using nn's choice for this shape (the entry for " \
           "matmul/float32/nn/64x64x64 from" in notes[0]
    assert Instance(Problem("matmul", (64, 64, 64), "float32", {"layout": "nt"}), rng).check(k) is None
    k, notes = lookup("matmul", (4096, 4096, 4096), db=folder, layout="tn")  # an exact nn entry is not fitted again
    assert k.params["SPLIT_K"] == MATMUL_B["SPLIT_K"] and "the entry for matmul/float32/nn/4096x4096x4096" in notes[0]
    k, notes = lookup("matmul", (100, 90, 80), db=folder, layout="tt")
    assert "using nn's choice for this shape (the nearest entry, shape 64x64x64" in notes[0]
    assert k.params["EDGE"] == "clamp" and all(k.params[n] == v for n, v in MATMUL_A.items() if n != "EDGE")
    assert Instance(Problem("matmul", (100, 90, 80), "float32", {"layout": "tt"}), rng).check(k) is None
    nt = Problem("matmul", (64, 64, 64), "float32", {"layout": "nt"})
    chosen = lk.choice(nt, [folder])
    assert chosen.params == dict(chosen.entry.params) and chosen.entry.problem.args["layout"] == "nn"
    monkeypatch.setattr(lk.backend, "simulator", lambda: False)
    chosen.entry.record["source_hash"] = source_hash(db.current_source(chosen.entry))  # fresh as tuned
    assert lk._stale(chosen, SimpleNamespace(source="the nt kernel's render", args=nt.args)) is None
    monkeypatch.undo()
    own = tmp_path / "own"
    write_db(own, SIM, [("matmul", (64, 64, 64), {"layout": "nn"}, MATMUL_A),
                        ("matmul", (4096, 4096, 4096), {"layout": "nt"}, MATMUL_B)])
    k, notes = lookup("matmul", (64, 64, 64), db=own, layout="nt")
    assert "nearest entry, shape 4096x4096x4096" in notes[0] and k.params["BM"] == MATMUL_B["BM"]
    none = tmp_path / "none"
    write_db(none, SIM, [("reduce", (1000,), {"op": "max"}, {"BLOCK": 64, "WAVES": 1})])
    k, notes = lookup("matmul", (64, 64, 64), db=none, layout="nt")
    assert "using the default configuration" in notes[0]


def test_tuning_starts_are_the_entry_then_the_nearest_shapes(tmp_path):
    MATMUL_C = {**MATMUL_A, "EDGE": "clamp"}
    write_db(tmp_path, SIM, [("matmul", (4096, 4096, 4096), {"layout": "nn"}, MATMUL_B),
                             ("matmul", (1000, 1000, 1000), {"layout": "nn"}, MATMUL_C),
                             ("matmul", (1024, 1024, 1024), {"layout": "nn"}, MATMUL_A),
                             ("matmul", (1024, 1024, 1024), {"layout": "tt"}, MATMUL_B),
                             ("reduce", (1000,), {"op": "max"}, {"BLOCK": 64, "WAVES": 1})])
    path = tmp_path / f"{db.device_slug(SIM['name'])}.yaml"
    incumbent, neighbours = tuning_starts(path, Problem("matmul", (1000, 1000, 1000), "float32"))
    assert incumbent["EDGE"] == "clamp" and incumbent["BM"] == 32
    assert [n["BM"] for n in neighbours] == [32, 64]  # 1024^3 (nn), then 4096^3; the tt entry is another family
    incumbent, neighbours = tuning_starts(path, Problem("matmul", (2000, 2000, 2000), "float32"), neighbours=1)
    assert incumbent is None and neighbours[0]["EDGE"] == "interior" and neighbours[0]["BM"] == 32
    assert tuning_starts(tmp_path / "missing.yaml", Problem("matmul", (8, 8, 8), "float32")) == (None, [])


def test_default_when_nothing_matches(folder):
    k, notes = lookup("reduce", (1000,), db=folder, op="min")
    assert "using the default configuration" in notes[0]
    assert k.params == load_space("reduce").validate({}, dtype="float32", args={"op": "min", "axis": None})


def test_file_of_the_same_architecture(tmp_path):
    write_db(tmp_path, {"name": "Other GPU", "cc": "9.0", "sm_count": 100},
             [("reduce", (1000,), {"op": "sum"}, {"BLOCK": 32, "WAVES": 1})])
    write_db(tmp_path, {"name": "Old GPU", "cc": "7.0", "sm_count": 80},
             [("reduce", (1000,), {"op": "sum"}, {"BLOCK": 512})])
    k, notes = lookup("reduce", (1000,), db=tmp_path)
    assert k.params["BLOCK"] == 32 and "Other GPU, same compute capability" in notes[0]


def test_bad_entry_is_skipped_with_a_warning(folder):
    path = folder / "cuda-simulator.yaml"
    path.write_text(path.read_text().replace("BLOCK: 64", "BLOCK: '64; import os'"))
    k, notes = lookup("matmul", (64, 64, 64), db=folder)
    assert any("skipped a bad database entry" in n and "BLOCK" in n for n in notes)
    assert all(k.params[n] == v for n, v in MATMUL_A.items())


def test_environment_variable_names_the_folder(folder, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(folder))
    k, notes = lookup("reduce", (1000,), op="max")
    assert notes == [] and k.params["BLOCK"] == 64


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_named_folder_that_is_no_database_folder_is_said_to_be_none(tmp_path, monkeypatch, kind):
    """``db=`` or ``$AUTOTUNE_DB`` naming a file, or a folder that does not exist: the lookup says the path is not a
    database folder (and why), not only that it holds no entry."""
    target = tmp_path / "kernels"
    if kind == "file":
        target.write_text("schema: 1\n")
    why = "no such folder" if kind == "missing" else "a file, not a folder"
    k, notes = lookup("reduce", (1009,), db=str(target))
    assert any(n.startswith(f"db={target} is not a database folder ({why}") for n in notes), notes
    assert any(f"in {target} (not a database folder: {why})" in n for n in notes), notes  # the fallback's note
    monkeypatch.setenv("AUTOTUNE_DB", str(target))
    k, notes = lookup("reduce", (1013,))
    assert any(n.startswith(f"AUTOTUNE_DB={target} is not a database folder ({why}") for n in notes), notes
    monkeypatch.setenv("HOME", str(tmp_path))
    write_db(tmp_path / "home-db", SIM, [("reduce", (1019,), {"op": "sum"}, {"BLOCK": 64, "WAVES": 1})])
    k, notes = lookup("reduce", (1019,), db="~/home-db")  # the README's db="~/kernels" form
    assert notes == [] and k.params["BLOCK"] == 64


@pytest.mark.parametrize("kind, shape, family", [
    ("matmul", (37, 29, 41), {"layout": "nn"}), ("matmul", (1, 13, 7), {"layout": "tn"}),
    ("reduce", (1031,), {"op": "sum"}), ("reduce", (997,), {"op": "max"}), ("reduce", (1,), {"op": "min"}),
    ("reduce", (523,), {"op": "dot"}), ("reduce", (13, 37), {"op": "sum", "axis": 1}),
    ("reduce", (37, 13), {"op": "dot", "axis": 0}),
])
def test_results_match_numpy(folder, kind, shape, family):
    k, _ = lookup(kind, shape, db=folder, **family)
    error = Instance(Problem(kind, shape, "float32", family), np.random.default_rng()).check(k)
    assert error is None


def test_second_process_reuses_the_generated_source(folder):
    """The generated module is a file named by its content's hash, never rewritten: what lets Numba's disk
    cache (cache=True in the GPU rendering) find the compiled kernel in a second process. The cache hit
    itself needs a GPU: `python lab/first_call.py` shows it there (a second process loads, not compiles)."""
    k, _ = lookup("matmul", (64, 64, 64), db=folder)
    path = source_path(k.source)
    stamp = path.stat().st_mtime_ns
    code = (f"from autotune import get_best_kernel; k = get_best_kernel('matmul', (64, 64, 64), db={str(folder)!r}); "
            f"print(k.kernel.py_func.__code__.co_filename)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert out.stdout.strip() == str(path)
    assert path.stat().st_mtime_ns == stamp
    from autotune.runtime.build import render_source

    gpu_source = render_source("matmul", k.params, simulator=False)[2]
    assert "@cuda.jit(cache=True" in gpu_source


def test_the_functions_read_the_database_folder_named_now(tmp_path, monkeypatch, rng):
    """autotune.max keeps its kernel per shape, but per database folder too: naming another folder in
    $AUTOTUNE_DB gives that folder's entry, not the kernel kept from the first."""
    import autotune
    from autotune.runtime import calls

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    write_db(first, SIM, [("reduce", (1000,), {"op": "max"}, {"BLOCK": 64, "WAVES": 1})])
    write_db(second, SIM, [("reduce", (1000,), {"op": "max"}, {"BLOCK": 32, "WAVES": 2})])
    x = rng.standard_normal(1000).astype(np.float32)
    for folder, block in ((first, 64), (second, 32)):
        monkeypatch.setenv("AUTOTUNE_DB", str(folder))
        assert autotune.max(x) == x.max()
        kernel = calls.tuned_kernel("reduce", (1000,), "float32", op="max", axis=None)
        assert kernel.params["BLOCK"] == block


def test_each_step_names_itself_and_the_bench_row_records_it(folder, tmp_path, monkeypatch):
    """``Choice.how`` names the step that chose, a stand-in's with its arguments' tag and their step; where nn's
    choice is not valid for the layout, the default's note says so; the bench's row for ours records ``how`` as
    ``chosen_by`` (the note's words once decided it, and called nn's rule "rule")."""
    from autotune.commands.bench import bench_problem
    from autotune.runtime import lookup as lk

    def how(shape, layout="nn", dtype="float32", folders=(folder,)):
        return lk.choice(Problem("matmul", shape, dtype, {"layout": layout}), list(folders)).how

    assert how((64, 64, 64)) == "exact" and how((100, 90, 80)) == "nearest"
    assert how((64, 64, 64), "nt") == "nn: exact" and how((100, 90, 80), "tt") == "nn: nearest"
    assert how((64, 64, 64), dtype="float64") == "default" and lk.choice(
        Problem("matmul", (64, 64, 64), "float64"), [folder]).default
    other = tmp_path / "other"
    write_db(other, {"name": "Another GPU", "cc": "9.0", "sm_count": 2},
             [("matmul", (64, 64, 64), {"layout": "nn"}, MATMUL_A)])
    assert how((64, 64, 64), folders=(tmp_path / "empty", other)) == "other gpu"
    assert how((64, 64, 64), "tn", folders=(tmp_path / "empty", other)) == "nn: other gpu"
    # a named model takes the same step, with the compute capability its own file declares (none without a file)
    db.write_entries(db.db_path(tmp_path / "named", "Named GPU"), {"name": "Named GPU", "cc": "9.0", "sm_count": 2}, [])
    named = [lk.choice(Problem("matmul", (64, 64, 64), "float32"), [tmp_path / "named", other], device=gpu).how
             for gpu in ("Named GPU", "Unknown GPU")]
    assert named == ["other gpu", "default"]
    db.write_entries(db.db_path(tmp_path / "older", "Older GPU"), {"name": "Older GPU", "cc": "8.0", "sm_count": 2}, [])
    assert lk.choice(Problem("matmul", (64, 64, 64), "float32"), [tmp_path / "older", other],
                     device="Older GPU").how == "default"
    # a file of the model without a cc read first does not hide the cc a later one declares; '09.00' is '9.0'
    db.write_entries(db.db_path(tmp_path / "mine", "Named GPU"), {"name": "Named GPU"}, [])
    assert lk.choice(Problem("matmul", (64, 64, 64), "float32"), [tmp_path / "mine", tmp_path / "named", other],
                     device="Named GPU").how == "other gpu"
    db.write_entries(db.db_path(tmp_path / "spelt", "Spelt GPU"), {"name": "Spelt GPU", "cc": "09.00"}, [])
    assert db.load_file(db.db_path(tmp_path / "spelt", "Spelt GPU")).device["cc"] == "9.0"
    assert lk.choice(Problem("matmul", (64, 64, 64), "float32"), [tmp_path / "spelt", other],
                     device="Spelt GPU").how == "other gpu"
    for nameless in ("", "  ", 7):
        with pytest.raises(ValueError, match="device must name a GPU model"):
            lk.choice(Problem("matmul", (64, 64, 64), "float32"), [other], device=nameless)
    forged = tmp_path / "forged.yaml"  # a name that would print a line of its own
    forged.write_text(yaml.safe_dump({"schema": 1, "device": {"name": "GPU\n/x.yaml: ok"}, "entries": []}))
    with pytest.raises(db.DatabaseError, match="printable"):
        db.load_file(forged)
    clustered = Problem("matmul", (19, 23, 29), "float16")  # a cluster of 2 shares A's tiles: not for a transposed A
    params = load_space("matmul").validate({"BM": 256, "BN": 64, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1,
                                            "CLUSTER": 2, "ASYNC_STAGES": 4}, dtype="float16", args=clustered.args)
    db.write_entries(db.db_path(tmp_path / "half", SIM["name"]), SIM,
                     [db.parse_entry(db.entry_record(clustered, params, time=TIME))])
    tn = lk.choice(Problem("matmul", (19, 23, 29), "float16", {"layout": "tn"}), [tmp_path / "half"])
    assert tn.how == "default" and "(nn's choice for this shape, the entry for matmul/float16/nn/19x23x29 from " \
        f"{db.db_path(tmp_path / 'half', SIM['name'])}, is not valid for tn); using the default" in tn.note
    assert lk.choice(Problem("matmul", (19, 23, 29), "float16", {"layout": "nt"}), [tmp_path / "half"]).how == \
        "nn: exact"
    monkeypatch.setattr("autotune.commands.bench.bench", lambda *a, **k: __import__("types").SimpleNamespace(
        median_ms=1.0))  # the simulator's timing is not what this test is about
    rows = bench_problem(Problem("matmul", (33, 17, 9), "float32", {"layout": "nt"}), [folder], None, seeds=False,
                         simulator=True)
    assert [(r["name"], r["chosen_by"]) for r in rows] == [("autotune", "nn: nearest")] and "error" not in rows[0]


def test_an_entry_whose_kernel_renders_differently_now_is_announced(tmp_path):
    """An entry records the hash of the GPU source it measured (``source_hash``): used as it is while today's
    render matches, announced (file and entry named) where it does not, and still used (the lookup does not guess
    another configuration)."""
    from autotune.runtime.render import source_hash

    problem = Problem("reduce", (1000,), "float32", {"op": "max"})
    params = load_space("reduce").validate({"BLOCK": 64, "WAVES": 1}, dtype="float32", args=problem.args)
    current = db.parse_entry(db.entry_record(problem, params, time=TIME))
    stamped = source_hash(db.current_source(current))
    for folder, recorded, stale in ((tmp_path / "same", stamped, False), (tmp_path / "old", "0123456789abcdef", True)):
        entry = db.parse_entry({**current.record, "source_hash": recorded})
        db.write_entries(folder / f"{db.device_slug(SIM['name'])}.yaml", SIM, [entry])
        k, notes = lookup("reduce", (1000,), op="max", db=folder)
        assert k.params == params
        if stale:
            assert len(notes) == 1 and notes[0].startswith(f"{folder}/cuda-simulator.yaml: the entry for "
                                                           f"reduce/float32/max/all/1000: the kernel its parameters "
                                                           f"render to changed since it was tuned"), notes
            assert "0123456789abcdef" in notes[0] and stamped in notes[0]
        else:
            assert notes == []
