"""Turn rendered source into a loaded module, and report what the real compiler makes of a kernel.

Generated source is written to a file named by the hash of its content and imported from there, which is
what lets Numba's on-disk cache (``cache=True``) work: a second process finds the compiled kernel instead of
compiling again. Files are never rewritten in place.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

DEFAULT_CC = (9, 0)


def cache_dir() -> Path:
    root = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root)


def source_path(source: str) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return cache_dir() / "kernels" / f"k_{digest}.py"


def _install_patches() -> None:
    """numba-cuda's replacements (autotune/_patches), before the first kernel is loaded: the compile passes on the
    GPU path, the simulator's fixes in the simulator."""
    from .. import _patches
    from ..core import backend

    _patches.install(backend.simulator())


def load_source(source: str) -> ModuleType:
    """Import generated source as a module (one per distinct source text, shared across processes)."""
    path = source_path(source)
    name = f"autotune_generated_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    _install_patches()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


@dataclass(frozen=True)
class ResourceReport:
    """What ptxas reports for one kernel on one architecture."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    shared_bytes: int
    cc: tuple[int, int]

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    @classmethod
    def from_dispatcher(cls, dispatcher, cc: tuple[int, int]) -> "ResourceReport":
        """The report of a kernel compiled on the GPU machine (one compile, no second pass through ptxas).

        The driver gives local memory per thread (stack frame plus spills) rather than the two apart; it is
        reported as both, which errs towards flagging a spill."""
        one = lambda d: next(iter(d.values())) if isinstance(d, dict) else d  # noqa: E731
        local = int(one(dispatcher.get_local_mem_per_thread()))
        return cls(registers=int(one(dispatcher.get_regs_per_thread())), spill_stores=local, spill_loads=local,
                   stack_bytes=local, shared_bytes=int(one(dispatcher.get_shared_mem_per_block())), cc=cc)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        return d


def _number(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    if not match:
        raise RuntimeError(f"compiler report lacks {pattern!r}:\n{text}")
    return int(match.group(1))


def target(cc: tuple[int, int]) -> tuple:
    """The compute capability compiled for ahead of time: ``cc`` with the architecture-specific suffix "a" from
    9.0 on, as numba-cuda compiles on such a GPU (sm_90a), so instructions only it has (wgmma) compile too."""
    return (*cc[:2], "a") if tuple(cc[:2]) >= (9, 0) else tuple(cc[:2])


def arch(cc: tuple[int, int]) -> str:
    """The linker's name of ``target(cc)``: sm_90a for 9.0."""
    return "sm_" + "".join(map(str, target(cc)))


def ptx_of(dispatcher, signature: str, cc: tuple[int, int] = DEFAULT_CC) -> str:
    """The PTX of the kernel's Python function for ``target(cc)``, with its launch bounds; no GPU needed."""
    from numba import cuda

    options = getattr(dispatcher, "targetoptions", {})
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=target(cc), launch_bounds=options.get("launch_bounds"))
    return ptx


def compile_ahead_report(kernel, cc: tuple[int, int] | None) -> ResourceReport:
    """Compile a kernel ahead, and the fixed kernels it launches besides (``Kernel.helper_kernels``): with ``cc``
    None for this process's GPU (which fills Numba's disk cache, so later processes load them), else for that
    compute capability to a cubin, no GPU needed; the kernel's resources either way."""
    if cc is None:
        from ..core.device import current_device

        compile_as_launched(kernel.entry, kernel.signature)
        for helper, signature in kernel.helper_kernels():
            compile_as_launched(helper, signature)
        return ResourceReport.from_dispatcher(kernel.entry, current_device().cc)
    for helper, signature in kernel.helper_kernels():
        _helper_linked(helper, signature, cc)
    return resource_report(kernel.entry, kernel.signature, cc=cc)


def compile_as_launched(dispatcher, signature: str):
    """Compile ``dispatcher`` for ``signature`` under the key a launch looks it up by, in memory and in Numba's
    disk cache. numba-cuda files a kernel in the disk cache under the signature exactly as ``compile`` was given
    it, and a launch looks it up by the tuple of its arguments' types: compiled with the signature's text, a
    kernel is filed where no call finds it, and every process's first call compiles again."""
    from numba.core import sigutils

    argtypes, _ = sigutils.normalize_signature(signature)
    return dispatcher.compile(tuple(argtypes))


@functools.lru_cache(maxsize=None)
def _helper_linked(helper, signature: str, cc: tuple[int, int]) -> None:
    """A fixed helper kernel compiled and linked for ``cc`` (a check that it builds): once per process, however
    many variants launch it."""
    link(ptx_of(helper, signature, cc), cc)


def link(ptx: str, cc: tuple[int, int] = DEFAULT_CC) -> tuple[bytes, str]:
    """The cubin of ``ptx`` for ``target(cc)``, linked with nvJitLink, and ptxas's log (registers, spills, notes
    such as a serialized wgmma); no GPU needed."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=LinkerOptions(arch=arch(cc), verbose=True))
    cubin = bytes(linker.link("cubin").code)
    return cubin, linker.get_info_log()


def resource_report(dispatcher, signature: str, cc: tuple[int, int] = DEFAULT_CC) -> ResourceReport:
    """Compile the kernel's Python function to PTX and link it with nvJitLink; no GPU needed."""
    _, log = link(ptx_of(dispatcher, signature, cc), cc)
    return ResourceReport(
        registers=_number(r"[Uu]sed (\d+) registers", log),
        spill_stores=_number(r"(\d+) bytes spill stores", log),
        spill_loads=_number(r"(\d+) bytes spill loads", log),
        stack_bytes=_number(r"(\d+) bytes stack frame", log),
        shared_bytes=_number(r"(\d+) bytes smem", log),
        cc=cc,
    )
