"""On the GPU: where the host time of a replayed ``autotune.sum(t)`` on a PyTorch tensor goes (issue 57: 15.5 us
against ``torch.sum``'s 10.4 on an H100, NOTES item 63). Times, in one process, the whole call and each of its
parts alone, each as lab/interop_gpu.py times host time (batches of 100 calls, the GPU waited for untimed between
them, median of alternating rounds):

- the whole calls: ``torch.sum(t)``, ``autotune.sum(t)``, ``autotune.sum(t, out=r)``;
- the replay's bookkeeping: ``library_of(t)``, building the ``Replay`` (its key from the tensor), finding the kept
  plan;
- the new result: ``TORCH.new`` (a 0-d tensor from PyTorch's allocator and its ``record_stream``), and each half;
- the launch: the kept plan moved onto a result made once (``Written.replay_onto``), and each of its steps alone
  (a prepared ``cuLaunchKernel``, or a ``cuMemsetD32Async``, through cuda.bindings), the memset also with its
  arguments as cuda.bindings' types made once;
- PyTorch's private query of its current stream's handle, which would tell when ``record_stream`` can be left out
  (the current stream being the launch stream), against the 1.3 us that call costs.

The parts do not add up exactly to the whole (each is timed in its own loop, with its own cache state), but say
which of them is worth shortening.

    cd lab && python host_time_parts.py [--rounds 5] [--size 1048576]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import warnings

import torch
from interop_gpu import timed  # lab/interop_gpu.py

import autotune
from autotune.runtime import calls, launch, libraries
from autotune.runtime.streams import as_stream


def parts(t, out) -> dict:
    """The calls to time, name -> a function of no arguments."""
    stream = as_stream(None)
    call = ("reduce", "sum", None, False, None)
    replay = calls.Replay(call, (t, None), None, stream, libraries.TORCH)
    plan, written = calls._replays[replay.key]  # kept by the first call
    new, pointer = libraries.TORCH.new(written, stream)
    written.replay_onto(plan, new, pointer)  # its launches moved onto ``new``, kept per pointer
    moved = written.moves.get(pointer)  # a Plan: from its second run, one CUDA graph launch
    steps = launch._calls(moved._steps) if moved is not None else None  # its steps one by one
    template = torch.empty((), dtype=t.dtype, device=t.device)
    torch_stream = torch.cuda.default_stream(t.device)
    found = {
        "torch.sum(t)": lambda: torch.sum(t),
        "autotune.sum(t)": lambda: autotune.sum(t),
        "autotune.sum(t, out=r)": lambda: autotune.sum(t, out=out),
        "library_of(t)": lambda: libraries.library_of(t),
        "Replay(...) with its key": lambda: calls.Replay(call, (t, None), None, stream, libraries.TORCH),
        "the kept plan found": lambda: calls._replays.get(replay.key),
        "TORCH.new (allocation + record_stream)": lambda: libraries.TORCH.new(written, stream),
        "torch.empty_like(0-d template)": lambda: torch.empty_like(template),
        "tensor.record_stream(s)": lambda: new.record_stream(torch_stream),
        "written.replay_onto(plan, new, pointer)": lambda: written.replay_onto(plan, new, pointer),
    }
    for i, (step, kind) in enumerate(zip(steps or (), plan._steps)):
        found[f"step {i} alone ({type(kind).__name__})"] = step
    memsets = [step for step in plan._steps if isinstance(step, launch.Memset)]
    if memsets:  # the driver memset with its arguments as cuda.bindings' own types, made once
        from cuda.bindings import driver as bindings

        m = memsets[0]
        typed = (bindings.CUdeviceptr(m.pointer), bindings.CUstream(m.stream))
        found["cuMemsetD32Async, int arguments"] = lambda: bindings.cuMemsetD32Async(m.pointer, 0, m.words, m.stream)
        found["cuMemsetD32Async, typed arguments"] = lambda: bindings.cuMemsetD32Async(typed[0], 0, m.words, typed[1])
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # private: what would tell record_stream apart
    if raw_stream is not None:
        index = t.device.index
        found["torch._C._cuda_getCurrentRawStream (private)"] = lambda: raw_stream(index)
    return found


def in_fresh_process(env: dict[str, str], *args: str) -> tuple[str, dict[str, float] | None]:
    """This script run in a fresh process, ``env`` over this one's environment: its output, and its table as
    {call: us} (None where it failed). Each setting (a database, AUTOTUNE_GRAPHS) gets a process of its own, so that
    nothing kept by the calls before it (plans, graphs, kernels) is measured."""
    run = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env={**os.environ, **env},
                         cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True, text=True)
    table = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| `(.+)` \| ([0-9.]+) \|$", run.stdout, re.M)}
    return run.stdout + run.stderr, table if run.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=1 << 20)
    a = ap.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    t = torch.randn(a.size, device="cuda")
    out = torch.empty((), device="cuda")
    expected = float(t.double().sum())
    for got in (autotune.sum(t), autotune.sum(t), autotune.sum(t, out=out)):  # the plans kept
        assert abs(float(got) - expected) <= 1e-5 * float(t.abs().double().sum()), (float(got), expected)
    print(f"host us per call, median of {a.rounds} alternating rounds ({torch.cuda.get_device_name()}, "
          f"{a.size} float32)")
    print("| call | us |\n| --- | --- |")
    for name, us in timed(parts(t, out), torch.cuda.synchronize, a.rounds):
        print(f"| `{name}` | {us:.2f} |")


if __name__ == "__main__":
    main()
