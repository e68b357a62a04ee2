"""A study's provenance (autotune/tuning/provenance.py): the family's code counts as the code it runs, so edits that
make no kernel and no measurement (docstrings, comments, shape sets, rule features) keep the studies, and every
other edit starts fresh ones."""
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.core.registry import family
from autotune.tuning.provenance import family_code_hash

FAMILY = '''
    """A family."""
    import math

    LIMIT = 8  # a limit


    class Tiny:
        """The class."""

        measurement_free_modules = ("shapes.py",)
        measurement_free_methods = frozenset({"rule_features"})

        def fit_config(self, params):
            """Fitted."""
            return {**params, "SPLIT": min(LIMIT, math.ceil(params["K"] / 64))}

        def rule_features(self, rank):
            return tuple(range(rank))

        def label(self):
            return "tiny"
    '''


@pytest.fixture
def package(tmp_path, monkeypatch):
    folder = tmp_path / "tinyfamily"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "family.py").write_text(textwrap.dedent(FAMILY))
    (folder / "shapes.py").write_text("DRAWS = 40\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("tinyfamily.family", folder / "family.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tinyfamily.family", module)
    spec.loader.exec_module(module)
    return folder, module.Tiny()


def edited(folder, name: str, old: str, new: str) -> None:
    path = folder / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("name, old, new", [
    ("family.py", '"""Fitted."""', '"""Fitted to the shape, as the docstring now says at length."""'),
    ("family.py", '"""The class."""', '"""The class."""  # and a comment'),
    ("family.py", "LIMIT = 8  # a limit", "LIMIT = 8  # the limit, said otherwise\n\n"),
    ("family.py", "return tuple(range(rank))", "return (0, (0, 1))"),
    ("shapes.py", "DRAWS = 40", "DRAWS = 100"),
], ids=["a docstring", "a comment", "layout", "a measurement-free method", "a measurement-free module"])
def test_edits_that_make_no_kernel_keep_the_hash(package, name, old, new):
    folder, impl = package
    before = family_code_hash(impl)
    edited(folder, name, old, new)
    assert family_code_hash(impl) == before


@pytest.mark.parametrize("name, old, new", [
    ("family.py", "LIMIT = 8", "LIMIT = 16"),
    ("family.py", 'params["K"] / 64', 'params["K"] / 128'),
    ("family.py", 'return "tiny"', 'return "small"'),
    ("family.py", 'measurement_free_modules = ("shapes.py",)', "measurement_free_modules = ()"),
], ids=["a constant", "fit_config", "another method", "what is left out"])
def test_edits_of_the_code_that_runs_change_the_hash(package, name, old, new):
    folder, impl = package
    before = family_code_hash(impl)
    edited(folder, name, old, new)
    assert family_code_hash(impl) != before


@pytest.mark.parametrize("name, text, edit", [
    ("kernel.py", "class Grid:\n    def rule_features(self):\n        return 4\n", ("return 4", "return 8")),
    ("family.py", None, ("return {**params,", "self.rule_features(3)\n        return {**params,")),
    ("family.py", None, ("    def rule_features(self,", "    @staticmethod\n    def rule_features(")),
], ids=["a helper class's method of that name", "a method the measuring code calls", "a decorated method"])
def test_a_method_of_a_free_name_counts_where_it_may_make_what_is_measured(package, name, text, edit):
    """Only the family class's own undecorated methods are left out, and only where no other code of the family
    names them: a helper's method of the same name, one that fit_config calls, one with a decorator all count."""
    folder, impl = package
    if text is not None:
        (folder / name).write_text(text)
    else:
        edited(folder, name, *edit)
        edit = ("return tuple(range(rank))", "return (0, (0, 1))")
    before = family_code_hash(impl)
    edited(folder, name, *edit)
    assert family_code_hash(impl) != before


def test_a_subclass_in_another_package_counts_the_modules_its_parent_leaves_out(package, tmp_path, monkeypatch):
    """measurement_free_modules names the files of the class that says it: a subclass elsewhere inherits the
    attribute, not the right to leave out its own modules of those names."""
    other = tmp_path / "subfamily"
    other.mkdir()
    (other / "__init__.py").write_text("")
    (other / "family.py").write_text("from tinyfamily.family import Tiny\n\n\nclass Sub(Tiny):\n    pass\n")
    (other / "shapes.py").write_text("BLOCK = 128\n")
    spec = importlib.util.spec_from_file_location("subfamily.family", other / "family.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "subfamily.family", module)
    spec.loader.exec_module(module)
    impl = module.Sub()
    assert impl.measurement_free_modules == ("shapes.py",)
    before = family_code_hash(impl)
    edited(other, "shapes.py", "BLOCK = 128", "BLOCK = 256")
    assert family_code_hash(impl) != before


def test_a_new_module_or_one_that_cannot_be_parsed_changes_the_hash(package):
    folder, impl = package
    before = family_code_hash(impl)
    (folder / "kernel.py").write_text("def launch():\n    return 1\n")
    with_module = family_code_hash(impl)
    (folder / "kernel.py").write_text("def launch(:\n")
    broken = family_code_hash(impl)
    (folder / "kernel.py").write_text("def launch(:\n  # edited\n")
    assert len({before, with_module, broken, family_code_hash(impl)}) == 4


def test_the_families_leave_out_only_modules_they_have():
    for name in ("matmul", "reduce"):
        impl = family(name)
        folder = Path(sys.modules[type(impl).__module__].__file__).parent
        assert impl.measurement_free_modules and all((folder / m).is_file() for m in impl.measurement_free_modules)
        assert all(callable(getattr(impl, m, None)) for m in impl.measurement_free_methods)
