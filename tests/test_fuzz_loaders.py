"""Fuzzing the two loaders of user files: every input either loads or is refused with an error that names the file,
within a deadline (so in bounded time; the bounded reader also keeps memory bounded)."""
import tempfile
from pathlib import Path

import yaml
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
