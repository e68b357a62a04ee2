"""Files replaced whole: written to a temporary file beside the target, then renamed over it.

A reader sees the old file or the new one, never one half written: ``os.replace`` swaps the name atomically within
one file system, which is why the temporary file is made in the target's own folder (never in /tmp). Where the write
fails (a full disk, an error or an interrupt while writing, a refused rename) the temporary file is removed and the
old file stays as it was. The temporary file is named ``.<name>.<random>.tmp``: hidden, and with a suffix no reader
of autotune's folders takes for one of its files (``*.code``, ``*.pickle``, ``*.yaml``, ``k_*.py``).

What differs between the files autotune writes is the caller's to say, by name:

- ``durable``: flush and fsync the data before the rename, so that a crash of the machine cannot leave the name on
  an empty file. Tuning databases and results ask for it (they are measurements that took hours); caches do not
  (a lost cache file is made again).
- ``keep_mode``: the file keeps the mode it had, and a new one gets the usual mode of new files (0666 less the
  umask), rather than the temporary file's 0600. Files people share or check in ask for it; cache files stay
  private to their user, as the temporary file is made.
- ``parents``: make the missing folders above the file first (caches, whose folders are made on first use).
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

TEMPORARY_SUFFIX = ".tmp"
#: At most this much of the target's name goes into the temporary file's, so that the longest name a folder takes
#: (255 bytes) still leaves room for the dot, mkstemp's random part and the suffix.
NAME_IN_TEMPORARY = 200


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = False, keep_mode: bool = False,
                       parents: bool = False) -> None:
    """Replace the file at ``path`` with ``data`` atomically (module docstring: ``durable``, ``keep_mode``,
    ``parents``). OSError where it cannot be written; the old file is then as it was, and no temporary file
    is left."""
    _replace(Path(path), lambda f: f.write(data), "wb", None, durable, keep_mode, parents)


def write_text_atomic(path: str | os.PathLike, text: str, *, durable: bool = False, keep_mode: bool = False,
                      parents: bool = False, encoding: str = "utf-8") -> None:
    """Replace the file at ``path`` with ``text`` atomically, encoded in ``encoding`` (UTF-8: what every reader of
    the project's files decodes, whatever the locale); see ``write_bytes_atomic``. An error while encoding leaves
    the old file as it was too."""
    _replace(Path(path), lambda f: f.write(text), "w", encoding, durable, keep_mode, parents)


def _replace(path: Path, write: Callable[[IO], object], mode: str, encoding: str | None, durable: bool,
             keep_mode: bool, parents: bool) -> None:
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    permissions = mode_to_keep(path) if keep_mode else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{_shortened(path.name)}.", suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            write(f)
            f.flush()
            if permissions is not None:
                os.fchmod(f.fileno(), permissions)
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def mode_to_keep(path: Path) -> int:
    """The permission bits a rewrite of ``path`` keeps: the file's own, or for a file not there yet the mode ``open``
    gives a new file (0666 less the umask, which is read by setting it and setting it back)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _shortened(name: str) -> str:
    """The first ``NAME_IN_TEMPORARY`` bytes of ``name`` in the file system's encoding, cut at a character: the
    temporary's name stays within the 255 bytes a name may have, whatever the characters."""
    return os.fsencode(name)[:NAME_IN_TEMPORARY].decode(sys.getfilesystemencoding(), errors="ignore")
