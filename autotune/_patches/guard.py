"""What every replacement of a Numba or numba-cuda function checks and does to be installed.

A replacement mirrors one exact version of the function it replaces, so it is installed only where that
function's source, hashed, is the one it was written against; elsewhere Numba's own stays. Installing puts the
replacement under the function's name in each module that calls it by that name (a module that imported the
name holds its own reference), and keeps the original as the replacement's ``__wrapped__``. Installation is
process-wide, before the first kernel compiles (``autotune.runtime.compiler``); it changes how fast Numba compiles, not
what: each replacement's test compares its results and the PTX with the original's.
"""
from __future__ import annotations

import hashlib
import inspect


def source_matches(function, known_sha256: str) -> bool:
    """True when the source of ``function`` (its original, where already replaced) hashes to ``known_sha256``."""
    original = getattr(function, "__wrapped__", function)
    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest() == known_sha256


def replace_in(modules, name: str, replacement) -> None:
    """Put ``replacement`` under ``name`` in each of ``modules``; the first module's function becomes its
    ``__wrapped__``."""
    replacement.__wrapped__ = getattr(modules[0], name)
    for module in modules:
        setattr(module, name, replacement)


def install_once(state: dict, matches, put) -> bool:
    """Run ``put`` (which installs a replacement) once per process, only where ``matches()``; whether installed."""
    if state["installed"]:
        return True
    if not matches():
        return False
    put()
    state["installed"] = True
    return True
