"""Accept the user's arrays: NumPy and other host arrays (PyTorch CPU tensors, DLPack producers on the host;
copied to the GPU), Numba device arrays, anything exposing the CUDA Array Interface (CuPy arrays, PyTorch CUDA
tensors; PyTorch's bfloat16 tensors through their bits, see autotune/core/dtypes.py) and DLPack producers on the
GPU (JAX), read in place. Which library a result is made in: autotune/runtime/libraries.py."""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ..core.dtypes import BFLOAT16, is_torch_bfloat16, kernel_view, numpy_from_torch, retyped, torch_bits
from .libraries import TORCH, device_view_of_dlpack, host_view, library_of, refuse_gradients


def is_host(x: Any) -> bool:
    """Whether ``x`` is a host array (NumPy, a PyTorch CPU tensor, a DLPack producer on the host)."""
    return type(x) is np.ndarray or library_of(x).host


def host_to_device(x: np.ndarray):
    """``cuda.to_device(x)``; a bfloat16 array travels as its bits (Numba's copies take no ml_dtypes buffer); an
    array whose elements fill one block of memory in another order of its axes (a stack of transposed matrices,
    ``x.swapaxes(-1, -2)`` of a C-contiguous one) travels as that block and is viewed with its own strides, as the
    same array on the device would be (ValueError for a strided view, which no block holds)."""
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        order = dense_order(x)
        if order is None:
            raise ValueError(f"a strided view (strides {x.strides}) is no block of memory to copy")
        return permuted(host_to_device(x.transpose(order)), tuple(int(a) for a in np.argsort(order)))
    if x.dtype == BFLOAT16:
        return retyped(cuda.to_device(x.view(np.uint16)), BFLOAT16)
    return cuda.to_device(x)


def device_to_host(d) -> np.ndarray:
    """``d.copy_to_host()`` of a Numba device array; a bfloat16 one travels as its bits."""
    if d.dtype == BFLOAT16:
        return kernel_view(d).copy_to_host().view(BFLOAT16)
    return d.copy_to_host()


def to_host(x: Any) -> np.ndarray:
    """A copy on the host of any array accepted here: Numba (.copy_to_host()), CuPy (.get()), PyTorch (.cpu())
    or NumPy."""
    if cuda.devicearray.is_cuda_ndarray(x):
        return device_to_host(x)
    if is_torch_bfloat16(x):
        return numpy_from_torch(x.cpu())
    for method in ("copy_to_host", "get"):
        if hasattr(x, method):
            return np.asarray(getattr(x, method)())
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    return np.asarray(x)


def to_device(x: Any, name: str, dlpack_stream: int = 1):
    """A Numba device array viewing ``x``, or for a host array (NumPy, PyTorch CPU, DLPack on the host) a copy
    of it on the GPU in the same layout. ``dlpack_stream``: the stream a DLPack producer on the GPU is asked to
    have ``x`` ready on (DLPack's numbering: 1 is the legacy default stream, else a handle).

    Host and device arrays follow one rule: the kernel checks the layout it needs (C-contiguous, or for a
    matmul built with a transposed layout, F-contiguous) and names the copy to make otherwise; nothing is
    copied into another layout behind the caller's back. So a NumPy array whose elements fill one block of memory
    in any order of its axes (a stack of transposed matrices, ``A.transpose(0, 2, 1)``) is copied as that block and
    viewed with its own strides, as the same array on the device would be."""
    if isinstance(x, np.ndarray):
        check_plain(x, name)
        check_native(x, name)
        if not (x.flags.c_contiguous or x.flags.f_contiguous) and dense_order(x) is None:
            raise ValueError(f"{name} is a strided view (strides {x.strides}); pass np.ascontiguousarray({name})")
        return host_to_device(x)
    if cuda.devicearray.is_cuda_ndarray(x):
        return x
    refuse_gradients(x, name)
    if library_of(x).host:
        view = host_view(x, name)
        if view is not None:
            return to_device(view, name)
    elif is_torch_bfloat16(x):
        return retyped(cuda.as_cuda_array(torch_bits(x), sync=False), BFLOAT16)
    elif hasattr(x, "__cuda_array_interface__"):
        return cuda.as_cuda_array(x, sync=False)  # ordered on the GPU instead: see producer_stream
    elif hasattr(x, "__dlpack__"):
        return device_view_of_dlpack(x, dlpack_stream)
    raise TypeError(f"{name} must be a NumPy array, a Numba device array, a CUDA array (CuPy, PyTorch tensor), a "
                    f"DLPack producer (JAX) or a PyTorch CPU tensor; got {type(x).__name__}")


def check_native(x: np.ndarray, name: str) -> None:
    """ValueError for a NumPy input whose elements are not in this machine's byte order (a big-endian ``>f4``):
    its dtype's name is the native one's, but the GPU would read its bytes as they are. (A host ``out=`` of any
    byte order is fine: the result reaches it through NumPy's copy, which converts.)"""
    if not x.dtype.isnative:
        raise ValueError(f"{name} is of byte order {x.dtype.byteorder!r}, not this machine's; autotune reads and "
                         f"writes native byte order: pass {name}.astype({name}.dtype.newbyteorder('='))")


#: NumPy array types taken as plain arrays: ndarray, and memmap (an ndarray over a file's pages, no other meaning)
PLAIN_HOST_TYPES = (np.ndarray, np.memmap)


def check_plain(x: np.ndarray, name: str) -> None:
    """TypeError for a NumPy array of a subclass: a subclass may change what its elements mean (a masked array's
    mask, ``np.matrix``'s 2-D rows, units), and the kernels would read only the buffer, giving a different answer
    than NumPy without a word. ``np.asarray(x)`` is the caller's explicit choice of the plain buffer."""
    if type(x) in PLAIN_HOST_TYPES:
        return
    if isinstance(x, np.ma.MaskedArray):
        what = "a NumPy masked array: its mask would be ignored (NumPy's result skips the masked elements); " \
               f"reduce {name}.compressed() or {name}.filled(value), or use np.ma's functions"
    elif isinstance(x, np.matrix):
        what = f"a np.matrix, whose results keep two dimensions; pass np.asarray({name})"
    else:
        what = (f"an instance of the ndarray subclass {type(x).__module__}.{type(x).__qualname__}, which may change "
                f"what its elements mean; pass np.asarray({name}) to use its plain buffer")
    raise TypeError(f"{name} is {what}")


def dense_order(x: np.ndarray) -> tuple[int, ...] | None:
    """The order of ``x``'s axes (outermost first) in which its elements fill one block of memory, C-contiguously;
    None where no order does (gaps, repeats or negative strides: a strided view)."""
    order = tuple(sorted(range(x.ndim), key=lambda a: -x.strides[a]))
    return order if x.transpose(order).flags.c_contiguous else None


def permuted(d, axes: tuple[int, ...]):
    """The device array ``d`` with its axes in the order ``axes`` (``np.transpose(d, axes)``): a view of the same
    memory, kept alive by the view. numba-cuda's ``DeviceNDArray.transpose`` copies (2-D) or refuses (more
    dimensions), so the view is made by ``strided``; the simulator's arrays are NumPy's views."""
    if getattr(d, "__cuda_array_interface__", None) is None:
        return d.transpose(axes)
    return strided(d, tuple(d.shape[a] for a in axes), tuple(d.strides[a] for a in axes))


def strided(d, shape: tuple[int, ...], strides: tuple[int, ...]):
    """A view of the device array ``d``'s memory from its first element with this shape and these byte strides
    (the caller keeps every element inside ``d``'s memory), kept alive by the view: a broadcast (stride 0), a
    transpose, a span. Numba makes no such views of its own arrays, so the view is made from the CUDA Array
    Interface; in the simulator, whose arrays wrap NumPy arrays, from NumPy's ``as_strided`` of that array,
    wrapped as the simulator wraps its own (tests/test_batch.py checks that the view shares memory)."""
    shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    interface = getattr(d, "__cuda_array_interface__", None)
    if interface is None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        base = np.asarray(d).view(d.dtype)  # the wrapped array (its interface names bfloat16 'V2')
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(base, shape, strides))
    typestr = "bfloat16" if d.dtype == BFLOAT16 else interface["typestr"]  # as dtypes.retyped: its str is "<V2"
    return cuda.from_cuda_array_interface(dict(interface, shape=shape, strides=strides, typestr=typestr), owner=d,
                                          sync=False)


def indexed(d, index: tuple[int, ...]):
    """``d[index]``, ``index`` integers (non-negative, in range) for the leading axes of the device array ``d``: a
    view of the same memory with the remaining axes' shape and strides, made from the CUDA Array Interface.
    numba-cuda's own indexing gives the sub-array of an array whose axes are permuted (a stack of transposed
    matrices, ``A.transpose(0, 2, 1)``) C-contiguous strides, so it would read the wrong elements; the
    simulator's arrays are NumPy's views."""
    interface = getattr(d, "__cuda_array_interface__", None)
    if not index:
        return d
    if interface is None:
        return d[index]
    offset = sum(i * s for i, s in zip(index, d.strides))
    rest = len(index)
    typestr = "bfloat16" if d.dtype == BFLOAT16 else interface["typestr"]  # as in permuted
    view = dict(interface, data=(interface["data"][0] + offset, interface["data"][1]), shape=tuple(d.shape[rest:]),
                strides=tuple(d.strides[rest:]), typestr=typestr)
    return cuda.from_cuda_array_interface(view, owner=d, sync=False)


def producer_stream(x: Any) -> int | None:
    """The stream a CUDA Array Interface array says its data are written on (its ``stream`` entry: 1 is the legacy
    default stream, 2 the per-thread one, else a handle), None where it names none.

    Arrays are imported without Numba's host synchronisation on that stream (which blocks the caller until the
    GPU is idle on it, and for a kernel queued behind a long producer costs the whole overlap); a caller that
    launches on another stream makes that stream wait for this one on the GPU (``streams.follow``)."""
    return stream_of(interface(x))


def interface(x: Any) -> dict | None:
    """The CUDA Array Interface dict of ``x``, None where it has none; a PyTorch bfloat16 tensor's is its int16
    view's with the typestr "bfloat16" (PyTorch exports none for bfloat16)."""
    if is_torch_bfloat16(x):
        found = getattr(torch_bits(x), "__cuda_array_interface__", None)  # None for a CPU tensor
        return None if found is None else dict(found, typestr="bfloat16")
    return getattr(x, "__cuda_array_interface__", None)


def replay_part(x: Any) -> tuple | None:
    """A PyTorch CUDA tensor's part of a replay key (pointer, shape, element strides, torch dtype), read from the
    tensor itself; None for anything else (whose part comes from its CUDA Array Interface: ``interface_part``).
    The strides in elements and the torch dtype never equal an interface's byte strides and typestr, so the two
    forms never make one key. PyTorch builds its interface dict in Python at every read, a large share of the host
    time of a call on tensors; it names no producer stream, and neither does this form. A tensor that records
    gradients gets the interface path, which refuses it as before."""
    if library_of(x) is TORCH and not x.requires_grad:
        return (x.data_ptr(), x.shape, x.stride(), x.dtype)
    return None


def interface_part(interface: dict) -> tuple:
    """An array's part of a replay or plan key from its CUDA Array Interface dict: pointer, shape, strides,
    typestr."""
    return (interface["data"][0], tuple(interface["shape"]), interface.get("strides"), interface["typestr"])


def stream_of(interface: dict | None) -> int | None:
    """The ``stream`` entry of a CUDA Array Interface dict (None for no dict or no entry)."""
    return None if interface is None else interface.get("stream")


def check_dtype(d, name: str, dtype: str, supported: tuple[str, ...] = ()) -> None:
    """TypeError unless ``d`` has ``dtype``; the advice names another dtype only where one is supported."""
    got = np.dtype(d.dtype).name
    if got != np.dtype(dtype).name:
        advice = (f"convert the input, or build the kernel with dtype={got!r}" if got in supported
                  else f"convert the input to {' or '.join(supported) if supported else dtype}")
        raise TypeError(f"{name} has dtype {got}; this kernel was built for {dtype} ({advice})")


def device_pointer(d) -> int:
    numba_pointer = getattr(d, "device_ctypes_pointer", None)  # a Numba array's, without building its interface
    if numba_pointer is not None:
        return numba_pointer.value or 0
    interface = getattr(d, "__cuda_array_interface__", None) or d.__array_interface__  # the latter: simulator
    return interface["data"][0]


def is_c_contiguous(d) -> bool:
    return d.size <= 1 or d.is_c_contiguous()


def is_f_contiguous(d) -> bool:
    return d.size <= 1 or d.is_f_contiguous()


def flat(d, order: str = "C"):
    """A 1-D view of a C-contiguous (``order="C"``) or F-contiguous (``"F"``) device array: its elements in memory
    order, never a copy (a device array's ``.T`` is a transposing copy by Numba's own kernel, not a view)."""
    return d.reshape(d.size, order=order)


def span(d):
    """A 1-D view of a device array's memory from its first element to its last, every element between included:
    ``flat(d)`` of a C-contiguous array, else a strided view's whole range (non-negative strides only)."""
    if is_c_contiguous(d):
        return flat(d)
    itemsize = d.dtype.itemsize
    count = 1 + sum((n - 1) * s for n, s in zip(d.shape, d.strides)) // itemsize if d.size else 0
    return strided(d, (count,), (itemsize,))


def aligned(d, width: int) -> bool:
    return device_pointer(d) % (width * np.dtype(d.dtype).itemsize) == 0


def plan_key(*xs: Any) -> tuple | None:
    """What identifies a call's device arrays (pointer, shape, strides, dtype of each; None entries allowed);
    None when one is a host array or not an array at all."""
    return interfaces_key([None if x is None else interface(x) or False for x in xs])


def interfaces_key(interfaces: list) -> tuple | None:
    """``plan_key`` from the arrays' CUDA Array Interface dicts (None: no array given; False: not a device
    array)."""
    key = []
    for interface in interfaces:
        if interface is None:
            key.append(None)
            continue
        if not interface:
            return None
        key.append(interface_part(interface))
    return tuple(key)


def byte_range(x) -> tuple[int, int]:
    """The device bytes [first, end) an array's elements occupy (empty for a zero-size array)."""
    found = interface(x) or x.__array_interface__
    shape, strides = tuple(found["shape"]), found.get("strides")
    itemsize = np.dtype(found["typestr"]).itemsize
    start = found["data"][0]
    if 0 in shape:
        return start, start
    if strides is None:
        return start, start + itemsize * int(np.prod(shape))
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return start + low, start + high + itemsize


def overlaps(out, *inputs) -> bool:
    """Whether ``out`` shares any byte with one of ``inputs`` (None entries ignored): then a kernel that writes
    ``out`` while it reads them would read its own results, so the call computes into scratch first."""
    first, end = byte_range(out)
    for x in inputs:
        if x is not None:
            a, b = byte_range(x)
            if a < end and first < b:
                return True
    return False
