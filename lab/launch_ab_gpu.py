"""On the GPU: the host time of one replayed launch through cuda.bindings against the driver called through ctypes,
and of a new PyTorch result as made today against one made from parts kept with the plan (issue 57).

A replayed ``autotune.sum(t)`` of 2^20 float32 on a tensor spends about 3.3 us of its 10-12 in ``cuLaunchKernel``
through cuda.bindings (its arguments converted at each call) and 2.5 us making the result tensor
(``libraries._torch_result``: device index, stream key, two dict lookups, the current-stream query). This times,
in one process, batches of 100 calls (the GPU waited for untimed between batches), median of alternating rounds:

- the kept plan's launch as replayed today (``BufferedLaunch``), its ``cuLaunchKernel`` called with the arguments
  unpacked beforehand, and the same launch through ``ctypes`` on libcuda (CDLL, which releases the GIL, and
  PyDLL, which keeps it), with every argument a ctypes value made once;
- the same for the plan's memset where it has one;
- the plan's steps captured into a CUDA graph, launched with one ``cuGraphLaunch`` (and the launch alone as a
  graph of one node);
- ``TORCH.new`` against ``torch.empty_like`` of the kept template and the current-stream query alone.

    cd lab && python3 launch_ab_gpu.py [--rounds 7]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import warnings
from typing import Any

import torch
from interop_gpu import timed  # lab/interop_gpu.py

import autotune
from autotune.runtime import calls, launch, libraries
from autotune.runtime.streams import as_stream


def ctypes_launch(dll, go) -> callable:
    """``go`` (a BufferedLaunch) through ``dll``'s cuLaunchKernel, its arguments ctypes values made once."""
    f = dll.cuLaunchKernel
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    args = (ctypes.c_void_p(int(go._function)), *(ctypes.c_uint(d) for d in go._dims),
            ctypes.c_void_p(int(go._stream)), ctypes.c_void_p(go._params), ctypes.c_void_p(0))

    def call():
        if f(*args):
            raise RuntimeError("cuLaunchKernel failed")
    return call


def ctypes_memset(dll, m) -> callable:
    f = dll.cuMemsetD32Async
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
    args = (ctypes.c_uint64(m.pointer), ctypes.c_uint(0), ctypes.c_size_t(m.words), ctypes.c_void_p(m.stream))

    def call():
        if f(*args):
            raise RuntimeError("cuMemsetD32Async failed")
    return call


def check(b, result) -> Any:
    err, *rest = result
    if err != b.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err!r}")
    return rest[0] if len(rest) == 1 else rest


def graph_launches(steps, plan, new, expected: float, scale: float) -> dict:
    """The plan's steps captured into a CUDA graph on a stream of its own (memset and launch with the same
    arguments), launched with one cuGraphLaunch on the plan's stream; and the launch alone as a graph of one node.
    The graph's result is checked first."""
    from cuda.bindings import driver as b

    stream = check(b, b.cuStreamCreate(1))  # CU_STREAM_NON_BLOCKING

    def captured(which) -> Any:
        check(b, (b.cuStreamBeginCapture(stream, b.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0],
                  None))
        for step, kind in zip(steps, plan._steps):
            if not which(kind):
                continue
            if isinstance(kind, launch.Memset):
                check(b, (b.cuMemsetD32Async(step.pointer, 0, step.words, stream)[0], None))
            else:
                check(b, (b.cuLaunchKernel(step._function, *step._dims, stream, step._params, 0)[0], None))
        graph = check(b, b.cuStreamEndCapture(stream))
        return check(b, b.cuGraphInstantiate(graph, 0))

    whole, only_launch = captured(lambda kind: True), captured(lambda kind: isinstance(kind, launch.PackedLaunch))
    launch_stream = b.CUstream(0)
    new.fill_(float("nan"))
    check(b, (b.cuGraphLaunch(whole, launch_stream)[0], None))
    torch.cuda.synchronize()
    assert abs(float(new) - expected) <= 1e-5 * scale, (float(new), expected)
    print("the plan as one graph computed the sum")
    graph_launch, success = b.cuGraphLaunch, b.CUresult.CUDA_SUCCESS

    def go(exe):
        def call():
            err, = graph_launch(exe, launch_stream)
            if err != success:
                raise RuntimeError(f"{err!r}")
        return call
    return {"the plan as one graph (cuGraphLaunch)": go(whole), "the launch alone as a graph": go(only_launch)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    t = torch.randn(1 << 20, device="cuda")
    expected = float(t.double().sum())
    for _ in range(2):
        got = float(autotune.sum(t))
        assert abs(got - expected) <= 1e-5 * float(t.abs().double().sum()), (got, expected)
    stream = as_stream(None)
    replay = calls.Replay(("reduce", "sum", None, False, None), (t, None), None, stream, libraries.TORCH)
    plan, written = calls._replays[replay.key]
    new, pointer = libraries.TORCH.new(written, stream)
    written.replay_onto(plan, new, pointer)
    steps = launch._calls(written.moves[pointer]._steps)
    cdll, pydll = ctypes.CDLL("libcuda.so.1"), ctypes.PyDLL("libcuda.so.1")
    found = {}
    for i, (step, kind) in enumerate(zip(steps, plan._steps)):
        if isinstance(kind, launch.PackedLaunch) and isinstance(step, launch.kernel_launch.BufferedLaunch):
            go, dims, fn, st, params = step, step._dims, step._launch, step._stream, step._params
            found[f"step {i}: BufferedLaunch (today)"] = go
            found[f"step {i}: cuLaunchKernel, arguments unpacked once"] = \
                lambda fn=fn, f=go._function, d=dims, s=st, p=params: fn(f, *d, s, p, 0)
            found[f"step {i}: ctypes CDLL cuLaunchKernel"] = ctypes_launch(cdll, go)
            found[f"step {i}: ctypes PyDLL cuLaunchKernel"] = ctypes_launch(pydll, go)
        elif isinstance(kind, launch.Memset):
            found[f"step {i}: Memset (today)"] = step
            found[f"step {i}: ctypes CDLL cuMemsetD32Async"] = ctypes_memset(cdll, step)
            found[f"step {i}: ctypes PyDLL cuMemsetD32Async"] = ctypes_memset(pydll, step)
    if any(isinstance(kind, launch.Memset) for kind in plan._steps):  # the ctypes steps compute the sum too
        new.fill_(float("nan"))
        for name, call in found.items():
            if "CDLL" in name:
                call()
        torch.cuda.synchronize()
        assert abs(float(new) - expected) <= 1e-5 * float(t.abs().double().sum()), (float(new), expected)
        print("the plan's steps through ctypes computed the sum")
    found.update(graph_launches(steps, plan, new, expected, float(t.abs().double().sum())))
    template, _ = next(iter(libraries._torch_targets.values()))
    raw = torch._C._cuda_getCurrentRawStream
    found["TORCH.new (today)"] = lambda: libraries.TORCH.new(written, stream)
    found["torch.empty_like(template) + data_ptr"] = lambda: (lambda x: (x, x.data_ptr()))(torch.empty_like(template))
    found["current-stream query"] = lambda: raw(0)
    found["torch.sum(t)"] = lambda: torch.sum(t)
    found["autotune.sum(t)"] = lambda: autotune.sum(t)
    print(f"host us per call, median of {a.rounds} alternating rounds of 100-call batches "
          f"({torch.cuda.get_device_name()}, 2^20 float32 sum plan: {[type(s).__name__ for s in plan._steps]})")
    print("| call | us |\n| --- | --- |")
    for name, us in timed(found, torch.cuda.synchronize, a.rounds):
        print(f"| {name} | {us:.2f} |")
    torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main())
