"""The tuned database: safe loading with precise errors, deterministic writes, merges that lose nothing."""
import multiprocessing as mp
import os

import pytest
import yaml

from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.runtime import db

DEVICE = {"name": "NVIDIA Test GPU", "cc": "9.0", "sm_count": 132}
TIME = {"median_ms": 1.0, "p20_ms": 0.99, "p80_ms": 1.01, "reps": 50}


def complete(problem, params):
    """A whole configuration, as the tuner writes it (entries must name every parameter that applies)."""
    return load_space(problem.family).validate(params, dtype=problem.dtype, args=problem.args)


def entry(shape=(64, 64, 64), ms=1.0, **params):
    problem = Problem("matmul", shape, "float32", {"layout": "nn"})
    record = db.entry_record(problem, complete(problem, params or {"strategy": "naive"}),
                             time={**TIME, "median_ms": ms}, trials=3)
    return db.parse_entry(record)


def reduce_entry(n, ms=1.0, op="sum"):
    problem = Problem("reduce", (n,), "float32", {"op": op, "axis": None})
    return db.parse_entry(db.entry_record(problem, complete(problem, {"BLOCK": 128}),
                                          time={**TIME, "median_ms": ms}))


def test_round_trip_and_deterministic_output(tmp_path):
    path = tmp_path / "gpu.yaml"
    entries = [entry((128, 64, 32), 2.0, BM=64, BN=64, BK=16, TM=4, TN=4), reduce_entry(1 << 20), entry()]
    db.write_entries(path, DEVICE, entries)
    text = path.read_text()
    loaded = db.load_file(path, strict=True)
    assert {e.problem.key for e in loaded.entries} == {e.problem.key for e in entries}
    assert {e.problem.key: e.params for e in loaded.entries} == {e.problem.key: e.params for e in entries}
    again = tmp_path / "again.yaml"
    db.write_entries(again, DEVICE, list(reversed(loaded.entries)))
    assert again.read_text() == text  # same content, any order in, same bytes out
    families = [e["family"] for e in yaml.safe_load(text)["entries"]]
    assert families == sorted(families)


def test_merge_keeps_others_and_replaces_only_with_faster(tmp_path):
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry(ms=2.0), reduce_entry(1024, ms=0.5)])
    notes = db.write_entries(path, DEVICE, [entry(ms=3.0)])
    assert "kept" in notes[0]
    assert {e.problem.key: e.median_ms for e in db.load_file(path).entries}["matmul/float32/nn/64x64x64"] == 2.0
    assert db.write_entries(path, DEVICE, [entry(ms=1.5)])[0].startswith("re-measured matmul/float32/nn/64x64x64")
    notes = db.write_entries(path, DEVICE, [entry(ms=9.0, TM=8)], force=True, reason="same-run comparison")
    assert notes[0].startswith("replaced") and "(recorded 1.5 ms; same-run comparison)" in notes[0]
    times = {e.problem.key: e.median_ms for e in db.load_file(path).entries}
    assert times == {"matmul/float32/nn/64x64x64": 9.0, "reduce/float32/sum/all/1024": 0.5}


def test_a_write_that_changes_nothing_leaves_the_file_alone(tmp_path, monkeypatch):
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry(ms=2.0), reduce_entry(1024, ms=0.5)])
    before = path.read_text()
    writes = []
    real_write = db.atomic_write
    monkeypatch.setattr(db, "atomic_write", lambda p, text: (writes.append(p), real_write(p, text)))
    assert "kept" in db.write_entries(path, DEVICE, [entry(ms=3.0)])[0]  # slower: the file's entry stays
    assert writes == [] and path.read_text() == before
    db.write_entries(path, DEVICE, [entry(ms=1.5)])  # faster: written
    assert writes == [path] and path.read_text() != before


def test_another_configuration_replaces_an_entry_only_beyond_the_noise(tmp_path):
    """TIME's p20-p80 range is 0.02 ms: 8.995 ms is within the noise of 9.0 (kept), 8.95 beyond it."""
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry(ms=9.0, strategy="tiled")])
    notes = db.write_entries(path, DEVICE, [entry(ms=8.995, strategy="tiled", GROUP_M=4)])
    assert notes[0].startswith("kept") and "not faster by more than the noise" in notes[0]
    assert db.write_entries(path, DEVICE, [entry(ms=8.95, strategy="tiled", GROUP_M=4)])[0].startswith("replaced")
    assert [e.median_ms for e in db.load_file(path).entries] == [8.95]


def good_file(tmp_path):
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry(), reduce_entry(1024)])
    return path


def test_an_entry_written_before_a_parameter_existed_loads_with_its_default(tmp_path):
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry(strategy="tiled")])
    data = yaml.safe_load(path.read_text())
    written = data["entries"][0]["params"]
    del written["THREAD_LAYOUT"]
    path.write_text(yaml.safe_dump(data))
    loaded = db.load_file(path, strict=True)
    [params] = [e.params for e in loaded.entries]
    assert params == {**written, "THREAD_LAYOUT": "contiguous"}


@pytest.mark.parametrize("field, value, message", [
    ("params", {"strategy": "tiled", "BM": "64); import os"}, "field 'params': parameter BM='64); import os' is not allowed"),
    ("params", {"strategy": "tiled", "BM": 96}, "parameter BM=96 is not allowed"),
    ("params", {"strategy": "naive", "XX": 1}, "unknown parameter 'XX'"),
    ("params", {"strategy": "tiled", "BM": 16, "BN": 16}, "threads per block = 4"),
    ("shape", [64, "64", 64], "field 'shape' must be a list of positive integers"),
    ("dtype", "int32", "field 'dtype' is 'int32'"),
    ("time", {"median_ms": "fast"}, "field 'time' must hold numbers"),
    ("layout", "xx", "field layout: layout 'xx'"),
    ("extra", 1, "unknown field 'extra'"),
])
def test_bad_entries_are_named_and_the_rest_loads(tmp_path, field, value, message):
    path = good_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["entries"][0][field] = value
    path.write_text(yaml.safe_dump(data))
    loaded = db.load_file(path)
    assert len(loaded.entries) == 1 and len(loaded.problems) == 1
    assert str(path) in loaded.problems[0] and "entry #1 (matmul " in loaded.problems[0]
    assert message in loaded.problems[0]
    with pytest.raises(db.DatabaseError, match="entry #1"):
        db.load_file(path, strict=True)


@pytest.mark.parametrize("text, message", [
    ("schema: 1\ndevice: {name: x}\nentries:\n - !!python/object/apply:os.system ['touch {marker}']\n", "cannot read"),
    ("{{{", "cannot read"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("schema: 99\ndevice: {name: x}\nentries: []\n", "field 'schema' is 99"),
    ("schema: 1\ndevice: 3\nentries: []\n", "field 'device'"),
])
def test_malformed_files_execute_nothing(tmp_path, text, message):
    marker = tmp_path / "executed"
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("{marker}", str(marker)))
    with pytest.raises(db.DatabaseError, match=message) as err:
        db.load_file(path)
    assert str(path) in str(err.value)
    assert not marker.exists()


def _writer(path, n, start):
    for i in range(n):
        db.write_entries(path, DEVICE, [reduce_entry(start + i)])


def test_concurrent_writers_keep_every_entry(tmp_path):
    path = tmp_path / "gpu.yaml"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 15, 1000 * (k + 1))) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert len(db.load_file(path, strict=True).entries) == 30


def test_interrupted_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = good_file(tmp_path)
    before = path.read_text()

    def broken_fsync(fd):
        raise OSError("disk unplugged")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk unplugged"):
        db.write_entries(path, DEVICE, [reduce_entry(77)])
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.yaml"]  # no temporary file left behind


def test_files_of_earlier_releases_name_the_family_kernel_and_are_read_and_written_anew(tmp_path):
    """An entry that names its family under the old field name ``kernel`` loads as today's ``family`` (the same
    problem, parameters and checks: a bad parameter is still refused); merging into such a file writes every entry
    under the new name; an entry giving both names is refused, naming them."""
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [entry((128, 64, 32), 2.0, BM=64, BN=64, BK=16, TM=4, TN=4), reduce_entry(1 << 20)])
    new_text = path.read_text()
    old_text = new_text.replace("- family: ", "- kernel: ")
    assert old_text != new_text and "family:" not in old_text.split("entries:")[1]
    path.write_text(old_text)
    loaded = db.load_file(path, strict=True)
    assert sorted(e.problem.key for e in loaded.entries) == sorted(e.problem.key for e in db.load_file(
        _written(tmp_path / "new.yaml", new_text), strict=True).entries)
    db.write_entries(path, DEVICE, [reduce_entry(1 << 10)])
    assert "kernel:" not in path.read_text() and path.read_text().count("- family: ") == 3
    bad = old_text.replace("BM: 64", "BM: 48", 1)
    with pytest.raises(db.DatabaseError, match="field 'params'"):
        db.load_file(_written(tmp_path / "bad.yaml", bad), strict=True)
    both = new_text.replace("- family: matmul", "- family: matmul\n  kernel: matmul", 1)
    with pytest.raises(db.DatabaseError, match="'kernel' and 'family' are both given"):
        db.load_file(_written(tmp_path / "both.yaml", both), strict=True)


def _written(path, text):
    path.write_text(text)
    return path


def test_a_write_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path):
    """A database file that is a link (into a shared folder, say): the write merges into the target, the link stays
    a link; a link into a folder that does not exist, or a loop, is refused with the file named."""
    shared = tmp_path / "shared"
    shared.mkdir()
    db.write_entries(shared / "gpu.yaml", DEVICE, [reduce_entry(1000)])
    mine = tmp_path / "mine"
    mine.mkdir()
    link = mine / "gpu.yaml"
    link.symlink_to(shared / "gpu.yaml")
    db.write_entries(link, DEVICE, [reduce_entry(2000)])
    assert link.is_symlink() and os.readlink(link) == str(shared / "gpu.yaml")
    assert sorted(e.problem.shape for e in db.load_file(shared / "gpu.yaml", strict=True).entries) == [(1000,), (2000,)]
    assert [p.name for p in mine.iterdir()] == ["gpu.yaml"] and sorted(p.name for p in shared.iterdir()) == ["gpu.yaml"]
    dangling = mine / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere" / "gpu.yaml")
    with pytest.raises(db.DatabaseError, match="dangling.yaml: a symbolic link to .*nowhere.*folder does not exist"):
        db.write_entries(dangling, DEVICE, [reduce_entry(3000)])
    loop = mine / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(db.DatabaseError, match="loop.yaml: a symbolic link that cannot be followed"):
        db.write_entries(loop, DEVICE, [reduce_entry(3000)])
    fresh = mine / "fresh.yaml"  # a link to a file not yet made, in a folder that exists: the file is made there
    fresh.symlink_to(shared / "other.yaml")
    db.write_entries(fresh, DEVICE, [reduce_entry(4000)])
    assert fresh.is_symlink() and len(db.load_file(shared / "other.yaml", strict=True).entries) == 1


@pytest.mark.parametrize("case, message", [
    ("folder is a file", "not a folder; a database is a folder"),
    ("file is a folder", "not a regular file"),
    ("bad entry", "entry #1 .*fix or remove these entries first"),
    ("under a file", "not a folder; the database folder .* cannot be made there"),
])
def test_where_a_write_would_fail_is_found_before_any_work(tmp_path, case, message):
    """``check_writable``, which a tuning run calls before measuring, refuses what ``write_entries`` would refuse
    at the end, naming the path."""
    path = tmp_path / "db" / "gpu.yaml"
    if case == "folder is a file":
        (tmp_path / "db").write_text("")
    elif case == "file is a folder":
        path.mkdir(parents=True)
    elif case == "bad entry":
        path.parent.mkdir()
        path.write_text("schema: 1\ndevice: {name: X}\nentries:\n- {family: reduce, dtype: float32}\n")
    else:
        (tmp_path / "file").write_text("")
        path = tmp_path / "file" / "db" / "gpu.yaml"
    with pytest.raises(db.DatabaseError, match=message):
        db.check_writable(path)
    with pytest.raises((db.DatabaseError, OSError)):
        db.write_entries(path, DEVICE, [reduce_entry(5)])  # what the check foresaw


def test_what_a_write_accepts_passes_the_check(tmp_path):
    db.check_writable(tmp_path / "new" / "folders" / "gpu.yaml")
    path = good_file(tmp_path)
    db.check_writable(path)
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    db.check_writable(link)


def test_an_entry_whose_kernel_renders_differently_now_is_stale(tmp_path):
    """``source_hash`` records the GPU source an entry measured; a different render today makes it stale (the
    note names both hashes), the same render or no recorded hash does not."""
    from autotune.runtime.render import source_hash

    plain = reduce_entry(1 << 20)
    assert db.stale_note(plain) is None  # written before entries recorded it: not judged
    current = source_hash(db.current_source(plain))
    stamped = db.parse_entry({**plain.record, "source_hash": current})
    assert db.stale_note(stamped) is None
    other = db.parse_entry({**plain.record, "source_hash": "0123456789abcdef"})
    note = db.stale_note(other)
    assert note and "0123456789abcdef" in note and current in note and "re-tune" in note
    path = tmp_path / "gpu.yaml"
    db.write_entries(path, DEVICE, [stamped, db.parse_entry({**other.record, "op": "max"})])
    stale = db.stale_entries(db.load_file(path))
    assert len(stale) == 1 and stale[0].startswith(f"{path}: entry reduce/float32/max/all/1048576: the kernel")


@pytest.mark.parametrize("device, words", [
    ({"name": "X", "cc": 9}, "'cc' must be"),
    ({"name": "X", "cc": True}, "'cc' must be"),
    ({"name": "X", "cc": "9.0.1"}, "'cc' must be"),
    ({"name": "X", "cc": [9, 0]}, "'cc' must be"),
    ({"name": "X", "cc": "9.0", "extra": [[[1]]]}, "unknown field 'extra'"),
    ({"name": "X", "sm_count": True}, "'sm_count'"),
    ({"name": ""}, "'name'"),
])
def test_a_device_record_is_one_form_or_refused(device, words):
    """Files are matched to GPU models by their records, so a record is checked and in one form: '9.0' for 9.0,
    and anything else refused naming the field (a matrix's record went into the database unchecked, where the
    next read refused the file)."""
    from autotune.core.device import checked_device_record
    from autotune.tuning.matrix import MatrixError

    assert checked_device_record({"name": "X", "cc": 9.0, "sm_count": 132}, ValueError) == \
        {"name": "X", "cc": "9.0", "sm_count": 132}
    with pytest.raises(db.DatabaseError, match=words):
        checked_device_record(device, db.DatabaseError)
    with pytest.raises(MatrixError, match=words):
        checked_device_record(device, MatrixError)


def test_a_file_not_named_for_the_model_it_declares_serves_no_lookup(tmp_path):
    """A copy beside a model's file, or another model's entries under its name, would serve the wrong model (or
    the right one as 'another GPU'): each is named and skipped; files of the same compute capability are found by
    the model they declare, a cc written as a number too."""
    import warnings

    from autotune.runtime.lookup import TunedKernelWarning, choice

    problem = Problem("reduce", (1000,), "float32", {"op": "max"})
    record = db.parse_entry(db.entry_record(problem, {"BLOCK": 64, "WAVES": 1}, time=TIME))
    here = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
    db.write_entries(tmp_path / "cuda-simulator.yaml", {"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}, [record])
    db.write_entries(tmp_path / "cuda-simulator.old.yaml", here, [record])
    (tmp_path / "sibling-gpu.yaml").write_text("schema: 1\ndevice: {name: Sibling GPU, cc: 9.0, sm_count: 2}\n"
                                               "entries: []\n")
    files, problems = db.load_folder(tmp_path)
    assert [f.path.name for f in files] == ["sibling-gpu.yaml"] and len(problems) == 2
    assert all("rename it or move it out of the folder" in p for p in problems)
    assert "declares the GPU model 'NVIDIA H100 80GB HBM3', whose file is nvidia-h100-80gb-hbm3.yaml" in \
        " ".join(problems)
    assert [f.device["name"] for f in db.same_cc_files([tmp_path], here["name"], (9, 0))[0]] == ["Sibling GPU"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = choice(problem, [tmp_path], device=here["name"])
    assert chosen.how == "default"
    assert any("cuda-simulator.yaml: declares the GPU model 'NVIDIA H100" in str(w.message) for w in caught
               if issubclass(w.category, TunedKernelWarning))
