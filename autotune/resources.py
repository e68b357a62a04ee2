"""Where the templates and search spaces live, from a checkout or from an installed wheel."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The folder ``name`` (templates, search_spaces): inside the package in a wheel, beside it in a checkout."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"autotune: cannot find the {name}/ folder next to {_PACKAGE}; is the install complete?")


def templates_dir() -> Path:
    return resource_dir("templates")


def search_space_path(kernel: str) -> Path:
    return resource_dir("search_spaces") / f"{kernel}.yaml"
