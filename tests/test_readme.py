"""Every command and Python snippet the README and the family authors' reference (docs/families.md) show works as
written.

Code blocks and indented command lines are read from each page in order. A block whose info string names a file
(```python file=my_family/family.py) is that file: all of a page's files are written into its scratch folder
first, and not run. Blocks after a `<!-- needs a GPU -->` line are checked without a GPU: their `autotune`
commands must parse and answer `--help`, their Python must compile. The others run here, in the CUDA simulator,
in one scratch folder per page, in order (a later block may use what an earlier one wrote). `pip install` lines
must name extras that pyproject.toml defines; other programs (pytest, optuna-dashboard, your own) are not run.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"README.md": (6, 6), "docs/families.md": (8, 3)}  # page: the fewest commands run here, and needing a GPU


def blocks(page: str = "README.md") -> list[tuple[str, str, bool]]:
    """(info string, text, needs a GPU) for each fenced block and each indented command line, in order."""
    found, gpu_next = [], False
    lines = (ROOT / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "<!-- needs a GPU -->":
            gpu_next = True
        elif line.startswith("```"):
            language = line[3:].strip() or "sh"
            end = lines.index("```", i + 1)
            found.append((language, "\n".join(lines[i + 1:end]), gpu_next))
            gpu_next, i = False, end
        elif line.startswith("    ") and line.strip().startswith(("autotune ", "pip ")) and \
                not lines[i - 1].strip().startswith(("search", "->")):
            found.append(("sh", line.strip(), False))
        i += 1
    return found


def file_blocks(page: str) -> dict[str, str]:
    """The blocks of a page that are files: path -> text."""
    files = {}
    for info, text, _ in blocks(page):
        m = re.search(r"\bfile=(\S+)", info)
        if m:
            files[m.group(1)] = text + "\n"
    return files


def commands(text: str) -> list[list[str]]:
    """The simple commands of a shell text: comments dropped, lines split at && and ||, parentheses removed."""
    found = []
    for line in text.splitlines():
        line = line.split("  #")[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|\|\|", line):
            part = part.strip().strip("()").strip()
            if part:
                found.append(shlex.split(part))
    return found


def run(argv, cwd, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"}
    env.pop("AUTOTUNE_DB", None)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=600, **kwargs)


# Each command that needs a GPU must parse as written and answer --help through the entry point; all of them in
# one process, since starting Python and importing autotune is most of the cost of each. Argument lists arrive
# as JSON on stdin; the first that fails ends the process with its command and why.
PARSES_AND_HELPS = """
import contextlib, io, json, sys
from autotune.commands import cli
for a in json.load(sys.stdin):
    command = "autotune " + " ".join(a)
    try:
        cli.parse(a)
    except SystemExit:
        sys.exit(f"{command} does not parse")
    try:
        with contextlib.redirect_stdout(io.StringIO()) as text:
            cli.main([*a, "--help"])
    except SystemExit as exit:
        if exit.code:
            sys.exit(f"{command} --help exited with {exit.code}")
        if "usage:" not in text.getvalue():
            sys.exit(f"{command} --help printed no usage")
        continue
    sys.exit(f"{command} --help did not exit")
"""


def check_pip(argv: list[str]) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for arg in argv[2:]:
        m = re.match(r"^(?:\.|autotune)\[(\w+)\]$", arg)
        if m:
            assert m.group(1) in extras, f"README installs the extra {m.group(1)!r}, which pyproject.toml lacks"


def test_the_readme_shows_commands_and_snippets():
    kinds = [(language, gpu) for language, _, gpu in blocks()]
    assert ("python", True) in kinds and ("python", False) in kinds and ("sh", True) in kinds and ("sh", False) in kinds


@pytest.mark.parametrize("page", list(PAGES))
def test_every_command_and_snippet_works(tmp_path, page):
    for folder in ("examples", "benchmarks"):  # the pages speak from the repository's root
        (tmp_path / folder).symlink_to(ROOT / folder)
    for name, text in file_blocks(page).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    ran, needs_gpu = 0, []
    for language, text, gpu in blocks(page):
        if "file=" in language:
            continue
        if language == "python":
            if gpu:
                compile(text, f"{page} snippet", "exec")
                continue
            out = run([sys.executable, "-W", "ignore", "-c", text], tmp_path)
            assert out.returncode == 0, f"{page} snippet failed:\n{text}\n{out.stderr[-2000:]}"
            assert "False" not in out.stdout, f"{page} snippet printed False:\n{text}\n{out.stdout}"
            ran += 1
            continue
        for argv in commands(text):
            while argv and re.match(r"^[A-Z_]+=", argv[0]):
                argv = argv[1:]  # VAR=value prefixes
            if argv[0] == "pip":
                check_pip(argv)
            elif argv[0] != "autotune":
                continue  # pytest, optuna-dashboard, a program of yours
            elif gpu or "--device" in argv:
                needs_gpu.append(argv[1:])
            else:
                out = run([sys.executable, "-m", "autotune", *argv[1:]], tmp_path)
                assert out.returncode == 0, f"{shlex.join(argv)}:\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
                ran += 1
    fewest_run, fewest_gpu = PAGES[page]
    assert ran >= fewest_run and len(needs_gpu) >= fewest_gpu, (ran, len(needs_gpu))
    out = run([sys.executable, "-c", PARSES_AND_HELPS], tmp_path, input=json.dumps(needs_gpu))
    assert out.returncode == 0, f"a command that needs a GPU does not parse or has no --help: {out.stderr[-1500:]}"


def test_the_reference_shows_the_minimal_family_as_the_tests_have_it():
    """docs/families.md's family files are tests/minimal_family's, byte for byte (the contract test runs those)."""
    files = file_blocks("docs/families.md")
    assert sorted(Path(name).name for name in files) == ["family.py", "layernorm.py.j2", "layernorm.yaml"]
    for name, text in files.items():
        assert text == (ROOT / "tests" / "minimal_family" / Path(name).name).read_text(), name


def test_the_reference_names_every_hook_macro_intrinsic_constraint_and_toolkit_name():
    """What a family author may use is all on the page: the protocol's methods and attributes, the shared macros,
    the intrinsics, every constraint name (generic and each family's), the toolkit."""
    import ast

    import autotune.toolkit
    from autotune.core.constraints import PREDICATES
    from autotune.core.family import KernelFamily
    from autotune.core.registry import family, register_family

    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / "families.md").read_text(), flags=re.S | re.M)  # prose only
    quoted = set(re.findall(r"`([^`]+)`", text))
    words = {w for q in quoted for w in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", q)}
    protocol = {n for n in vars(KernelFamily) if not n.startswith("_")}
    kernel = {"bind", "helper_kernels", "entry", "signature"}
    missing = sorted(n for n in protocol | kernel if n not in words)
    for page, prefix in (("_common.j2", "c."), ("_sim.j2", "sim.")):
        macros = re.findall(r"{%-? macro (\w+)\(", (ROOT / "autotune" / "kernels" / "templates" / page).read_text())
        missing += [prefix + m for m in macros if prefix + m not in words]
    for module in ("intrinsics", "wgmma", "tma"):
        tree = ast.parse((ROOT / "autotune" / "kernels" / f"{module}.py").read_text())
        names = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                     and getattr(node.targets[0], "id", "") == "__all__")
        missing += [n for n in names if n not in words]
    register_family(str(ROOT / "examples" / "softmax"))
    predicates = {*PREDICATES, *family("matmul").predicates, *family("softmax").predicates}
    missing += [n for n in predicates if n not in words]
    missing += [n for n in autotune.toolkit.__all__ if n not in words]
    assert not missing, missing
