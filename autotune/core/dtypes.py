"""bfloat16: its NumPy dtype and how kernels see it.

NumPy has no bfloat16; ml_dtypes gives it one (``np.dtype("bfloat16")`` once ml_dtypes is imported), as JAX and
CuPy 14 use, so host arrays, references and results have the dtype users expect. Numba's simulator and its
array typing have no bfloat16, so a kernel takes a bfloat16 array as its 16-bit patterns (``uint16``), widens
each element to float32 exactly (the pattern is a float32's top half) and rounds a float32 result back to
nearest-even bits (``intrinsics.bf16_to_f32`` / ``f32_to_bf16``). PyTorch's bfloat16 tensors export no CUDA Array
Interface and NumPy has no bfloat16 PyTorch takes, so they travel both ways as an int16 view of the same memory
(``torch_bits``, ``numpy_from_torch``, ``torch_from_numpy``, ``torch_from_device``; ``torch_dtype`` names
PyTorch's dtypes; PyTorch imported only when called).
"""
from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
HALF = ("float16", "bfloat16")  # the 16-bit floats: summed and multiplied in float32
STORAGE = {"bfloat16": "uint16"}  # the kernel-side element type of dtypes Numba cannot type


def numpy_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, with "bfloat16" known (this module imports ml_dtypes, which registers it)."""
    return np.dtype(dtype)


def storage(dtype: str) -> str:
    """The element type a kernel's signature names for ``dtype``: its own, or for bfloat16 its bits."""
    return STORAGE.get(dtype, dtype)


def kernel_view(d):
    """A device array as a kernel takes it: a bfloat16 array viewed as its uint16 bits, anything else as it is."""
    return retyped(d, np.dtype(np.uint16)) if d is not None and d.dtype == BFLOAT16 else d


def retyped(d, dtype: np.dtype):
    """The device array ``d`` viewed as ``dtype`` of the same item size: the same memory, kept alive by the view.

    numba-cuda 0.30's ``DeviceNDArray.view`` fails for every dtype (it passes its shape as a list to a cached
    constructor), so the view is made from the array's CUDA Array Interface with ``cuda.from_cuda_array_interface``;
    the simulator's arrays have no such interface and a working ``view`` (NumPy's)."""
    interface = getattr(d, "__cuda_array_interface__", None)
    if interface is None:
        return d.view(dtype)
    from numba import cuda

    typestr = dtype.name if dtype == BFLOAT16 else dtype.str  # "bfloat16": a NumPy name, where its str is "<V2"
    return cuda.from_cuda_array_interface(dict(interface, typestr=typestr), owner=d, sync=False)


def is_torch_bfloat16(x: Any) -> bool:
    """Whether ``x`` is a PyTorch bfloat16 tensor (without importing PyTorch)."""
    return type(x).__module__.startswith("torch") and str(getattr(x, "dtype", "")) == "torch.bfloat16"


def torch_bits(x: Any) -> Any:
    """A PyTorch bfloat16 tensor's int16 view: the same memory, which PyTorch exports by the CUDA Array Interface."""
    import torch

    return x.view(torch.int16)


@functools.cache
def torch_dtype(name: str) -> Any:
    """PyTorch's dtype named as NumPy names it: float32, float64, float16, bfloat16, int32, int64."""
    import torch

    return getattr(torch, name)


def numpy_from_torch(x: Any) -> np.ndarray:
    """The NumPy array viewing the memory of the PyTorch CPU tensor ``x``; a bfloat16 one through its bits, as
    ml_dtypes' bfloat16 (``Tensor.numpy`` refuses bfloat16)."""
    return torch_bits(x).numpy().view(BFLOAT16) if is_torch_bfloat16(x) else x.numpy()


def torch_from_numpy(value: np.ndarray) -> Any:
    """The PyTorch CPU tensor viewing the memory of the NumPy array ``value``; a bfloat16 one through its bits
    (``torch.from_numpy`` takes no ml_dtypes array)."""
    import torch

    if value.dtype == BFLOAT16:
        return torch.from_numpy(value.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(value)


def torch_from_device(d: Any) -> Any:
    """The PyTorch CUDA tensor viewing the memory of the Numba device array ``d`` (by its CUDA Array Interface);
    a bfloat16 one through its bits (PyTorch imports no bfloat16 by that interface)."""
    import torch

    if d.dtype == BFLOAT16:
        return torch.as_tensor(retyped(d, np.dtype(np.int16))).view(torch.bfloat16)
    return torch.as_tensor(d)
