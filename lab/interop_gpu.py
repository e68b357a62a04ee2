"""On the GPU: results in the caller's array library, checked, and the host time of a call that returns them.

    taskset -c 5 python lab/interop_gpu.py            (CuPy and PyTorch where installed; JAX too, if it is)
    taskset -c 5 python lab/interop_gpu.py --torch    (also autotune.torch: gradients, torch.compile)

Checks, each against float64 NumPy on fresh random data with NaN planted for max and min, outputs poisoned
with NaN first; any failure is listed and the exit status is 1:

- every function (sum, max, min, nanmax, nanmin over all, one axis and with keepdims; dot; matmul) on each
  library's arrays gives that library's type on the input's device (PyTorch: same device index; CuPy: a
  ``cupy.ndarray``; Numba: a device array; NumPy: NumPy; a JAX array, read through DLPack: a Numba device array);
- bfloat16 PyTorch tensors give bfloat16 tensors without ``out=``; float16 and int32 keep NumPy's dtypes;
- ``out=`` of each library (and a NumPy ``out=`` for a device input) is written and returned;
- a PyTorch result is a view, not a copy: its memory returns to autotune's result pool with the tensor;
- a call on a non-blocking PyTorch stream (``stream=``) reads the data its producer wrote there;
- with ``--torch``: ``autotune.torch.matmul``'s gradient against ``torch.matmul``'s on the same data, and
  ``torch.compile(fullgraph=True)`` (inductor) of a function of ``autotune.torch`` operators against eager.

Then host microseconds per call (the host's time issuing 2000 calls, in batches of 100 with the GPU waited for
untimed between them; median of 5 alternating rounds) of a 2^20 float32 sum: ``torch.sum(t)``,
``autotune.sum(t)`` (a tensor back), ``autotune.sum(t, out=r)``, PyTorch's allocation of a result tensor alone,
and the same with CuPy (``cupy.sum``). The issue's target: ``autotune.sum(t)`` at most ``torch.sum(t)``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import ml_dtypes
import numpy as np
from numba import cuda

import autotune

BF16 = np.dtype(ml_dtypes.bfloat16)
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def host(x) -> np.ndarray:
    from autotune.runtime.arrays import to_host

    return np.asarray(to_host(x))


def within_product_bound(got, A, B, ulps: float = 4.0) -> bool:
    """``got`` is ``A @ B`` within float32's bound for a sum of K products in any order: each element within
    ``ulps * K * eps * (|A| @ |B|)`` of the float64 product (an element near zero is no less exact than its terms
    allow: a relative check fails there for any summation order but NumPy's)."""
    got, A64, B64 = np.asarray(got, dtype=np.float64), A.astype(np.float64), B.astype(np.float64)
    bound = ulps * A.shape[1] * np.finfo(np.float32).eps * (np.abs(A64) @ np.abs(B64))
    return got.shape == (A.shape[0], B.shape[1]) and bool(np.all(np.abs(got - A64 @ B64) <= bound))


def within(got, want, scale, n: int, rel: float = 0.0, ulps: float = 4.0) -> bool:
    """``got`` is the float64 ``want`` within float32's bound for a sum of ``n`` terms in any order (``ulps * n *
    eps * scale``, ``scale`` the sum of the terms' magnitudes) plus ``rel * |want|`` (a result rounded to a
    narrower type); NaN exactly where ``want`` has NaN. A relative check fails for sums near zero whatever the
    order of summation."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    bound = ulps * n * np.finfo(np.float32).eps * np.asarray(scale, dtype=np.float64) + rel * np.abs(want)
    finite = ~np.isnan(want)
    return bool(np.all(np.abs(got - want)[finite] <= np.broadcast_to(bound, want.shape)[finite]))


def matches(op: str, got, x: np.ndarray, axis, keepdims: bool) -> bool:
    """NumPy's reduction ``op`` of ``x``: max and min exactly (the result is one of the elements), a sum within
    float32's bound (``within``)."""
    want = reference(op, x, axis, keepdims)
    if op != "sum":
        got = np.asarray(got, dtype=np.float64)
        return got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
    scale = np.nansum(np.abs(x.astype(np.float64)), axis=axis, keepdims=keepdims)
    return within(got, want, scale, x.size if axis is None else x.shape[axis])


def reference(op: str, x: np.ndarray, axis, keepdims: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return getattr(np, op)(x.astype(np.float64), axis=axis, keepdims=keepdims)


def libraries():
    """(name, to library, expected type check, device of) for each library installed."""
    found = [("numpy", lambda a: a, lambda r: isinstance(r, (np.ndarray, np.generic))),
             ("numba", cuda.to_device, lambda r: cuda.is_cuda_array(r) and type(r).__module__.startswith("numba"))]
    try:
        import torch

        found.append(("torch", lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda(),
                      lambda r: isinstance(r, torch.Tensor) and r.is_cuda and r.device.index == 0))
    except ImportError:
        print("PyTorch not installed: its checks skipped")
    try:
        import cupy

        found.append(("cupy", cupy.asarray, lambda r: isinstance(r, cupy.ndarray)))
    except ImportError:
        print("CuPy not installed: its checks skipped")
    try:
        import jax.numpy as jnp

        found.append(("jax", jnp.asarray, lambda r: cuda.is_cuda_array(r)))
    except ImportError:
        pass
    return found


def check_functions(rng) -> None:
    x = rng.standard_normal((64, 257)).astype(np.float32)
    x[3, 7] = np.nan
    A, B = rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 48)).astype(np.float32)
    v = rng.standard_normal(1000).astype(np.float32)
    for name, make, is_library in libraries():
        for op in ("sum", "max", "min", "nanmax", "nanmin"):
            for axis, keepdims in ((None, False), (1, False), (0, True)):
                got = getattr(autotune, op)(make(x), axis=axis, keepdims=keepdims)
                check(is_library(got) and matches(op, host(got), x, axis, keepdims),
                      f"{name}: {op}(axis={axis}, keepdims={keepdims}) type {type(got).__name__}")
        got = autotune.dot(make(v), make(v))
        check(is_library(got) and within(host(got), v.astype(np.float64) @ v, v.astype(np.float64) @ v, v.size),
              f"{name}: dot")
        got = autotune.matmul(make(A), make(B))
        check(is_library(got) and within_product_bound(host(got), A, B), f"{name}: matmul")
        if name != "numpy":
            out = make(np.full((64,), np.nan, np.float32))
            check(autotune.sum(make(x), axis=1, out=out) is out and matches("sum", host(out), x, 1, False),
                  f"{name}: out= of {name}")
            host_out = np.full(64, np.nan, np.float32)
            check(autotune.max(make(x), axis=1, out=host_out) is host_out and
                  matches("max", host_out, x, 1, False), f"{name}: a NumPy out= of a {name} call")


def check_torch_specifics(rng) -> None:
    try:
        import torch
    except ImportError:
        return
    x = (rng.integers(0, 9, size=(33, 129)) + 2).astype(BF16)
    t = torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    got = autotune.sum(t, axis=1)
    want = x.astype(np.float64).sum(axis=1).astype(BF16)
    check(isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16 and got.is_cuda and
          np.array_equal(got.view(torch.int16).cpu().numpy().view(BF16), want), "torch: bfloat16 sum, no out=")
    h = torch.from_numpy(rng.standard_normal((64, 64)).astype(np.float16)).cuda()
    check(autotune.matmul(h, h).dtype == torch.float16, "torch: float16 matmul keeps float16")
    i = torch.from_numpy(rng.integers(-9, 9, (1000,)).astype(np.int32)).cuda()
    check(autotune.sum(i).dtype == torch.int64 and autotune.sum(i).item() == int(i.sum()), "torch: int32 sum is int64")
    import gc

    from autotune.runtime import result_pool

    result = autotune.sum(torch.ones((3, 1 << 20), device="cuda"), axis=0)  # 4 MiB: a block of its own
    torch.cuda.synchronize()
    before = result_pool.cached_bytes()
    del result
    gc.collect()
    check(result_pool.cached_bytes() >= before + (4 << 20),
          "torch: the result tensor views autotune's pool block (returned with the tensor): no copy")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.ones(1 << 22, device="cuda") * 3
        total = autotune.sum(y, stream=s)
    s.synchronize()
    check(total.item() == 3 * (1 << 22), "torch: a call on the producer's non-blocking stream")
    check_torch_replays(rng, torch)


def check_torch_replays(rng, torch) -> None:
    """Repeated calls on the same tensors replay the first call's launches onto new tensors from PyTorch's
    allocator: each result right, each its own tensor, in every layout and on a stream that is not PyTorch's."""
    x = torch.from_numpy(rng.standard_normal((5, 6, 7)).astype(np.float32)).cuda().permute(2, 1, 0)  # F-order
    results = [autotune.sum(x, axis=1, keepdims=True) for _ in range(4)]
    check(all(isinstance(r, torch.Tensor) and matches("sum", r.cpu().numpy(), x.cpu().numpy(), 1, True)
              for r in results) and len({r.data_ptr() for r in results}) == 4,
          "torch: replayed F-order sums, each right and its own tensor")
    b = torch.from_numpy(rng.standard_normal((40, 50)).astype(np.float32)).cuda().to(torch.bfloat16)
    terms = b.float().cpu().numpy().astype(np.float64)
    results = [autotune.sum(b, axis=0) for _ in range(3)]
    check(all(r.dtype == torch.bfloat16 and within(r.float().cpu().numpy(), terms.sum(axis=0),
                                                    np.abs(terms).sum(axis=0), 40, rel=2.0 ** -8) for r in results),
          "torch: replayed bfloat16 sums")
    s = torch.cuda.Stream()
    y = torch.ones(1 << 22, device="cuda")
    torch.cuda.synchronize()
    totals = [autotune.sum(y, stream=s) for _ in range(20)]  # PyTorch's current stream is not s
    s.synchronize()
    check(all(t.item() == 1 << 22 for t in totals), "torch: replayed sums on another stream than PyTorch's current one")
    from autotune.runtime.torch_stream import current_handle

    index = torch.cuda.current_device()
    with torch.cuda.stream(s):
        inside = current_handle(torch, index)
        totals = [autotune.sum(y) for _ in range(20)]  # launched on the default stream, PyTorch's current is s
    torch.cuda.synchronize()
    check(inside == s.cuda_stream and current_handle(torch, index) == torch.cuda.current_stream().cuda_stream,
          "torch: PyTorch's current stream read through its private query (autotune/runtime/torch_stream.py)")
    check(all(t.item() == 1 << 22 for t in totals), "torch: replayed sums while PyTorch's current stream is another")
    an = rng.standard_normal((96, 80)).astype(np.float32)
    a = torch.from_numpy(an).cuda()
    results = [autotune.matmul(a, a.T) for _ in range(3)]
    check(all(within_product_bound(r.cpu().numpy(), an, an.T) for r in results), "torch: replayed matmuls")


def check_torch_module(rng) -> None:
    import torch

    import autotune.torch as att

    for a_shape, b_shape in (((64, 48), (48, 80)), ((48,), (48, 80)), ((3, 64, 48), (48, 80))):
        a = torch.randn(a_shape, device="cuda", dtype=torch.float64, requires_grad=True)
        b = torch.randn(b_shape, device="cuda", dtype=torch.float64, requires_grad=True)
        w = torch.randn(torch.matmul(a, b).shape, device="cuda", dtype=torch.float64)
        (att.matmul(a, b) * w).sum().backward()
        ours = a.grad.clone(), b.grad.clone()
        a.grad = b.grad = None
        (torch.matmul(a, b) * w).sum().backward()
        check(all(torch.allclose(g, r, rtol=1e-10, atol=1e-10) for g, r in zip(ours, (a.grad, b.grad))),
              f"autotune.torch: matmul gradient {a_shape} @ {b_shape}")

    def f(a, b):
        c = att.matmul(a, b)
        return att.sum(c, axis=-1) + att.max(c, axis=-1)

    a, b = torch.randn(256, 128, device="cuda"), torch.randn(128, 64, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    check(torch.allclose(compiled(a, b), f(a, b), rtol=1e-5, atol=1e-4), "autotune.torch: torch.compile fullgraph")


def per_call_us(fn, synchronize, n=2000, batch=100) -> float:
    """Host microseconds per call: the time the host spends issuing ``n`` calls, in batches of ``batch`` after
    each of which the GPU is waited for untimed (so the launch queue never fills and no call waits for the GPU:
    a call whose GPU work outlasts its host time would otherwise be timed by the GPU)."""
    for _ in range(50):
        fn()
    synchronize()
    spent = 0.0
    for _ in range(n // batch):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        spent += time.perf_counter() - t0
        synchronize()
    return spent / (n // batch * batch) * 1e6


def host_times(rounds: int = 5) -> None:
    rows = []
    try:
        import torch

        t = torch.randn(1 << 20, device="cuda")
        r = torch.empty((), device="cuda")
        stream = torch.cuda.default_stream()
        rows += timed({"torch.sum(t)": lambda: torch.sum(t), "autotune.sum(t)": lambda: autotune.sum(t),
                       "autotune.sum(t, out=r)": lambda: autotune.sum(t, out=r),
                       # the pieces of a new result: PyTorch's allocation of it, as libraries._torch_result makes it
                       "torch.empty((), dtype, device)": lambda: torch.empty((), dtype=torch.float32, device=t.device),
                       "the same + record_stream": lambda: torch.empty((), dtype=torch.float32,
                                                                       device=t.device).record_stream(stream)},
                      torch.cuda.synchronize, rounds)
    except ImportError:
        pass
    try:
        import cupy

        x = cupy.random.standard_normal(1 << 20, dtype=cupy.float32)
        q = cupy.empty((), cupy.float32)
        sync = cupy.cuda.Device().synchronize
        rows += timed({"cupy.sum(x)": lambda: cupy.sum(x), "autotune.sum(x)": lambda: autotune.sum(x),
                       "autotune.sum(x, out=q)": lambda: autotune.sum(x, out=q)}, sync, rounds)
    except ImportError:
        pass
    print(f"\nhost us per call, 2^20 float32 sum, median of {rounds} alternating rounds ({cuda.get_current_device().name})")
    print("| call | us |\n| --- | --- |")
    for name, us in rows:
        print(f"| `{name}` | {us:.1f} |")


def timed(calls: dict, synchronize, rounds: int) -> list[tuple[str, float]]:
    samples = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            samples[name].append(per_call_us(fn, synchronize))
    return [(name, statistics.median(values)) for name, values in samples.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch", action="store_true", help="also check autotune.torch (gradients, torch.compile)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    rng = np.random.default_rng()
    check_functions(rng)
    check_torch_specifics(rng)
    if a.torch:
        check_torch_module(rng)
    host_times(a.rounds)
    print(f"\n{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
