"""The shapes a program met without an exact database entry, recorded so that ``autotune met tune`` can tune exactly
those later (as PyTorch's TunableOp records the GEMMs a program ran).

One small file per GPU model in the cache folder (``$AUTOTUNE_CACHE_DIR`` or ``~/.cache/autotune``):
``met/<gpu-model>.jsonl``, a JSON object per line (family, dtype, shape, the family's arguments). A lookup that
falls back (a rule, the nearest entry, the default) appends its problem once per process; the file is appended
under a lock and bounded (``MAX_BYTES``: past it nothing more is recorded, said once). Reading checks every line
(a damaged or foreign line is skipped and counted, never trusted). ``AUTOTUNE_RECORD_MET=0`` turns recording off.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.device import device_slug
from ..core.problem import Problem
from ..core.registry import FamilyError
from ..core.yamlfile import read_regular

MAX_BYTES = 1 << 20
MAX_LINE = 4096
_recorded: set[tuple[str, str]] = set()
_full_said: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class MetFile:
    path: Path
    problems: list[Problem]
    skipped: int  # lines that were damaged, or of families not registered here


def met_path(device_name: str) -> Path:
    from ..core.resources import cache_dir

    return cache_dir() / "met" / f"{device_slug(device_name)}.jsonl"


def recording() -> bool:
    return os.environ.get("AUTOTUNE_RECORD_MET", "1") != "0"


def record(problem: Problem, device_name: str) -> None:
    """Append ``problem`` to the device's file, once per process; nothing where recording is off or the file is
    full. Never raises: recording must not break a lookup (a failure to write is warned about once)."""
    if not recording():
        return
    key = (device_name, problem.key)
    with _lock:
        if key in _recorded:
            return
        _recorded.add(key)
    path = met_path(device_name)
    line = json.dumps(_line(problem), separators=(",", ":")) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device there: never waited on, never written
            os.close(fd)
            _say_full(path, "it is no regular file")
            return
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            if f.tell() + len(line) > MAX_BYTES:
                _say_full(path)
                return
            f.write(line)
    except OSError as exc:
        _say_full(path, f"cannot write it ({exc.strerror or exc})")


def _say_full(path: Path, why: str | None = None) -> None:
    if str(path) in _full_said:
        return
    _full_said.add(str(path))
    from ..core.caller import TunedKernelWarning

    warnings.warn(f"not recording more shapes met without a tuned entry in {path}: "
                  f"{why or f'it holds {MAX_BYTES >> 10} KiB'} (`autotune met clear` empties it)",
                  TunedKernelWarning, stacklevel=4)


def _line(problem: Problem) -> dict:
    impl = problem.impl
    text = impl.args_text(problem.args)
    return {"family": problem.family, "dtype": problem.dtype, "shape": list(problem.shape),
            "args": {a.name: text[a.name] for a in impl.args}}


def read_met(path: Path) -> MetFile:
    """The problems recorded in ``path``, each once, in the order first met; bad lines skipped and counted."""
    problems, seen, skipped = [], set(), 0
    if not path.exists():
        return MetFile(path, [], 0)
    data = read_regular(path, MAX_BYTES + MAX_LINE)  # OSError naming the file for a FIFO, a device, a folder
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        problem = _problem(raw)
        if problem is None:
            skipped += 1
        elif problem.key not in seen:
            seen.add(problem.key)
            problems.append(problem)
    return MetFile(path, problems, skipped)


def _problem(raw: bytes) -> Problem | None:
    if len(raw) > MAX_LINE:
        return None
    try:
        item = json.loads(raw.decode("utf-8"))
        if not isinstance(item, dict) or set(item) != {"family", "dtype", "shape", "args"}:
            return None
        if not isinstance(item["shape"], list) or len(item["shape"]) > 8 or \
                not all(type(d) is int for d in item["shape"]) or not isinstance(item["args"], dict):
            return None
        return Problem(str(item["family"]), tuple(item["shape"]), str(item["dtype"]), item["args"])
    except (ValueError, TypeError, FamilyError, UnicodeDecodeError, RecursionError):
        return None


def clear(path: Path) -> bool:
    """Remove the file; whether there was one."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False


__all__ = ["record", "read_met", "met_path", "clear", "recording", "MetFile"]
