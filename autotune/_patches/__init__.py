"""Replacements of numba-cuda internals: faster passes of its compiler, and three fixes of its CUDA simulator.

The compile passes and the simulator's shared arrays belong upstream (``docs/upstream/`` holds a report for each:
the problem, the measurement, the patch; its barrier report proposes a thread-based form of ``simulator_blocks``,
which runs blocks as greenlets). Until numba-cuda takes them they live here, fenced:

- Each module mirrors one exact version of what it replaces and is installed only where that source hashes to the
  one it was written against (``guard.py``); with any other version Numba's own stays, and a ``PatchWarning``
  says so once per process and replacement, since the speed-up (or the simulator fix) is then gone.
- ``install`` is the one install point: the compile path calls it before the first kernel is loaded
  (``runtime/compiler.py``); compile passes on the GPU path, simulator fixes in the simulator.
- ``AUTOTUNE_NUMBA_PATCH`` chooses the compile passes: unset or ``1`` all, ``0`` none, or a comma-separated list
  (``lowering``, ``ssa``, ``liveness``, ``scopes``, ``typing``, ``dominators``), so each can be measured alone.
- ``report`` says, for each, whether it is active here and why not; ``active`` names those a compile in this
  environment uses (written into each database entry's ``versions``, and printed by ``autotune --version``).

Installation is process-wide: it changes how fast Numba compiles every kernel of the process (autotune's or not),
never what it makes; each replacement's test compares its results and the PTX with the original's.
"""
from __future__ import annotations

import os
import warnings
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

#: compile passes: name -> module (each has ``install()`` and ``original_source_matches()``)
COMPILE_PASSES = {"lowering": "numba_lowering", "ssa": "numba_ssa", "liveness": "numba_liveness",
                  "scopes": "numba_scopes", "typing": "numba_typing", "dominators": "numba_dominators"}
#: fixes of the CUDA simulator: name -> module
SIMULATOR_FIXES = {"simulator_shared": "simulator_shared", "simulator_blocks": "simulator_blocks",
                   "simulator_casts": "simulator_casts"}
#: the package and version whose source each replacement mirrors
WRITTEN_FOR = {"lowering": ("numba-cuda", "0.30.4"), "ssa": ("numba-cuda", "0.30.4"),
               "liveness": ("numba-cuda", "0.30.4"), "scopes": ("numba-cuda", "0.30.4"), "typing": ("numba", "0.68.1"),
               "dominators": ("numba-cuda", "0.30.4"), "simulator_shared": ("numba-cuda", "0.30.4"),
               "simulator_blocks": ("numba-cuda", "0.30.4"), "simulator_casts": ("numba", "0.68.1")}

_warned: set[str] = set()


class PatchWarning(UserWarning):
    """A replacement of a numba-cuda internal does not apply to the installed version: Numba's own is used."""


def module(name: str):
    """The module of the replacement called ``name``."""
    return import_module(f".{({**COMPILE_PASSES, **SIMULATOR_FIXES})[name]}", __name__)


def passes_wanted() -> tuple[str, ...]:
    """The compile passes ``AUTOTUNE_NUMBA_PATCH`` asks for (ValueError naming an unknown one)."""
    value = os.environ.get("AUTOTUNE_NUMBA_PATCH", "1").strip()
    if value == "1":
        return tuple(COMPILE_PASSES)
    if value == "0":
        return ()
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in COMPILE_PASSES]
    if unknown:
        raise ValueError(f"AUTOTUNE_NUMBA_PATCH={value!r}: unknown {', '.join(unknown)}; "
                         f"use 1, 0 or some of {', '.join(COMPILE_PASSES)}")
    return tuple(name for name in COMPILE_PASSES if name in names)  # installed in one order, however listed


def install(simulator: bool) -> dict[str, bool]:
    """Install what applies to this backend (simulator fixes, or the compile passes wanted), once per process;
    whether each was installed. A replacement whose source guard refuses is announced once (``PatchWarning``)."""
    names = tuple(SIMULATOR_FIXES) if simulator else passes_wanted()
    done = {}
    for name in names:
        done[name] = bool(module(name).install())
        if not done[name]:
            _warn_once(name)
    return done


def report(simulator: bool = False) -> list[tuple[str, str]]:
    """(name, "active" or why not) for every replacement, for this backend and environment, without installing
    anything."""
    wanted = () if simulator else passes_wanted()
    rows = []
    for name in COMPILE_PASSES:
        if simulator:
            rows.append((name, "not used (the simulator does not compile)"))
        elif name not in wanted:
            rows.append((name, f"off (AUTOTUNE_NUMBA_PATCH={os.environ.get('AUTOTUNE_NUMBA_PATCH')})"))
        else:
            rows.append((name, _applies(name)))
    for name in SIMULATOR_FIXES:
        rows.append((name, _applies(name) if simulator else "only in the simulator"))
    return rows


def active(simulator: bool = False) -> list[str]:
    """The replacements a compile in this environment uses."""
    return [name for name, state in report(simulator) if state == "active"]


def _applies(name: str) -> str:
    if module(name).original_source_matches():
        return "active"
    package, written = WRITTEN_FOR[name]
    return f"inactive: {package} {_installed(package)} is not {written}, whose source it mirrors"


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "(not installed)"


def _warn_once(name: str) -> None:
    if name in _warned:
        return
    _warned.add(name)
    package, written = WRITTEN_FOR[name]
    what = ("compiles run at numba-cuda's own speed (AUTOTUNE_NUMBA_PATCH=0 asks for none of these replacements)"
            if name in COMPILE_PASSES else "the simulator runs as numba-cuda made it")
    warnings.warn(f"autotune's replacement {name!r} does not apply to {package} {_installed(package)} (written for "
                  f"{written}): {what}", PatchWarning, stacklevel=3)


__all__ = ["install", "report", "active", "passes_wanted", "PatchWarning", "WRITTEN_FOR", "COMPILE_PASSES",
           "SIMULATOR_FIXES"]
