"""Render validated configurations into Numba CUDA source through a family's Jinja templates."""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..core.resources import templates_dir

if TYPE_CHECKING:
    import jinja2


def environment(folder: str) -> jinja2.Environment:
    """Templates from $AUTOTUNE_TEMPLATES first (a folder of your own, e.g. to test a variant), then the family's
    folder, then the built-in templates (so a family of your own can import their macro files). Cached per folder
    and $AUTOTUNE_TEMPLATES as it is now; Jinja reloads a template whose file changed."""
    return _environment(folder, os.environ.get("AUTOTUNE_TEMPLATES") or None)


@functools.lru_cache(maxsize=16)
def _environment(folder: str, override: str | None) -> jinja2.Environment:
    import jinja2

    folders = [override] if override else []
    folders += [folder] + ([str(templates_dir())] if Path(folder) != templates_dir() else [])
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        extensions=["jinja2.ext.do"],
    )


IMPORTS_MARK = "# autotune: imports"
NUMBA_NAMES = ("cuda", "float32", "float64", "int32", "int64", "uint16", "uint32", "uint64")
NUMBA_TYPES = ("float16",)  # scalar types the top-level numba module does not export


class TemplateError(ValueError):
    """A family's template cannot be read, parsed or rendered, or renders Python that does not compile; the
    message names the template file and line."""


def check_templates(family) -> None:
    """Parse every template the family renders from (its own and the shared ones it names); TemplateError with
    the file and line of the first that does not parse. A tuning run calls this first, so that a template's
    syntax error stops it once instead of failing every variant alike."""
    import jinja2  # here, not at import: a process that finds its sources remembered never loads Jinja

    env = environment(str(family.template_dir))
    for name in family.templates():
        try:
            env.get_template(name)
        except jinja2.TemplateNotFound:
            raise TemplateError(f"{family.name}: template {name!r} not found in {', '.join(env.loader.searchpath)}") \
                from None
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(_syntax_error(exc)) from None


def render(family, template: str, context: Mapping[str, Any]) -> str:
    """The module source ``template`` of ``family`` renders with ``context``; TemplateError (file and line) where
    the template does not parse or render, or renders Python that does not compile (a template bug)."""
    import jinja2

    env = environment(str(family.template_dir))
    try:
        source = env.get_template(template).render(**context)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"{family.name}: template {exc.name!r} not found in "
                            f"{', '.join(env.loader.searchpath)}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(_syntax_error(exc)) from None
    except Exception as exc:  # Jinja's UndefinedError, or an error of Python code the template calls
        raise TemplateError(f"{_template_line(exc) or template}: rendering failed: {type(exc).__name__}: {exc}") \
            from None
    try:
        source = _completed(source, f"<autotune {family.name} {template}>")
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        raise TemplateError(f"{template} rendered Python that does not compile (SyntaxError: {exc.msg}, line "
                            f"{exc.lineno} of the rendered source: {line[:120]!r}); `autotune render --family "
                            f"{family.name}` prints the source") from None
    return source


@functools.lru_cache(maxsize=256)
def _completed(source: str, filename: str) -> str:
    """``source`` with its imports filled in (``fill_imports``, from the names of its code compiled), checked to
    compile as filled (an import mark in an indented block or before a ``__future__`` import would not).
    Remembered per text in this process: rendering the same configuration again (each build of a kernel renders
    it) makes the same text, and its imports and the compile checks are most of the cost of a render. A text that
    fails raises each time (an exception is not remembered)."""
    filled = fill_imports(source, compile(source, filename, "exec", dont_inherit=True))
    if filled is not source:
        compile(filled, filename, "exec", dont_inherit=True)
    return filled


def _syntax_error(exc: jinja2.TemplateSyntaxError) -> str:
    where = exc.filename or exc.name or "template"
    return f"{where}:{exc.lineno}: template syntax error: {exc.message}"


def _template_line(exc: BaseException) -> str | None:
    """'file.j2:LINE' of the template line a rendering error comes from, with the macro lines it went through
    (Jinja maps its frames to template lines), or None."""
    import traceback

    frames = [f"{f.filename}:{f.lineno}" for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(".j2")]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else f"{frames[0]} (in {', in '.join(frames[1:])})"


def fill_imports(source: str, code=None) -> str:
    """Replace the header's import mark with imports of exactly the names the module uses: ``math``, NumPy as
    ``np`` (simulator renderings: stand-ins of tensor-core instructions), Numba's
    ``cuda`` and scalar types, and the intrinsics of ``autotune.kernels.intrinsics``, ``autotune.kernels.wgmma`` and
    ``autotune.kernels.tma`` (code, not comments, counts). ``code``: the source compiled, where the caller has
    compiled it already."""
    if IMPORTS_MARK not in source:
        return source
    from ..kernels import intrinsics, tma, wgmma

    importable = {"math", "np", *NUMBA_NAMES, *NUMBA_TYPES, *intrinsics.__all__, *wgmma.__all__, *tma.__all__}
    used = _names(source, code or compile(source, "<autotune render>", "exec", dont_inherit=True), importable)
    lines = (["import math"] if "math" in used else []) + (["import numpy as np"] if "np" in used else [])
    lines += [""] if lines else []
    numba = [n for n in NUMBA_NAMES if n in used]
    if numba:
        lines.append(f"from numba import {', '.join(numba)}")
    types = [n for n in NUMBA_TYPES if n in used]
    if types:
        lines.append(f"from numba.types import {', '.join(types)}")
    for module in (intrinsics, wgmma, tma):
        ours = sorted(n for n in used if n in module.__all__)
        if ours:
            lines += _wrapped(f"from {module.__name__} import ", ours)
    head, _, body = source.partition(IMPORTS_MARK)
    return head + "\n".join(lines) + "\n\n" + body.lstrip("\n")


def _names(source: str, code, importable: set[str]) -> set[str]:
    """Which of the ``importable`` names the module's code uses, less those its top level binds itself (a simulator
    stand-in of an intrinsic, say). The compiled code names every name and attribute it touches (``co_names``,
    ``co_varnames`` of each code object); of those, a name counts where the source has it bare somewhere, not only
    after a dot (``np.float32`` is no use of ``float32``; one that is also bare in a comment is imported, unused).
    Tokenizing the source instead took most of a large render's time."""
    import dis
    import re

    touched: set[str] = set()
    pending = [code]
    while pending:
        co = pending.pop()
        touched.update(co.co_names, co.co_varnames)
        pending.extend(c for c in co.co_consts if hasattr(c, "co_names"))
    bound = {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_NAME", "STORE_GLOBAL")}
    return {name for name in (touched & importable) - bound if re.search(rf"(?<![\w.]){name}\b", source)}


def _wrapped(prefix: str, names: list[str], width: int = 116) -> list[str]:
    line = prefix + ", ".join(names)
    if len(line) <= width:
        return [line]
    lines, current = [], prefix + "("
    indent = " " * len(current)
    for i, name in enumerate(names):
        piece = name + (", " if i < len(names) - 1 else ")")
        if len(current) + len(piece.rstrip()) > width:
            lines.append(current.rstrip())
            current = indent
        current += piece
    return lines + [current]


def source_hash(source: str) -> str:
    """Short hash of a rendered module's text: what a database entry records of the kernel it measured
    (``source_hash``), the name of its file in tests/golden/renders/."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def template_hash(family) -> str:
    """Short hash of the template files a family renders from, recorded with tuned results."""
    env = environment(str(family.template_dir))
    digest = hashlib.sha256()
    for name in family.templates():
        source, _, _ = env.loader.get_source(env, name)
        digest.update(source.encode())
    return digest.hexdigest()[:16]
