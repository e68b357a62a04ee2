"""Kept plans replay as one CUDA graph from their second run (autotune/runtime/launch.py ``Plan``, ``_graphed``;
autotune/runtime/kernel_launch.py ``captured``, ``GraphLaunch``). No GPU: the driver is a stand-in that records
what reaches the GPU (a launch, a memset, or a graph launch with the work it holds) and what was captured."""
import functools
import gc
import warnings
from types import SimpleNamespace

import pytest
from cuda.bindings import driver
from cuda.core import LaunchConfig

from autotune.runtime import kernel_launch, launch
from autotune.runtime.launch import Memset, PackedLaunch, Plan, Written

OK = driver.CUresult.CUDA_SUCCESS
STREAM = 0x55
P, Q = 1 << 40, (1 << 40) + (1 << 20)  # an output's pointer, and another output's


class StandInDriver:
    """cuda.bindings' driver calls that replays use, recording instead of launching."""

    CUresult, CUstream, CUstreamCaptureMode = driver.CUresult, driver.CUstream, driver.CUstreamCaptureMode
    CUstream_flags, CUstreamCaptureStatus = driver.CUstream_flags, driver.CUstreamCaptureStatus

    def __init__(self, refuse: str | None = None):
        self.gpu = []  # what reached the GPU, in order: (kind, ..., stream handle)
        self.capturing, self.captured = None, []
        self.created, self.destroyed, self.modes = [], [], []
        self.refuse = refuse
        self.users_capture = set()  # streams a caller of autotune is capturing into a graph of its own
        self.queries = 0

    def _issue(self, work: tuple, stream) -> tuple:
        if self.capturing is not None and int(stream) == self.capturing:
            self.captured.append(work)
        else:
            self.gpu.append((*work, int(stream)))
        return (OK,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return self._issue(("launch", function, (gx, gy, gz, bx, by, bz, shared), params), stream)

    def cuMemsetD32Async(self, pointer, value, words, stream):
        return self._issue(("memset", pointer, value, words), stream)

    def cuStreamCreate(self, flags):
        stream = 0x9000 + len(self.created)
        self.created.append((stream, flags))
        return OK, driver.CUstream(stream)

    def cuStreamBeginCapture(self, stream, mode):
        self.capturing = int(stream)
        self.modes.append(mode)
        return (OK,)

    def cuStreamEndCapture(self, stream):
        assert int(stream) == self.capturing
        graph, self.capturing, self.captured = ("graph", tuple(self.captured)), None, []
        return OK, graph

    def cuGraphInstantiate(self, graph, flags):
        if self.refuse == "instantiate":
            return driver.CUresult.CUDA_ERROR_NOT_SUPPORTED, None
        return OK, ("exec", graph[1])

    def cuGraphLaunch(self, graph_exec, stream):
        self.gpu.append(("graph", graph_exec[1], int(stream)))
        return (OK,)

    def cuStreamIsCapturing(self, stream):
        self.queries += 1
        active = int(stream) in self.users_capture
        return OK, getattr(driver.CUstreamCaptureStatus, "CU_STREAM_CAPTURE_STATUS_" + ("ACTIVE" if active else "NONE"))

    def cuStreamDestroy(self, stream):
        self.destroyed.append(("stream", int(stream)))
        return (OK,)

    def cuGraphExecDestroy(self, graph_exec):
        self.destroyed.append(("exec", graph_exec[1]))
        return (OK,)

    def cuGraphDestroy(self, graph):
        self.destroyed.append(("graph", graph[1]))
        return (OK,)


@pytest.fixture
def gpu(monkeypatch):
    """The stand-in driver in place of cuda.bindings' (with cuda.core's own ParamHolder), graphs on."""
    stand_in = StandInDriver()
    pieces = SimpleNamespace(ParamHolder=kernel_launch._pieces().ParamHolder, bindings=stand_in,
                             function_of=lambda kernel: kernel)
    monkeypatch.setattr(kernel_launch, "_pieces", lambda: pieces)
    monkeypatch.delenv(kernel_launch.GRAPHS_ENV, raising=False)
    monkeypatch.setattr(launch, "_graph_refused", [])
    return stand_in


def _steps(stream: int = STREAM, memset_stream: int | None = None) -> list:
    """A split-K-like call writing the output at P: the output zeroed by a memset, then one kernel launch whose
    arguments are an array at P (numba-cuda's packing: meminfo, parent, size, itemsize, pointer, shape, strides)
    and a scalar."""
    zero = Memset(kernel_launch.memset_d32(), P, 256, STREAM if memset_stream is None else memset_stream)
    packed = (0, 0, 256, 4, P, 256, 4, 7)
    run = PackedLaunch(kernel_launch.prepared, stream, LaunchConfig(grid=(3, 2), block=128, shmem_size=1024),
                       "kernel", packed, (4,))
    return [zero, run]


def test_a_plan_runs_launch_by_launch_first_then_as_one_graph_of_the_same_work(gpu):
    plan = Plan(_steps(), "out")
    assert plan() == "out"
    direct = list(gpu.gpu)
    assert [w[0] for w in direct] == ["memset", "launch"] and {w[-1] for w in direct} == {STREAM}
    assert plan() == "out" and plan() == "out"
    graph = ("graph", tuple(w[:-1] for w in direct), STREAM)  # the same work, in the same order, on its stream
    assert gpu.gpu == direct + [graph, graph]
    (capture, flags), = gpu.created  # captured once, on a stream of its own that waits on nothing
    assert capture != STREAM and flags == driver.CUstream_flags.CU_STREAM_NON_BLOCKING
    assert gpu.modes == [driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL]
    assert ("stream", capture) in gpu.destroyed and gpu.capturing is None
    assert ("graph", graph[1]) in gpu.destroyed  # the graph is not needed once instantiated; the executable is kept
    assert ("exec", graph[1]) not in gpu.destroyed


def test_a_plan_moved_onto_a_new_output_captures_the_moved_work_per_pointer(gpu):
    plan = Plan(_steps(), None)
    written = Written(P, 1024, (256,), "float32", "C")
    for _ in range(3):
        assert written.replay_onto(plan, "new", Q) == "new"
    first, second, third = gpu.gpu[:2], gpu.gpu[2], gpu.gpu[3]
    assert first[0][:2] == ("memset", Q) and first[1][0] == "launch"  # the first replay onto Q: step by step
    assert second == third and second[0] == "graph" and second[1][0][:2] == ("memset", Q)
    moved_params = first[1][3]
    assert second[1][1] == ("launch", "kernel", (3, 2, 1, 128, 1, 1, 1024), moved_params)


def test_steps_a_graph_cannot_hold_stay_launch_by_launch(gpu):
    copies = []
    with_a_copy = _steps() + [functools.partial(copies.append, "copy")]  # a copy between arrays, a cuda.core launch
    on_two_streams = _steps(memset_stream=STREAM + 1)
    for steps in (with_a_copy, on_two_streams, []):
        plan = Plan(steps, None)
        for _ in range(3):
            plan()
    assert gpu.created == [] and not any(w[0] == "graph" for w in gpu.gpu)
    assert len(gpu.gpu) == 12 and copies == ["copy"] * 3


def test_a_refused_capture_is_said_once_and_the_plan_replays_launch_by_launch(gpu):
    gpu.refuse = "instantiate"
    plans = [Plan(_steps(), None), Plan(_steps(), None)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for plan in plans:
            for _ in range(3):
                plan()
    said = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "cuGraphInstantiate" in str(said[0].message) and "AUTOTUNE_GRAPHS" in str(said[0].message)
    assert [w[0] for w in gpu.gpu] == ["memset", "launch"] * 6  # every run computed, step by step
    assert gpu.capturing is None and [d[0] for d in gpu.destroyed].count("stream") == 2
    assert ("graph", (("memset", P, 0, 256), gpu.gpu[1][:-1])) in gpu.destroyed  # the captured graph, not leaked


def test_graphs_are_off_with_AUTOTUNE_GRAPHS_0(gpu, monkeypatch):
    monkeypatch.setenv(kernel_launch.GRAPHS_ENV, "0")
    plan = Plan(_steps(), None)
    for _ in range(3):
        plan()
    assert gpu.created == [] and [w[0] for w in gpu.gpu] == ["memset", "launch"] * 3


def test_a_graph_is_destroyed_with_its_plan(gpu):
    plan = Plan(_steps(), None)
    plan()
    plan()
    assert not any(d[0] == "exec" for d in gpu.destroyed)
    del plan
    gc.collect()
    assert [d[0] for d in gpu.destroyed if d[0] != "stream"] == ["graph", "exec"]


def test_a_step_refused_mid_capture_ends_the_capture_and_destroys_what_it_made(gpu):
    """A step the driver refuses during the capture (LaunchError), or one that fails before reaching it (a
    Python error: the capture stays valid and ending it gives a partial graph): the capture is ended, its graph
    and stream destroyed, the plan replays launch by launch, and the refusal is said once."""
    real = gpu.cuLaunchKernel

    def refused(*args):
        return (driver.CUresult.CUDA_ERROR_INVALID_VALUE,) if gpu.capturing is not None else real(*args)

    def broken(*args):
        if gpu.capturing is not None:
            raise TypeError("an argument cuda.bindings cannot convert")
        return real(*args)

    for failing in (refused, broken):
        gpu.cuLaunchKernel, gpu.destroyed, gpu.gpu = failing, [], []
        launch._graph_refused.clear()
        plan = Plan(_steps(), None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                plan()
        assert gpu.capturing is None, "the capture was left open on this thread"
        assert [w[0] for w in gpu.gpu] == ["memset", "launch"] * 3
        assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
        assert [d[0] for d in gpu.destroyed] == ["graph", "stream"], failing  # the partial graph: not leaked
        assert gpu.destroyed[0][1] == (("memset", P, 0, 256),)


def test_inside_a_callers_own_capture_a_graph_replays_launch_by_launch(gpu):
    """A graph's launch cannot be captured: on a stream that a caller is capturing into a graph of its own, the
    replay issues its launches one by one, which the caller's capture records; on the legacy default stream (which
    no capture can hold) nothing is asked."""
    plan = Plan(_steps(), None)
    plan()
    plan()
    gpu.users_capture.add(STREAM)
    plan()
    gpu.users_capture.clear()
    plan()
    kinds = [w[0] for w in gpu.gpu]
    assert kinds == ["memset", "launch", "graph", "memset", "launch", "graph"] and gpu.queries == 3
    on_default = Plan(_steps(stream=0, memset_stream=0), None)
    for _ in range(3):
        on_default()
    assert gpu.queries == 3 and [w[0] for w in gpu.gpu[6:]] == ["memset", "launch", "graph", "graph"]


def test_a_refused_graph_launch_raises_naming_the_driver_error(gpu):
    plan = Plan(_steps(), None)
    plan()
    gpu.cuGraphLaunch = lambda graph_exec, stream: (driver.CUresult.CUDA_ERROR_LAUNCH_FAILED,)
    with pytest.raises(kernel_launch.LaunchError, match="cuGraphLaunch.*CUDA_ERROR_LAUNCH_FAILED"):
        plan()


def test_moved_plans_are_kept_for_the_latest_output_addresses(gpu):
    """Past MAX_MOVES addresses the oldest moved plan goes, not all of them: an address still in use keeps its
    plan, so its next replay is its graph."""
    plan = Plan(_steps(), None)
    written = Written(P, 1024, (256,), "float32", "C")
    addresses = [Q + i * 4096 for i in range(launch.MAX_MOVES + 1)]
    for address in addresses:
        written.replay_onto(plan, "new", address)
    assert list(written.moves) == addresses[1:]
    written.replay_onto(plan, "new", addresses[1])
    assert gpu.gpu[-1][0] == "graph" and gpu.gpu[-1][1][0][:2] == ("memset", addresses[1])
