"""The package's wings (README, "How it works") import downwards only: core <- kernels, _patches <- runtime <- families
<- tuning <- commands <- the public API. Checked over every relative import, in function bodies and TYPE_CHECKING
blocks too, so that a lazy import cannot hide a climb back up (tests/test_family.py checks that module-level
imports form no circle)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
RANK = {"core": 0, "kernels": 1, "_patches": 1, "runtime": 2, "families": 3, "tuning": 4, "commands": 5}
PUBLIC = 6  # autotune/__init__.py, functions.py, __main__.py
ALLOWED = {"autotune.__version__"}  # the package's version, read by what records it


def wing_rank(module: str) -> int:
    parts = module.split(".")
    return RANK.get(parts[1], PUBLIC) if len(parts) > 1 else PUBLIC


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute target) of every relative import in the file."""
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = f"{base}.{node.module}" if node.module else base
            found += [(node.lineno, target)] if node.module else [(node.lineno, f"{target}.{a.name}")
                                                                  for a in node.names]
    return found


def test_every_import_runs_down_the_wings():
    climbs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for line, target in imports(path):
            if target not in ALLOWED and wing_rank(target) > wing_rank(name):
                climbs.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not climbs, climbs


def test_the_rule_sees_a_climb():
    """The check itself: a module of core importing from runtime is a climb, one of runtime from core is not."""
    assert wing_rank("autotune.runtime.db") > wing_rank("autotune.core.problem")
    assert wing_rank("autotune.functions") > wing_rank("autotune.commands.cli") > wing_rank("autotune.tuning.tuner")
    assert imports(PACKAGE / "runtime" / "lookup.py"), "relative imports are read"


def test_each_built_in_family_is_one_folder_with_its_templates_and_space():
    for name in ("matmul", "reduce"):
        folder = PACKAGE / "families" / name
        assert (folder / "family.py").is_file() and (folder / "space.yaml").is_file()
        assert list((folder / "templates").glob("*.py.j2")), name
