"""The one place that touches numba's scalar types as the simulator calls them: ``float32(x)`` without an import.

In Numba's CUDA simulator a kernel's ``float32(x)`` (or ``int32(x)``, ``uint64(x)``, ...) is a call of numba's
``Type.__call__``, which runs ``from numba.core.typing import signature`` on every call before it casts: most of a
cast's 5 microseconds, and a simulated matmul makes hundreds of thousands of them. The replacement is the same
method with that import done once. ``Type.__call__`` also builds signatures (``float32(float32, float32)``); that
path is the same too.

Installed as ``autotune._patches.guard`` describes, over numba 0.68.1's method only, whenever a generated kernel is
loaded in the simulator; it changes nothing on a GPU.
"""
from __future__ import annotations

from .guard import install_once, replace_in, source_matches

KNOWN_SOURCE_SHA256 = "66b4a100a28208724e826e4d9fa6e4f66254dec8f9463a628d39eea7f730570f"

_state = {"installed": False}


def _type_class():
    from numba.core.types.abstract import Type

    return Type


def original_source_matches() -> bool:
    return source_matches(_type_class().__call__, KNOWN_SOURCE_SHA256)


def install() -> bool:
    """Put the import-free ``__call__`` in place (once per process); False where the guard says no."""
    from numba.core.typing import signature

    type_class = _type_class()

    def __call__(self, *args):
        """numba's ``Type.__call__``: a cast of one non-type value, else a signature returning this type."""
        if len(args) == 1 and not isinstance(args[0], type_class):
            return self.cast_python_value(args[0])
        return signature(self, *args)

    return install_once(_state, original_source_matches, lambda: replace_in((type_class,), "__call__", __call__))
