"""Plans: a checked call recorded once and replayed (simulator: replays go through the dispatcher)."""
import numpy as np
from numba import cuda

from autotune import build_kernel
from autotune.runtime.arrays import plan_key
from autotune.runtime.launch import Memset, Plan, Planned, bind


class CudaArrayLike:
    def __init__(self, ptr, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "strides": None,
                                         "typestr": typestr, "version": 3}


def test_plan_key_names_pointer_shape_and_dtype_and_refuses_host_arrays():
    a, b = CudaArrayLike(4096, (3, 5)), CudaArrayLike(8192, (5,))
    assert plan_key(a, None, b) == ((4096, (3, 5), None, "<f4"), None, (8192, (5,), None, "<f4"))
    assert plan_key(a, b) != plan_key(a, CudaArrayLike(8192, (5,), "<f8"))
    assert plan_key(a, np.zeros(3)) is None


def test_bind_falls_back_to_calling_the_configuration():
    calls = []
    step = bind(lambda *args: calls.append(args), (1, 2))
    step()
    step()
    assert calls == [(1, 2), (1, 2)]


def test_a_replayed_reduction_plan_computes_on_the_arrays_current_contents():
    rng = np.random.default_rng()
    kernel = build_kernel("reduce", {"BLOCK": 32, "ITEMS": 2, "VEC": 2, "COMBINE": "atomic"}, "float32", op="dot")
    x, y = (cuda.to_device(rng.integers(-8, 9, 997).astype(np.float32)) for _ in range(2))
    out = cuda.to_device(np.full(1, np.nan, np.float32))
    plan = kernel.bind(x, y, out=out)
    assert isinstance(plan, Plan) and len(plan) == 2  # the fill for the atomic combine, then the kernel
    for _ in range(2):
        hx, hy = (rng.integers(-8, 9, 997).astype(np.float32) for _ in range(2))
        x.copy_to_device(hx)
        y.copy_to_device(hy)
        out.copy_to_device(np.full(1, np.nan, np.float32))
        assert plan() is out
        assert out.copy_to_host()[0] == np.dot(hx.astype(np.float64), hy.astype(np.float64))


def test_a_replayed_split_k_matmul_plan_clears_its_output_first():
    rng = np.random.default_rng()
    kernel = build_kernel("matmul", {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "VEC": 2, "SPLIT_K": 2}, "float32")
    A, B = (rng.integers(-2, 3, s).astype(np.float32) for s in ((37, 29), (29, 41)))
    C = cuda.to_device(np.full((37, 41), np.nan, np.float32))
    plan = kernel.bind(cuda.to_device(A), cuda.to_device(B), out=C)
    for _ in range(2):  # a second replay must not add onto the first result
        plan()
        assert np.array_equal(C.copy_to_host(), A.astype(np.float64) @ B)


def test_a_simulated_launch_switches_threads_often_and_restores_the_interval_after():
    """The simulator's barriers wait for thread switches: its launches run with a short switch interval, and the
    process's own interval is back afterwards, also when the kernel raises."""
    import sys

    import pytest

    from autotune.runtime.launch import SIMULATOR_SWITCH_S, configure

    seen = []

    @cuda.jit
    def record(fail):
        cuda.syncthreads()
        seen.append(sys.getswitchinterval())
        if fail[0]:
            raise ValueError("kernel failed")

    before = sys.getswitchinterval()
    assert before > SIMULATOR_SWITCH_S
    launch = configure(record, 2, 4, simulator=True)
    launch(np.zeros(1, np.int32))
    assert seen == [SIMULATOR_SWITCH_S] * 8 and sys.getswitchinterval() == before
    with pytest.raises(ValueError, match="kernel failed"):
        launch(np.ones(1, np.int32))
    assert sys.getswitchinterval() == before


class _Zeroes(Planned):
    """A stand-in kernel that makes a new output and zeroes it with a memset (a step that moves like a packed
    launch), logging the pointer each memset writes."""

    def __init__(self):
        self.log = []
        self.checked = 0  # checked calls (``_prepare``)

    def _prepare(self, x):
        from autotune.runtime.arrays import device_pointer

        self.checked += 1
        result = cuda.device_array(3, np.float32)
        zero = Memset(lambda pointer, value, words, stream: self.log.append(pointer), device_pointer(result), 3, 0)
        return result, lambda: self._enqueue(zero)

    def __call__(self, x, stream=0):
        if (result := self._replayed_new((x,), stream)) is not None:
            return result
        return self._run_new((x,), self._prepare(x), stream)


def test_a_kernel_called_without_out_replays_its_first_plan_onto_a_new_output_each_time():
    from autotune.runtime.arrays import device_pointer

    k = _Zeroes()
    x = CudaArrayLike(4096, (3,))
    results = [k(x) for _ in range(3)]
    assert len({id(r) for r in results}) == 3
    assert k.log == [device_pointer(r) for r in results]  # each call wrote its own output
    assert k.checked == 1 and len(k._plans) == 1  # the later two replayed the first call's plan
    k(np.zeros(3))  # a host array: checked every call, nothing kept
    assert k.checked == 2 and len(k._plans) == 1 and len(k.log) == 4


def test_a_plan_kept_for_new_outputs_does_not_keep_the_first_output_alive(monkeypatch):
    """A call without ``out=`` keeps its plan to move onto the next call's new output (``Written.replay``); the
    first output is the caller's, and dropping it must give its memory back (a kept reference held a 4 MiB
    torch result's block in the result pool on an H200). The simulator's launches are never kept, so the kept
    plans are made here directly: a NumPy-style function's (``Replay``) and a kernel object's (``_run_new``)."""
    import gc
    import weakref

    from autotune.runtime import calls, launch

    monkeypatch.setattr(launch, "_new_output_key", lambda inputs, stream: ("test",))  # as device inputs key it

    class Kernel(Planned):
        pass

    for keep in ("function", "kernel"):
        result = cuda.device_array(8, dtype=np.float32)
        first = weakref.ref(result)
        if keep == "function":
            replay = calls.Replay(("test",), (), None, 0)
            replay.key = ("test", id(result))  # as device inputs would key it
            replay.run(Plan([], result), result)
            kept = calls._replays.pop(replay.key)
        else:
            kernel = Kernel()
            kernel._run_new((cuda.device_array(4),), (result, lambda: None), 0)
            kept = kernel.__dict__["_plans"][("test",)]
        del result
        gc.collect()
        assert first() is None, f"the {keep}'s kept plan keeps the first output alive"
        assert kept[0].out is None and kept[1].nbytes == 32
