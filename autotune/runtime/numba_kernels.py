"""The one place autotune touches numba-cuda's private kernel objects (written against numba-cuda 0.30).

What it reads: a compiled kernel's (``_Kernel``, from ``dispatcher.compile``) entry name, cubin, argument types
and whether anything besides its cubin must come with it (linked files, module set-up, cooperative launch, debug
checks); numba-cuda's packing of launch arguments (``_prepare_args``); the cuda.core kernel it loaded; the
per-kernel opt-in to more than 48 KB of dynamic shared memory. Everything here is checked by
tests/test_code_cache.py (``test_the_numba_adapter_holds_for_this_numba_cuda``) against the installed numba-cuda;
where an attribute is missing (another numba-cuda), ``compiled_code`` returns None (nothing is cached, kernels
launch through Numba) and the packing falls back to the dispatcher's own call.
"""
from __future__ import annotations

import functools
from typing import Any

DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024  # a launch may ask for more only after opting in per kernel

# jit options of a kernel whose code can be cached: each is baked into the code (launch bounds, fast math, line
# info, optimisation level, LTO) or applied when it is linked (max_registers); those that need Numba at launch
# time (debug checks, linked files, extensions, a shared-memory carve-out) must keep their neutral value.
CACHEABLE_OPTIONS = frozenset({"cache", "launch_bounds", "fastmath", "lineinfo", "opt", "max_registers", "inline",
                               "lto"})
NEUTRAL_OPTIONS = {"debug": (False, 0, None), "forceinline": (False, None), "device": (False, None),
                   "link": ((), [], None), "extensions": ((), [], None), "shared_memory_carveout": (None,)}


def jit_defaults() -> tuple[bool, bool]:
    """(optimise, debug): what a kernel's jit options default to in this process (``NUMBA_OPT``,
    ``NUMBA_CUDA_DEBUGINFO``), which the decorators of generated modules leave to their defaults."""
    from numba.cuda.core import config

    return config.OPT != 0, bool(config.CUDA_DEBUGINFO_DEFAULT)


def jit_options(dispatcher) -> dict[str, Any] | None:
    """The dispatcher's jit options where its kernels can be cached as code alone; None otherwise."""
    options = dict(getattr(dispatcher, "targetoptions", None) or {})
    for name, value in options.items():
        if name in CACHEABLE_OPTIONS:
            continue
        if name not in NEUTRAL_OPTIONS or not any(value == neutral for neutral in NEUTRAL_OPTIONS[name]):
            return None
    return options


def compiled_code(dispatcher, argtypes: tuple) -> tuple[str, bytes] | None:
    """Compile (or find compiled) ``dispatcher`` for the Numba types ``argtypes`` on this process's GPU, as a
    launch would; its (entry name, cubin) where that cubin is all the kernel needs, else None."""
    if jit_options(dispatcher) is None:
        return None
    kernel = dispatcher.compile(tuple(argtypes))
    try:
        library = kernel._codelibrary
        if (kernel.cooperative or kernel.debug or getattr(kernel, "shared_memory_carveout", None) is not None
                or library._linking_files or library._setup_functions or library.needs_cudadevrt):
            return None
        return str(kernel.entry_name), cubin_bytes(library.get_cubin())
    except AttributeError:
        return None


def cubin_bytes(cubin) -> bytes:
    """The bytes of a cubin as numba-cuda's ``get_cubin`` hands it: bytes where Numba links with its own linker,
    a cuda.core ``ObjectCode`` (whose ``code`` holds them) where it links through cuda.core, as on a GPU."""
    if isinstance(cubin, (bytes, bytearray, memoryview)):
        return bytes(cubin)
    code = cubin.code
    if not isinstance(code, (bytes, bytearray, memoryview)):
        raise AttributeError(f"a cubin held as {type(code).__name__}, not in memory")
    return bytes(code)


def compiled_for_launch(configured, args: tuple):
    """The compiled kernel a Numba launch configuration ``configured`` launches for ``args``, its pre-launch
    callbacks run (the dynamic shared memory opt-in)."""
    dispatcher = configured.dispatcher
    kernel = dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in args))
    for callback in configured.pre_launch_callbacks:
        callback(kernel, configured)
    return kernel


def numba_packed(kernel, types: tuple, args: tuple, stream) -> list:
    """The launch arguments as numba-cuda packs them for cuda.core (``_prepare_args``)."""
    packed: list = []
    for ty, value in zip(types, args):
        kernel._prepare_args(ty, value, stream, [], packed)
    return packed


def argument_types(kernel) -> tuple:
    return tuple(kernel.argument_types)


def launch_kernel(kernel):
    """The cuda.core kernel numba-cuda loaded for ``kernel`` in the current context."""
    return kernel._codelibrary.get_cufunc().kernel


def allow_dynamic_shared(kernel, nbytes: int) -> None:
    """Let ``kernel`` (a compiled Numba kernel) launch with ``nbytes`` of dynamic shared memory (above 48 KB a
    kernel must opt in)."""
    from numba.cuda.cudadrv.driver import binding, driver

    cufunc = kernel._codelibrary.get_cufunc()
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)


def prepare_args_packer():
    """numba-cuda's packing function, called unbound on a stand-in kernel without extensions: what the tests
    compare autotune's own packing with (no GPU needed)."""
    from numba.cuda.dispatcher import _Kernel

    stand_in = _Kernel.__new__(_Kernel)
    stand_in.extensions = []

    def pack(types: tuple, args: tuple) -> list:
        return numba_packed(stand_in, types, args, 0)

    return pack


def numba_configure(kernel, grid, block, shared: int = 0, stream=0):
    """Numba's ``kernel[grid, block, stream, shared]``, with ``shared`` bytes of dynamic shared memory above the
    default 48 KB opted into before the first launch."""
    configured = kernel[grid, block, stream, shared]
    if shared > DEFAULT_DYNAMIC_SHARED_BYTES:
        configured.pre_launch_callbacks.append(functools.partial(_allow_dynamic_shared, nbytes=shared))
    return configured


def _allow_dynamic_shared(compiled, launch_config, nbytes: int) -> None:
    allow_dynamic_shared(compiled, nbytes)
