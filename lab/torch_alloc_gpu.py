"""On the GPU: host microseconds of the ways to make a new PyTorch CUDA result tensor from Python, beside
``torch.sum(t)`` and ``autotune.sum(t)`` of 2^20 float32 (issue 57: a call that returns a new tensor spends its
extra host time in PyTorch's allocation), and ``autotune.sum(t)`` with its results made as before
(``torch.empty`` with dtype and device, ``before``) and as now (autotune/runtime/libraries.py), alternating in one
process. Measured as lab/interop_gpu.py measures host time.

    cd lab && python torch_alloc_gpu.py
"""
import warnings

import torch
from interop_gpu import timed  # lab/interop_gpu.py

import autotune
from autotune.core.dtypes import torch_dtype
from autotune.runtime import libraries
from autotune.runtime.streams import stream_key

NOW = libraries.TORCH.new


_targets = {}


def before(written, stream):
    """libraries._torch_result as it was before the kept 0-d tensor (C-order results only: what this script makes):
    device and stream kept per (device, stream) as then, the dtype looked up and the tensor made by ``torch.empty``."""
    key = (written.context.device.id, stream_key(stream))
    target = _targets.get(key)
    if target is None:
        device = torch.device("cuda", key[0])
        target = _targets[key] = (device, torch.cuda.default_stream(device) if key[1] == 0 else
                                  torch.cuda.ExternalStream(key[1], device=device))
    device, torch_stream = target
    tensor = torch.empty(written.shape, dtype=torch_dtype(written.dtype), device=device)
    tensor.record_stream(torch_stream)
    return tensor, tensor.data_ptr()


def made(new):
    """``autotune.sum`` with PyTorch results made by ``new``."""
    def call(t):
        object.__setattr__(libraries.TORCH, "new", new)
        try:
            return autotune.sum(t)
        finally:
            object.__setattr__(libraries.TORCH, "new", NOW)
    return call


def main() -> None:
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    t = torch.randn(1 << 20, device="cuda")
    device, dtype = t.device, t.dtype
    template = torch.empty((), dtype=dtype, device=device)
    stream = torch.cuda.default_stream()
    sum_before, sum_now = made(before), made(NOW)
    for f in (sum_before, sum_now):
        assert abs(float(f(t)) - float(t.double().sum())) <= 1e-5 * float(t.abs().double().sum())
    calls = {
        "torch.sum(t)": lambda: torch.sum(t),
        "autotune.sum(t)": lambda: autotune.sum(t),
        "autotune.sum(t), results as before": lambda: sum_before(t),
        "autotune.sum(t), results as now": lambda: sum_now(t),
        "torch.empty((), dtype=, device=)": lambda: torch.empty((), dtype=dtype, device=device),
        "torch.empty((), device=)": lambda: torch.empty((), device=device),
        "template.new_empty(())": lambda: template.new_empty(()),
        "torch.empty_like(template)": lambda: torch.empty_like(template),
        "template.new_empty(()).record_stream(s)": lambda: template.new_empty(()).record_stream(stream),
    }
    print(f"host us per call, median of 5 alternating rounds ({torch.cuda.get_device_name()})")
    print("| call | us |\n| --- | --- |")
    for name, us in timed(calls, torch.cuda.synchronize, 5):
        print(f"| `{name}` | {us:.2f} |")


if __name__ == "__main__":
    main()
