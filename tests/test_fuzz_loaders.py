"""Fuzzing the two loaders of user files: every input either loads or is refused with an error that names the file,
within a deadline (so in bounded time; the bounded reader also keeps memory bounded)."""
import tempfile
from pathlib import Path

import pytest
import yaml
from checks import finishes, release_fifo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core.space import SpaceError, load_space
from autotune.runtime import db

FUZZ = settings(max_examples=120, deadline=10000, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["float32", "reduce", "matmul", "sum", "all", "nn", "tiled"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                      max_leaves=25)
fields = st.sampled_from(["kernel", "dtype", "shape", "params", "time", "rate", "baseline", "resources", "op", "axis",
                          "layout", "trials", "date", "device", "versions", "unit", "template_hash"])
entries = st.dictionaries(fields, values, max_size=10)
database = st.fixed_dictionaries({"schema": st.sampled_from([1, 1, 2, "1", None]),
                                  "device": st.one_of(values, st.fixed_dictionaries({"name": st.text(max_size=8)})),
                                  "entries": st.one_of(st.lists(entries, max_size=4), values)})
param_specs = st.one_of(values, st.fixed_dictionaries({"values": values}, optional={"default": scalars, "when": values}))
space = st.fixed_dictionaries({"family": st.sampled_from(["reduce", "matmul", "other"]),
                               "params": st.dictionaries(st.sampled_from(["BLOCK", "ITEMS", "VEC", "XX", "BM"]),
                                                         param_specs, max_size=4)},
                              optional={"constraints": values, "starts": values})


def nasty_texts():
    """Text that is not a tidy document: raw bytes, deep nesting, aliases, anchors that refer to themselves."""
    deep = st.integers(1, 5000).map(lambda n: "[" * n + "]" * n)
    aliases = st.integers(2, 12).map(lambda n: "a: &x [1, 2]\n" + "".join(
        f"b{i}: &y{i} [{', '.join(['*x' if i == 0 else f'*y{i - 1}'] * 8)}]\n" for i in range(n)))
    self_ref = st.just("a: &x [*x]\n")
    return st.one_of(deep, aliases, self_ref, st.text(max_size=300))


def write(tmp: str, content) -> Path:
    path = Path(tmp) / "fuzz.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, allow_unicode=True))
    return path


def loads_or_names_the_file(load, errors, path: Path) -> None:
    try:
        load(path)
    except errors as exc:
        assert str(path) in str(exc), str(exc)
        assert len(str(exc)) < 2000, "a refusal's message stays short"


@FUZZ
@given(st.one_of(st.binary(max_size=400), nasty_texts(), database))
def test_database_files_load_or_are_refused_naming_the_file(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(tmp, content)
        try:
            loaded = db.load_file(path)
        except db.DatabaseError as exc:
            assert str(path) in str(exc) and len(str(exc)) < 2000
        else:
            assert all(str(path) in problem for problem in loaded.problems)


@FUZZ
@given(st.one_of(st.binary(max_size=400), nasty_texts(), space))
def test_search_space_files_load_or_are_refused_naming_the_file(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(tmp, content)
        loads_or_names_the_file(lambda p: load_space("reduce", p), SpaceError, path)


# -- scalars PyYAML's constructors cannot build, in every file the project reads ---------------------------------
TAGS = ["int", "float", "bool", "null", "str", "binary", "timestamp", "map", "seq", "set", "omap", "pairs"]
TAG_TEXTS = ["''", "abc", "maybe", "xyz", "1", "0x", "0o", "1:x", "-.", ".inf", "2026-13-45", "[1]", "{a: 1}", "@@@"]
explicit_tags = st.builds(lambda tag, text: f"!!{tag} {text}", st.sampled_from(TAGS),
                          st.one_of(st.sampled_from(TAG_TEXTS), st.from_regex(r"[a-z0-9.:+-]{0,8}", fullmatch=True)))
timestamps = st.one_of(
    st.builds(lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}", st.integers(0, 9999), st.integers(0, 99),
              st.integers(0, 99)),
    st.builds(lambda d, h, mi, s, z: f"2026-01-{d:02d} {h:02d}:{mi:02d}:{s:02d}{z}", st.integers(1, 31),
              st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
              st.sampled_from(["", "Z", " +05:30", " -23:59", " +99:00", ".1234567890"])))
huge_scalars = st.one_of(
    st.integers(300, 6000).map(lambda n: "9" * n), st.integers(300, 6000).map(lambda n: "0x" + "f" * n),
    st.integers(2, 3000).map(lambda n: "1" + ":1" * n), st.integers(300, 6000).map(lambda n: "1" + "0" * n + ".5"),
    st.sampled_from(["1e999", "-1e999", ".inf", "-.inf", ".nan", "0b" + "1" * 5000]))
nasty_scalars = st.one_of(explicit_tags, timestamps, huge_scalars)
DB_TEMPLATE = """schema: 1
device: {{name: CUDA simulator, cc: '9.0', sm_count: {0}}}
entries:
- family: reduce
  dtype: float32
  shape: [{1}]
  op: sum
  params: {{BLOCK: {2}, WAVES: 1}}
  time: {{median_ms: {3}, p20_ms: 0.9, p80_ms: 1.1, reps: {4}}}
  trials: {5}
  date: {6}
  template_hash: {7}
"""
DB_DEFAULTS = ["2", "1000", "64", "1.0", "10", "3", "2026-11-23", "abc"]
SPACE_TEMPLATE = """family: reduce
params:
  BLOCK: {{values: [{0}, 64], default: {1}}}
  ITEMS: {{values: [{2}]}}
starts:
- {{BLOCK: {3}}}
"""
SPACE_DEFAULTS = ["32", "32", "1", "32"]


def filled(template: str, defaults: list[str], draw) -> str:
    """The template with some of its values replaced by nasty scalars (at least one)."""
    values = list(defaults)
    for i in draw(st.sets(st.integers(0, len(values) - 1), min_size=1, max_size=3)):
        values[i] = draw(nasty_scalars)
    return template.format(*values)


def sweep_template(tmp: str) -> tuple[str, list[str]]:
    """A small valid sweep file's text, with slots for nasty scalars (device, problem, a row)."""
    import re

    from autotune.core.device import DeviceInfo
    from autotune.core.problem import Problem
    from autotune.core.space import load_space
    from autotune.core.timing import Timing
    from autotune.tuning.sweep import Sweep, SweepRow, valid_configurations, write_sweep

    space = Path(tmp) / "s.space.yaml"
    space.write_text("family: reduce\nparams:\n  BLOCK: {values: [64, 128]}\n  ITEMS: {values: [1]}\n"
                     "  VEC: {values: [4]}\n  WAVES: {values: [1]}\n")
    problem = Problem("reduce", (1 << 20,), "float32", {"op": "sum"})
    rows = tuple(SweepRow(c, "ok", Timing(1.0, 1.0, 1.0, 100), 4.0, 0.5)
                 for c in valid_configurations(load_space("reduce", space), problem))
    path = Path(tmp) / "template.yaml"
    write_sweep(path, Sweep(problem, DeviceInfo("Test GPU", (9, 0), 132, 50 << 20), space, 2,
                            {"date": "2026-11-24", "command": "synthetic"}, rows))
    text = path.read_text().replace("{", "{{").replace("}", "}}")
    text = text.replace("sm_count: 132", "sm_count: {0}").replace("l2_bytes: 52428800", "l2_bytes: {1}")
    text = text.replace("  - 1048576", "  - {2}").replace("compile_workers: 2", "compile_workers: {3}")
    text = re.sub(r"\[\[64, ([^\]]*)\], ok, 1\.0, 1\.0, 1\.0, 100,", r"[[{4}, \1], ok, {5}, 1.0, 1.0, {6},", text,
                  count=1)
    assert text.count("{") - text.count("{{") * 2 >= 7, "the sweep template lost its slots"
    return text, ["132", "52428800", "1048576", "2", "64", "1.0", "100"]


@settings(FUZZ, max_examples=60)
@given(st.data())
def test_database_files_with_tags_timestamps_and_huge_scalars_load_or_are_refused(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(tmp, filled(DB_TEMPLATE, DB_DEFAULTS, data.draw))
        try:
            loaded = db.load_file(path)
        except db.DatabaseError as exc:
            assert str(path) in str(exc) and len(str(exc)) < 2000
        else:
            assert all(str(path) in problem and len(problem) < 2000 for problem in loaded.problems)
            for entry in loaded.entries:  # what loads is usable: printed, dumped, merged
                db.dump(loaded.device, [entry])


@settings(FUZZ, max_examples=60)
@given(st.data())
def test_search_spaces_with_tags_timestamps_and_huge_scalars_load_or_are_refused(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(tmp, filled(SPACE_TEMPLATE, SPACE_DEFAULTS, data.draw))
        loads_or_names_the_file(lambda p: load_space("reduce", p), SpaceError, path)


@settings(FUZZ, max_examples=60)
@given(st.data())
def test_sweep_files_with_tags_timestamps_and_huge_scalars_load_or_are_refused(data):
    from autotune.tuning.sweep import SweepError, load_sweep

    with tempfile.TemporaryDirectory() as tmp:
        template, defaults = sweep_template(tmp)
        path = write(tmp, filled(template, defaults, data.draw))
        loads_or_names_the_file(load_sweep, SweepError, path)


def test_the_sweep_template_loads_as_it_is():
    from autotune.tuning.sweep import load_sweep

    with tempfile.TemporaryDirectory() as tmp:
        template, defaults = sweep_template(tmp)
        assert load_sweep(write(tmp, template.format(*defaults))).device.sm_count == 132
        assert db.load_file(write(tmp, DB_TEMPLATE.format(*DB_DEFAULTS))).entries
        assert load_space("reduce", write(tmp, SPACE_TEMPLATE.format(*SPACE_DEFAULTS))).params["BLOCK"].values


# -- files that are not regular files ---------------------------------------------------------------------------
def non_regular(kind: str, path: Path):
    """Make ``path`` a FIFO, a folder, a link to a character device or a listening UNIX socket; returns what to
    close afterwards (None)."""
    import os
    import socket

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        return sock
    return None


@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "socket"])
def test_a_file_that_is_not_regular_is_named_not_read(tmp_path, kind):
    """A FIFO (which would block the reader forever), a folder, a device (/dev/zero never ends) or a socket named
    like a database, search-space or sweep file is refused with its name and what it is; a database folder holding
    one skips it with a warning and reads the rest."""
    from autotune.tuning.sweep import SweepError, load_sweep

    path = tmp_path / "nvidia-x.yaml"
    held = non_regular(kind, path)
    try:
        for load, errors in ((db.load_file, db.DatabaseError), (lambda p: load_space("reduce", p), SpaceError),
                             (load_sweep, SweepError)):
            exc = finishes(lambda: load(path))
            assert isinstance(exc, errors) and str(path) in str(exc), exc
            if kind != "socket":  # a socket cannot even be opened: named as unreadable
                assert "not a regular file" in str(exc), exc
        files, problems = finishes(lambda: db.load_folder(tmp_path))
        assert files == [] and len(problems) == 1 and str(path) in problems[0]
    finally:
        if held is not None:
            held.close()
        if kind == "fifo":  # a reader still blocked in open() (the fault under test) gets its end of file
            release_fifo(path)
