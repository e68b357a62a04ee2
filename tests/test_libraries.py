"""Results in the caller's array library (autotune/runtime/libraries.py), in the CUDA simulator: NumPy in, NumPy
out; PyTorch CPU tensors in, PyTorch tensors out (bfloat16 included); host DLPack producers read; ``out=`` of
each; which library a call's arguments belong to. PyTorch's own tests run where PyTorch is installed; its and
CuPy's GPU results are checked by lab/interop_gpu.py on a GPU."""
import sys
import types
import warnings

import ml_dtypes
import numpy as np
import pytest
from checks import assert_matmul_close, small_integers
from numba import cuda

import autotune
from autotune.runtime import libraries, streams
from autotune.runtime.libraries import library_of

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(autouse=True)
def empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        yield


class HostDLPack:
    """A DLPack producer on the host that is nothing else (as a JAX array on the CPU is to autotune)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class DeviceDLPack:
    def __dlpack__(self, **kwargs):  # pragma: no cover - never read in these tests
        raise AssertionError("not read")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


class CudaArrayLike:
    __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_the_library_of_a_call_is_its_first_argument_that_is_not_numpy():
    x = np.ones(3, np.float32)
    d = cuda.to_device(x)
    assert library_of(x) is libraries.NUMPY and library_of(x, x) is libraries.NUMPY and library_of() is libraries.NUMPY
    assert library_of(d) is libraries.NUMBA and library_of(x, d) is libraries.NUMBA and library_of(None, d, x) is \
        libraries.NUMBA
    assert library_of(CudaArrayLike()) is libraries.DEVICE
    assert library_of(HostDLPack(x)) is libraries.HOST and library_of(DeviceDLPack()) is libraries.DEVICE
    cupy_like = type("ndarray", (), {"__module__": "cupy._core.core", "__cuda_array_interface__": {}})
    assert library_of(x, cupy_like()) is libraries.CUPY
    assert library_of([1.0, 2.0]) is libraries.UNKNOWN
    assert library_of(np.float32(1)) is libraries.UNKNOWN


def test_numpy_in_numpy_out_and_out_of_numpy(rng):
    x = small_integers(rng, (5, 7), np.float32)
    total = autotune.sum(x)
    assert type(total) is np.float32 and total == x.astype(np.float64).sum()
    out = np.full(5, np.nan, np.float32)
    assert autotune.sum(x, axis=1, out=out) is out
    np.testing.assert_array_equal(out, x.astype(np.float64).sum(axis=1))
    strided = np.full((7, 2), np.nan, np.float32)[:, 0]  # NumPy writes a strided out, and so does autotune
    assert autotune.max(x, axis=0, out=strided) is strided
    np.testing.assert_array_equal(strided, x.max(axis=0))
    readonly = np.zeros(5, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        autotune.sum(x, axis=1, out=readonly)
    with pytest.raises(ValueError, match="shape"):
        autotune.sum(x, axis=1, out=np.zeros(7, np.float32))


def test_a_device_call_fills_a_host_out(rng):
    x = small_integers(rng, (6, 3), np.float32)
    out = np.full(3, np.nan, np.float32)
    assert autotune.sum(cuda.to_device(x), axis=0, out=out) is out
    np.testing.assert_array_equal(out, x.astype(np.float64).sum(axis=0))


def test_a_host_dlpack_producer_is_read_and_gets_numpy(rng):
    x = rng.standard_normal((4, 13)).astype(np.float32)
    x[2, 5] = np.nan
    got = autotune.max(HostDLPack(x), axis=1)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, np.max(x.astype(np.float64), axis=1).astype(np.float32))
    A, B = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    assert_matmul_close(autotune.matmul(HostDLPack(A), HostDLPack(B)), A, B)


def test_a_device_result_is_handed_to_the_callers_library(rng):
    """The result of a call on device arrays is what the library's ``wrap`` makes of the Numba array (here a
    stand-in library; PyTorch's and CuPy's wraps run on the GPU: lab/interop_gpu.py)."""
    from autotune.families.reduce.functions import reduce_call

    seen = []
    library = libraries.Library("recorder", host=False, wrap=lambda d: seen.append(d) or ("wrapped", d))
    x = small_integers(rng, (3, 8), np.float32)
    tag, d = reduce_call("sum", cuda.to_device(x), 1, False, None, None, None, library=library)
    assert tag == "wrapped" and seen == [d]
    np.testing.assert_array_equal(d.copy_to_host(), x.astype(np.float64).sum(axis=1))


def test_anything_else_is_refused_naming_what_is_accepted():
    with pytest.raises(TypeError, match="DLPack producer"):
        autotune.sum([1.0, 2.0])
    with pytest.raises(TypeError, match="out must be an array"):
        autotune.sum(np.ones(3, np.float32), out=[0.0])


# -- PyTorch CPU tensors (the GPU's are checked by lab/interop_gpu.py) --------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_in_torch_out(torch, rng):
    x = rng.standard_normal((6, 11)).astype(np.float32)
    x[1, 3] = np.nan
    t = torch.from_numpy(x)
    for op, reference in (("sum", np.sum), ("max", np.max), ("nanmin", np.nanmin)):
        got = getattr(autotune, op)(t, axis=0)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.device.type == "cpu"
        want = reference(x.astype(np.float64), axis=0)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, equal_nan=True)
    total = autotune.sum(torch.from_numpy(small_integers(rng, (2, 3, 5), np.float32)), axis=None)
    assert isinstance(total, torch.Tensor) and total.shape == () and total.dtype == torch.float32
    keep = autotune.min(t, axis=1, keepdims=True)
    assert tuple(keep.shape) == (6, 1)


def test_torch_integers_and_empty_tensors_as_numpy(torch, rng):
    i = torch.from_numpy(rng.integers(-2**31, 2**31 - 1, (7, 3), dtype=np.int32))
    got = autotune.sum(i, axis=0)
    assert got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), i.numpy().astype(np.int64).sum(axis=0))
    empty = torch.zeros((3, 0), dtype=torch.float32)
    assert autotune.sum(empty).item() == 0 and isinstance(autotune.sum(empty), torch.Tensor)
    assert tuple(autotune.max(empty, axis=0).shape) == (0,)
    with pytest.raises(ValueError, match="no identity"):
        autotune.max(empty, axis=1)


def test_torch_bfloat16_in_and_out(torch, rng):
    x = (rng.integers(0, 9, size=(5, 37)) + 2).astype(BF16)
    t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    got = autotune.sum(t, axis=1)
    assert got.dtype == torch.bfloat16 and isinstance(got, torch.Tensor)
    want = x.astype(np.float64).sum(axis=1).astype(BF16)  # float32 sums of integers rounded once
    np.testing.assert_array_equal(got.view(torch.int16).numpy().view(BF16), want)
    A = small_integers(rng, (3, 8), BF16)
    B = small_integers(rng, (8, 2), BF16)
    ta, tb = (torch.from_numpy(m.view(np.int16)).view(torch.bfloat16) for m in (A, B))
    C = autotune.matmul(ta, tb)
    assert C.dtype == torch.bfloat16
    np.testing.assert_array_equal(C.view(torch.int16).numpy().view(BF16),
                                  (A.astype(np.float64) @ B.astype(np.float64)).astype(BF16))


def test_out_of_torch_and_matmul_of_torch(torch, rng):
    A, B = rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    out = torch.full((7, 5), float("nan"))
    assert autotune.matmul(torch.from_numpy(A), torch.from_numpy(B), out=out) is out
    assert_matmul_close(out.numpy(), A, B)
    C = autotune.matmul(torch.from_numpy(A[0]), torch.from_numpy(B))  # a vector on the left
    assert isinstance(C, torch.Tensor) and tuple(C.shape) == (5,)
    a, b = np.ascontiguousarray(A[:, 0]), np.ascontiguousarray(A[:, 1])
    d = autotune.dot(torch.from_numpy(a), torch.from_numpy(b))
    assert isinstance(d, torch.Tensor) and d.shape == ()
    np.testing.assert_allclose(d.item(), a.astype(np.float64) @ b, rtol=1e-5)
    k = autotune.get_best_kernel("reduce", (7,), op="max")  # kernel objects hand results back the same way
    top = k(torch.from_numpy(A[:, 0].copy()))
    assert isinstance(top, torch.Tensor) and top.item() == A[:, 0].max()


def test_a_tensor_that_records_gradients_is_refused(torch):
    with pytest.raises(ValueError, match="requires grad.*detach"):
        autotune.sum(torch.ones(3, requires_grad=True))
    with pytest.raises(ValueError, match="requires grad"):
        autotune.sum(torch.ones(3), out=torch.zeros((), requires_grad=True))


class _FakeTensor:
    """What ``_torch_result`` uses of a tensor, logging ``record_stream``."""

    def __init__(self, log: list):
        self.log = log

    def new_empty(self, shape):
        return _FakeTensor(self.log)

    def record_stream(self, stream):
        self.log.append(stream)

    def data_ptr(self):
        return 4096


def _fake_torch(current, device: int):
    """A stand-in for the ``torch`` module: its private current-stream query returns ``current`` (an int) for
    ``device`` and another stream for any other device, raises (an exception), or is missing (None)."""
    if current is None:
        private = types.SimpleNamespace()
    elif isinstance(current, Exception):
        def private_query(index):
            raise current
        private = types.SimpleNamespace(_cuda_getCurrentRawStream=private_query)
    else:
        private = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: current if index == device else 99)
    return types.SimpleNamespace(_C=private)


@pytest.mark.parametrize("device", [0, 3])
@pytest.mark.parametrize("current, launch, recorded", [
    (0, 0, False),          # PyTorch's current stream (on the result's device) is the launch stream: no record
    (7, 0, True),           # another current stream: the block is recorded on the launch stream
    (0, 7, True),
    (7, 7, False),
    (None, 0, True),        # no private query: recorded, as without the shortcut
    (RuntimeError("no CUDA"), 0, True)])
def test_a_replayed_tensor_result_is_recorded_on_its_stream_unless_pytorchs_current_one_is_it(
        monkeypatch, current, launch, recorded, device):
    from autotune.runtime import torch_stream
    from autotune.runtime.launch import Written

    log = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(current, device))
    monkeypatch.setattr(torch_stream, "_warned", False)
    monkeypatch.setattr(libraries, "stream_key", lambda s: 0 if s is streams.DEFAULT else int(s))  # as on a GPU
    context = types.SimpleNamespace(device=types.SimpleNamespace(id=device))  # the device the result is made on
    launch_stream = streams.DEFAULT if launch == 0 else launch
    monkeypatch.setitem(libraries._torch_targets, (device, launch, "float32"), (_FakeTensor(log), "the launch stream"))
    written = Written(8192, 16, (4,), "float32", "C", context)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            tensor, pointer = libraries.TORCH.new(written, launch_stream)
            assert pointer == 4096 and isinstance(tensor, _FakeTensor)
    assert log == (["the launch stream"] * 2 if recorded else [])
    said = [w for w in caught if "_cuda_getCurrentRawStream" in str(w.message)]
    assert len(said) == (1 if current is None or isinstance(current, Exception) else 0)
    assert all(w.filename == __file__ for w in said)  # at the caller's line, not autotune's


class _FakeCupyArray:
    """What ``_cupy_result`` uses of a CuPy array: its shape, dtype, order, pointer and ``view``."""

    def __init__(self, shape, dtype, order, ptr=1 << 30):
        self.shape, self.dtype, self.order = shape, np.dtype(dtype), order
        self.data = types.SimpleNamespace(ptr=ptr)

    def view(self, dtype):
        assert np.dtype(dtype).itemsize == self.dtype.itemsize
        return _FakeCupyArray(self.shape, dtype, self.order, self.data.ptr)


def _fake_cupy(device: int, stream: int):
    """A stand-in for the ``cupy`` module: its current device and stream, and ``empty`` from its pool."""
    cuda_ = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: device),
                                  get_current_stream=lambda: types.SimpleNamespace(ptr=stream))
    return types.SimpleNamespace(cuda=cuda_, empty=lambda shape, dtype, order="C": _FakeCupyArray(shape, dtype, order))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
@pytest.mark.parametrize("cupy_device, cupy_stream, launch, made", [
    (0, 0, 0, True),    # CuPy's current stream is the launch stream, on the output's device: from CuPy's pool
    (0, 7, 7, True),
    (0, 7, 0, False),   # another current stream: CuPy's pool could hand the block to it too early
    (0, 0, 7, False),
    (1, 0, 0, False)])  # another current device
def test_a_replayed_cupy_result_comes_from_cupys_pool_only_for_its_current_stream_and_device(
        monkeypatch, dtype, cupy_device, cupy_stream, launch, made):
    from autotune.runtime.launch import Written

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(cupy_device, cupy_stream))
    monkeypatch.setattr(libraries, "stream_key", lambda s: 0 if s is streams.DEFAULT else int(s))  # as on a GPU
    context = types.SimpleNamespace(device=types.SimpleNamespace(id=0))
    for shape, order in (((), "C"), ((3, 5), "F")):
        written = Written(8192, 60, shape, dtype, order, context)
        got = libraries.CUPY.new(written, streams.DEFAULT if launch == 0 else launch)
        if not made:
            assert got is None
            continue
        array, pointer = got
        assert (array.shape, array.dtype, array.order, pointer) == (shape, np.dtype(BF16 if dtype == "bfloat16"
                                                                                  else dtype), order, 1 << 30)


def test_a_replay_whose_library_makes_no_array_wraps_one_of_the_result_pool(monkeypatch):
    """``Library.new`` may decline (None): the replay then moves its plan onto a result-pool array and wraps it."""
    from autotune.runtime import calls
    from autotune.runtime.launch import Plan, Written

    made = []
    declining = libraries.Library("declining", host=False, wrap=lambda d: ("wrapped", d), new=lambda w, s: None)
    making = libraries.Library("making", host=False, wrap=None,
                               new=lambda w, s: made.append(w) or ("its own", 4096))
    written = Written(8192, 16, (4,), "float32", "C")
    for library, expected in ((declining, "wrapped"), (making, "its own")):
        replay = calls.Replay(("test", library.name), (), None, streams.DEFAULT, library)
        replay.key = ("test", library.name)
        monkeypatch.setitem(calls._replays, replay.key, (Plan([], None), written))
        got = replay.result()
        assert (got[0] if isinstance(got, tuple) else got) == expected
    assert made == [written]
