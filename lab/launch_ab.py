"""On the GPU: the host time of one replayed launch (issue 57), through cuda.bindings' ``cuLaunchKernel`` (what
``runtime/kernel_launch.BufferedLaunch`` calls) against the same driver function called through ctypes with its
arguments converted once, and what ``record_stream`` and ``torch.empty_like`` cost beside them. The kept plan of a
``autotune.sum(t)`` on a PyTorch tensor gives the launch: the same function, grid, stream and parameter buffer in
every form. After the ctypes launches the result is checked against float64 PyTorch.

    cd lab && python launch_ab.py [--rounds 7] [--size 1048576]
"""
from __future__ import annotations

import argparse
import ctypes
import warnings

import torch
from interop_gpu import timed  # lab/interop_gpu.py

import autotune
from autotune.runtime import calls, libraries
from autotune.runtime.kernel_launch import BufferedLaunch
from autotune.runtime.streams import as_stream


def ctypes_launch(launch: BufferedLaunch):
    """The same launch through ctypes: libcuda's cuLaunchKernel with every argument a ctypes value made once."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    uint = ctypes.c_uint
    fn.argtypes = [ctypes.c_void_p] + [uint] * 7 + [ctypes.c_void_p] * 3
    args = (ctypes.c_void_p(int(launch._function)), *(uint(d) for d in launch._dims),
            ctypes.c_void_p(int(launch._stream)), ctypes.c_void_p(launch._params), None)

    def go():
        err = fn(*args)
        if err:
            raise RuntimeError(f"cuLaunchKernel: {err}")
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=1 << 20)
    a = ap.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    t = torch.randn(a.size, device="cuda")
    expected = float(t.double().sum())
    for _ in range(2):
        autotune.sum(t)  # the plan kept, its launch moved onto the result
    stream = as_stream(None)
    replay = calls.Replay(("reduce", "sum", None, False, None), (t, None), None, stream, libraries.TORCH)
    plan, written = calls._replays[replay.key]
    new, pointer = libraries.TORCH.new(written, stream)
    written.replay_onto(plan, new, pointer)
    steps = written.moves[pointer]
    launches = [s for s in steps if isinstance(s, BufferedLaunch)]
    print(f"{len(steps)} step(s), {len(launches)} buffered launch(es): {[type(s).__name__ for s in steps]}")
    if len(steps) != 1 or not launches:
        print("not a single buffered launch: nothing to compare")
        return
    bindings_go, ctypes_go = launches[0], ctypes_launch(launches[0])
    new.fill_(float("nan"))
    ctypes_go()
    torch.cuda.synchronize()
    got = float(new)
    tolerance = 1e-5 * float(t.abs().double().sum())
    print(f"ctypes launch result {got} (float64 {expected}): {'ok' if abs(got - expected) <= tolerance else 'WRONG'}")
    template = torch.empty((), device="cuda")
    side = torch.cuda.default_stream()
    found = {"torch.sum(t)": lambda: torch.sum(t), "autotune.sum(t)": lambda: autotune.sum(t),
             "cuLaunchKernel via cuda.bindings": bindings_go, "cuLaunchKernel via ctypes": ctypes_go,
             "torch.empty_like(0-d)": lambda: torch.empty_like(template),
             "record_stream(default)": lambda: new.record_stream(side),
             "torch.cuda.current_stream()": torch.cuda.current_stream}
    print(f"host us per call, median of {a.rounds} alternating rounds ({torch.cuda.get_device_name()})")
    print("| call | us |\n| --- | --- |")
    for name, us in timed(found, torch.cuda.synchronize, a.rounds):
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
