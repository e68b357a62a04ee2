"""Compiled kernels kept on disk, so that a later process launches them without compiling: the code cache.

A kernel compiled once (by a tuning run, ``autotune warm`` or an earlier call) is stored here as its cubin with
what launching it needs, its mangled entry name; a later process reads it, the driver loads it and it launches
through the same packed launch as any other (autotune/runtime/driver_kernels.py), with no Numba type inference,
lowering or dispatcher. Two stores hold such code, read in this order:

- the local cache, ``<cache folder>/code`` (``$AUTOTUNE_CACHE_DIR``, else ``~/.cache/autotune``), filled by this
  machine's compiles;
- the shipped store, ``tuned_db/code`` beside the database that comes with the package, which
  ``autotune warm --cc X.Y --ship`` fills with the cubins of the shipped entries, so that a fresh install's first
  call of a shipped entry loads instead of compiling.

A piece of code is filed under a ``CodeKey``: the SHA-256 of the source text of the module that defines the
kernel, the kernel's name in it, its launch argument types (Numba's names), the GPU architecture (``sm_90a``) and
the toolchain. In the local cache the toolchain is everything that changes the code: the versions of Numba,
numba-cuda, NVVM, nvJitLink and cuda-core, autotune's version and a hash of its kernel library
(``autotune/kernels/*.py``, which generated modules import), and which of autotune's replacements of Numba passes
were installed; and whether Numba optimises (``NUMBA_OPT``). Shipped code is a finished product that the user's
compilers never touch, so its toolchain is what fixes its meaning and its interface: Numba's and numba-cuda's
versions (the lowering and the layout of the arguments), the kernel library and the optimisation; the compilers
it was made with are recorded in it. Numba's debug mode turns the code cache off. Code for another
architecture or toolchain has another key, so it is never found.

A file is one header line (JSON: the key, what the code is, its size and SHA-256) and the code compressed with
zlib. A file is written to a temporary name and renamed into place, so a reader sees all of it or nothing. One
that cannot be read, is too large, holds another key or whose code does not match its hash is ignored (and, in
the local cache, removed), never trusted: the kernel is compiled again.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import struct
import warnings
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.atomic import write_bytes_atomic

ENV = "AUTOTUNE_CODE_CACHE"
FORMAT = 1
SUFFIX = ".code"
MAX_HEADER_BYTES = 64 << 10
MAX_CODE_BYTES = 64 << 20  # a cubin of the largest generated kernels is under 100 KB
ELF_MAGIC = b"\x7fELF"
EM_CUDA, SHT_SYMTAB, STT_FUNC, STO_CUDA_ENTRY = 190, 2, 2, 0x10
KINDS = ("cubin",)
COMPILER_DISTRIBUTIONS = {  # the wheels that bring each compiler library, newest naming first
    "nvvm": ("nvidia-nvvm", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc"),
    "nvjitlink": ("nvidia-nvjitlink", "nvidia-nvjitlink-cu12"),
}


class CodeCacheWarning(UserWarning):
    """Compiled code could not be stored (the kernel still runs; a later process compiles it again)."""


@dataclass(frozen=True)
class CodeKey:
    """What a piece of compiled code is for; see the module docstring."""

    source: str  # SHA-256 (hex) of the text of the module that defines the kernel
    function: str  # the kernel's Python name in that module
    argtypes: tuple[str, ...]  # Numba's names of its launch argument types: 'array(float32, 1d, C)', 'int64'
    arch: str  # the architecture compiled for: 'sm_90a'
    toolchain: tuple[tuple[str, str], ...]  # (component, version) pairs

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()

    def as_dict(self) -> dict:
        d = asdict(self)
        d["argtypes"] = list(self.argtypes)
        d["toolchain"] = [list(pair) for pair in self.toolchain]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CodeKey":
        return cls(source=str(d["source"]), function=str(d["function"]), argtypes=tuple(map(str, d["argtypes"])),
                   arch=str(d["arch"]), toolchain=tuple((str(a), str(b)) for a, b in d["toolchain"]))


@dataclass(frozen=True)
class CompiledCode:
    """A kernel's code as the driver loads it: ``kind`` 'cubin', the entry's mangled ``name`` in it, and the
    compilers that made it (recorded, not part of a shipped key)."""

    key: CodeKey
    kind: str
    name: str
    code: bytes
    made_with: tuple[tuple[str, str], ...] = ()


# -- where ------------------------------------------------------------------------------------------
def local_root() -> Path:
    from ..core.resources import cache_dir

    return cache_dir() / "code"


def setting() -> str:
    """``AUTOTUNE_CODE_CACHE``: '1' (default: both stores), 'local' (this machine's cache only, shipped code not
    used) or '0' (no code cache: every kernel launches through Numba, compiled or from Numba's own disk cache).
    Numba's debug mode (``NUMBA_CUDA_DEBUGINFO=1``: kernels with debug info and error checks) is '0' too."""
    value = os.environ.get(ENV, "1").strip().lower() or "1"
    if value not in ("1", "0", "local"):
        raise ValueError(f"{ENV}={value!r}: use 1 (default), local or 0")
    from .numba_kernels import jit_defaults

    return "0" if jit_defaults()[1] else value


def shipped_root() -> Path | None:
    """``code/`` of the database shipped with the package; None where there is none or ``AUTOTUNE_CODE_CACHE``
    is 'local'."""
    from ..core.resources import resource_dir

    if setting() != "1":
        return None
    try:
        return resource_dir("tuned_db") / "code"
    except FileNotFoundError:
        return None


def path_of(root: Path, key: CodeKey) -> Path:
    """One folder per source module, one file per key: ``<root>/<source>/<function>-<key digest>.code``."""
    return root / key.source[:32] / f"{key.function}-{key.digest[:32]}{SUFFIX}"


def functions_with_code(root: Path | None, source: str) -> set[str]:
    """The kernel names of the module with this source hash that have code in ``root`` (for any key)."""
    if root is None:
        return set()
    try:
        names = os.listdir(root / source[:32])
    except OSError:
        return set()
    return {n.rsplit("-", 1)[0] for n in names if n.endswith(SUFFIX) and "-" in n}


# -- writing ----------------------------------------------------------------------------------------
def encode(compiled: CompiledCode) -> bytes:
    """The file's bytes: a JSON header line, then the code compressed."""
    if compiled.kind not in KINDS:
        raise ValueError(f"unknown kind of code {compiled.kind!r}")
    header = {"format": FORMAT, "key": compiled.key.as_dict(), "kind": compiled.kind, "name": compiled.name,
              "size": len(compiled.code), "sha256": hashlib.sha256(compiled.code).hexdigest(),
              "made_with": [list(pair) for pair in compiled.made_with]}
    return json.dumps(header, sort_keys=True).encode() + b"\n" + zlib.compress(compiled.code, 6)


def store(root: Path, compiled: CompiledCode) -> Path | None:
    """Write ``compiled`` under its key, atomically; the path, or None (announced once) where it cannot be
    written."""
    path = path_of(root, compiled.key)
    try:
        write_bytes_atomic(path, encode(compiled), parents=True)  # a cache file: private, rebuilt if lost
    except OSError as exc:
        _warn_once(f"compiled kernels cannot be stored in {root} ({exc.strerror or exc}); later processes will "
                   f"compile them again (set AUTOTUNE_CACHE_DIR to a writable folder)")
        return None
    return path


# -- reading ----------------------------------------------------------------------------------------
class DamagedCode(ValueError):
    """A code file that cannot be trusted; the message says why."""


def decode(data: bytes, key: CodeKey) -> CompiledCode:
    """The code a file holds for ``key``; DamagedCode where anything about it is wrong."""
    line, newline, packed = data.partition(b"\n")
    if not newline or len(line) > MAX_HEADER_BYTES:
        raise DamagedCode("no header line")
    try:
        header = json.loads(line)
        stored_key = CodeKey.from_dict(header["key"])
        kind, name, size, digest = header["kind"], header["name"], int(header["size"]), header["sha256"]
        made_with = tuple((str(a), str(b)) for a, b in header.get("made_with", ()))
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedCode(f"unreadable header ({exc})") from None
    if header.get("format") != FORMAT:
        raise DamagedCode(f"format {header.get('format')!r}, not {FORMAT}")
    if stored_key != key:
        raise DamagedCode("it holds code for another key")
    if kind not in KINDS or not isinstance(name, str) or not name:
        raise DamagedCode(f"kind {kind!r} or entry name {name!r} unknown")
    if not 0 < size <= MAX_CODE_BYTES:
        raise DamagedCode(f"size {size} out of bounds")
    try:
        code = zlib.decompressobj().decompress(packed, size + 1)
    except zlib.error as exc:
        raise DamagedCode(f"compressed code damaged ({exc})") from None
    if len(code) != size or hashlib.sha256(code).hexdigest() != digest:
        raise DamagedCode("the code does not match its hash")
    sm, entries = cubin_facts(code)
    if name not in entries:
        raise DamagedCode(f"the cubin has no kernel entry {name!r}")
    wanted = arch_number(key.arch)
    if sm is not None and wanted is not None and sm != wanted:
        raise DamagedCode(f"the cubin is for sm_{sm}, not {key.arch}")
    return CompiledCode(stored_key, kind, name, code, made_with)


def cubin_facts(code: bytes) -> tuple[int | None, set[str]]:
    """The SM number a cubin is for (None where its ELF ABI version is not one known here) and the names of its
    kernel entries (function symbols marked STO_CUDA_ENTRY); DamagedCode where it is no CUDA ELF file."""
    try:
        if code[:4] != ELF_MAGIC or code[4] != 2 or code[5] != 1:  # 64-bit, little-endian
            raise DamagedCode("no 64-bit little-endian ELF file")
        machine, = struct.unpack_from("<H", code, 18)
        flags, = struct.unpack_from("<I", code, 48)
        shoff, = struct.unpack_from("<Q", code, 40)
        shentsize, shnum = struct.unpack_from("<HH", code, 58)
        if machine != EM_CUDA or shentsize != 64 or shnum > 65535:
            raise DamagedCode("no CUDA ELF file")
        sections = [struct.unpack_from("<IIQQQQIIQQ", code, shoff + i * shentsize) for i in range(shnum)]
        entries = set()
        for section in sections:
            if section[1] != SHT_SYMTAB:
                continue
            strings = sections[section[6]]
            offset, size = section[4], section[5]
            for start in range(offset, offset + size - size % 24, 24):
                name_at, info, other = struct.unpack_from("<IBB", code, start)
                if info & 0xF == STT_FUNC and other & STO_CUDA_ENTRY:
                    at = strings[4] + name_at
                    end = code.index(b"\0", at, strings[4] + strings[5])
                    entries.add(code[at:end].decode())
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise DamagedCode(f"unreadable cubin ({exc})") from None
    abi = code[8]
    sm = (flags >> 8) & 0xFF if abi == 8 else flags & 0xFF if abi == 7 else None
    return sm, entries


def arch_number(arch: str) -> int | None:
    """90 for 'sm_90a' and 'sm_90'; None for what is no such name."""
    match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return int(match.group(1)) if match else None


def load(root: Path | None, key: CodeKey, *, discard_damaged: bool = False) -> CompiledCode | None:
    """The code stored for ``key`` in ``root``; None where there is none or it is damaged (then removed when
    ``discard_damaged``: the caller compiles it again and stores it anew)."""
    if root is None:
        return None
    path = path_of(root, key)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_HEADER_BYTES + MAX_CODE_BYTES + 1)
    except OSError:
        return None
    try:
        if len(data) > MAX_HEADER_BYTES + MAX_CODE_BYTES:
            raise DamagedCode("file too large")
        return decode(data, key)
    except DamagedCode:
        if discard_damaged:
            with contextlib.suppress(OSError):
                path.unlink()
        return None


def stored(root: Path) -> dict[Path, CodeKey | None]:
    """Every code file under ``root`` with the key its header names (None where that cannot be read)."""
    found: dict[Path, CodeKey | None] = {}
    for path in sorted(root.glob(f"*/*{SUFFIX}")):
        try:
            with open(path, "rb") as f:
                line = f.readline(MAX_HEADER_BYTES + 1)
            found[path] = CodeKey.from_dict(json.loads(line)["key"])
        except (OSError, ValueError, KeyError, TypeError):
            found[path] = None
    return found


def discard(root: Path, key: CodeKey) -> None:
    """Remove the code stored for ``key`` (one the driver refused to load)."""
    with contextlib.suppress(OSError):
        path_of(root, key).unlink()


# -- toolchains -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def local_toolchain() -> tuple[tuple[str, str], ...] | None:
    """Everything besides source, types and architecture that changes compiled code, as (component, version)
    pairs; None where a compiler library cannot be identified (then nothing is cached locally)."""
    from .. import _patches

    base = shipped_toolchain()
    compilers = compiler_versions()
    if compilers is None:
        return None
    from ..core.version import __version__

    return (*base, ("autotune", __version__), *compilers,
            ("cuda-core", _distribution_version("cuda-core") or "?"),
            ("numba-passes", ",".join(_patches.active()) or "none"))


@functools.lru_cache(maxsize=1)
def shipped_toolchain() -> tuple[tuple[str, str], ...]:
    """What shipped code is keyed by besides source, types and architecture (see the module docstring)."""
    import numba

    from .numba_kernels import jit_defaults

    optimise, _ = jit_defaults()
    return (("numba", numba.__version__), ("numba-cuda", _numba_cuda_version()),
            ("autotune-kernels", kernel_library_hash()), ("optimise", "yes" if optimise else "no"))


@functools.lru_cache(maxsize=1)
def compiler_versions() -> tuple[tuple[str, str], ...] | None:
    """NVVM's and nvJitLink's versions: of the wheels that bring them, else of the libraries themselves (path,
    size and modification time of the file the loader finds); None where one cannot be found."""
    found = []
    for component, distributions in COMPILER_DISTRIBUTIONS.items():
        version = next((v for v in map(_distribution_version, distributions) if v), None)
        if version is None:
            version = _library_identity({"nvvm": "nvvm", "nvjitlink": "nvJitLink"}[component])
        if version is None:
            return None
        found.append((component, version))
    return tuple(found)


def made_with() -> tuple[tuple[str, str], ...]:
    """The compilers of this machine, as recorded in the code it makes."""
    return compiler_versions() or ()


def kernel_library_hash() -> str:
    """SHA-256 (16 hex digits) of autotune's kernel library (``autotune/kernels/*.py``), which generated modules
    and the fixed kernels import their intrinsics from."""
    from ..core.resources import templates_dir

    return _files_hash(tuple(sorted(templates_dir().parent.glob("*.py"))))


@functools.lru_cache(maxsize=8)
def _files_hash(paths: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _numba_cuda_version() -> str:
    try:
        import numba_cuda

        return str(numba_cuda.__version__)
    except (ImportError, AttributeError):
        return _distribution_version("numba-cuda") or "?"


def _distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _library_identity(name: str) -> str | None:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = os.path.realpath(load_nvidia_dynamic_lib(name).abs_path)
        st = os.stat(path)
    except Exception:
        return None
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


# -- helpers ----------------------------------------------------------------------------------------
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CodeCacheWarning, stacklevel=3)


def source_hash(text: str) -> str:
    """The SHA-256 of a module's source text (what code is keyed by)."""
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def file_source_hash(path: str) -> str | None:
    """``source_hash`` of a module file (a fixed kernel's); None where it cannot be read."""
    try:
        return source_hash(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
