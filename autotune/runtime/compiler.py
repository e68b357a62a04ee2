"""Turn rendered source into a loaded module, and report what the real compiler makes of a kernel.

Generated source is written to a file named by the hash of its content and imported from there, which is
what lets Numba's on-disk cache (``cache=True``) work: a second process finds the compiled kernel instead of
compiling again. Files are never rewritten in place (one that holds other text is replaced whole). Where the code
cache (code_cache.py) holds a module's kernels, ``kernel_module`` hands out a stand-in instead of importing it.
Ahead of time, ``code_ahead`` makes on the CPU the cubin numba-cuda makes on the GPU, and stores it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from ..core.atomic import write_text_atomic
from ..core.device import arch, target
from ..core.resources import cache_dir

DEFAULT_CC = (9, 0)


def source_path(source: str) -> Path:
    return source_path_of_digest(hashlib.sha256(source.encode()).hexdigest())


def source_path_of_digest(digest: str) -> Path:
    """The file of the generated source whose SHA-256 is ``digest`` (hex)."""
    return cache_dir() / "kernels" / f"k_{digest[:24]}.py"


def write_source(source: str) -> Path:
    """The source's file, written (atomically) where it is missing or holds other text (a damaged file is
    replaced, never imported)."""
    path = source_path(source)
    try:
        if path.read_text(encoding="utf-8") == source:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    write_text_atomic(path, source, parents=True)  # a cache file: private, rebuilt if lost (no fsync)
    return path


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
    write_source(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def kernel_module(source: str, simulator: bool):
    """The generated module of ``source`` as kernel objects use it: on a GPU, where compiled code of some of its
    kernels is stored (autotune/runtime/code_cache.py), a LazyModule that launches them from that code and imports
    the module only for anything else; otherwise the module imported (``load_source``)."""
    from . import code_cache, driver_kernels

    if simulator or not driver_kernels.enabled() or not driver_kernels.cacheable_source(source):
        return load_source(source)
    digest = code_cache.source_hash(source)
    names = code_cache.functions_with_code(code_cache.local_root(), digest) | \
        code_cache.functions_with_code(code_cache.shipped_root(), digest)
    if not names:
        return load_source(source)
    write_source(source)
    return driver_kernels.LazyModule(source, digest, names, load_source)


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

    @classmethod
    def from_loaded(cls, kernel, cc: tuple[int, int]) -> "ResourceReport":
        """The report of a kernel the driver loaded from stored code (a cuda.core kernel); local memory per
        thread counted as both spills and stack, as in ``from_dispatcher``."""
        attributes = kernel.attributes
        local = int(attributes.local_size_bytes)
        return cls(registers=int(attributes.num_regs), spill_stores=local, spill_loads=local, stack_bytes=local,
                   shared_bytes=int(attributes.shared_size_bytes), cc=cc)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        return d


def _number(pattern: str, text: str, default: int | None = None) -> int:
    match = re.search(pattern, text)
    if not match:
        if default is not None:
            return default
        raise RuntimeError(f"compiler report lacks {pattern!r}:\n{text}")
    return int(match.group(1))


def ptx_of(dispatcher, signature: str, cc: tuple[int, int] = DEFAULT_CC) -> str:
    """The PTX of the kernel's Python function for ``target(cc)``, compiled with the jit options a launch compiles
    it with (launch bounds, fast math, line info, optimisation); no GPU needed."""
    from numba import cuda

    options = getattr(dispatcher, "targetoptions", None) or {}
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=target(cc), launch_bounds=options.get("launch_bounds"),
                              **_compile_options(options))
    return ptx


def entry_name(ptx: str) -> str:
    """The mangled name of the one kernel entry in ``ptx``."""
    names = re.findall(r"\.entry\s+([\w$.]+)\s*\(", ptx)
    if len(names) != 1:
        raise RuntimeError(f"expected one kernel entry in the PTX, found {len(names)}")
    return names[0]


def compile_ahead_report(kernel, cc: tuple[int, int] | None, ship: Path | None = None) -> ResourceReport:
    """Compile a kernel ahead, and the fixed kernels it launches besides (``Kernel.helper_kernels``), and store
    their code in the code cache (autotune/runtime/code_cache.py): with ``cc`` None for this process's GPU (code
    already stored is loaded instead; a kernel whose code cannot be cached fills Numba's disk cache), else for
    that compute capability to a cubin, no GPU needed, stored for this machine's toolchain and, given ``ship``, in
    that shipped store (``code_cache.shipped_root()``). The kernel's resources either way."""
    if cc is None:
        return resources_here(kernel)
    for helper, signature in kernel.helper_kernels():
        _helper_linked(helper, signature, cc, ship)
    return resource_report(kernel.entry, kernel.signature, cc=cc, store=True, ship=ship)


def resources_here(kernel) -> ResourceReport:
    """The resources of ``kernel``'s entry as this process's GPU runs it, its kernels made ready first
    (``load_ahead``)."""
    from ..core.device import current_device

    entry = load_ahead(kernel)[0]
    cc = current_device().cc
    return ResourceReport.from_dispatcher(kernel.entry, cc) if entry is None else \
        ResourceReport.from_loaded(entry.kernel, cc)


def load_ahead(kernel) -> list:
    """Make ready on this GPU every kernel a call of ``kernel`` launches (its entry first, then its helpers): the
    stored code loaded (compiled and stored where missing, autotune/runtime/driver_kernels.py), or, for a kernel
    whose code cannot be cached, compiled by Numba into its disk cache. Each one's loaded code, None for the
    latter."""
    from . import driver_kernels

    found = []
    for dispatcher, signature in [(kernel.entry, kernel.signature), *kernel.helper_kernels()]:
        loaded = driver_kernels.loaded_here(dispatcher, signature)
        if loaded is None:
            compile_as_launched(dispatcher, signature)
        found.append(loaded)
    return found


def compile_as_launched(dispatcher, signature: str):
    """Compile ``dispatcher`` for ``signature`` under the key a launch looks it up by, in memory and in Numba's
    disk cache. numba-cuda files a kernel in the disk cache under the signature exactly as ``compile`` was given
    it, and a launch looks it up by the tuple of its arguments' types: compiled with the signature's text, a
    kernel is filed where no call finds it, and every process's first call compiles again."""
    from numba.core import sigutils

    argtypes, _ = sigutils.normalize_signature(signature)
    return dispatcher.compile(tuple(argtypes))


@functools.lru_cache(maxsize=None)
def _helper_linked(helper, signature: str, cc: tuple[int, int], ship: Path | None = None) -> None:
    """A fixed helper kernel compiled and linked for ``cc`` (a check that it builds) and its code stored: once per
    process, however many variants launch it."""
    linked(helper, signature, cc, ship)


def link(ptx: str, cc: tuple[int, int] = DEFAULT_CC, max_registers: int | None = None) -> tuple[bytes, str]:
    """The cubin of ``ptx`` for ``target(cc)``, linked with nvJitLink, and ptxas's log (registers, spills, notes
    such as a serialized wgmma); no GPU needed."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    options = LinkerOptions(arch=arch(cc), verbose=True, max_register_count=max_registers)
    linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=options)
    cubin = bytes(linker.link("cubin").code)
    return cubin, linker.get_info_log()


def code_ahead(dispatcher, signature: str, cc: tuple[int, int] = DEFAULT_CC) -> tuple[bytes, str]:
    """The cubin a launch on a GPU of compute capability ``cc`` builds for the kernel, and the linker's log, made
    the way numba-cuda makes it there, on the CPU: NVVM's LTO-IR linked by nvJitLink with link-time optimisation
    where the kernel's jit options ask for LTO (numba-cuda's default wherever nvJitLink is installed: the code
    the GPU runs and the tuner timed), else its PTX linked."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    options = getattr(dispatcher, "targetoptions", None) or {}
    lto = bool(options.get("lto"))
    if lto:
        from numba import cuda

        ltoir, _ = cuda.compile(dispatcher.py_func, signature, device=False, abi="numba", output="ltoir",
                                cc=target(cc), launch_bounds=options.get("launch_bounds"), **_compile_options(options))
        code = ObjectCode.from_ltoir(ltoir)
    else:
        code = ObjectCode.from_ptx(ptx_of(dispatcher, signature, cc).encode())
    linker = Linker(code, options=LinkerOptions(arch=arch(cc), verbose=True, link_time_optimization=lto or None,
                                                max_register_count=options.get("max_registers"),
                                                lineinfo=options.get("lineinfo") or None))
    return bytes(linker.link("cubin").code), linker.get_info_log()


def _compile_options(options: dict) -> dict:
    return {name: options[name] for name in ("fastmath", "lineinfo", "opt", "debug") if name in options}


def linked(dispatcher, signature: str, cc: tuple[int, int], ship: Path | None = None) -> str:
    """Compile and link the kernel for ``cc`` on the CPU (``code_ahead``), storing the cubin in the code cache
    (and in the shipped store ``ship`` where given); the linker's log."""
    from . import code_cache, driver_kernels

    cubin, log = code_ahead(dispatcher, signature, cc)
    keys = driver_kernels.ahead_keys(dispatcher, signature, arch(cc), shipped=ship)
    if keys:
        _, entries = code_cache.cubin_facts(cubin)
        if len(entries) != 1:
            raise RuntimeError(f"expected one kernel entry in the cubin, found {len(entries)}")
        name = next(iter(entries))
        for root, key in keys:
            code_cache.store(root, code_cache.CompiledCode(key, "cubin", name, cubin, code_cache.made_with()))
    return log


def resource_report(dispatcher, signature: str, cc: tuple[int, int] = DEFAULT_CC, *, store: bool = False,
                    ship: Path | None = None) -> ResourceReport:
    """Compile and link the kernel as a launch on the GPU would (``code_ahead``, no GPU needed), with ``store`` its
    code stored (``linked``); what ptxas reports."""
    log = linked(dispatcher, signature, cc, ship) if store else code_ahead(dispatcher, signature, cc)[1]
    return ResourceReport(
        registers=_number(r"[Uu]sed (\d+) registers", log),
        spill_stores=_number(r"(\d+) bytes spill stores", log),
        spill_loads=_number(r"(\d+) bytes spill loads", log),
        stack_bytes=_number(r"(\d+) bytes stack frame", log),
        shared_bytes=_number(r"(\d+) bytes smem", log, default=0),  # ptxas leaves out none
        cc=cc,
    )
