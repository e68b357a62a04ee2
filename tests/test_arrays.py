"""runtime/arrays.py: views of device arrays made from the CUDA Array Interface, where numba-cuda's own would be
wrong. The simulator's arrays are NumPy's, so the interface path is checked here on host memory: the view's
dictionary is turned back into a NumPy array over the same bytes and compared with NumPy's own indexing."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.runtime import arrays


class _Device:
    """A stand-in for a device array: NumPy's memory described by a CUDA Array Interface."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.shape, self.strides, self.dtype, self.size = host.shape, host.strides, host.dtype, host.size
        face = host.__array_interface__
        self.__cuda_array_interface__ = {"shape": host.shape, "strides": host.strides, "typestr": face["typestr"],
                                         "data": face["data"], "version": 3}


def _as_numpy(interface: dict, owner=None, sync=None) -> np.ndarray:
    holder = type("Holder", (), {"__array_interface__": dict(interface, version=3)})()
    return np.asarray(holder)


@pytest.mark.parametrize("order", [(0, 2, 1), (2, 0, 1), (0, 1, 2), (1, 0, 2)])
def test_a_matrix_of_a_permuted_stack_is_viewed_where_numpy_views_it(monkeypatch, order):
    rng = np.random.default_rng()
    base = rng.standard_normal((3, 7, 5)).astype(np.float32)
    stack = base.transpose(order)
    monkeypatch.setattr(arrays.cuda, "from_cuda_array_interface", _as_numpy, raising=False)
    for i in range(stack.shape[0]):
        got = arrays.indexed(_Device(stack), (i,))
        assert got.shape == stack[i].shape and got.strides == stack[i].strides
        assert np.array_equal(got, stack[i])
    assert np.array_equal(arrays.indexed(_Device(stack), (1, 2)), stack[1, 2])
    assert arrays.indexed(stack, ()) is stack


def test_numba_cudas_own_indexing_of_a_permuted_stack_is_still_wrong():
    """Why ``indexed`` exists: numba-cuda (0.30) gives matrix i of a stack of transposed matrices C-contiguous
    strides. When this fails, numba-cuda has fixed it and ``indexed`` can become plain indexing."""
    import importlib.util
    from pathlib import Path

    import numba_cuda

    path = Path(numba_cuda.__file__).parent / "numba" / "cuda" / "cudadrv" / "dummyarray.py"
    spec = importlib.util.spec_from_file_location("numba_cuda_dummyarray", path)  # the simulator hides the real one
    dummyarray = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dummyarray)
    Array = dummyarray.Array
    stack = Array.from_desc(0, (3, 40, 65), (10400, 4, 160), 4)  # 3 transposed 65 x 40 float32 matrices
    assert stack[1].strides == (260, 4)  # NumPy's: (4, 160)
