"""On the GPU: host time per call of the functional API made the ways before and after NOTES item 46, in one
process, alternating rounds (median of five), each round's results checked against float64 first.

    taskset -c 5 python lab/host_time_ab.py     (CuPy; one pinned core gives steadier figures)

Variants: "before": each result's block given back by a ``weakref.finalize`` and its array made by Numba's
constructor, launches through cuda.core's ``launch`` and memsets through Numba's driver wrapper; "pool": results
as autotune/runtime/result_pool.py makes them now, launches as before; "after": as the package runs now (launches with
their parameter buffer built once, autotune/runtime/kernel_launch.py). Then one launch of the 2^20 sum's kernel each
way, and a 256-word memset through Numba's wrapper and through cuda.bindings.
"""
import functools
import warnings

import cupy as cp
import numpy as np
from call_overhead import per_call_us  # lab/call_overhead.py
from numba import cuda
from numba.cuda.cudadrv.driver import MemoryPointer
from numba.cuda.cudadrv.driver import driver as numba_driver

import autotune
from autotune import functions as F
from autotune.runtime import kernel_launch
from autotune.runtime import result_pool as rp

warnings.simplefilter("ignore", autotune.TunedKernelWarning)


def finalized_memory(context, owner_key, nbytes):
    """result_pool._memory before item 46: a plain MemoryPointer whose weakref finalizer caches the block."""
    size = -(-nbytes // rp.ALIGN) * rp.ALIGN
    key = owner_key + (size,)
    block = rp._cache.take(key, size)
    if block is None:
        block = rp._allocated(lambda: context.memalloc(size))
    return MemoryPointer(context, block.device_pointer, nbytes,
                         finalizer=functools.partial(rp._cache.put, key, size, block))


def constructed_array(form, gpu_data):
    return rp._numba().DeviceNDArray(*form, gpu_data=gpu_data)


VARIANTS = {"before": (finalized_memory, constructed_array, lambda: None),
            "pool": (rp._memory, rp._array, lambda: None),
            "after": (rp._memory, rp._array, kernel_launch._pieces)}


def use(name: str) -> None:
    """Switch to a variant; kept plans are dropped, so the next calls record theirs the variant's way."""
    rp._memory, rp._array, kernel_launch._pieces = VARIANTS[name]
    F._replays.clear()
    for k in F._kernels.values():
        k.__dict__.pop("_plans", None)


def checked(x, A, r, C, ref_sum: float, tol: float, ref_mm) -> bool:
    """New and ``out=`` results of a sum and a matmul, each called three times (so replays), near float64."""
    good = True
    for _ in range(3):
        s = float(cp.asarray(autotune.sum(x)))
        m = cp.asnumpy(cp.asarray(autotune.matmul(A, A)))
        r.fill(np.nan)
        autotune.sum(x, out=r)
        C.fill(np.nan)
        autotune.matmul(A, A, out=C)
        good &= abs(s - ref_sum) <= tol and abs(float(r) - ref_sum) <= tol
        good &= float(np.max(np.abs(m - ref_mm))) < 1e-3 and float(np.max(np.abs(cp.asnumpy(C) - ref_mm))) < 1e-3
    return bool(good)


def main() -> None:
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal(1 << 20).astype(np.float32))
    r = cp.empty((), cp.float32)
    A = cp.asarray(rng.standard_normal((256, 256)).astype(np.float32))
    C = cp.empty((256, 256), cp.float32)
    xh, Ah = cp.asnumpy(x).astype(np.float64), cp.asnumpy(A).astype(np.float64)
    ref = (float(xh.sum()), 1e-5 * float(np.abs(xh).sum()), Ah @ Ah)
    rows = [("autotune.sum(x), 2^20", lambda: autotune.sum(x)),
            ("autotune.sum(x, out=r)", lambda: autotune.sum(x, out=r)),
            ("cupy.sum(x)", lambda: cp.sum(x)),
            ("autotune.matmul(A, A), 256^3", lambda: autotune.matmul(A, A)),
            ("autotune.matmul(A, A, out=C)", lambda: autotune.matmul(A, A, out=C)),
            ("cupy.matmul(A, A)", lambda: cp.matmul(A, A))]
    times = {name: {label: [] for label, _ in rows} for name in VARIANTS}
    wrong = []
    for _ in range(5):
        for name in VARIANTS:
            use(name)
            if not checked(x, A, r, C, *ref):
                wrong.append(name)
            for label, fn in rows:
                times[name][label].append(per_call_us(fn, 3000))
    print("rounds with a wrong result:", wrong or "none")

    use("after")
    autotune.sum(x, out=r)
    plan = next(p for p, written in F._replays.values() if written is None)
    step = next(s for s in plan._steps if type(s).__name__ == "PackedLaunch")
    from cuda.bindings import driver as bindings
    from cuda.core import launch

    through_core = functools.partial(launch, step.stream, step.config, step.function, *step.packed)
    buffer = cuda.device_array(256, np.float32)
    pointer = buffer.device_ctypes_pointer.value
    singles = {"cuda.core launch": through_core, f"buffered launch ({type(step.go).__name__})": step.go,
               "memset, Numba's wrapper": lambda: numba_driver.cuMemsetD32Async(pointer, 0, 256, 0),
               "memset, cuda.bindings": lambda: bindings.cuMemsetD32Async(pointer, 0, 256, 0)}
    single_times = {label: [] for label in singles}
    for _ in range(5):
        for label, fn in singles.items():
            single_times[label].append(per_call_us(fn, 5000))

    print("\n| call (host us, median of 5 rounds) | " + " | ".join(VARIANTS) + " |\n| --- | --- | --- | --- |")
    for label, _ in rows:
        print(f"| {label} | " + " | ".join(f"{np.median(times[n][label]):.1f}" for n in VARIANTS) + " |")
    print()
    for label, us in single_times.items():
        print(f"{label}: {np.median(us):.2f} us ({', '.join(f'{u:.2f}' for u in us)})")


if __name__ == "__main__":
    main()
