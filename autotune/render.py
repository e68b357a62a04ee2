"""Render validated configurations into Numba CUDA source through the Jinja templates."""
from __future__ import annotations

import functools
import os
from typing import Any, Mapping

import jinja2

from .resources import templates_dir


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Templates from $AUTOTUNE_TEMPLATES first (a folder of your own, e.g. to test a variant), then ours."""
    folders = [os.environ["AUTOTUNE_TEMPLATES"]] if os.environ.get("AUTOTUNE_TEMPLATES") else []
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([*folders, str(templates_dir())]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        extensions=["jinja2.ext.do"],
    )


def render(kernel: str, context: Mapping[str, Any]) -> str:
    """The module source for ``kernel`` with ``context``; a SyntaxError here is a template bug."""
    source = environment().get_template(f"{kernel}.py.j2").render(**context)
    compile(source, f"<autotune {kernel}>", "exec")
    return source


def template_hash(kernel: str) -> str:
    """Short hash of the template files a kernel is rendered from, recorded with tuned results."""
    import hashlib

    digest = hashlib.sha256()
    for name in ("_common.j2", f"{kernel}.py.j2"):
        source, _, _ = environment().loader.get_source(environment(), name)
        digest.update(source.encode())
    return digest.hexdigest()[:16]
