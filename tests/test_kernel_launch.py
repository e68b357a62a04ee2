"""Replayed launches hand the driver a parameter buffer built once by cuda.core's ParamHolder
(autotune/runtime/kernel_launch.py): the buffer is checked against the packed values, and a launch passes the
configuration, stream and buffer to cuLaunchKernel. No GPU: the driver call is a stand-in."""
import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
from cuda.core import LaunchConfig

from autotune.runtime import kernel_launch

# what numba-cuda packs for (float32 array, int32, float32, float64): meminfo, parent, size, itemsize, pointer,
# shape, strides; then ctypes scalars
PACKED = (0, 0, 1000, 4, 1 << 40, 1000, 4, ctypes.c_int32(-7), ctypes.c_float(1.5), ctypes.c_double(-2.25),
          ctypes.c_uint16(0x3C00), np.float32(3.0), True, False)


def _read(holder, i: int, ctype):
    slot = (ctypes.c_void_p * len(PACKED)).from_address(holder.ptr)[i]
    return ctype.from_address(slot).value


def test_the_buffer_holds_each_packed_value_as_the_kernel_receives_it():
    holder = kernel_launch._checked_buffer(kernel_launch._pieces().ParamHolder, PACKED)
    assert holder is not None
    assert [_read(holder, i, ctypes.c_int64) for i in range(7)] == [0, 0, 1000, 4, 1 << 40, 1000, 4]
    assert _read(holder, 7, ctypes.c_int32) == -7 and _read(holder, 8, ctypes.c_float) == 1.5
    assert _read(holder, 9, ctypes.c_double) == -2.25 and _read(holder, 10, ctypes.c_uint16) == 0x3C00
    assert _read(holder, 11, ctypes.c_float) == 3.0
    assert _read(holder, 12, ctypes.c_bool) is True and _read(holder, 13, ctypes.c_bool) is False


def test_a_buffer_that_does_not_hold_the_values_is_refused():
    class Int32Holder:  # a conversion other than cuda.core's: Python ints as 32-bit
        def __init__(self, packed):
            self._values = [ctypes.c_int32(v) if isinstance(v, int) else v for v in packed]
            self._slots = (ctypes.c_void_p * len(packed))(*[ctypes.addressof(v) for v in self._values])
            self.ptr = ctypes.addressof(self._slots)

    assert kernel_launch._checked_buffer(Int32Holder, (1 << 40, 5)) is None
    assert kernel_launch._checked_buffer(Int32Holder, (ctypes.c_int32(5),)) is not None
    assert kernel_launch._checked_buffer(kernel_launch._pieces().ParamHolder, (object(),)) is None  # unknown type


def _stand_in_bindings(calls: list, result: int = 0):
    from cuda.bindings import driver

    def launch(*args):
        calls.append(args)
        return (driver.CUresult(result),)

    return SimpleNamespace(cuLaunchKernel=launch, CUresult=driver.CUresult, CUstream=driver.CUstream)


def test_a_launch_passes_grid_block_shared_bytes_stream_and_the_buffer():
    calls = []
    holder = kernel_launch._checked_buffer(kernel_launch._pieces().ParamHolder, PACKED)
    stream = SimpleNamespace(handle=ctypes.c_void_p(0x1234))
    launch = kernel_launch.BufferedLaunch(_stand_in_bindings(calls), "function",
                                          LaunchConfig(grid=(7, 2), block=128, shmem_size=4096),
                                          kernel_launch.stream_handle(stream), holder)
    launch()
    launch()
    assert len(calls) == 2 and calls[0] == calls[1]
    function, *dims, stream_arg, params, extra = calls[0]
    assert function == "function" and dims == [7, 2, 1, 128, 1, 1, 4096] and extra == 0
    assert int(stream_arg) == 0x1234 and params == holder.ptr
    assert kernel_launch.stream_handle(0) == 0 and kernel_launch.stream_handle(SimpleNamespace(handle=99)) == 99


def test_a_refused_launch_raises_naming_the_driver_error():
    launch = kernel_launch.BufferedLaunch(_stand_in_bindings([], result=1), "function", LaunchConfig(grid=1, block=1),
                                          0, kernel_launch._checked_buffer(kernel_launch._pieces().ParamHolder, (1,)))
    with pytest.raises(kernel_launch.LaunchError, match="CUDA_ERROR_INVALID_VALUE"):
        launch()


def test_without_a_buffer_the_launch_goes_through_cuda_core(monkeypatch):
    from cuda import core

    seen = []
    monkeypatch.setattr(core, "launch", lambda *args: seen.append(args))
    config = LaunchConfig(grid=1, block=32)
    for packed in ((object(),), PACKED):  # a value with no known bytes; a known one without ParamHolder
        if packed is PACKED:
            monkeypatch.setattr(kernel_launch, "_pieces", lambda: None)
        kernel_launch.prepared(0, config, "kernel", packed)()
        # on a cuda.core stream (cuda.core 1.2 refuses the default stream's handle 0 with a TypeError)
        assert isinstance(seen[-1][0], core.Stream) and int(seen[-1][0].handle) == 0
        assert seen[-1][1:] == (config, "kernel", *packed)


def test_a_memset_goes_to_the_driver_with_its_result_checked(monkeypatch):
    from cuda.bindings import driver

    calls, results = [], [0, 1]

    def memset(*args):
        calls.append(args)
        return (driver.CUresult(results.pop(0)),)

    bindings = SimpleNamespace(cuMemsetD32Async=memset, CUresult=driver.CUresult)
    monkeypatch.setattr(kernel_launch, "_pieces", lambda: SimpleNamespace(bindings=bindings))
    zero = kernel_launch.memset_d32()
    zero(1 << 20, 0, 64, 7)
    assert calls == [(1 << 20, 0, 64, 7)]
    with pytest.raises(kernel_launch.LaunchError, match="cuMemsetD32Async.*CUDA_ERROR_INVALID_VALUE"):
        zero(1 << 20, 0, 64, 7)
