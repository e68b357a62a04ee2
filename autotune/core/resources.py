"""Where the package's data lives: the shared template library, the database shipped with the package, and the
cache folder of this machine."""
from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def resource_dir(name: str) -> Path:
    """The folder ``name`` (tuned_db): inside the package in a wheel, beside it in a checkout."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"autotune: cannot find the {name}/ folder next to {_PACKAGE}; is the install complete?")


def templates_dir() -> Path:
    """The template library every family may import from (``_common.j2``, ``_sim.j2``)."""
    return _PACKAGE / "kernels" / "templates"


def cache_dir() -> Path:
    """This machine's cache folder: $AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune or ~/.cache/autotune."""
    root = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root)
