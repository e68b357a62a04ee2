"""`autotune db refresh`: stale entries measured again with the current templates, in the simulator."""
import yaml

from autotune.core.problem import Problem
from autotune.core.space import load_space
from autotune.runtime import db
from autotune.runtime.render import source_hash

SIMULATOR = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
TIME = {"median_ms": 1.0, "p20_ms": 0.99, "p80_ms": 1.01, "reps": 50}


def stamped(op: str, n: int, recorded: str | None = None, **params) -> db.Entry:
    """A reduce entry recording ``recorded`` as the hash of the source it measured (its current render's if None)."""
    problem = Problem("reduce", (n,), "float32", {"op": op, "axis": None})
    checked = load_space("reduce").validate({"BLOCK": 64, **params}, dtype="float32", args=problem.args)
    plain = db.parse_entry(db.entry_record(problem, checked, time=TIME, trials=7, baseline={"median_ms": 2.0},
                                           resources={"registers": 255, "shared_bytes": 1}))
    return db.parse_entry({**plain.record, "source_hash": recorded or source_hash(db.current_source(plain))})


def run(*argv: str) -> int:
    from autotune.commands.cli import main

    return main(["db", "refresh", "--simulator", *argv])


def test_refresh_measures_stale_entries_again_and_keeps_the_others(tmp_path, capsys):
    """Each stale entry is built from the current templates, checked and timed, and written back with its new time
    and the current render's hash, its trials and baseline kept; an entry that is not stale, and one the --only
    prefix leaves out, stay byte for byte as they were; `db check` passes on what was refreshed."""
    path = db.db_path(tmp_path, SIMULATOR["name"])
    fresh, old_sum, old_max, left = (stamped("min", 300), stamped("sum", 1000, "0123456789abcdef"),
                                     stamped("max", 997, "fedcba9876543210", VEC=1),
                                     stamped("sum", 5000, "00000000000000ff"))
    db.write_entries(path, SIMULATOR, [fresh, old_sum, old_max, left])
    before = {e["shape"][0]: e for e in yaml.safe_load(path.read_text())["entries"]}

    assert run("--db", str(tmp_path), "--only", "reduce/float32/sum/all/1000", "--only", "reduce/float32/max") == 0
    out = capsys.readouterr().out
    assert "sum/all/1000, reduce/float32/max: 2\n" in out and "FAIL" not in out
    assert "re-measured reduce/float32/sum/all/1000:" in out
    after = {e["shape"][0]: e for e in yaml.safe_load(path.read_text())["entries"]}
    assert after[300] == before[300] and after[5000] == before[5000]
    for n, old in ((1000, old_sum), (997, old_max)):
        entry = db.parse_entry(after[n])
        assert db.stale_note(entry) is None and entry.params == old.params
        assert entry.record["source_hash"] == source_hash(db.current_source(old)) != old.record["source_hash"]
        assert entry.record["time"] != TIME and entry.record["trials"] == 7
        assert entry.record["baseline"] == {"median_ms": 2.0} and "resources" not in entry.record  # the old kernel's
        assert entry.record["rate"] == round(entry.problem.rate(entry.median_ms / 1e3), 4)
    assert [e.problem.key for e, _ in db.stale(db.load_file(path))] == ["reduce/float32/sum/all/5000"]


def test_a_configuration_that_computes_a_wrong_result_stays_stale_and_fails_the_run(tmp_path, capsys, monkeypatch):
    """The oracle's check comes before any time is written: a configuration whose kernel is wrong now (here the
    build of the max entry is given min's kernel) is named, its entry left stale, and the run ends with exit 1,
    while the other stale entry is still refreshed."""
    import autotune.tuning.evaluate as evaluate

    real = evaluate.build_kernel

    def wrong_for_max(family, params, dtype, **args):
        return real(family, params, dtype, **{**args, "op": "min" if args.get("op") == "max" else args["op"]})

    monkeypatch.setattr(evaluate, "build_kernel", wrong_for_max)
    path = db.db_path(tmp_path, SIMULATOR["name"])
    old_max = stamped("max", 997, "fedcba9876543210")
    db.write_entries(path, SIMULATOR, [old_max, stamped("sum", 1000, "0123456789abcdef")])
    assert run("--db", str(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "FAIL reduce/float32/max/all/997: is wrong" in out and "re-measured reduce/float32/sum/all/1000" in out
    stale = [e for e, _ in db.stale(db.load_file(path))]
    assert [e.record for e in stale] == [old_max.record]


def test_without_a_file_of_this_model_nothing_is_written(tmp_path, capsys):
    assert run("--db", str(tmp_path)) == 0
    assert "nothing to refresh" in capsys.readouterr().out and not any(tmp_path.iterdir())


def test_an_entry_another_run_wrote_meanwhile_is_kept(tmp_path, capsys, monkeypatch):
    """The file is read before the measuring and written after it: where another run wrote the entry in between
    (here a different configuration, measured with the current templates), refresh keeps that one and says so."""
    import autotune.tuning.evaluate as evaluate

    path = db.db_path(tmp_path, SIMULATOR["name"])
    db.write_entries(path, SIMULATOR, [stamped("sum", 1000, "0123456789abcdef")])
    newer = stamped("sum", 1000, BLOCK=256)
    real = evaluate.checked_timing

    def while_measuring(problem, params, *rest):
        db.write_entries(path, SIMULATOR, [newer], force=True)
        return real(problem, params, *rest)

    monkeypatch.setattr(evaluate, "checked_timing", while_measuring)
    assert run("--db", str(tmp_path)) == 0
    assert "another run wrote this entry meanwhile" in capsys.readouterr().out
    assert [e.record for e in db.load_file(path).entries] == [newer.record]


def test_a_recorded_time_of_zero_and_a_prefix_that_matches_nothing_are_said_not_fatal(tmp_path, capsys):
    path = db.db_path(tmp_path, SIMULATOR["name"])
    zero = db.parse_entry({**stamped("sum", 1000, "0123456789abcdef").record, "time": {**TIME, "median_ms": 0.0}})
    db.write_entries(path, SIMULATOR, [zero])
    assert run("--db", str(tmp_path), "--only", "reduce/float32/sum", "--only", "reduce/float32/mxa") == 0
    out = capsys.readouterr().out
    assert "no entry of" in out and "reduce/float32/mxa" in out and "re-measured reduce/float32/sum/all/1000" in out
    assert not db.stale(db.load_file(path))
