"""The code cache with the real compiler, no GPU (run by tests/test_code_cache.py in its own process, without the
simulator): prints one JSON object.

    python tests/code_cache_sample.py ahead SHIPPED_DIR     compile a reduction (and its helper) for sm_90 ahead
    python tests/code_cache_sample.py second SHIPPED_DIR    what a later process builds from the stored code
    python tests/code_cache_sample.py packing               autotune's packing against numba-cuda's _prepare_args
"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

PARAMS = {"BLOCK": 128, "COMBINE": "two_pass"}  # a max whose blocks' partials a second kernel (finish) combines


def kernel():
    from autotune.runtime.build import build_kernel

    return build_kernel("reduce", PARAMS, "float32", op="max", axis=None)


def ahead(shipped: Path) -> dict:
    from autotune.runtime import code_cache
    from autotune.runtime.compiler import compile_ahead_report
    from autotune.runtime.driver_kernels import signature_types

    k = kernel()
    report = compile_ahead_report(k, (9, 0), ship=shipped)
    launched = {d.py_func.__name__: [str(t) for t in signature_types(sig)]
                for d, sig in [(k.entry, k.signature), *k.helper_kernels()]}
    files = []
    for root, where in ((code_cache.local_root(), "local"), (shipped, "shipped")):
        for path, key in code_cache.stored(root).items():
            compiled = code_cache.load(root, key)
            sm, entries = code_cache.cubin_facts(compiled.code)
            files.append({"where": where, "path": str(path), "function": key.function, "argtypes": list(key.argtypes),
                          "arch": key.arch, "toolchain": dict(key.toolchain), "name": compiled.name, "sm": sm,
                          "entries": sorted(entries), "made_with": dict(compiled.made_with)})
    return {"report": report.as_dict(), "launched": launched, "files": files,
            "local_toolchain": dict(code_cache.local_toolchain()),
            "shipped_toolchain": dict(code_cache.shipped_toolchain())}


def second(shipped: Path) -> dict:
    from autotune.runtime import code_cache

    code_cache.shipped_root = lambda: shipped  # as the package's own store would be found
    k = kernel()
    helpers = k.helper_kernels()
    return {"module": type(k.module).__name__, "entry": type(k.entry).__name__,
            "helpers": [type(h).__name__ for h, _ in helpers],
            "imported": sorted(m for m in sys.modules if m.startswith("autotune_generated"))}


class Memory:
    """A stand-in for a device allocation: what a Numba device array reads its pointer from."""

    def __init__(self, pointer: int):
        self.device_ctypes_pointer = ctypes.c_void_p(pointer)
        self.handle = self.device_ctypes_pointer


def packing() -> dict:
    import numba
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from autotune.runtime import arrays as device_arrays
    from autotune.runtime import driver_kernels, kernel_launch
    from autotune.runtime.numba_kernels import prepare_args_packer

    numba_pack = prepare_args_packer()
    arrays = [DeviceNDArray((37,), (4,), np.float32, gpu_data=Memory(1 << 20)),
              DeviceNDArray((5, 7), (56, 8), np.float64, gpu_data=Memory(3 << 20)),
              DeviceNDArray((1,), (2,), np.uint16, gpu_data=Memory(5 << 20)),
              DeviceNDArray((3, 1, 2), (8, 8, 4), np.int32, gpu_data=Memory(7 << 20))]
    scalars = [np.int64(-3), np.int32(2**31 - 1), np.uint16(7), 11, True, False, np.bool_(True), np.float32(2.5),
               np.float64(-1e300), 0.1, np.float16(1.5), np.uint8(255), np.int8(-128), np.uint64(2**64 - 1)]
    results = []
    for value in arrays + scalars:
        ty = numba.typeof(value)
        packer = driver_kernels._packer(ty)
        ours = []
        position = packer(value, ours) if packer else None
        theirs = numba_pack((ty,), (value,))
        results.append({"value": repr(value), "type": str(ty), "covered": packer is not None,
                        "same": [kernel_launch._bytes(v) for v in ours] == [kernel_launch._bytes(v) for v in theirs],
                        "pointer_at": position, "pointer": device_arrays.device_pointer(value)
                        if isinstance(value, DeviceNDArray) else None,
                        "sizes": [len(kernel_launch._bytes(v)) for v in theirs],
                        "declared": driver_kernels._parameter_sizes((ty,)) if packer else None})
    host = driver_kernels._packer(numba.typeof(np.zeros(3, np.float32)))
    try:
        host(np.zeros(3, np.float32), [])
        host_refused = False
    except driver_kernels.UnpackableArgument:
        host_refused = True
    return {"results": results, "host_array_refused": host_refused}


def adapter() -> dict:
    """What numba_kernels reads of numba-cuda, present in the installed one."""
    import inspect

    from numba.cuda import codegen, dispatcher

    from autotune.runtime import numba_kernels

    init = inspect.getsource(dispatcher._Kernel.__init__)
    library = inspect.getsource(codegen.CUDACodeLibrary.__init__)
    configuration = inspect.getsource(dispatcher._LaunchConfiguration.__init__)
    k = kernel()
    return {"kernel": {name: f"self.{name}" in init for name in ("entry_name", "_codelibrary", "cooperative",
                                                                   "debug", "signature")},
            "library": {name: f"self.{name}" in library for name in ("_linking_files", "_setup_functions",
                                                                      "needs_cudadevrt")},
            "methods": {name: callable(getattr(cls, name, None)) for cls, name in
                        ((dispatcher._Kernel, "_prepare_args"), (codegen.CUDACodeLibrary, "get_cubin"),
                         (codegen.CUDACodeLibrary, "get_cufunc"), (dispatcher.CUDADispatcher, "compile"),
                         (dispatcher.CUDADispatcher, "typeof_pyval"))},
            "argument_types": isinstance(getattr(dispatcher._Kernel, "argument_types", None), property),
            "pre_launch_callbacks": "self.pre_launch_callbacks" in configuration,
            "jit_options": numba_kernels.jit_options(k.entry) is not None,
            "debug_refused": numba_kernels.jit_options(type("D", (), {"targetoptions": {"debug": True}})()) is None,
            "link_refused": numba_kernels.jit_options(type("D", (), {"targetoptions": {"link": ["x.cu"]}})()) is None}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "ahead":
        out = ahead(Path(sys.argv[2]))
    elif mode == "second":
        out = second(Path(sys.argv[2]))
    else:
        out = {"packing": packing(), "adapter": adapter()}
    print(json.dumps(out))
