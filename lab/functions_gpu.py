"""On the GPU: the NumPy-style functions (autotune.sum/max/.../matmul) checked against NumPy, the caller's stream
honoured, host time per call, and (outer, R, inner) reductions against CuPy and PyTorch.

    python lab/functions_gpu.py [--quick] [--dtypes-only] [--bfloat16-only] [--half-bench] [--host-only]
        [--allocator-rounds N]
    (needs CuPy and PyTorch)

1. Checks: every function on 1-D to 4-D arrays, every axis, keepdims, transposed views, NaN data, fresh and
   NaN-poisoned ``out=``; matmul on the four layouts, 1-D operands and broadcast stacks; repeated calls without
   ``out=`` (a kept plan moved onto each new output) right every time, and so for a kernel object's calls.
2. Streams: a producer on a non-blocking PyTorch stream sleeps on the GPU, then writes ``x``; the sum of ``x``
   with ``stream=`` that stream, read after the stream synchronises, must be exact every time. The same
   without ``stream=`` shows whether it races (it runs on the legacy default stream, which a non-blocking
   stream does not wait for).
3. Host microseconds per call on device arrays, synchronised every 200 calls: a 2^20 sum and a 1024^3 matmul,
   against cupy.sum / torch.sum and cupy.matmul / torch.matmul; ``--allocator-rounds N``: N rounds alternating
   autotune's result pool with Numba's ``cuda.device_array`` for new outputs (medians).
4. GPU time (CUDA events, L2 flushed, median) of reductions along each axis of 3-D shapes and of 65536x256
   along axis 1, against cupy.sum and torch.sum.
5. int32, int64 and float16 reductions (``--dtypes-only``: this part alone): checked against NumPy's own result
   bit for bit (integers over the whole dtype; float16 sums of integers against the exact sum rounded once),
   then sums timed as in 4 against cupy.sum and torch.sum (the same result dtype: int64 for int32).
6. bfloat16 (``--bfloat16-only``): NumPy (ml_dtypes) arrays and PyTorch tensors (into a bfloat16 ``out=``) checked
   as float16 is in 5; sums of PyTorch tensors timed against torch.sum (bfloat16 result both). ``--half-bench``:
   that timing alone, for float16 and bfloat16.
"""
import argparse
import sys
import time
import warnings

import numpy as np
from call_overhead import per_call_us  # lab/call_overhead.py: host microseconds per call
from numba import cuda

import autotune
from autotune.tuning.measure import L2Flusher, bench

OPS = {"sum": np.sum, "max": np.max, "min": np.min, "nanmax": np.nanmax, "nanmin": np.nanmin}


def check_reductions(rng, quick: bool) -> list[str]:
    failures = []
    shapes = [(1_000_003,), (1031, 2053), (64, 1000, 33), (7, 130, 1031), (3, 5, 67, 129)]
    for shape in shapes[:3] if quick else shapes:
        for op, ref in OPS.items():
            x = rng.integers(-8, 9, shape).astype(np.float32) if op == "sum" else \
                rng.standard_normal(shape).astype(np.float32)
            if op != "sum":
                x.flat[rng.integers(x.size, size=3)] = np.nan
            for order in ("C", "F"):
                a = np.asfortranarray(x) if order == "F" else x
                d = cuda.to_device(a)
                axes = [None, *range(len(shape)), -1] + [(i, i + 1) for i in range(len(shape) - 1)]
                for axis in axes:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        want = ref(a.astype(np.float64), axis=axis, keepdims=True).astype(np.float32)
                    got = getattr(autotune, op)(d, axis=axis, keepdims=True).copy_to_host()
                    close = np.array_equal(got, want, equal_nan=True) if op != "sum" else \
                        np.allclose(got, want, rtol=0, atol=0, equal_nan=True)
                    if not close:
                        failures.append(f"{op} {shape} {order} axis={axis}")
        if len(shape) == 3:  # a repeated call with out= replays its launches: new data, same memory
            x = rng.integers(-8, 9, shape).astype(np.float32)
            d, out = cuda.to_device(x), cuda.device_array(shape[::2], np.float32)
            for _ in range(2):
                d.copy_to_device(x)
                autotune.sum(d, axis=1, out=out)
                if not np.array_equal(out.copy_to_host(), x.astype(np.float64).sum(axis=1)):
                    failures.append(f"replayed sum {shape}")
                x = x[::-1].copy()
    return failures


def check_matmul(rng) -> list[str]:
    failures = []
    A = rng.integers(-4, 5, (300, 257)).astype(np.float32)
    B = rng.integers(-4, 5, (257, 131)).astype(np.float32)
    for layout in ("nn", "tn", "nt", "tt"):
        a = cuda.to_device(np.asfortranarray(A) if layout[0] == "t" else A)
        b = cuda.to_device(np.asfortranarray(B) if layout[1] == "t" else B)
        out = cuda.to_device(np.full((300, 131), np.nan, np.float32))
        autotune.matmul(a, b, out=out)
        if not np.array_equal(out.copy_to_host(), A.astype(np.float64) @ B):
            failures.append(f"matmul {layout}")
    S = rng.integers(-4, 5, (3, 1, 300, 257)).astype(np.float32)
    T = rng.integers(-4, 5, (4, 257, 131)).astype(np.float32)
    for a, b in ((S, T), (A[0], B), (A, B[:, 0].copy()), (S, B)):
        if not np.array_equal(autotune.matmul(a, b), np.matmul(a.astype(np.float64), b)):
            failures.append(f"matmul {a.shape} @ {b.shape}")
    return failures


def check_new_outputs(rng) -> list[str]:
    """Calls without ``out=`` replay a plan moved onto a new array each time: every result right for the data of
    its own call, and the earlier results left as they were (reductions along each axis, matmul with split-K
    entries of the suite)."""
    failures = []
    cases = [("sum", (1 << 20,), None), ("sum", (1031, 2053), 1), ("max", (1031, 2053), 0),
             ("sum", (64, 100, 33), 1), ("matmul", (1024, 1024, 1024), None), ("matmul", (127, 3000, 511), None),
             ("matmul", (4096, 4096, 256), None), ("matmul", (8192, 128, 8192), None)]
    for op, shape, axis in cases:
        if op == "matmul":
            M, N, K = shape
            data = [rng.integers(-4, 5, (M, K)).astype(np.float32) for _ in range(3)]
            B = rng.integers(-4, 5, (K, N)).astype(np.float32)
            d, dB = cuda.to_device(data[0]), cuda.to_device(B)
            want = [a.astype(np.float64) @ B for a in data]
            call = lambda: autotune.matmul(d, dB)  # noqa: E731
        else:
            data = [rng.integers(-8, 9, shape).astype(np.float32) for _ in range(3)]
            d = cuda.to_device(data[0])
            want = [getattr(np, op)(x.astype(np.float64), axis=axis) for x in data]
            call = lambda: getattr(autotune, op)(d, axis=axis)  # noqa: E731
        results = []
        for x in data:
            d.copy_to_device(x)
            results.append(call())
        for i, (got, ref) in enumerate(zip(results, want)):
            if not np.array_equal(got.copy_to_host(), ref):
                failures.append(f"new output {op} {shape} axis={axis} call {i + 1}")
    kernel = autotune.get_best_kernel("matmul", (127, 3000, 511))  # a kernel object called without out=
    A, B = (rng.integers(-4, 5, s).astype(np.float32) for s in ((127, 511), (511, 3000)))
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    results = []
    for i in range(3):
        dA.copy_to_device(A + i)
        results.append(kernel(dA, dB))
    for i, got in enumerate(results):
        if not np.array_equal(got.copy_to_host(), (A + i).astype(np.float64) @ B):
            failures.append(f"new output, kernel object, call {i + 1}")
    return failures


def stream_race(iterations: int) -> dict[str, int]:
    import torch

    n = 1 << 24
    x = torch.zeros(n, device="cuda")
    stream = torch.cuda.Stream()
    wrong = {}
    for label, given in (("stream=", True), ("no stream=", False)):
        bad = 0
        for it in range(1, iterations + 1):
            with torch.cuda.stream(stream):
                torch.cuda._sleep(2_000_000)  # about a millisecond of GPU time before x is written
                x.fill_(float(it))
                total = autotune.sum(x, stream=stream if given else None)
            stream.synchronize()
            cuda.synchronize()
            bad += float(total.copy_to_host()) != float(it) * n
        wrong[label] = bad
    return wrong


def host_times(rng) -> list[tuple[str, float]]:
    import cupy as cp
    import torch

    x = cp.asarray(rng.standard_normal(1 << 20).astype(np.float32))
    t = torch.as_tensor(x, device="cuda")
    r = cp.empty((), cp.float32)
    A = cp.asarray(rng.standard_normal((1024, 1024)).astype(np.float32))
    C = cp.empty((1024, 1024), cp.float32)
    tA = torch.as_tensor(A, device="cuda")
    a = cp.asarray(rng.standard_normal((256, 256)).astype(np.float32))  # small enough for host time to show
    c = cp.empty((256, 256), cp.float32)
    k = autotune.get_best_kernel("reduce", (1 << 20,))
    return [("autotune.sum(x), 2^20", per_call_us(lambda: autotune.sum(x))),
            ("get_best_kernel('reduce', (2^20,))(x)", per_call_us(lambda: k(x))),
            ("autotune.sum(x, out=r), 2^20", per_call_us(lambda: autotune.sum(x, out=r))),
            ("cupy.sum(x), 2^20", per_call_us(lambda: cp.sum(x))),
            ("torch.sum(t), 2^20", per_call_us(lambda: torch.sum(t))),
            ("autotune.matmul(A, A), 1024^3", per_call_us(lambda: autotune.matmul(A, A), 500)),
            ("autotune.matmul(A, A, out=C), 1024^3", per_call_us(lambda: autotune.matmul(A, A, out=C), 500)),
            ("cupy.matmul(A, A), 1024^3", per_call_us(lambda: cp.matmul(A, A), 500)),
            ("torch.matmul(tA, tA), 1024^3", per_call_us(lambda: torch.matmul(tA, tA), 500)),
            ("autotune.matmul(a, a), 256^3", per_call_us(lambda: autotune.matmul(a, a))),
            ("autotune.matmul(a, a, out=c), 256^3", per_call_us(lambda: autotune.matmul(a, a, out=c))),
            ("cupy.matmul(a, a), 256^3", per_call_us(lambda: cp.matmul(a, a)))]


def numba_allocated(shape, dtype, order="C", stream=0, context=None):
    """What result_pool.empty replaced: a new cuda.device_array per result."""
    return cuda.device_array(tuple(shape), dtype=dtype, order=order)


def print_host_times(rng, rounds: int = 1) -> None:
    """Part 3; with ``rounds`` > 1, alternately with autotune's result pool and with Numba's allocator (the
    median of the rounds each)."""
    from autotune.runtime import result_pool

    pooled, numba = [], []
    for _ in range(rounds):
        pooled.append(host_times(rng))
        if rounds > 1:
            saved, result_pool.empty = result_pool.empty, numba_allocated
            try:
                numba.append(host_times(rng))
            finally:
                result_pool.empty = saved
    if numba:
        print("\n| call (device arrays) | host us per call | with Numba's allocator |\n| --- | --- | --- |")
    else:
        print("\n| call (device arrays) | host us per call |\n| --- | --- |")
    for i, (name, _) in enumerate(pooled[0]):
        us = np.median([r[i][1] for r in pooled])
        other = f" {np.median([r[i][1] for r in numba]):.1f} |" if numba else ""
        print(f"| {name} | {us:.1f} |{other}")


def axis_bench(rng) -> list[tuple]:
    import cupy as cp
    import torch

    flush = L2Flusher()
    rows = []
    for shape, axes in (((64, 1024, 1024), (0, 1, 2)), ((65536, 256), (1,)), ((256, 65536), (0,))):
        x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        t = torch.as_tensor(x, device="cuda")
        for axis in axes:
            out_shape = tuple(n for i, n in enumerate(shape) if i != axis)
            r = cp.empty(out_shape, cp.float32)
            want = cp.asnumpy(x).astype(np.float64).sum(axis=axis)
            autotune.sum(x, axis=axis, out=r)
            ok = np.allclose(cp.asnumpy(r), want, rtol=1e-4, atol=1e-2)
            times = {"autotune": bench(lambda: autotune.sum(x, axis=axis, out=r), flush=flush).median_ms,
                     "cupy": bench(lambda: cp.sum(x, axis=axis, out=r), flush=flush).median_ms,
                     "torch": bench(lambda: torch.sum(t, dim=axis), flush=flush).median_ms}
            gbps = {k: x.nbytes / v / 1e6 for k, v in times.items()}
            rows.append(("x".join(map(str, shape)), axis, ok, gbps["autotune"], gbps["cupy"], gbps["torch"],
                         times["cupy"] / times["autotune"]))
    return rows


def print_axis_bench(rng) -> list[tuple]:
    rows = axis_bench(rng)
    print("\n| shape | axis | correct | autotune GB/s | cupy GB/s | torch GB/s | autotune vs cupy |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for shape, axis, ok, a, c, t, ratio in rows:
        print(f"| {shape} | {axis} | {ok} | {a:.0f} | {c:.0f} | {t:.0f} | {ratio:.2f}x |", flush=True)
    return rows


NARROW = (np.int32, np.int64, np.float16)


def narrow_data(rng, shape, dtype, op):
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if op in ("sum", "dot"):
        return rng.integers(-8, 9, shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[rng.integers(x.size, size=3)] = np.nan
    return x


def check_narrow(rng) -> list[str]:
    failures = []
    for dtype in NARROW:
        for shape, axes in (((1 << 24) + 3,), (None,)), ((1031, 2053), (0, 1)), ((64, 1000, 33), (1, 2)):
            for op in ("sum", "max", "min", "nanmax"):
                x = narrow_data(rng, shape, dtype, op)
                for axis in axes:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        want = OPS[op](x, axis=axis) if x.dtype.kind == "i" or op != "sum" else \
                            x.astype(np.float64).sum(axis=axis).astype(dtype)
                    got = getattr(autotune, op)(cuda.to_device(x), axis=axis).copy_to_host()
                    if got.dtype != np.asarray(want).dtype or not np.array_equal(got, want, equal_nan=True):
                        failures.append(f"{op} {np.dtype(dtype).name} {shape} axis={axis}")
        a, b = narrow_data(rng, (1_000_003,), dtype, "dot"), narrow_data(rng, (1_000_003,), dtype, "dot")
        want = np.dot(a, b) if a.dtype.kind == "i" else np.float16(a.astype(np.float64) @ b.astype(np.float64))
        if autotune.dot(a, b) != want:
            failures.append(f"dot {np.dtype(dtype).name}")
    return failures


def narrow_bench(rng) -> list[tuple]:
    import cupy as cp
    import torch

    flush = L2Flusher()
    rows = []
    for dtype in NARROW:
        for shape, axis in (((1 << 26,), None), ((8192, 8192), 1), ((8192, 8192), 0)):
            x = cp.asarray(narrow_data(rng, shape, dtype, "sum"))
            t = torch.as_tensor(x, device="cuda")
            r = cp.empty(() if axis is None else (shape[1 - axis],), np.sum(np.zeros(1, dtype)).dtype)
            autotune.sum(x, axis=axis, out=r)
            ok = bool(cp.all(r == cp.sum(x, axis=axis, dtype=r.dtype))) if x.dtype.kind == "i" else None
            times = {"autotune": bench(lambda: autotune.sum(x, axis=axis, out=r), flush=flush).median_ms,
                     "cupy": bench(lambda: cp.sum(x, axis=axis, out=r), flush=flush).median_ms,
                     "torch": bench(lambda: torch.sum(t) if axis is None else torch.sum(t, dim=axis),
                                    flush=flush).median_ms}
            gbps = {k: x.nbytes / v / 1e6 for k, v in times.items()}
            rows.append((np.dtype(dtype).name, "x".join(map(str, shape)), axis, ok, gbps["autotune"], gbps["cupy"],
                         gbps["torch"], times["cupy"] / times["autotune"]))
    return rows


def print_narrow(rng) -> list[str]:
    t0 = time.time()
    failures = check_narrow(rng)
    print(f"int32/int64/float16 checks: {len(failures)} failures {failures[:10]} ({time.time() - t0:.0f} s)",
          flush=True)
    print("\n| dtype | shape | axis | same as cupy | autotune GB/s | cupy GB/s | torch GB/s | autotune vs cupy |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")
    for dtype, shape, axis, ok, a, c, t, ratio in narrow_bench(rng):
        print(f"| {dtype} | {shape} | {axis} | {'-' if ok is None else ok} | {a:.0f} | {c:.0f} | {t:.0f} | "
              f"{ratio:.2f}x |", flush=True)
    return failures


def check_bfloat16(rng) -> list[str]:
    """bfloat16 from NumPy (ml_dtypes) and from PyTorch (into a bfloat16 ``out=`` tensor): sums of integers against
    the exact sum rounded once, max/min/nanmax bit for bit against NumPy's on the widened data, NaN included."""
    import torch

    bf16 = np.dtype("bfloat16")
    failures = []
    for shape, axes in (((1 << 24) + 3,), (None,)), ((1031, 2053), (0, 1)), ((64, 1000, 33), (1, 2)):
        for op in ("sum", "max", "min", "nanmax"):
            x32 = narrow_data(rng, shape, np.float32, op)
            x = x32.astype(bf16)
            t = torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
            for axis in axes:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    want = OPS[op](x.astype(np.float64), axis=axis).astype(bf16)
                out = torch.full(np.shape(want), float("nan"), dtype=torch.bfloat16, device="cuda")
                from_torch = getattr(autotune, op)(t, axis=axis, out=out)
                got = [np.asarray(getattr(autotune, op)(x, axis=axis)),
                       from_torch.view(torch.int16).cpu().numpy().view(bf16)]
                for way, g in zip(("numpy", "torch"), got):
                    if g.dtype != bf16 or not np.array_equal(g.astype(np.float32), np.asarray(want, np.float32),
                                                             equal_nan=True):
                        failures.append(f"{op} bfloat16 {shape} axis={axis} from {way}")
    return failures


def half_bench(rng, name: str = "bfloat16") -> list[tuple]:
    """Sums of PyTorch tensors of ``name`` (float16 or bfloat16) against torch.sum, the result in that dtype."""
    import torch

    dtype = getattr(torch, name)
    flush = L2Flusher()
    rows = []
    for shape, axis in (((1 << 20,), None), ((1 << 26,), None), ((8192, 8192), 1), ((8192, 8192), 0)):
        t = torch.randn(shape, device="cuda").to(dtype)
        r = torch.empty(() if axis is None else (shape[1 - axis],), dtype=dtype, device="cuda")
        autotune.sum(t, axis=axis, out=r)
        same = torch.sum(t.float()) if axis is None else torch.sum(t.float(), dim=axis)
        close = bool(torch.allclose(r.float(), same, rtol=1e-2, atol=1e-2 * float(same.abs().max())))
        times = {"autotune": bench(lambda: autotune.sum(t, axis=axis, out=r), flush=flush).median_ms,
                 "torch": bench(lambda: torch.sum(t) if axis is None else torch.sum(t, dim=axis),
                                flush=flush).median_ms}
        gbps = {k: t.numel() * 2 / v / 1e6 for k, v in times.items()}
        rows.append(("x".join(map(str, shape)), axis, close, gbps["autotune"], gbps["torch"],
                     times["torch"] / times["autotune"]))
    return rows


def print_half_bench(rng, names: tuple[str, ...]) -> None:
    print("\n| dtype | shape | axis | close to torch's float32 sum | autotune GB/s | torch GB/s | autotune vs torch |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        for shape, axis, close, a, t, ratio in half_bench(rng, name):
            print(f"| {name} | {shape} | {axis} | {close} | {a:.0f} | {t:.0f} | {ratio:.2f}x |", flush=True)


def print_bfloat16(rng) -> list[str]:
    t0 = time.time()
    failures = check_bfloat16(rng)
    print(f"bfloat16 checks: {len(failures)} failures {failures[:10]} ({time.time() - t0:.0f} s)", flush=True)
    print_half_bench(rng, ("bfloat16",))
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes in the checks")
    parser.add_argument("--iterations", type=int, default=200, help="iterations of the stream test per variant")
    parser.add_argument("--dtypes-only", action="store_true", help="only part 5: int32, int64 and float16")
    parser.add_argument("--bfloat16-only", action="store_true", help="only part 6: bfloat16 (NumPy and PyTorch)")
    parser.add_argument("--half-bench", action="store_true",
                        help="only the float16 and bfloat16 sums against torch.sum (part 6's timing, both dtypes)")
    parser.add_argument("--host-only", action="store_true", help="only the new-output checks and part 3")
    parser.add_argument("--axis-only", action="store_true", help="only part 4: reductions along an axis")
    parser.add_argument("--allocator-rounds", type=int, default=1,
                        help="part 3 this many times with the result pool, and as many with Numba's allocator "
                             "(alternating)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    if args.dtypes_only:
        return 1 if print_narrow(rng) else 0
    if args.bfloat16_only:
        return 1 if print_bfloat16(rng) else 0
    if args.half_bench:
        print_half_bench(rng, ("float16", "bfloat16"))
        return 0
    if args.axis_only:
        return 0 if all(row[2] for row in print_axis_bench(rng)) else 1
    t0 = time.time()
    failures = check_new_outputs(rng)
    if not args.host_only:
        failures += check_reductions(rng, args.quick) + check_matmul(rng)
    print(f"checks: {len(failures)} failures {failures[:10]} ({time.time() - t0:.0f} s)", flush=True)
    if args.host_only:
        print_host_times(rng, args.allocator_rounds)
        return 1 if failures else 0
    race = stream_race(args.iterations)
    print(f"stream test, wrong results of {args.iterations}: {race}", flush=True)
    print_host_times(rng, args.allocator_rounds)
    print_axis_bench(rng)
    failures += print_narrow(rng)
    return 1 if failures or race["stream="] else 0


if __name__ == "__main__":
    sys.exit(main())
