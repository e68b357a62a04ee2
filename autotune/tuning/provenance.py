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
    from ..core.version import __version__
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
    module_file = _class_file(type(impl))
    if module_file is None:
        return []
    folder = module_file.parent
    if (folder / "__init__.py").is_file():
        return sorted(folder.glob("*.py"))[:MAX_FILES]
    return [module_file]


def _class_file(cls) -> Path | None:
    try:
        module_file = Path(inspect.getsourcefile(cls) or "")
    except TypeError:  # defined in no file (built in a session): nothing to hash
        return None
    return module_file if module_file.is_file() else None


def family_code_hash(impl) -> str:
    """The hash of what the family's Python files run (``family_files``): each parsed and written out again
    (comments and layout gone), without docstrings, and without what the family's own class declares makes no
    kernel and no measurement:

    - the modules its class itself names in ``measurement_free_modules`` (not a subclass's inherited list: that
      names its parent's files; never the class's own module);
    - the methods named in ``measurement_free_methods`` that its class defines, undecorated, where no other code
      of the family refers to their names (a method another one calls makes what that one makes).

    A file that cannot be read or parsed counts as its bytes (or its error), so that it still changes the hash."""
    cls, own = type(impl), _class_file(type(impl))
    skipped = set(vars(cls).get("measurement_free_modules", ())) - {own.name if own else ""}
    contents = {path: _read(path) for path in family_files(impl) if path.name not in skipped}
    key = (cls.__module__, cls.__qualname__, str(own), frozenset(cls.measurement_free_methods),
           tuple((str(path), data if isinstance(data, str) else hashlib.sha256(data).digest())
                 for path, data in contents.items()))
    found = _code_hashes.get(key)
    if found is None:
        sources = {path: _parsed(data) for path, data in contents.items()}
        free = _free_methods(cls, sources.get(own, ("", None))[1], sources)
        digest = hashlib.sha256()
        for path, (raw, tree) in sources.items():
            text = raw if tree is None else _measured_text(tree, raw, cls.__name__ if path == own else None, free)
            digest.update(path.name.encode() + b"\0" + text.encode() + b"\0")
        found = _code_hashes[key] = digest.hexdigest()[:16]
    return found


_code_hashes: dict[tuple, str] = {}  # by the files' contents: parsing them is what costs


def _read(path: Path) -> bytes | str:
    """The file's bytes, or why it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def _parsed(data: bytes | str) -> tuple[str, ast.Module | None]:
    """(the file's text for a hash where it cannot be parsed, its tree or None)."""
    if isinstance(data, str):
        return data, None
    raw = "unparsed: " + hashlib.sha256(data).hexdigest()
    try:
        return raw, ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return raw, None


def _family_class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    return next((node for node in (tree.body if tree else ()) if isinstance(node, ast.ClassDef) and node.name == name),
                None)


def _free_methods(cls, tree: ast.Module | None, sources: dict) -> set[str]:
    """The measurement-free methods the class defines in ``tree`` (its module), undecorated, whose names no other
    code of ``sources`` mentions (as an attribute, a name or a string)."""
    klass = _family_class(tree, cls.__name__)
    if klass is None:
        return set()
    methods = {id(item): item.name for item in klass.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
               and item.name in cls.measurement_free_methods and not item.decorator_list}
    mentioned: set[str] = set()
    for _, other in sources.values():
        stack = [other] if other is not None else []
        while stack:
            node = stack.pop()
            if id(node) in methods or _declares_free(node):
                continue  # a free method's own body, or the family's list of them
            if isinstance(node, ast.Attribute):
                mentioned.add(node.attr)
            elif isinstance(node, ast.Name):
                mentioned.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                mentioned.add(node.value)
            stack.extend(ast.iter_child_nodes(node))
    return set(methods.values()) - mentioned


def _declares_free(node: ast.AST) -> bool:
    """Whether ``node`` assigns ``measurement_free_methods`` or ``measurement_free_modules`` (whose strings name
    what is left out, not code that calls it)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id in ("measurement_free_methods", "measurement_free_modules")
               for t in targets)


def _measured_text(tree: ast.Module, raw: str, family_class: str | None, free: set[str]) -> str:
    """The module written out again without docstrings and, in the class ``family_class``, without the methods
    ``free``; ``raw`` where it cannot be written out."""
    klass = _family_class(tree, family_class) if family_class else None
    if klass is not None:
        klass.body[:] = [item for item in klass.body
                         if not (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in free)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and _docstring(node.body):
            node.body[:] = node.body[1:] or [ast.Pass()]
    try:
        return ast.unparse(tree)
    except (RecursionError, MemoryError, ValueError):
        return raw


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
