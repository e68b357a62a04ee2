"""What a study measured: the code and toolchain that turn a configuration of a family into a kernel.

A study's trials hold measurements of kernels, but a trial records only the configuration: the kernel itself is
what the family's templates, search space and Python code and the compiler made of it when it was measured. Edit
a template and the same configuration is another kernel, possibly a wrong one; a study that kept its old trials
would hand their winner to the database, where the new template renders it. So every study is tied to the
``Provenance`` it measured with: its name carries the provenance's digest (``tuner.study_name``), a changed
kernel opens a fresh study, and the old study's parts (a user attribute) say what changed.

The parts, each a short hash or a version:

- ``templates``: the family's template files and the shared macro files (``render.template_hash``);
- ``space``: the family's search space file, and the user's ``--space`` file where one is given (it may change
  defaults, so what a configuration renders);
- ``family code``: the Python files of the family (its package folder, or its module file), as the code they
  run: without docstrings and comments, without the modules and protocol methods that make no kernel and no
  measurement (``KernelFamily.measurement_free_modules`` and ``measurement_free_methods``: shape sets, rule
  features, bench peers), so that editing those keeps a coverage's studies, which take hours of GPU time to fill;
- ``kernel library``: ``autotune/kernels/*.py``, the intrinsics generated modules import;
- ``autotune``, ``numba``, ``numba_cuda``: the versions of the package and the compiler front end.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.problem import Problem

PROVENANCE_ATTR = "provenance"  # the study's user attribute holding the parts it was created with
MAX_FILES = 200  # a family's code is hashed from at most this many files (a package folder, not a site-packages)


@dataclass(frozen=True)
class Provenance:
    """The parts a study's measurements depend on, name -> hash or version."""

    parts: Mapping[str, str]

    @property
    def digest(self) -> str:
        """12 hex digits that change when any part does."""
        text = json.dumps(dict(self.parts), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def changes_from(self, older: Mapping[str, Any] | None) -> str:
        """What differs from ``older`` (an earlier study's parts), in words: 'templates, numba 0.68.1 -> 0.69.0'."""
        if not isinstance(older, Mapping):
            return "the study was made before studies recorded what they measured"
        changed = []
        for name, value in self.parts.items():
            before = older.get(name)
            if before == value:
                continue
            versioned = name in ("autotune", "numba", "numba_cuda")
            changed.append(f"{name} {before} -> {value}" if versioned else name)
        return ", ".join(changed) or "nothing that this autotune records"


def tie_study(study, now: Provenance, older) -> str | None:
    """Record ``now`` on ``study`` where it has no provenance yet; where the study is new (no trials) and replaces
    ``older`` (a ``storage.EarlierStudy`` of another provenance, or None), what changed since, in words (else None)."""
    if PROVENANCE_ATTR not in study.user_attrs:
        study.set_user_attr(PROVENANCE_ATTR, dict(now.parts))
    if older is None or study.get_trials(deepcopy=False):
        return None
    return now.changes_from(older.user_attrs.get(PROVENANCE_ATTR))


def provenance(problem: Problem, space_path: str | None = None) -> Provenance:
    """What a study of ``problem`` measures with, as this process finds it now (the files are read each call)."""
    from .. import __version__
    from ..runtime.render import template_hash
    from .report import versions

    impl = problem.impl
    toolchain = versions()
    parts = {
        "templates": template_hash(impl),
        "space": _files_hash([Path(impl.space_file)] + ([Path(space_path)] if space_path else [])),
        "family code": family_code_hash(impl),
        "kernel library": _files_hash(sorted((Path(__file__).parent.parent / "kernels").glob("*.py"))),
        "autotune": __version__,
        "numba": toolchain.get("numba", "?"),
        "numba_cuda": toolchain.get("numba_cuda", "?"),
    }
    return Provenance(parts)


def family_files(impl) -> list[Path]:
    """The Python files of a family: every module of the package its class is defined in (not sub-packages),
    or the one module file where that module is no package's."""
    try:
        module_file = Path(inspect.getsourcefile(type(impl)) or "")
    except TypeError:  # defined in no file (built in a session): nothing to hash
        return []
    if not module_file.is_file():
        return []
    folder = module_file.parent
    if (folder / "__init__.py").is_file():
        return sorted(folder.glob("*.py"))[:MAX_FILES]
    return [module_file]


def family_code_hash(impl) -> str:
    """The hash of what the family's Python files run (``family_files``), as ``measured_source`` gives each, the
    measurement-free modules left out."""
    skipped = set(impl.measurement_free_modules)
    digest = hashlib.sha256()
    for path in family_files(impl):
        if path.name in skipped:
            continue
        digest.update(path.name.encode() + b"\0" + measured_source(path, impl.measurement_free_methods).encode()
                      + b"\0")
    return digest.hexdigest()[:16]


def measured_source(path: Path, free_methods: Iterable[str]) -> str:
    """The module at ``path`` as the code it runs: parsed and written out again (comments and layout gone),
    without docstrings and without the methods named ``free_methods`` of its classes. A file that cannot be read
    or parsed counts as its bytes (or its error), so that it still changes the hash when it changes."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return "unparsed: " + hashlib.sha256(text).hexdigest()
    free = set(free_methods)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        if isinstance(node, ast.ClassDef):
            body[:] = [item for item in body
                       if not (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in free)]
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and _docstring(body):
            body[:] = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _docstring(body: list) -> bool:
    first = body[0] if body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def _files_hash(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            digest.update(f"unreadable: {exc.strerror}".encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
