"""On the GPU: replayed calls computed through CUDA graphs (NOTES item 68) are right, and how much host time the
graphs save.

A kept plan replays as one CUDA graph from its second run (autotune/runtime/launch.py ``Plan``). This calls each
of several NumPy-style functions on PyTorch tensors eight times on the same input tensor, its contents rewritten
before each call, with a new result each time (some kept, so that results land at several addresses, some
dropped, so that addresses recur) and into one ``out=``; every result is checked against float64 PyTorch. The
calls cover the plans' kinds: a memset and a launch (whole-array sums with atomics, column sums split over
blocks, split-K matmuls), a fill kernel and a launch, one launch, and several launches. Then it counts the
graphs made, and times ``host_time_parts.py`` in fresh processes with graphs on and off (``AUTOTUNE_GRAPHS=0``).

    cd lab && python3 replay_graphs_gpu.py
"""
from __future__ import annotations

import gc
import sys
import warnings

import torch
from host_time_parts import in_fresh_process  # lab/host_time_parts.py

import autotune
from autotune.runtime import kernel_launch

failures: list[str] = []


def cases() -> list[tuple[str, tuple, callable, callable, tuple[float, float]]]:
    """(name, input shape and dtype, the call, float64 reference, (a, b)): the error bound is a times the reference
    of |x| (the accumulation's, through any cancellation) plus b times |the result| (a half-precision result's
    rounding). A replay that missed its output's zeroing is off by a whole result: far over either."""
    f32, f16 = torch.float32, torch.float16
    return [
        ("sum of 2^20 float32", ((1 << 20,), f32), lambda x, **k: autotune.sum(x, **k), lambda x: x.sum(), (1e-5, 0)),
        ("sum of 2^24 float32", ((1 << 24,), f32), lambda x, **k: autotune.sum(x, **k), lambda x: x.sum(), (1e-5, 0)),
        ("max of 2^20 float32", ((1 << 20,), f32), lambda x, **k: autotune.max(x, **k), lambda x: x.max(), (0, 0)),
        ("sum of 2^20 float16", ((1 << 20,), f16), lambda x, **k: autotune.sum(x, **k), lambda x: x.sum(), (1e-5, 1e-3)),
        ("column sums of 8192 x 1000", ((8192, 1000), f32), lambda x, **k: autotune.sum(x, axis=0, **k),
         lambda x: x.sum(0), (1e-5, 0)),
        ("row sums of 1000 x 8192", ((1000, 8192), f32), lambda x, **k: autotune.sum(x, axis=1, **k),
         lambda x: x.sum(1), (1e-5, 0)),
        ("dot of 2^20 float32", ((2, 1 << 20), f32), lambda x, **k: autotune.dot(x[0], x[1], **k),
         lambda x: x[0] @ x[1], (1e-5, 0)),
        ("matmul 1000^3 float32", ((2, 1000, 1000), f32), lambda x, **k: autotune.matmul(x[0], x[1], **k),
         lambda x: x[0] @ x[1], (1e-5, 0)),
        ("matmul 777 x 333 x 555 float32", ((777 * 555 + 555 * 333,), f32),
         lambda x, **k: autotune.matmul(*_operands(x), **k), lambda x: _operands(x)[0] @ _operands(x)[1], (1e-5, 0)),
        ("matmul 1024^3 float16", ((2, 1024, 1024), f16), lambda x, **k: autotune.matmul(x[0], x[1], **k),
         lambda x: x[0] @ x[1], (1e-5, 1e-3)),
    ]


def _operands(x):
    """A 777 x 555 and a 555 x 333 matrix, both contiguous views of the flat ``x``."""
    return x[:777 * 555].view(777, 555), x[777 * 555:].view(555, 333)


def check_case(name, shape_dtype, call, reference, rtol, g) -> None:
    a, b = rtol
    shape, dtype = shape_dtype
    x = torch.empty(shape, dtype=dtype, device="cuda")
    kept, out = [], None
    for i in range(8):
        x.copy_(torch.randn(shape, generator=g, device="cpu").to(dtype))  # the same tensor, new contents
        want = reference(x.double())
        got = call(x)
        if out is None:
            out = torch.full_like(got, float("nan"))
        else:
            out.fill_(float("nan"))
        into = call(x, out=out)
        bound = a * reference(x.double().abs()).abs().max().item() + b * want.abs().max().item()
        for what, r in (("new result", got), ("out=", into)):
            err = (r.double() - want).abs().max().item()
            if not err <= bound:
                failures.append(f"{name}, call {i}, {what}: error {err:.3g} over {bound:.3g}")
        if i % 2:
            kept.append(got)  # kept: the next result lands elsewhere; dropped: its block comes back
    torch.cuda.synchronize()


def graphs_made() -> int:
    return sum(isinstance(o, kernel_launch.GraphLaunch) for o in gc.get_objects())


def host_times(graphs: bool) -> dict[str, float]:
    text, table = in_fresh_process({kernel_launch.GRAPHS_ENV: "1" if graphs else "0"})
    print(text)
    if table is None:
        failures.append(f"host_time_parts.py (graphs {graphs}) failed: {text[-1500:]}")
    return table or {}


def main() -> int:
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    warnings.filterwarnings("error", ".*could not be captured into a CUDA graph", RuntimeWarning)  # a refusal fails
    g = torch.Generator().manual_seed(68)
    for case in cases():
        check_case(*case, g)
        print(f"checked {case[0]}: {graphs_made()} graphs alive so far")
    if graphs_made() == 0:
        failures.append("no replay went through a CUDA graph")
    on, off = host_times(True), host_times(False)
    print("| host us per call | graphs on | AUTOTUNE_GRAPHS=0 |\n| --- | --- | --- |")
    for name in ("torch.sum(t)", "autotune.sum(t)", "autotune.sum(t, out=r)", "written.replay_onto(plan, new, pointer)"):
        print(f"| {name} | {on.get(name, float('nan')):.2f} | {off.get(name, float('nan')):.2f} |")
    print(f"\n{len(failures)} failed" + (":\n" + "\n".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
