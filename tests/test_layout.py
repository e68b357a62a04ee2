"""The package's wings (README, "How it works") import downwards only: core <- kernels, _patches <- runtime <- families
<- tuning <- commands <- the public API. Checked over every import of the package's own modules, relative
(``from ..runtime import db``) or absolute (``import autotune``, ``from autotune.runtime import db``), in function
bodies and TYPE_CHECKING blocks too, so that a lazy import cannot hide a climb back up (tests/test_family.py checks
that module-level imports form no circle). Modules named by a string (``importlib.import_module``: the registry's
built-in families, the public API's lazy names) are not imports this test can read."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
TOP = PACKAGE.name
RANK = {"core": 0, "kernels": 1, "_patches": 1, "runtime": 2, "families": 3, "tuning": 4, "commands": 5}
PUBLIC = 6  # autotune/__init__.py, functions.py, __main__.py
#: Climbs allowed in one module only, (module, target) -> why it is no climb in fact.
ALLOWED_IN = {
    ("autotune.core.registry", "autotune"):
        "reserved_names reads the names of the package's namespace (__all__, its lazy names, its modules) so that "
        "a family's function cannot shadow one; the package's __init__ is loaded before any of its modules and "
        "imports nothing at load (its names are lazy), so reading it loads no higher wing",
}


def wing_rank(module: str) -> int:
    parts = module.split(".")
    return RANK.get(parts[1], PUBLIC) if len(parts) > 1 else PUBLIC


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute target) of every import of the package's own modules in the file."""
    name = module_name(path)
    return imports_in(path.read_text(), name if path.name == "__init__.py" else name.rsplit(".", 1)[0])


def imports_in(text: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute target) of every import of the package's own modules in the source ``text`` of a module of
    ``package``: relative ones resolved against it, absolute ones of ``autotune`` itself or below it (not of a
    package whose name merely starts so). ``from X import a, b`` targets ``X``, unless ``X`` is the top package,
    where each name is a target of its own (``from .. import __version__``, ``from autotune import sum``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _own(a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.level or _own(node.module or "")):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module
            found += [(node.lineno, target)] if target != TOP else [(node.lineno, f"{target}.{a.name}")
                                                                    for a in node.names]
    return found


def _own(module: str) -> bool:
    return module == TOP or module.startswith(TOP + ".")


def climbs_in(name: str, found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The imports of the module ``name`` that climb to a higher wing and are not allowed."""
    return [(line, target) for line, target in found if (name, target) not in ALLOWED_IN
            and wing_rank(target) > wing_rank(name)]


def test_every_import_runs_down_the_wings():
    climbs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, target in climbs_in(module_name(path), imports(path)):
            climbs.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not climbs, climbs


def test_every_allowed_climb_is_still_there():
    """An allowance whose import is gone is removed, so that it cannot let a new climb through later."""
    present = {(module_name(path), target) for path in PACKAGE.rglob("*.py") for _, target in imports(path)}
    assert set(ALLOWED_IN) <= present, set(ALLOWED_IN) - present


def test_the_rule_sees_a_climb():
    """The check itself: a module of core importing from runtime is a climb, one of runtime from core is not;
    relative and absolute imports alike, in function bodies too."""
    assert wing_rank("autotune.runtime.db") > wing_rank("autotune.core.problem")
    assert wing_rank("autotune.functions") > wing_rank("autotune.commands.cli") > wing_rank("autotune.tuning.tuner")
    assert imports(PACKAGE / "runtime" / "lookup.py"), "relative imports are read"
    text = """
import numpy
import autotune_extras
from ..core import problem
from .. import __version__
def lazy():
    import autotune
    import autotune.tuning.tuner as tuner
    from autotune.runtime import db
    from autotune import sum
    from .. import functions
"""
    found = imports_in(text, "autotune.core")
    assert [target for _, target in found] == [
        "autotune.core", "autotune.__version__", "autotune", "autotune.tuning.tuner", "autotune.runtime",
        "autotune.sum", "autotune.functions"], found
    assert [target for _, target in climbs_in("autotune.core.x", found)] == [
        "autotune.__version__", "autotune", "autotune.tuning.tuner", "autotune.runtime", "autotune.sum",
        "autotune.functions"]
    assert climbs_in("autotune.commands.x", found) == [(5, "autotune.__version__"), (7, "autotune"),
                                                       (10, "autotune.sum"), (11, "autotune.functions")]


def test_each_built_in_family_is_one_folder_with_its_templates_and_space():
    for name in ("matmul", "reduce"):
        folder = PACKAGE / "families" / name
        assert (folder / "family.py").is_file() and (folder / "space.yaml").is_file()
        assert list((folder / "templates").glob("*.py.j2")), name
