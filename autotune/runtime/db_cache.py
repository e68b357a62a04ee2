"""The parse cache of database files: a file whose content has been read and validated once is not parsed or
validated again, by this process or a later one.

A database of 10,000 entries is about 8 MB of YAML; parsing it takes seconds even with libyaml, and validating
every entry against its search space as long again. What a lookup needs is a few entries of one family, dtype
and arguments. So the first read of a file stores its validated form (``DbFile``: device, problems, entries
of families not registered, the fitted rules as their records, and the entries, pickled by kind,
``db_records.kind_of``) under the cache folder (``$AUTOTUNE_CACHE_DIR/db/``, else ``~/.cache/autotune/db/``), and a
later read unpickles only the kinds asked for (``DbFile.like``), or all of them where a command lists every entry.

The cache is keyed by everything that changes what it holds: the file's path and content (SHA-256 of its bytes,
so any change of any byte is seen, whatever the file's time stamps say), the format of this cache, Python's,
PyYAML's and NumPy's versions and the parser used, autotune's own code (version, and the size and time stamp of
each of its source files, so an edited checkout is seen), and for each family the file names, whether it is
registered in this process and, where it is, its search space and code (their sizes and time stamps). A cache
file is trusted only whole: it starts with a SHA-256 of the rest, checked before anything is unpickled, and
only the classes a cache holds may be unpickled from it; a cache file that is missing, damaged, of another
format or stale is ignored, and the file is parsed, validated and cached again. Nothing here can fail a load:
a cache that cannot be written is skipped. The process also keeps the files it has read, by path and content.

A lookup reads its file again each time, so that a file changed under a running process is seen. Hashing the
bytes of a file of a few thousand entries costs more than choosing from it, so a file this process has read is
taken as unchanged, without reading it, while its status is: the same device, inode, size, modification and
change times (``os.stat``). The change time cannot be set from user space, and any write or ``touch`` moves it.
A file whose last change was less than ``RACY_S`` before it was read is never taken so (as Git treats a racily
clean file): a time stamp of coarse granularity could hide a second change within the same tick. Such a file is
read and hashed at each lookup until its change is old enough.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ..core.atomic import write_bytes_atomic
from ..core.registry import family as family_named
from ..core.registry import BUILTIN, is_known
from ..core.rule import Rule, parse_rule
from .db_records import DbFile, Entry, kind_of, read_back

FORMAT = 3
MAGIC = b"autotune database cache\n"
DIGEST = 32  # bytes of SHA-256
MAX_CACHE_FILES = 64  # per cache folder: older ones are removed when a new one is written
MAX_MEMO = 32  # files kept in memory by this process
RACY_S = 2.0  # seconds: a file changed more recently than this before its read is hashed at every lookup

_memo: dict[str, tuple[bytes, dict, DbFile, tuple | None]] = {}  # content, families, file, status signature
_lock = threading.Lock()


def kept_file(path: Path, status: os.stat_result) -> DbFile | None:
    """The ``DbFile`` this process read from ``path`` where the file's ``status`` now says it is unchanged since
    (see the module's docstring), else None: then read it and ask ``cached_file``."""
    kept = _memo.get(_where(path))
    if kept is None or kept[3] is None or _status(status) != kept[3] or kept[1] != _families_key(kept[1]):
        return None
    return kept[2]


def cached_file(path: Path, data: bytes, build: Callable[[], DbFile], status: os.stat_result | None = None) -> DbFile:
    """The ``DbFile`` of ``path``, whose bytes are ``data``: this process's, else the cache folder's where one
    is there for the same content and code, else ``build()`` (which may raise DatabaseError), stored for next
    time. ``status``: the file's, taken before ``data`` was read, for ``kept_file``."""
    source = hashlib.sha256(data).digest()
    where = _where(path)
    signature = _signature(status)
    kept = _memo.get(where)
    if kept is not None and kept[0] == source and kept[1] == _families_key(kept[1]):
        if kept[3] != signature:
            with _lock:
                _memo[where] = (*kept[:3], signature)
        return kept[2]
    store = cache_path(where)
    db_file = _read(store, where, source, Path(path))
    if db_file is None:
        db_file = build()
        _write(store, where, source, db_file)
    with _lock:
        if len(_memo) >= MAX_MEMO:
            _memo.clear()
        _memo[where] = (source, _families_key(db_file.family_names()), db_file, signature)
    return db_file


def _status(status: os.stat_result) -> tuple:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _signature(status: os.stat_result | None) -> tuple | None:
    """What ``kept_file`` compares a file's status with, None where the file changed too recently to be taken
    as unchanged by its status later (or no status was taken)."""
    if status is None or time.time() - max(status.st_mtime, status.st_ctime) < RACY_S:
        return None
    return _status(status)


def store_written(path: Path, data: bytes, build: Callable[[], DbFile]) -> None:
    """Store the cache of the file just written at ``path`` with the bytes ``data``, as ``build()`` gives it
    (the document it was written from, checked); this process reads it from the cache too. Any failure leaves
    the file to be parsed at its next read."""
    where = _where(path)
    with _lock:
        _memo.pop(where, None)
    try:
        db_file = build()
    except Exception:  # noqa: BLE001 - the next read parses the file and reports what is wrong with it
        return
    _write(cache_path(where), where, hashlib.sha256(data).digest(), db_file)


def cache_folder() -> Path:
    from ..core.resources import cache_dir

    return cache_dir() / "db"


def cache_path(where: str) -> Path:
    """The cache file of the database file ``where`` (``_where``: one per path, a new content replacing the
    cache of the old)."""
    return cache_folder() / f"{hashlib.sha256(where.encode()).hexdigest()[:32]}.pickle"


def _where(path: Path) -> str:
    """A database file's absolute path, and the path as given (which the messages of a read name)."""
    return f"{Path(path).absolute()}\n{path}"


def forget() -> None:
    """Drop the files this process keeps (the cache folder stays)."""
    with _lock:
        _memo.clear()


# -- what the cache is keyed by ----------------------------------------------------------------------
def _key(where: str, source: bytes) -> tuple:
    import numpy
    import yaml

    from ..core.yamlfast import parser_name

    return (FORMAT, where, source, sys.version_info[:2], yaml.__version__, parser_name(), numpy.__version__,
            _code_stamp())


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """autotune's version and the size and time stamp of each of its source files (the code running in this
    process was read from them)."""
    from ..core.version import __version__

    root = Path(__file__).resolve().parent.parent
    stamps = [__version__]
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
            stat = path.stat()
            stamps.append(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


def _families_key(families: Iterable[str]) -> dict[str, Any]:
    """For each family named: None where it is not registered in this process, else what its validation depends
    on besides autotune's code (its search space file and its own module's folder: sizes and time stamps)."""
    return {name: _family_stamp(name) if is_known(name) else None for name in families}


def _family_stamp(name: str) -> tuple:
    impl = family_named(name)
    if BUILTIN.get(name) == type(impl).__module__:
        return _built_in_stamp(name)
    return _stamp_of(impl)


@functools.lru_cache(maxsize=None)
def _built_in_stamp(name: str) -> tuple:
    """A family of autotune's own: its files are autotune's code, stamped once a process as ``_code_stamp``
    stamps the rest (the code running was read from them)."""
    return _stamp_of(family_named(name))


def _stamp_of(impl) -> tuple:
    files = [Path(impl.space_file)]
    module = sys.modules.get(type(impl).__module__)
    source = getattr(module, "__file__", None)
    if source:
        source = Path(source)
        files += sorted(source.parent.glob("*.py")) if source.name in ("family.py", "__init__.py") else [source]
    stamps = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            stamps.append((str(path), None))
            continue
        stamps.append((str(path), stat.st_size, stat.st_mtime_ns))
    return (type(impl).__module__, type(impl).__qualname__, impl.source, tuple(stamps))


# -- reading and writing cache files -------------------------------------------------------------------
class CachedDbFile(DbFile):
    """A ``DbFile`` read from the cache: its entries are unpickled by kind when first asked for."""

    def __init__(self, path: Path, device: dict[str, Any], problems: list[str], foreign: list[dict[str, Any]],
                 kinds: dict[str, memoryview], families: list[str], rules: list[dict[str, Any]],
                 foreign_rules: list[dict[str, Any]]):
        self.path, self.device, self.problems, self.foreign = path, device, problems, foreign
        self._rule_records, self.foreign_rules, self._rules = rules, foreign_rules, None
        self._blobs = kinds
        self._families = families
        self._kinds = {}
        self._all: list[Entry] | None = None

    @property
    def entries(self) -> list[Entry]:
        if self._all is None:
            placed = [pair for kind in self._blobs for pair in self._placed(kind)]
            self._all = [entry for _, entry in sorted(placed, key=lambda pair: pair[0])]
        return self._all

    @property
    def rules(self) -> list[Rule]:
        """The rules, checked again from their records (a few per file): a ``Rule`` is not pickled."""
        if self._rules is None:
            self._rules = [parse_rule(record) for record in self._rule_records]
        return self._rules

    def like(self, problem) -> list[Entry]:
        kind = kind_of(problem)
        if kind not in self._blobs:
            return []
        return [entry for _, entry in self._placed(kind)]

    def family_names(self) -> list[str]:
        return list(self._families)

    def _placed(self, kind: str) -> list[tuple[int, Entry]]:
        placed = self._kinds.get(kind)
        if placed is None:
            placed = self._kinds[kind] = _unpickled(self._blobs[kind])
        return placed


def _read(store: Path, where: str, source: bytes, path: Path) -> CachedDbFile | None:
    """The cached file, or None where the cache file is missing, damaged, stale or of another format.

    A cache file: ``MAGIC``, the SHA-256 of the rest, the length of the header (8 bytes), the header (a pickled
    dict: key, families, device, problems, foreign entries, and where each kind's entries lie), then each kind's
    entries, pickled."""
    try:
        raw = memoryview(store.read_bytes())
    except OSError:
        return None
    start = len(MAGIC) + DIGEST
    if raw[:len(MAGIC)] != MAGIC or hashlib.sha256(raw[start:]).digest() != raw[len(MAGIC):start]:
        return None
    try:
        size = int.from_bytes(raw[start:start + 8], "little")
        doc = _unpickled(raw[start + 8:start + 8 + size])
        if doc["key"] != _key(where, source) or doc["families"] != _families_key(doc["families"]):
            return None
        base = start + 8 + size
        kinds = {kind: raw[base + offset:base + offset + length] for kind, (offset, length) in doc["kinds"].items()}
        return CachedDbFile(path, doc["device"], list(doc["problems"]), list(doc["foreign"]), kinds,
                            list(doc["families"]), list(doc["rules"]), list(doc["foreign_rules"]))
    except Exception:  # noqa: BLE001 - a cache that does not read as written is rebuilt, whatever it holds
        return None


def _write(store: Path, where: str, source: bytes, db_file: DbFile) -> None:
    """Store ``db_file`` in the cache (atomically: a temporary file renamed); any failure leaves no cache."""
    placed: dict[str, list[tuple[int, Entry]]] = {}
    for position, entry in enumerate(db_file.entries):
        placed.setdefault(kind_of(entry.problem), []).append((position, entry))
    try:
        blobs, kinds, offset = [], {}, 0
        for kind, pairs in placed.items():
            blobs.append(pickle.dumps(pairs, protocol=pickle.HIGHEST_PROTOCOL))
            kinds[kind] = (offset, len(blobs[-1]))
            offset += len(blobs[-1])
        header = pickle.dumps({"key": _key(where, source), "families": _families_key(db_file.family_names()),
                               "device": db_file.device, "problems": db_file.problems, "foreign": db_file.foreign,
                               "rules": [read_back(r.record) for r in db_file.rules], "foreign_rules": db_file.foreign_rules,
                               "kinds": kinds}, protocol=pickle.HIGHEST_PROTOCOL)
        body = b"".join([len(header).to_bytes(8, "little"), header, *blobs])
        write_bytes_atomic(store, MAGIC + hashlib.sha256(body).digest() + body, parents=True)
        _prune(store.parent)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError):
        return  # the cache is an optimisation: a load never fails for it


def _prune(folder: Path) -> None:
    """Keep the newest ``MAX_CACHE_FILES`` cache files of the folder."""
    with contextlib.suppress(OSError):
        files = [p for p in folder.glob("*.pickle")]
        if len(files) <= MAX_CACHE_FILES:
            return
        files.sort(key=lambda p: p.stat().st_mtime_ns)
        for old in files[:-MAX_CACHE_FILES]:
            with contextlib.suppress(OSError):
                old.unlink()


#: the classes a cache file may hold; unpickling anything else is refused
ALLOWED = {("autotune.runtime.db_records", "Entry"), ("autotune.core.problem", "Problem"), ("datetime", "date"),
           ("datetime", "datetime"), ("datetime", "time"), ("datetime", "timedelta"), ("datetime", "timezone")}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"a database cache holds no {module}.{name}")
        return super().find_class(module, name)


def _unpickled(blob: bytes | memoryview) -> Any:
    return _Unpickler(io.BytesIO(blob)).load()
