"""``get_best_kernel``: the tuned variant for this GPU and shape, from the database, with stated fallbacks.

Lookup order, each fallback announced with a warning that says what was used:
1. the device's own file (``<folder>/<gpu-model-slug>.yaml``): the exact entry, else the nearest shape of the
   same kernel, dtype and layout/op/axis. Distance is the sum over dimensions of |log2(a) - log2(b)|, so
   4096 is as far from 2048 as from 8192; ties go to the entry listed first;
2. a file of another GPU model of the same compute capability, the same way;
3. a default configuration for the shape.
The folder is the ``db`` argument, else ``$AUTOTUNE_DB``, else ``./tuned_db``, else the database shipped with
the package. Kernels are cached per (problem, device, folder) in this process; compiled code is cached on disk
by Numba, so a second process does not compile again.
"""
from __future__ import annotations

import math
import threading
import warnings
from pathlib import Path
from typing import Any

from .build import build_kernel
from .db import Entry, db_dir, load_file, load_folder
from .device import current_device, device_slug
from .problem import Problem, shape_text
from .resources import resource_dir


class TunedKernelWarning(UserWarning):
    """get_best_kernel used something other than an exact entry for this GPU."""


_cache: dict[tuple, Any] = {}
_lock = threading.Lock()


def get_best_kernel(kind: str, shape, dtype: str = "float32", *, device: str | None = None,
                    db: str | Path | None = None, **family_args):
    """The callable kernel object tuned for ``shape`` on this GPU (or the GPU model named ``device``).

    ``get_best_kernel("matmul", (4096, 4096, 4096))(A, B)``;
    ``get_best_kernel("reduce", (1 << 24,), op="max")(x)``; ``get_best_kernel("reduce", (M, N), axis=1)``.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    problem = Problem(kind, shape, dtype, family_args)
    folder = database_folder(db)
    key = (problem.key, device, str(folder))
    with _lock:
        if key not in _cache:
            params, note = choose(problem, folder, device)
            if note:
                warnings.warn(note, TunedKernelWarning, stacklevel=2)
            _cache[key] = build_kernel(kind, params, dtype, **problem.family)
        return _cache[key]


def database_folder(db: str | Path | None = None) -> Path:
    folder = db_dir(db)
    if db is None and not folder.is_dir():
        try:
            return resource_dir("tuned_db")
        except FileNotFoundError:
            return folder
    return folder


def choose(problem: Problem, folder: Path, device: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The parameters for ``problem`` and a sentence on the fallback used (None for an exact entry)."""
    info = current_device() if device is None else None
    name = device or info.name
    own = folder / f"{device_slug(name)}.yaml"
    files = [load_file(own)] if own.exists() else []
    if not files and info is not None and folder.is_dir():
        files = [f for f in load_folder(folder) if str(f.device.get("cc")) == f"{info.cc[0]}.{info.cc[1]}"]
    for db_file in files:
        for problem_text in db_file.problems:
            warnings.warn(f"skipped a bad database entry: {problem_text}", TunedKernelWarning, stacklevel=3)
    other_model = bool(files) and files[0].path != own
    for db_file in files:
        entry, distance = nearest(problem, db_file.entries)
        if entry is None:
            continue
        if distance == 0 and not other_model:
            return entry.params, None
        where = f"{db_file.path} ({db_file.device.get('name')}, same compute capability)" if other_model \
            else str(db_file.path)
        what = "the entry" if distance == 0 else f"the nearest entry, shape {shape_text(entry.problem.shape)}"
        return entry.params, f"no tuned entry for {problem.key} on {name}; using {what} from {where}"
    return default_params(problem), (f"no tuned entry for {problem.key} on {name} in {folder}; using the default "
                                     f"configuration (run `autotune {problem.kind}` to tune it)")


def nearest(problem: Problem, entries: list[Entry]) -> tuple[Entry | None, float]:
    ranked = by_distance(problem, entries)
    return (ranked[0][1], ranked[0][0]) if ranked else (None, math.inf)


def by_distance(problem: Problem, entries: list[Entry]) -> list[tuple[float, Entry]]:
    """The entries of the same kind, dtype and family, nearest shape first (distance: sum of |log2| ratios)."""
    found = []
    for entry in entries:
        other = entry.problem
        if (other.kind, other.dtype, dict(other.family)) != (problem.kind, problem.dtype, dict(problem.family)):
            continue
        if len(other.shape) != len(problem.shape):
            continue
        found.append((sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(problem.shape, other.shape)), entry))
    return sorted(found, key=lambda pair: pair[0])


def tuning_starts(path: Path, problem: Problem, neighbours: int = 3) -> tuple[dict[str, Any] | None,
                                                                              list[dict[str, Any]]]:
    """What a tuning run measures first, from the database file at ``path``: the entry for ``problem`` (the
    incumbent, None if there is none) and the winners of the ``neighbours`` nearest other shapes of its kind,
    dtype and family. A neighbour is often close to this shape's best: the 1024^3 winner, clamped at the edges,
    beat the 1000^3 entry by 16% on the H100 (benchmarks/NOTES.md item 20)."""
    if not path.exists():
        return None, []
    ranked = by_distance(problem, load_file(path).entries)
    incumbent = next((e.params for distance, e in ranked if distance == 0), None)
    return incumbent, [e.params for distance, e in ranked if distance > 0][:neighbours]


def default_params(problem: Problem) -> dict[str, Any]:
    """A reasonable untuned configuration: the search space's defaults, adapted to dtype and size."""
    params: dict[str, Any] = {}
    if problem.dtype == "float64":
        params["VEC"] = 2
    if problem.kind == "matmul" and max(problem.shape[:2]) < 1024:
        params.update(BM=64, BN=64, BK=16, TM=4, TN=4)
    return params


__all__ = ["get_best_kernel", "TunedKernelWarning", "choose", "nearest", "default_params"]
