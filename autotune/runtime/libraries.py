"""The array libraries callers use, and results handed back in the caller's own.

A call's result is made in the library of its first array argument that is not a NumPy array (NumPy when all
are), on that argument's side of the bus, without copying on the device:

| argument | read as | result |
| --- | --- | --- |
| NumPy array | copied to the GPU | NumPy array (a NumPy scalar where NumPy gives one) |
| Numba device array | in place | Numba device array |
| PyTorch CUDA tensor | in place (bfloat16 through its bits) | PyTorch tensor on its device, viewing the result |
| PyTorch CPU tensor | copied to the GPU | PyTorch CPU tensor (0-d where NumPy gives a scalar, as ``torch.sum``) |
| CuPy array | in place | CuPy array viewing the result |
| another CUDA Array Interface or DLPack producer on the GPU | in place | Numba device array |
| a DLPack producer on the host (JAX on the CPU) | copied to the GPU | NumPy array |

PyTorch and CuPy results view the memory of a new device array made by ``result_pool``: the library's array
keeps that array alive, and its block returns to the pool with the last view, by the pool's rule. A replayed call
(``calls.Replay``) instead writes a new tensor from PyTorch's own caching allocator, or a new CuPy array from
CuPy's pool where CuPy's current stream is the launch stream (``Library.new``): viewing a Numba array costs the
library several microseconds of reading its interface. A tensor that
records gradients is refused: autotune's functions record none (``autotune.torch`` has a differentiable matmul).
Which library an argument belongs to is worked out once per type (and per device for PyTorch).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.dtypes import BFLOAT16, numpy_from_torch, retyped, torch_dtype, torch_from_device, torch_from_numpy
from .streams import stream_key
from .torch_stream import current_handle

DLPACK_HOST = (1, 3)  # DLPack's kDLCPU, kDLCUDAHost: memory the host reads
DLPACK_DEVICE = (2, 13)  # kDLCUDA, kDLCUDAManaged


@dataclass(frozen=True)
class Library:
    """An array library as a call meets it: ``host`` (its arrays are read by copying them to the GPU, and its
    results copied back) and how a result is made one of its arrays (``wrap``: from a NumPy array for host
    libraries, from a Numba device array for the others)."""

    name: str
    host: bool
    wrap: Callable[[Any], Any] | None = None  # None: the array as it is
    # (launch.Written, stream) -> a new array of that output's form for work on the stream, and its pointer, or
    # None where it cannot make one; None, or None returned: a Numba array from the result pool, wrapped
    new: Callable[[Any, Any], tuple[Any, int] | None] | None = None

    def result(self, value: Any, scalar: bool = False) -> Any:
        """``value`` (a NumPy array for a host library, else a Numba device array) as this library's result;
        ``scalar``: NumPy gives a scalar here (a NumPy result is one; a PyTorch or CuPy one is 0-d)."""
        if self.wrap is not None:
            return self.wrap(value)
        return value[()] if scalar and self.host else value


def _cupy_from_device(d):
    import cupy

    if d.dtype == BFLOAT16:
        return cupy.asarray(retyped(d, np.dtype(np.uint16))).view(BFLOAT16)
    return cupy.asarray(d)


def _cupy_result(written, stream) -> tuple[Any, int] | None:
    """A new CuPy array of the form of a kept output (``launch.Written``) from CuPy's memory pool, and its pointer,
    where CuPy's current device is the output's and its current stream is the launch stream: CuPy's pool gives a
    freed block only to later allocations on the stream it was made for, so the block is not handed to other
    work before the launches that write it (the rule PyTorch's allocator follows, ``_torch_result``). None
    otherwise: the caller then wraps an array of the result pool, which orders its blocks by the launch stream
    itself. Made directly, not by viewing a Numba array (several microseconds of reading its interface)."""
    cupy = sys.modules["cupy"]  # imported: the call's arguments are CuPy arrays
    if written.context is not None and cupy.cuda.runtime.getDevice() != written.context.device.id:
        return None
    if cupy.cuda.get_current_stream().ptr != stream_key(stream):
        return None
    if written.dtype == "bfloat16":  # CuPy has no bfloat16 of its own: its bits, viewed
        array = cupy.empty(written.shape, np.uint16, order=written.order).view(BFLOAT16)
    else:
        array = cupy.empty(written.shape, written.dtype, order=written.order)
    return array, array.data.ptr


def _torch_result(written, stream) -> tuple[Any, int]:
    """A new PyTorch tensor of the form of a kept output (``launch.Written``), on the GPU it was made on, from
    PyTorch's caching allocator, and its pointer. The allocator gives the block to PyTorch's current stream;
    where that is not the launch stream (``torch_stream.current_handle``; unknown counts as not), ``record_stream``
    tells it that the launch stream uses it too, so the block is not handed to other work before the launches
    that write it are done. Made from a kept 0-d tensor of the result's dtype on its device (``empty_like`` of it
    for a 0-d result, ``new_empty`` otherwise): no device or dtype arguments for PyTorch to parse, about half the
    host time of ``torch.empty`` (lab/torch_alloc_gpu.py)."""
    torch = sys.modules["torch"]  # imported: the call's arguments are tensors
    index = torch.cuda.current_device() if written.context is None else written.context.device.id
    handle = stream_key(stream)
    key = (index, handle, written.dtype)
    target = _torch_targets.get(key)
    if target is None:
        target = _torch_target(torch, *key)
    template, torch_stream = target
    if not written.shape:
        tensor = torch.empty_like(template)
    elif written.order == "C":
        tensor = template.new_empty(written.shape)
    else:
        shape = written.shape[::-1]
        tensor = template.new_empty(shape).permute(*range(len(shape) - 1, -1, -1))
    if current_handle(torch, index) != handle:
        tensor.record_stream(torch_stream)
    return tensor, tensor.data_ptr()


_torch_targets: dict[tuple[int, int, str], tuple[Any, Any]] = {}


def _torch_target(torch, index: int, handle: int, dtype: str) -> tuple[Any, Any]:
    """A 0-d tensor of ``dtype`` on PyTorch's device ``index`` (what results are made like) and PyTorch's stream
    object for the launch stream ``handle`` (0: the legacy default stream, which is PyTorch's default stream),
    kept for later calls."""
    device = torch.device("cuda", index)
    stream = torch.cuda.default_stream(device) if handle == 0 else torch.cuda.ExternalStream(handle, device=device)
    template = torch.empty((), dtype=torch_dtype(dtype), device=device)
    with _lock:
        return _torch_targets.setdefault((index, handle, dtype), (template, stream))


NUMPY = Library("numpy", host=True)
NUMBA = Library("numba", host=False)
TORCH = Library("torch", host=False, wrap=torch_from_device, new=_torch_result)
TORCH_CPU = Library("torch-cpu", host=True, wrap=torch_from_numpy)
CUPY = Library("cupy", host=False, wrap=_cupy_from_device, new=_cupy_result)
DEVICE = Library("device", host=False)  # another CUDA Array Interface or DLPack producer on the GPU
HOST = Library("host", host=True)  # a DLPack producer on the host
UNKNOWN = Library("unknown", host=True)  # no array: refused where it is read

_by_type: dict[type, Callable[[Any], Library]] = {}
_lock = threading.Lock()


def library_of(*xs: Any) -> Library:
    """The library of the first argument that is not a NumPy array (None arguments ignored); NumPy when all
    are."""
    for x in xs:
        if x is None or type(x) is np.ndarray:
            continue
        which = _by_type.get(type(x))
        if which is None:
            with _lock:
                which = _by_type.setdefault(type(x), _classified(x))
        library = which(x)
        if library is not NUMPY:
            return library
    return NUMPY


def _classified(x: Any) -> Callable[[Any], Library]:
    """How to tell the library of an object of ``type(x)`` (PyTorch's tensors of one type live on either side)."""
    from numba import cuda

    module = type(x).__module__
    if isinstance(x, np.ndarray):
        return lambda _: NUMPY
    if cuda.devicearray.is_cuda_ndarray(x):
        return lambda _: NUMBA
    if module.startswith("torch"):
        return lambda t: TORCH if t.is_cuda else TORCH_CPU
    if module.startswith("cupy"):
        return lambda _: CUPY
    if hasattr(x, "__cuda_array_interface__"):
        return lambda _: DEVICE
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return lambda a: HOST if a.__dlpack_device__()[0] in DLPACK_HOST else DEVICE
    return lambda _: UNKNOWN


def host_view(x: Any, name: str, writable: bool = False) -> np.ndarray | None:
    """The NumPy array viewing the host array ``x`` (NumPy, a PyTorch CPU tensor, a host DLPack producer), None
    where ``x`` is none; ``writable``: ValueError where it cannot be written (an ``out=``)."""
    library = library_of(x)
    if library is NUMPY and isinstance(x, np.ndarray):
        view = x
    elif library is TORCH_CPU:
        refuse_gradients(x, name)
        view = numpy_from_torch(x)
    elif library is HOST:
        view = np.from_dlpack(x)
    else:
        return None
    if writable and not view.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return view


def refuse_gradients(x: Any, name: str) -> None:
    """ValueError for a PyTorch tensor that records gradients: the result would silently lose them."""
    if getattr(x, "requires_grad", False):
        raise ValueError(f"{name} requires grad: autotune's functions record no gradients; pass {name}.detach(), "
                         f"or use autotune.torch, whose matmul is differentiable")


def device_view_of_dlpack(x: Any, stream_handle: int):
    """A Numba device array viewing the device memory of the DLPack producer ``x`` (through cuda.core's
    ``StridedMemoryView``), its data ready for work on the stream ``stream_handle`` (the producer orders it
    there, by the DLPack protocol)."""
    from cuda.core.utils import StridedMemoryView
    from numba import cuda

    view = StridedMemoryView.from_dlpack(x, stream_ptr=stream_handle)
    itemsize = np.dtype(view.dtype).itemsize
    strides = None if view.strides is None else tuple(s * itemsize for s in view.strides)
    typestr = "bfloat16" if view.dtype == BFLOAT16 else np.dtype(view.dtype).str
    interface = {"shape": tuple(view.shape), "strides": strides, "typestr": typestr,
                 "data": (view.ptr, bool(view.readonly)), "version": 3, "stream": None}
    return cuda.from_cuda_array_interface(interface, owner=view, sync=False)
