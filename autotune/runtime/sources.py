"""Which source a configuration renders to, remembered on disk, so that a process looking up a tuned kernel need
not render it again.

Rendering a large matmul variant (Jinja compiling the templates, then the render, then filling in its imports)
costs more than everything else a first call of a kernel with stored code does (autotune/runtime/code_cache.py).
So the rendered source's hash is remembered under a key made of everything rendering reads: the family's name,
the validated parameters, dtype and family arguments, and whether it renders for the simulator, with a hash of
every file rendering can depend on: the template folders' files (``$AUTOTUNE_TEMPLATES`` too), autotune's own
Python files (the families' ``template_context``, the render), the folder of a family defined outside autotune,
and Jinja's and Python's versions. Templates are read again where a file's size or modification time changed,
so a template edited while a process runs is seen at its next render; Python files, imported once, are hashed
once per process. The source itself is the file the compiler imports (``compiler.source_path``); a remembered
hash whose file is missing or holds other text is rendered again, never trusted.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.atomic import write_text_atomic
from ..core.resources import templates_dir

_PACKAGE = Path(__file__).resolve().parent.parent
MAX_FILES = 10_000  # a template folder is no place for a tree this large: past it, nothing is remembered


def remembered(family, params: Mapping[str, Any], dtype: str, args: Mapping[str, Any], simulator: bool,
               render: Callable[[], str]) -> str:
    """The source ``render()`` makes for this configuration: remembered, else rendered and remembered."""
    from .code_cache import source_hash

    key = memo_key(family, params, dtype, args, simulator)
    if key is None:
        return render()
    memo = memo_path(key)
    source = _recall(memo)
    if source is not None:
        return source
    source = render()
    _remember(memo, source, source_hash(source))
    return source


def memo_key(family, params: Mapping[str, Any], dtype: str, args: Mapping[str, Any], simulator: bool) -> str | None:
    """The key of one configuration's rendering; None where the files it depends on cannot all be read."""
    inputs = render_inputs_hash(family.name, str(family.template_dir), os.environ.get("AUTOTUNE_TEMPLATES") or "",
                                _family_folder(family))
    if inputs is None:
        return None
    text = json.dumps({"family": family.name, "params": dict(params), "dtype": dtype,
                       "args": {k: args[k] for k in sorted(args)}, "simulator": bool(simulator), "inputs": inputs},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def memo_path(key: str) -> Path:
    from ..core.resources import cache_dir

    return cache_dir() / "sources" / key[:2] / f"{key}.txt"


def render_inputs_hash(name: str, template_dir: str, user_templates: str, family_folder: str | None) -> str | None:
    """SHA-256 of every file rendering can read (see the module docstring); None where one cannot be read. The
    templates are read again only where one's size or modification time changed since this process last hashed
    them (or the list of files changed): a template edited while a process runs is seen at its next render.
    Python files are hashed once per process: code already imported does not change under it."""
    from importlib import metadata

    jinja = metadata.version("jinja2")  # without importing Jinja, which a remembered source does not need
    code = _code_hash(family_folder)
    folders = [Path(f) for f in (user_templates, template_dir) if f] + [templates_dir()]
    files = [(str(i), p) for i, folder in enumerate(folders) for p in _files(folder, "*")]
    if code is None or len(files) > MAX_FILES:
        return None
    try:
        stamps = tuple((label, str(path), *_stamp(path)) for label, path in files)
    except OSError:
        return None
    key = (name, jinja, code, stamps)
    if key in _hashed:
        return _hashed[key]
    digest = hashlib.sha256(f"{name}\0jinja2 {jinja}\0python {sys.version_info[:2]}\0{code}\0".encode())
    try:
        for label, path in files:
            digest.update(f"{label}\0{path}\0".encode() + path.read_bytes() + b"\0")
    except OSError:
        return None
    if len(_hashed) >= 32:
        _hashed.clear()
    _hashed[key] = digest.hexdigest()
    return _hashed[key]


@functools.lru_cache(maxsize=32)
def _code_hash(family_folder: str | None) -> str | None:
    """SHA-256 of autotune's Python files and of a family's own folder (its ``template_context``)."""
    files = [("autotune", p) for p in _files(_PACKAGE, "*.py")]
    if family_folder:
        files += [("family", p) for p in _files(Path(family_folder), "*.py", recursive=False)]
    digest = hashlib.sha256()
    try:
        for label, path in files:
            digest.update(f"{label}\0{path}\0".encode() + path.read_bytes() + b"\0")
    except OSError:
        return None
    return digest.hexdigest()


_hashed: dict[tuple, str] = {}


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


def _files(folder: Path, pattern: str, recursive: bool = True) -> list[Path]:
    found = folder.rglob(pattern) if recursive else folder.glob(pattern)
    return sorted(p for p in found if p.is_file() and "__pycache__" not in p.parts)


def _family_folder(family) -> str | None:
    """The folder of a family defined outside autotune (its Python files feed ``template_context``)."""
    import inspect

    try:
        path = Path(inspect.getfile(type(family))).resolve()
    except (TypeError, OSError):
        return None
    return None if _PACKAGE in path.parents else str(path.parent)


def _recall(memo: Path) -> str | None:
    """The remembered source, where the memo and its source file agree."""
    from .code_cache import source_hash

    try:
        digest = memo.read_text(encoding="utf-8").strip()
        source = source_path_for(digest).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if source_hash(source) != digest:
        with contextlib.suppress(OSError):
            memo.unlink()
        return None
    return source


def source_path_for(digest: str) -> Path:
    from .compiler import source_path_of_digest

    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"not a source hash: {digest!r}")
    return source_path_of_digest(digest)


def _remember(memo: Path, source: str, digest: str) -> None:
    """Write the source file and the memo (each atomically; a folder that cannot be written is left alone)."""
    from .compiler import write_source

    with contextlib.suppress(OSError):
        write_source(source)
        write_text_atomic(memo, digest + "\n", parents=True)
