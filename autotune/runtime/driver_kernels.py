"""Kernels launched from compiled code through the driver, without Numba's dispatcher.

A ``CachedDispatcher`` stands where a Numba dispatcher stood (a kernel object's ``entry``, a generated module's
``fill``, a fixed kernel such as ``tf32_copies.rounded_rows``) and is launched the same way,
``d[grid, block, stream, shared](*args)``. At the first launch with some argument types it finds the kernel's
compiled code in the code cache (autotune/runtime/code_cache.py: this machine's, then the code shipped with the
package), has the driver load it (cuda.core ``ObjectCode.from_cubin(...).get_kernel(name)``) and packs the
arguments as numba-cuda packs them (an array as meminfo, parent, size, itemsize, data pointer, shape and strides;
scalars as their C types) for the launch path every kernel takes (autotune/runtime/kernel_launch.py). No type
inference, lowering or import of the generated module happens. Where no code is stored it compiles through Numba
(importing the module then), stores the code for later processes and launches it the same way. Where code cannot
be cached (jit options that need Numba at launch time, argument types this packing does not cover, the driver
refusing the code) the launch goes through Numba's dispatcher as before. Any attribute a dispatcher has and this
class lacks (``py_func``, ``compile``, ``get_regs_per_thread``) is the real dispatcher's, imported on first use.

``LazyModule`` stands for a generated module whose kernels have stored code: its kernels are CachedDispatchers,
and the module is imported only when something else of it is asked for. ``AUTOTUNE_CODE_CACHE=0`` turns all of
this off (every kernel launches through Numba, compiled or loaded from Numba's own disk cache); ``local`` uses
this machine's cache only, not the code shipped with the package.

Code is cached only for what its key covers: a generated module that imports nothing but ``math``, NumPy, Numba
and autotune's kernel library (whose hash is in the key), and the fixed kernels of autotune's own modules.
"""
from __future__ import annotations

import collections
import ctypes
import re
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import code_cache, kernel_launch
from .code_cache import CodeKey, CompiledCode

ALLOWED_IMPORTS = ("math", "numpy", "numba", "autotune.kernels")
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w.]+))", re.MULTILINE)
_PACKAGE = Path(__file__).resolve().parent.parent
_wrapped: dict[Any, "CachedDispatcher | None"] = {}
_wrapped_lock = threading.Lock()
_loads: collections.Counter = collections.Counter()


def enabled() -> bool:
    """Whether compiled code is cached and launched through the driver (``AUTOTUNE_CODE_CACHE`` not 0)."""
    return code_cache.setting() != "0"


def loads() -> dict[str, int]:
    """How many kernels (per argument types) this process has readied, by where their code came from: 'local',
    'shipped', 'compiled' (here, then stored) or 'numba' (launched through Numba)."""
    return dict(_loads)


def cacheable_source(text: str) -> bool:
    """Whether a generated module imports only what a code key covers (see the module docstring)."""
    for match in _IMPORT.finditer(text):
        name = match.group(1) or match.group(2)
        if name.startswith("."):
            return False
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED_IMPORTS):
            return False
    return True


# -- stand-ins for modules and dispatchers ----------------------------------------------------------
class LazyModule:
    """A generated module whose kernels with stored code are CachedDispatchers; imported for anything else."""

    def __init__(self, source: str, digest: str, names: set[str], importer: Callable[[str], Any]):
        self.__dict__.update(_source=source, _digest=digest, _names=frozenset(names), _importer=importer)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._names:
            value = CachedDispatcher(self._digest, name, importer=lambda: getattr(self._module(), name))
        else:
            value = getattr(self._module(), name)
        self.__dict__[name] = value
        return value

    def _module(self):
        return self._importer(self._source)

    def __repr__(self) -> str:
        return f"<generated module {self._digest[:12]} (kernels {', '.join(sorted(self._names))} from stored code)>"


def cached(dispatcher) -> "CachedDispatcher | None":
    """The CachedDispatcher for a Numba dispatcher (kept per dispatcher), where its code can be cached: a kernel of
    a generated module (imports as ``cacheable_source`` allows) or of a module of autotune itself; else None."""
    if isinstance(dispatcher, CachedDispatcher):
        return dispatcher
    with _wrapped_lock:
        if dispatcher not in _wrapped:
            _wrapped[dispatcher] = _wrap(dispatcher)
        return _wrapped[dispatcher]


def _wrap(dispatcher) -> "CachedDispatcher | None":
    from ..core.resources import cache_dir
    from .numba_kernels import jit_options

    py_func = getattr(dispatcher, "py_func", None)
    filename = getattr(getattr(py_func, "__code__", None), "co_filename", None)
    if not filename or jit_options(dispatcher) is None:
        return None
    path = Path(filename).resolve()
    generated = path.parent == (cache_dir() / "kernels").resolve()
    if not generated and _PACKAGE not in path.parents:
        return None
    digest = code_cache.file_source_hash(str(path))
    if digest is None or (generated and not cacheable_source(path.read_text(encoding="utf-8"))):
        return None
    return CachedDispatcher(digest, py_func.__name__, dispatcher)


class CachedDispatcher:
    """A kernel launched from its stored code; see the module docstring. ``real``: the Numba dispatcher, or
    ``importer``: a function that imports it."""

    def __init__(self, source: str, function: str, real=None, *, importer: Callable[[], Any] | None = None):
        self.source = source
        self.function = function
        self._real = real
        self._importer = importer
        self._loaded: dict[tuple, "Loaded | None"] = {}
        self._lock = threading.Lock()

    @property
    def real(self):
        """The Numba dispatcher (its module imported on first use)."""
        if self._real is None:
            self._real = self._importer()
        return self._real

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def __getitem__(self, config) -> "CachedLaunch":
        """``d[grid, block]``, ``d[grid, block, stream]``, ``d[grid, block, stream, shared_bytes]``, as Numba's."""
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise ValueError("launch configuration must be [grid, block], [grid, block, stream] or "
                             "[grid, block, stream, dynamic shared bytes]")
        return CachedLaunch(self, *config)

    def __repr__(self) -> str:
        return f"<kernel {self.function} of {self.source[:12]} launched from stored code>"

    def loaded(self, args: tuple) -> "Loaded | None":
        """The kernel's code for the types of ``args`` on this GPU, loaded; None where it launches through Numba."""
        import numba

        return self.loaded_for(tuple(numba.typeof(a) for a in args))

    def loaded_for(self, types: tuple) -> "Loaded | None":
        """The kernel's code for the Numba argument types ``types`` on this GPU: stored, else compiled and stored;
        loaded by the driver. None where it launches through Numba."""
        arch = _current_arch()
        memo = (arch, types)
        found = self._loaded.get(memo, False)
        if found is not False:
            return found
        with self._lock:
            if memo not in self._loaded:
                loaded = self._loaded[memo] = self._load(types, arch)
                _loads[loaded.origin if loaded is not None else "numba"] += 1
            return self._loaded[memo]

    def key(self, types: tuple, arch: str, toolchain: tuple) -> CodeKey:
        return CodeKey(self.source, self.function, tuple(map(str, types)), arch, toolchain)

    def _load(self, types: tuple, arch: str) -> "Loaded | None":
        packers = tuple(_packer(t) for t in types)
        if None in packers:
            return None
        local = code_cache.local_toolchain()
        local_key = self.key(types, arch, local) if local else None
        shipped_key = self.key(types, arch, code_cache.shipped_toolchain())
        sizes = _parameter_sizes(types)
        if local_key is not None:
            code = code_cache.load(code_cache.local_root(), local_key, discard_damaged=True)
            kernel = _driver_load(code, sizes)
            if kernel is not None:
                return Loaded(kernel, packers, "local")
            if code is not None:  # stored, but the driver refused it or its parameters differ
                code_cache.discard(code_cache.local_root(), local_key)
        kernel = _driver_load(code_cache.load(code_cache.shipped_root(), shipped_key), sizes)
        if kernel is not None:
            return Loaded(kernel, packers, "shipped")
        return self._compiled(types, arch, local_key, packers, sizes)

    def _compiled(self, types: tuple, arch: str, local_key: CodeKey | None, packers: tuple,
                  sizes: list[int]) -> "Loaded | None":
        """Compile through Numba, store the code (in the local cache) and load it; None where it cannot be."""
        from .numba_kernels import compiled_code

        made = compiled_code(self.real, types)
        if made is None:
            return None
        name, cubin = made
        key = local_key or self.key(types, arch, ())
        code = CompiledCode(key, "cubin", name, cubin, code_cache.made_with())
        kernel = _driver_load(code, sizes)
        if kernel is None:
            return None
        if local_key is not None:
            code_cache.store(code_cache.local_root(), code)
        return Loaded(kernel, packers, "compiled")


class CachedLaunch:
    """A CachedDispatcher configured for a launch; calling it launches, ``bound(args)`` prepares a replay.
    ``cluster``: blocks per cluster along x (the grid's x a multiple of it), which only the driver's launch takes:
    a cluster launch refuses to go through Numba."""

    def __init__(self, dispatcher: CachedDispatcher, grid, block, stream=0, shared: int = 0, cluster: int = 1):
        self.dispatcher = dispatcher
        self.griddim = _dims(grid, "grid")
        self.blockdim = _dims(block, "block")
        self.stream = stream
        self.sharedmem = int(shared)
        self.cluster = int(cluster)
        if self.cluster < 1 or self.griddim[0] % self.cluster:
            raise ValueError(f"a grid of {self.griddim[0]} blocks along x has no clusters of {cluster}")
        self._numba = None
        self._core_stream = None

    def __call__(self, *args) -> None:
        loaded = self.dispatcher.loaded(args)
        if loaded is None:
            self.numba_configured()(*args)
            return
        try:
            packed, _ = loaded.pack(args)
        except UnpackableArgument:
            self.numba_configured()(*args)
            return
        from cuda.core import launch

        loaded.allow_shared(self.sharedmem)
        if self._core_stream is None:
            self._core_stream = kernel_launch.core_stream(self.stream)
        launch(self._core_stream, self.config(), loaded.kernel, *packed)

    def bound(self, args: tuple) -> tuple | None:
        """(stream, cuda.core launch configuration, cuda.core kernel, packed arguments, positions of the arrays'
        data pointers) for a launch with ``args``; None where it launches through Numba (``numba_configured``)."""
        loaded = self.dispatcher.loaded(args)
        if loaded is None:
            return None
        try:
            packed, pointers = loaded.pack(args)
        except UnpackableArgument:
            return None
        loaded.allow_shared(self.sharedmem)
        return self.stream, self.config(), loaded.kernel, tuple(packed), pointers

    def config(self):
        from cuda.core import LaunchConfig

        if self.cluster > 1:  # cuda.core counts a clustered grid in clusters
            x, y, z = self.griddim
            return LaunchConfig(grid=(x // self.cluster, y, z), cluster=(self.cluster, 1, 1), block=self.blockdim,
                                shmem_size=self.sharedmem)
        return LaunchConfig(grid=self.griddim, block=self.blockdim, shmem_size=self.sharedmem)

    def numba_configured(self):
        """The same launch as Numba configures it (``launch.configure`` of the real dispatcher)."""
        if self.cluster > 1:
            raise RuntimeError(f"{self.dispatcher!r} launches in clusters of {self.cluster}, which only the driver's "
                               f"launch (cuda.core) takes, and its code could not be loaded there")
        if self._numba is None:
            from .numba_kernels import numba_configure

            self._numba = numba_configure(self.dispatcher.real, self.griddim, self.blockdim, self.sharedmem,
                                          self.stream)
        return self._numba


class Loaded:
    """A kernel's code loaded by the driver, with the packing of each of its arguments; ``origin``: where the code
    came from ('local' cache, 'shipped' store, or 'compiled' in this process)."""

    __slots__ = ("kernel", "packers", "origin", "_shared", "_lock")

    def __init__(self, kernel, packers: tuple, origin: str):
        self.kernel = kernel
        self.packers = packers
        self.origin = origin
        self._shared = 0
        self._lock = threading.Lock()

    def pack(self, args: tuple) -> tuple[list, tuple[int, ...]]:
        """The arguments as numba-cuda packs them, and where each array's data pointer is in them."""
        packed: list = []
        pointers = []
        for pack, value in zip(self.packers, args):
            pointer = pack(value, packed)
            if pointer is not None:
                pointers.append(pointer)
        return packed, tuple(pointers)

    def allow_shared(self, nbytes: int) -> None:
        """Opt the kernel into ``nbytes`` of dynamic shared memory where that is above the default 48 KB."""
        from .numba_kernels import DEFAULT_DYNAMIC_SHARED_BYTES

        if nbytes <= max(self._shared, DEFAULT_DYNAMIC_SHARED_BYTES):
            return
        with self._lock:
            from cuda.bindings import driver as bindings
            from numba import cuda

            attr = bindings.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            err, = bindings.cuKernelSetAttribute(attr, nbytes, self.kernel.handle, cuda.get_current_device().id)
            if err != bindings.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes}) failed: {err!r}")
            self._shared = nbytes


# -- ahead of time -----------------------------------------------------------------------------------
def signature_types(signature: str) -> tuple:
    """The Numba argument types of a launch signature ('void(float32[::1], int64)'), as a launch types them."""
    from numba.core import sigutils

    argtypes, _ = sigutils.normalize_signature(signature)
    return tuple(argtypes)


def loaded_here(dispatcher, signature: str) -> "Loaded | None":
    """The kernel's code for ``signature`` on this GPU, from the code cache or compiled and stored there; None
    where its code cannot be cached (it then compiles through Numba at launch)."""
    from ..core import backend

    stand_in = cached(dispatcher) if enabled() and not backend.simulator() else None
    return None if stand_in is None else stand_in.loaded_for(signature_types(signature))


def ahead_keys(dispatcher, signature: str, arch: str, *, shipped: Path | None = None) -> list[tuple[Path, CodeKey]]:
    """Where code compiled ahead (on the CPU, for ``arch``) is stored, with its keys: the local cache (where this
    machine's toolchain can be told) and the shipped store ``shipped`` where given; empty where the kernel's code
    cannot be cached."""
    stand_in = cached(dispatcher)
    if stand_in is None:
        return []
    types = signature_types(signature)
    keys = []
    local = code_cache.local_toolchain()
    if local is not None:
        keys.append((code_cache.local_root(), stand_in.key(types, arch, local)))
    if shipped is not None:
        keys.append((shipped, stand_in.key(types, arch, code_cache.shipped_toolchain())))
    return keys


# -- packing, as numba-cuda 0.30's _prepare_args --------------------------------------------------
class UnpackableArgument(TypeError):
    """An argument this packing does not cover (a host array where a device array is due)."""


def _pack_array(value, packed: list) -> int:
    from .arrays import device_pointer

    if isinstance(value, np.ndarray) or getattr(value, "__cuda_array_interface__", None) is None:
        raise UnpackableArgument(f"a device array is needed, got {type(value).__name__}")
    packed += (0, 0, value.size, value.dtype.itemsize)
    packed.append(device_pointer(value))
    packed.extend(value.shape)
    packed.extend(value.strides)
    return len(packed) - 2 * len(value.shape) - 1


def _scalar_packer(convert: Callable[[Any], Any]) -> Callable[[Any, list], None]:
    def pack(value, packed: list) -> None:
        packed.append(convert(value))

    return pack


def _packer(ty) -> Callable[[Any, list], int | None] | None:
    """How one argument of Numba type ``ty`` is packed; None for a type this packing does not cover."""
    from numba.core import types

    if isinstance(ty, types.Array):
        return _pack_array
    if isinstance(ty, types.Integer):
        return _scalar_packer(getattr(ctypes, f"c_{ty}"))
    if ty == types.float16:
        return _scalar_packer(lambda v: ctypes.c_uint16(int(np.float16(v).view(np.uint16))))
    if ty == types.float32:
        return _scalar_packer(ctypes.c_float)
    if ty == types.float64:
        return _scalar_packer(ctypes.c_double)
    if ty == types.boolean:
        return _scalar_packer(lambda v: v)
    return None


def _parameter_sizes(types: tuple) -> list[int]:
    """The byte size of each kernel parameter the packing makes for ``types`` (what the loaded kernel must
    declare)."""
    from numba.core import types as nt

    sizes: list[int] = []
    for ty in types:
        if isinstance(ty, nt.Array):
            sizes += [8] * (5 + 2 * ty.ndim)
        elif ty == nt.boolean:
            sizes.append(1)
        else:
            sizes.append(ty.bitwidth // 8)
    return sizes


# -- the driver -------------------------------------------------------------------------------------
def _driver_load(code: CompiledCode | None, sizes: list[int]):
    """The cuda.core kernel of ``code`` where the driver loads it and its parameters have the sizes the packing
    makes; None otherwise (no code, a refusal, another signature)."""
    if code is None:
        return None
    from cuda.core import ObjectCode

    try:
        kernel = ObjectCode.from_cubin(code.code, name=code.name).get_kernel(code.name)
    except Exception:
        return None
    try:
        declared = [info.size for info in kernel.arguments_info]
    except Exception:  # a driver without cuFuncGetParamInfo: nothing to compare
        return kernel
    return kernel if declared == sizes else None


def _current_arch() -> str:
    from numba import cuda

    from ..core.device import arch

    return arch(tuple(cuda.get_current_device().compute_capability))


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ValueError(f"{what} dimensions must be 1 to 3 positive integers, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
