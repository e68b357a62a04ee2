"""Every command and Python snippet the README shows works as written.

Code blocks and indented command lines are read from README.md in order. Blocks after a `<!-- needs a GPU -->`
line are checked without a GPU: their `autotune` commands must parse and answer `--help`, their Python must
compile. The others run here, in the CUDA simulator, in one scratch folder, in order (a later block may use what an
earlier one wrote). `pip install` lines must name extras that pyproject.toml defines; other programs (pytest,
optuna-dashboard, your own) are not run.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def blocks() -> list[tuple[str, str, bool]]:
    """(language, text, needs a GPU) for each fenced block and each indented command line, in order."""
    found, gpu_next = [], False
    lines = README.splitlines()
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
        cli.parser(cli.preload_families(a), a).parse_args(a)
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


def test_every_command_and_snippet_in_the_readme_works(tmp_path):
    for folder in ("examples", "benchmarks"):  # the README speaks from the repository's root
        (tmp_path / folder).symlink_to(ROOT / folder)
    ran, needs_gpu = 0, []
    for language, text, gpu in blocks():
        if language == "python":
            if gpu:
                compile(text, "README snippet", "exec")
                continue
            out = run([sys.executable, "-W", "ignore", "-c", text], tmp_path)
            assert out.returncode == 0, f"README snippet failed:\n{text}\n{out.stderr[-2000:]}"
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
    assert ran >= 6 and len(needs_gpu) >= 6
    out = run([sys.executable, "-c", PARSES_AND_HELPS], tmp_path, input=json.dumps(needs_gpu))
    assert out.returncode == 0, f"a command that needs a GPU does not parse or has no --help: {out.stderr[-1500:]}"
