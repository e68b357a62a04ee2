"""Warnings attributed to the caller's line: the first frame outside autotune and outside the registered
families' own code.

A warning that names a line of autotune (``autotune/runtime/calls.py:128``) tells a user nothing about which of
their calls it is about, and Python's default filter shows a warning once per line, so every call through that
line but the first would go unannounced. ``warn`` walks the stack to the first frame that is the user's: not in
the ``autotune`` package, and not in the folder of a registered family's code (a family's NumPy-style function
calls the lookup on the user's behalf).
"""
from __future__ import annotations

import inspect
import os
import warnings
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep
_family_folders: set[str] = set()  # the folders of registered families' code (registry.py adds them)


def note_family(family: object) -> None:
    """Count the folder of ``family``'s class among the family code whose frames are not the caller's."""
    try:
        _family_folders.add(str(Path(inspect.getfile(type(family))).resolve().parent) + os.sep)
    except (TypeError, OSError):  # a family class defined interactively
        pass


def _ours(filename: str, folders: list[str]) -> bool:
    if filename.startswith("<"):  # frozen importlib frames and the like
        return filename.startswith("<frozen")
    path = str(Path(filename).resolve())
    return path.startswith(_PACKAGE) or any(path.startswith(folder) for folder in folders)


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by the function that calls this one, name the
    first frame outside autotune and the registered families (1: that function itself)."""
    folders = list(_family_folders)
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # the function that will call warnings.warn
    level = 1
    while frame is not None and _ours(frame.f_code.co_filename, folders):
        frame = frame.f_back
        level += 1
    return level


class TunedKernelWarning(UserWarning):
    """get_best_kernel used something other than an exact entry for this GPU, or skipped part of the database."""


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` at the caller's line (see the module docstring)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())


__all__ = ["warn", "caller_stacklevel", "note_family", "TunedKernelWarning"]
