"""The database read in milliseconds: the parse cache is used only for the very content and code it was made
from, a damaged or crafted cache is never trusted, libyaml reads as the pure-Python parser does, and only the
entries a lookup needs are unpickled."""
import os
import pickle
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core.problem import Problem
from autotune.core.registry import family as family_named
from autotune.core.space import load_space
from autotune.core.yamlfast import libyaml_usable, parse_yaml_fast
from autotune.core.yamlfile import YamlFileError, parse_yaml
from autotune.runtime import db, db_cache, db_records

SIM = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}


def record(n, block=64, op="sum", ms=1.0):
    problem = Problem("reduce", (n,), "float32", {"op": op})
    params = load_space("reduce").validate({"BLOCK": block, "WAVES": 1}, dtype="float32", args=problem.args)
    return db.entry_record(problem, params, time={"median_ms": ms, "p20_ms": ms, "p80_ms": ms, "reps": 7},
                           trials=3, date="2026-11-27")


def matmul_record(shape, ms=1.0):
    problem = Problem("matmul", shape, "float32", {"layout": "nn"})
    params = load_space("matmul").validate({"strategy": "naive"}, dtype="float32", args=problem.args)
    return db.entry_record(problem, params, time={"median_ms": ms, "p20_ms": ms, "p80_ms": ms})


def write(path: Path, records, device=SIM) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"schema": 1, "device": device, "entries": records}, sort_keys=False))
    return path


def summary(db_file: db.DbFile) -> tuple:
    """Everything a read gives, comparable."""
    return (dict(db_file.device), [(e.problem, e.params, e.record) for e in db_file.entries], list(db_file.problems),
            list(db_file.foreign))


PARSE = db.parse_file


def fresh(path: Path):
    """What parsing the file now gives (a summary, or the error's text)."""
    return outcome_of(lambda: PARSE(path, path.read_bytes()))


def loaded(path: Path, forget: bool = True):
    """What a read gives; with ``forget``, the process's own copy forgotten first (so the cache folder is read)."""
    if forget:
        db_cache.forget()
    return outcome_of(lambda: db.load_file(path))


def outcome_of(read):
    try:
        return summary(read())
    except db.DatabaseError as exc:
        return str(exc)


@pytest.fixture
def no_parse(monkeypatch):
    """Make a parse fail the test: what is read must come from the cache."""
    def parse_file(path, data):
        raise AssertionError(f"{path} was parsed again")

    return lambda: monkeypatch.setattr(db, "parse_file", parse_file)


def mixed_file(tmp_path) -> Path:
    records = [record(1000), matmul_record((64, 32, 16)), record(5000, 128, op="max"), record(1000, 128),
               {**record(7), "trials": -1}, matmul_record((65, 33, 17), 2.0),
               {"family": "not_registered_here", "dtype": "float32", "shape": [3], "params": {"X": 1}}]
    return write(tmp_path / "db" / "cuda-simulator.yaml", records)


def test_a_second_read_comes_from_the_cache_and_gives_what_a_parse_gives(tmp_path, no_parse):
    path = mixed_file(tmp_path)
    first = db.load_file(path)
    assert len(first.entries) == 4 and len(first.problems) == 2 and first.foreign_families == ["not_registered_here"]
    expected = summary(first)
    no_parse()
    db_cache.forget()
    again = db.load_file(path)
    assert isinstance(again, db_cache.CachedDbFile) and summary(again) == expected
    assert db.load_file(path) is again  # the process keeps what it read while the file is unchanged
    with pytest.raises(db.DatabaseError, match="entry #4"):  # strict: the first problem, as a parse reports it
        db.load_file(path, strict=True)


def test_a_lookup_unpickles_only_the_entries_of_its_kind(tmp_path, no_parse):
    path = mixed_file(tmp_path)
    in_file_order = [e.problem.key for e in db.load_file(path).entries]
    no_parse()
    db_cache.forget()
    cached = db.load_file(path)
    problem = Problem("matmul", (64, 64, 64), "float32", {"layout": "nn"})
    found = cached.like(problem)
    assert [e.problem.shape for e in found] == [(64, 32, 16), (65, 33, 17)]
    assert list(cached._kinds) == [db_records.kind_of(problem)]  # the other kinds are still bytes
    assert cached.like(Problem("reduce", (9,), "float32", {"op": "min"})) == []
    assert [e.problem.key for e in cached.entries] == in_file_order  # all of them, in file order


def test_any_change_of_the_file_is_seen_whatever_its_time_stamps_say(tmp_path, rng):
    path = mixed_file(tmp_path)
    original = path.read_bytes()
    stamp = os.stat(path)
    db.load_file(path)
    positions = rng.choice(len(original), size=25, replace=False)
    for position in positions:
        changed = bytearray(original)
        changed[position] = ord("7") if changed[position] != ord("7") else ord("3")  # same size
        path.write_bytes(bytes(changed))
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same time stamps
        assert loaded(path, forget=False) == fresh(path), position  # the process's copy is not used either
        assert loaded(path) == fresh(path), position
        path.write_bytes(original)
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert loaded(path) == fresh(path)


def counted_reads(monkeypatch) -> list:
    """The paths ``load_file`` reads the bytes of, from now on."""
    reads, real = [], db.read_bytes
    monkeypatch.setattr(db, "read_bytes", lambda path, **kw: reads.append(path) or real(path, **kw))
    return reads


def test_a_file_read_before_is_not_read_again_while_its_status_says_unchanged(tmp_path, rng, monkeypatch):
    """A lookup reads its file each time; hashing a large file cost more than choosing from it. A file this
    process read is taken as unchanged while its status is (device, inode, size, modification and change
    times); any change of content is still seen: a rewrite of the same size with the old time stamps put back
    (the change time moves) and a file replaced by another (another inode)."""
    monkeypatch.setattr(db_cache, "RACY_S", 0.0)  # nothing here is too recent to be taken by its status
    path = mixed_file(tmp_path)
    first = db.load_file(path)
    reads = counted_reads(monkeypatch)
    assert db.load_file(path) is first and reads == []
    original, stamp = path.read_bytes(), os.stat(path)
    for position in rng.choice(len(original), size=5, replace=False):
        changed = bytearray(original)
        changed[position] = ord("7") if changed[position] != ord("7") else ord("3")  # same size
        path.write_bytes(bytes(changed))
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same modification time
        assert loaded(path, forget=False) == fresh(path), position
    path.write_bytes(original)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert loaded(path, forget=False) == fresh(path)
    reads.clear()
    kept = db.load_file(path)
    assert db.load_file(path) is kept and reads == []  # unchanged again: taken by its status
    other = write(tmp_path / "other.yaml", [record(1000), matmul_record((64, 32, 16), 3.0)])
    os.replace(other, path)  # another file in its place
    assert loaded(path, forget=False) == fresh(path) and reads == [path]
    assert summary(db.load_file(path))[1][1][2]["time"]["median_ms"] == 3.0


def test_a_file_changed_just_before_its_read_is_read_at_every_lookup(tmp_path, monkeypatch):
    """A time stamp of coarse granularity could hide a second change within one tick: a file whose last change is
    recent is not taken as unchanged by its status (as Git treats a racily clean file)."""
    path = mixed_file(tmp_path)  # written just now
    db.load_file(path)
    reads = counted_reads(monkeypatch)
    db.load_file(path)
    db.load_file(path)
    assert reads == [path, path]


def damages(raw: bytes, rng) -> list[bytes]:
    flips = []
    for position in rng.choice(len(raw), size=12, replace=False):
        changed = bytearray(raw)
        changed[position] ^= 1 << int(rng.integers(8))
        flips.append(bytes(changed))
    return [b"", raw[:len(raw) // 2], raw[:-1], raw + b"x", b"\0" * len(raw), *flips]


def test_a_damaged_cache_is_ignored_and_rebuilt(tmp_path, rng, no_parse):
    path = mixed_file(tmp_path)
    expected = summary(db.load_file(path))
    store = db_cache.cache_path(db_cache._where(path))
    good = store.read_bytes()
    for damaged in damages(good, rng):
        store.write_bytes(damaged)
        assert loaded(path) == expected
        assert store.read_bytes() == good  # rebuilt
    no_parse()
    assert loaded(path) == expected


def test_a_cache_of_another_file_or_other_code_is_not_used(tmp_path, monkeypatch):
    path = mixed_file(tmp_path)
    other = write(tmp_path / "other" / "cuda-simulator.yaml", [record(77)])
    expected = summary(db.load_file(path))
    db.load_file(other)
    db_cache.cache_path(db_cache._where(path)).write_bytes(db_cache.cache_path(db_cache._where(other)).read_bytes())
    assert loaded(path) == expected  # a valid cache file, but another file's
    parsed = []
    real = db.parse_file
    monkeypatch.setattr(db, "parse_file", lambda p, data: parsed.append(p) or real(p, data))
    monkeypatch.setattr(db_cache, "_code_stamp", lambda: "another autotune")
    assert loaded(path) == expected and parsed == [path]
    monkeypatch.setattr(db_cache, "_family_stamp", lambda name: ("a search space edited", name))
    assert loaded(path) == expected and parsed == [path, path]
    assert loaded(path) == expected and parsed == [path, path]  # and cached again


def test_the_stamp_of_a_family_covers_its_search_space_and_code():
    impl = family_named("reduce")
    modules, qualname, source, stamps = db_cache._family_stamp("reduce")
    names = {Path(p).name for p, *_ in stamps}
    assert Path(impl.space_file).name in names and {"family.py", "config.py"} <= names
    assert all(len(stamp) == 3 for stamp in stamps)  # path, size, time stamp


def test_a_users_family_is_stamped_at_each_lookup_and_a_built_in_one_once(tmp_path, monkeypatch):
    """autotune's own families are its code, stamped once a process as the rest of it; a family of the user's
    may have its search space edited while a process runs, and a lookup must see it."""
    from autotune import register_family

    fam = register_family(str(Path(__file__).resolve().parent.parent / "examples" / "softmax"))
    space = tmp_path / "softmax.yaml"
    space.write_bytes(Path(fam.space_file).read_bytes())
    monkeypatch.setattr(fam, "space_file", str(space))
    before = db_cache._family_stamp("softmax")
    os.utime(space, ns=(os.stat(space).st_atime_ns, os.stat(space).st_mtime_ns + 5_000_000_000))
    assert db_cache._family_stamp("softmax") != before
    assert db_cache._family_stamp("reduce") is db_cache._family_stamp("reduce")


class Boom:
    def __reduce__(self):
        return (open, (str(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / "pwned"), "w"))


def test_a_crafted_cache_is_refused_without_running_anything(tmp_path):
    path = mixed_file(tmp_path)
    expected = summary(db.load_file(path))
    store = db_cache.cache_path(db_cache._where(path))
    header = pickle.dumps({"key": Boom()})
    body = len(header).to_bytes(8, "little") + header
    import hashlib

    store.write_bytes(db_cache.MAGIC + hashlib.sha256(body).digest() + body)  # a correct digest: only find_class
    assert loaded(path) == expected
    assert not (Path(os.environ["AUTOTUNE_CACHE_DIR"]) / "pwned").exists()


def test_a_written_file_is_cached_as_reading_it_gives_it(tmp_path, no_parse):
    path = tmp_path / "db" / "cuda-simulator.yaml"
    entries = [db.parse_entry(r) for r in (record(1000), matmul_record((64, 32, 16)), record(3, 256, op="max"))]
    db.write_entries(path, SIM, entries[:2])
    db.write_entries(path, SIM, entries[2:])
    expected = fresh(path)
    no_parse()
    assert loaded(path) == expected


def test_what_a_write_caches_is_what_yaml_reads_back(rng):
    doc = {"a": (1, [2.5, (3, "x")]), "b": {"c": -0.0, "d": None, 7: True}, "e": {1, 2}}
    assert db.read_back(doc) == yaml.safe_load(db.file_text(doc))
    with pytest.raises(ValueError):
        db.read_back({(1, 2): "a key YAML reads back as a list"})


def test_a_cache_folder_that_cannot_be_written_costs_only_speed(tmp_path, monkeypatch):
    path = mixed_file(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(blocked))
    assert loaded(path) == fresh(path)


def test_a_database_over_the_bound_is_refused_naming_it(tmp_path, monkeypatch):
    path = write(tmp_path / "db" / "cuda-simulator.yaml", [record(n) for n in (1, 2, 3)])
    monkeypatch.setattr(db, "MAX_FILE_BYTES", 256)
    with pytest.raises(db.DatabaseError, match="larger than") as err:
        db.load_file(path)
    assert str(path) in str(err.value)


def test_the_database_bounds_hold_ten_thousand_entries():
    assert db.MAX_FILE_BYTES >= 10_000 * 900 and db.MAX_FILE_NODES >= 10_000 * 120


# -- libyaml's reading and PyYAML's pure-Python one agree ---------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=12), st.dates())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                      max_leaves=30)
nasty = st.one_of(st.integers(1, 1200).map(lambda n: "[" * n + "]" * n),
                  st.integers(60, 70).map(lambda n: "".join(" " * i + "-\n" for i in range(n)) + " " * n + "1\n"),
                  st.just("a: &x [*x]\n"), st.just("a: 1\nb: 2\na: 3\n"), st.just("k: !!python/name:os.system\n"),
                  st.just("d: 2026-11-27\nt: 2026-11-27 10:20:30+02:00\nb: !!binary aGVsbG8=\ns: !!set {a, b}\n"))


def outcome(parse, text):
    try:
        return ("value", parse(text))
    except YamlFileError as exc:
        return ("refused", "nested deeper" in str(exc), "given twice" in str(exc), "refers to the node" in str(exc))


@pytest.mark.skipif(not libyaml_usable(), reason="PyYAML without a libyaml that bounds nesting")
@settings(max_examples=60, deadline=10000, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(values.map(lambda v: yaml.safe_dump(v, allow_unicode=True, default_flow_style=None)), nasty))
def test_libyaml_reads_what_the_python_parser_reads_and_refuses_what_it_refuses(text):
    fast, slow = outcome(parse_yaml_fast, text), outcome(parse_yaml, text)
    if fast[0] == slow[0] == "refused":
        assert fast[1:] == slow[1:] or fast[1:] == (False, False, False) or slow[1:] == (False, False, False)
    else:
        assert fast == slow
