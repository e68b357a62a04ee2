"""Low-overhead launches: a kernel call checked and prepared once, then replayed for the cost of its launches.

A checked call (``k(x, out=r)``) converts and validates arrays, picks the launch configuration and lets Numba's
dispatcher type the arguments: more host time than a whole reduction of a million elements takes on the GPU. ``Plan`` keeps what such a call launched, with each kernel's arguments already packed, and
replays it with one driver launch per kernel, its parameter buffer built once (autotune/runtime/kernel_launch.py): no
typing, no checks, no allocation, no synchronisation.

A kernel launched from its stored code (autotune/runtime/driver_kernels.py) is packed by autotune as numba-cuda
packs it; one launched through Numba is packed by numba-cuda itself (``_prepare_args``, reached through
autotune/runtime/numba_kernels.py); where that is missing (the CUDA simulator, another numba-cuda) a launch is
replayed through the dispatcher instead, which is slower but the same computation. A plan can be moved to a new
output (``Plan.moved``) where each array's data pointer is found where numba-cuda 0.30 packs it (checked at each
packing).
"""
from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from typing import Any, Callable

import numpy as np

from ..core import caller
from ..core.dtypes import kernel_view
from . import arrays, driver_kernels, kernel_launch, numba_kernels, result_pool
from .numba_kernels import numba_configure
from .streams import stream_key

MAX_PLANS = 32
MAX_MOVES = 8  # moved launches kept per kept plan (Written.replay_onto)
SIMULATOR_SWITCH_S = 5e-4  # seconds; 1e-4 to 1e-3 measured alike, the default 5e-3 3-5x slower
_recording = threading.local()  # per thread: kernel objects are shared, a recording must not catch other calls


class Plan:
    """The launches of one call, replayed in order on the stream they were made for; returns the output. Its
    first run goes launch by launch; from its second, where every step is a buffered launch or a memset on one
    stream, the steps replay as one CUDA graph captured then (``_graphed``): one driver call, and less host time
    than even one launch (inside a caller's own capture of that stream, launch by launch again: GraphLaunch). A
    plan run once (a checked call's own) so never captures anything."""

    def __init__(self, steps: list[Callable[[], Any]], out):
        self._steps = steps
        self._calls = _calls(steps)
        self._ran = False
        self._graph_pending = True
        self.out = out

    def __call__(self):
        if self._ran and self._graph_pending:
            self._graph_pending = False
            graph = _graphed(self._steps)
            if graph is not None:
                self._calls = [graph]
        self._ran = True
        for call in self._calls:
            call()
        return self.out

    def __len__(self) -> int:
        return len(self._steps)

    def detached(self) -> "Plan":
        """The same launches without the reference to the output: a plan kept to be moved onto new outputs
        (``Written.replay``) must not keep the first output's memory alive after its caller dropped it."""
        return Plan(self._steps, None)

    @classmethod
    def joined(cls, plans: list["Plan"], out) -> "Plan":
        """The plans' launches one after the other, as one plan that returns ``out``."""
        return cls([step for plan in plans for step in plan._steps], out)

    def moved(self, old_pointer: int, nbytes: int, new) -> "Plan | None":
        """The same launches writing the device array ``new`` where they wrote the ``nbytes`` from ``old_pointer``
        (an output of the same size): every pointer into that memory points at the same offset of ``new``. So a
        call that returns a fresh output each time replays a plan too, instead of a checked call. (The old output
        need not be alive: every other pointer of the plan was allocated while it was.) None where a step holds
        arrays rather than pointers (the simulator's launches, a copy between arrays)."""
        if not self.movable:
            return None
        return Plan(self._moved_steps(old_pointer, nbytes, arrays.device_pointer(new)), new)

    def _moved_steps(self, old_pointer: int, nbytes: int, new_pointer: int) -> list[Callable[[], Any]]:
        delta = new_pointer - old_pointer
        return [step.moved(old_pointer, old_pointer + nbytes, delta) for step in self._steps]

    @property
    def movable(self) -> bool:
        """Whether ``moved`` can move every step: launches whose array pointers were found, and memsets."""
        return all(isinstance(step, Memset) or (isinstance(step, PackedLaunch) and step.pointers is not None)
                   for step in self._steps)


@dataclasses.dataclass(frozen=True)
class Written:
    """Where a kept plan wrote its output, and the output's form: what ``Plan.moved`` needs, and the form of the
    new array each later call gets (the first output itself is not kept alive)."""

    pointer: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    order: str
    context: Any = None  # the Numba context the output was made in (None: look up the current one)
    moves: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # new pointer -> Plan

    @classmethod
    def of(cls, d) -> "Written":
        order = "C" if arrays.is_c_contiguous(d) else "F"
        return cls(arrays.device_pointer(d), d.nbytes, tuple(d.shape), np.dtype(d.dtype).name, order,
                   result_pool.context_of(d))

    def new(self, stream=0) -> tuple[Any, int]:
        """A new array of this output's form from the result pool, for work on ``stream``, and its pointer."""
        new = result_pool.empty(self.shape, self.dtype, self.order, stream, self.context)
        return new, arrays.device_pointer(new)

    def replay(self, plan: Plan, stream=0):
        """``plan``, which wrote this output on ``stream``, run onto a new array from the result pool; that array."""
        return self.replay_onto(plan, *self.new(stream))

    def replay_onto(self, plan: Plan, new, pointer: int):
        """``plan``, which wrote this output, run onto ``new`` (an array of this output's form at ``pointer``, made
        for work on the plan's stream); ``new``. The moved launches are kept per new pointer (not the array, which
        would keep its memory alive): a result dropped before the next call hands its block to that call (the result
        pool's rule, and PyTorch's caching allocator's), so repeated calls move nothing."""
        moved = self.moves.get(pointer)
        if moved is None:
            if len(self.moves) >= MAX_MOVES:  # the oldest goes (dicts keep their order)
                self.moves.pop(next(iter(self.moves)), None)
            moved = self.moves[pointer] = Plan(plan._moved_steps(self.pointer, self.nbytes, pointer), None)
        moved()
        return new


def _calls(steps: list) -> list[Callable[[], Any]]:
    """What each step runs when called: a packed launch's prepared launch itself (one Python call less each)."""
    return [step.go if isinstance(step, PackedLaunch) else step for step in steps]


def _run_all(calls: list[Callable[[], Any]]) -> None:
    for call in calls:
        call()


_graph_refused: list[str] = []  # why the driver refused a capture, said once


def _graphed(steps: list) -> Callable[[], None] | None:
    """The steps as one CUDA graph launch (kernel_launch.captured), where graphs are on and every step is a
    buffered launch or a memset, all on one stream; None otherwise: a step launched through cuda.core or the
    dispatcher, a copy, the simulator's launches. A capture the driver refuses leaves the plan launch by launch,
    and a RuntimeWarning says so once."""
    if not steps or not kernel_launch.graphs_enabled():
        return None
    issuers, streams = [], set()
    for step in steps:
        go = step.go if isinstance(step, PackedLaunch) else step
        if isinstance(go, kernel_launch.BufferedLaunch):
            issuers.append(go.issue_on)
            streams.add(go.stream_handle)
        elif isinstance(step, Memset):
            issuers.append(step.issue_on)
            streams.add(step.stream)
        else:
            return None
    if len(streams) != 1:
        return None
    try:
        return kernel_launch.captured(issuers, streams.pop(), functools.partial(_run_all, _calls(steps)))
    except Exception as e:  # noqa: BLE001 - a driver or cuda.bindings that refuses: launch by launch, and say so
        if not _graph_refused:
            _graph_refused.append(str(e))
            caller.warn(f"autotune: replayed launches could not be captured into a CUDA graph ({e}); they are "
                        f"replayed launch by launch (set AUTOTUNE_GRAPHS=0 to skip the attempt)", RuntimeWarning)
        return None


@dataclasses.dataclass(frozen=True)
class PackedLaunch:
    """One kernel launch with its arguments packed (numba-cuda's packing, for cuda.core): ``pointers`` are the
    positions in ``packed`` of the arrays' data pointers (None where they could not be told). ``prepare`` makes
    the call that launches it, once (``kernel_launch.prepared``: the parameter buffer built once)."""

    prepare: Callable[[Any, Any, Any, tuple], Callable[[], None]]  # (stream, config, function, packed) -> launch
    stream: Any
    config: Any
    function: Any
    packed: tuple
    pointers: tuple[int, ...] | None
    go: Callable[[], None] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "go", self.prepare(self.stream, self.config, self.function, self.packed))

    def __call__(self):
        self.go()

    def moved(self, lo: int, hi: int, delta: int) -> "PackedLaunch":
        """This launch with its array pointers that lie in [lo, hi) moved by ``delta`` bytes (``pointers`` known)."""
        packed = list(self.packed)
        for i in self.pointers:
            if lo <= packed[i] < hi:
                packed[i] += delta
        return PackedLaunch(self.prepare, self.stream, self.config, self.function, tuple(packed), self.pointers)


@dataclasses.dataclass(frozen=True)
class Memset:
    """``words`` 32-bit zeros written from ``pointer`` on ``stream`` (a driver memset)."""

    memset: Callable  # the driver's cuMemsetD32Async (kernel_launch.memset_d32)
    pointer: int
    words: int
    stream: int

    def __call__(self):
        self.memset(self.pointer, 0, self.words, self.stream)

    def issue_on(self, stream) -> None:
        """The same memset on another stream (a ``CUstream``): how a graph captures it."""
        self.memset(self.pointer, 0, self.words, int(stream))

    def moved(self, lo: int, hi: int, delta: int) -> "Memset":
        return dataclasses.replace(self, pointer=self.pointer + delta) if lo <= self.pointer < hi else self


def configure(kernel, grid, block, shared: int = 0, simulator: bool = False, stream=0, cluster: int = 1):
    """``kernel[grid, block, stream, shared]``, safe to keep and to record. On a GPU a kernel whose compiled code
    can be cached launches from it through the driver (driver_kernels.CachedDispatcher), others through Numba
    (``numba_configure``); ``cluster`` > 1 (blocks per cluster along x) through the driver only (RuntimeError
    where it cannot). The CUDA simulator's ``kernel[grid, block]`` sets the grid on the kernel object itself and
    returns it, so a kept configuration would launch with whichever grid was configured last; there it is a
    function that configures at each launch (it has no clusters: each block runs as without one)."""
    if simulator:
        return lambda *args: _simulate(kernel[grid, block, 0, shared], args)
    cached = driver_kernels.cached(kernel) if driver_kernels.enabled() else None
    if cached is not None:
        return driver_kernels.CachedLaunch(cached, grid, block, stream, shared, cluster)
    if cluster > 1:
        raise RuntimeError(f"a launch in clusters of {cluster} goes through the driver's launch (cuda.core), and "
                           f"this kernel's code cannot be loaded there (AUTOTUNE_CODE_CACHE 0, or its code not "
                           f"cacheable)")
    return numba_configure(kernel, grid, block, shared, stream)


def _simulate(configured, args):
    """One launch in Numba's CUDA simulator, with the interpreter switching threads every SIMULATOR_SWITCH_S.

    numba-cuda's own simulator runs each GPU thread as a Python thread, and its block manager polls them in a loop
    to find when all have reached a barrier; at the default switch interval every barrier waits whole intervals for
    the threads to be scheduled, and kernels with many of them run several times slower. Where autotune's
    greenlet blocks are installed (autotune/_patches/simulator_blocks.py) a launch runs in one thread and the
    interval changes nothing; it matters where numba-cuda's version turns them off."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SIMULATOR_SWITCH_S))
    try:
        return configured(*args)
    finally:
        sys.setswitchinterval(interval)


def elementwise(kernel, size: int, simulator: bool, stream=0):
    """``kernel`` configured with one thread per element of a flat array of ``size`` (256-thread blocks)."""
    threads = 256
    return configure(kernel, max(1, -(-size // threads)), threads, 0, simulator, stream)


def fill(module, d, value, simulator: bool, stream=0) -> tuple:
    """The launch that sets every element of a flat device array to ``value`` with the module's fill kernel."""
    return elementwise(module.fill, d.size, simulator, stream), d, d.dtype.type(value)


def zero(module, d, simulator: bool, stream=0) -> tuple:
    """The step that zeroes a flat device array: a driver memset on the stream the kernels launch on (faster than
    the fill kernel ahead of a split-K sum); the fill kernel in the simulator, which has no driver."""
    if simulator:
        return fill(module, d, 0, simulator)
    return (Memset(kernel_launch.memset_d32(), arrays.device_pointer(d), d.size * d.dtype.itemsize // 4, int(stream)),)


def bind(configured, args: tuple) -> Callable[[], Any]:
    """``configured(*args)`` (a launch configuration and its arguments) as a call with nothing left to do but
    launch."""
    if isinstance(configured, Memset):
        return configured
    if isinstance(configured, driver_kernels.CachedLaunch):
        parts = configured.bound(args)
        if parts is not None:
            return PackedLaunch(kernel_launch.prepared, *parts)
        configured = configured.numba_configured()
    try:
        return _packed_launch(configured, args)
    except (AttributeError, TypeError, KeyError, ImportError):
        return functools.partial(configured, *args)


def _packed_launch(configured, args: tuple) -> PackedLaunch:
    from cuda.core import LaunchConfig
    from numba.core import types

    kernel = numba_kernels.compiled_for_launch(configured, args)
    argtypes = numba_kernels.argument_types(kernel)
    packed: list = []
    pointers = []
    for ty, value in zip(argtypes, args):
        start = len(packed)
        packed += numba_kernels.numba_packed(kernel, (ty,), (value,), configured.stream)
        if isinstance(ty, types.Array):
            pointers.append(_data_pointer_position(packed, start, value))
    config = LaunchConfig(grid=configured.griddim, block=configured.blockdim, shmem_size=configured.sharedmem)
    return PackedLaunch(kernel_launch.prepared, configured.stream, config, numba_kernels.launch_kernel(kernel),
                        tuple(packed), None if None in pointers else tuple(pointers))


def _data_pointer_position(packed: list, start: int, array) -> int | None:
    """Where numba-cuda packed ``array``'s data pointer: after its meminfo, parent, size and itemsize; None (the
    launch then cannot be moved to another output) where another numba-cuda packs arrays otherwise."""
    position = start + 4
    fits = position < len(packed) and packed[position] == arrays.device_pointer(array)
    return position if fits else None


class Planned:
    """Mixin of the kernel classes: launches go through ``_enqueue``, so a checked call can be recorded as a Plan,
    and calls with device arrays are served from plans kept per (pointers, shapes, dtypes): with ``out=`` the plan
    writes ``out`` again, without it the first such call's plan is moved onto a new array each time."""

    def _enqueue(self, configured, *args) -> None:
        steps = getattr(_recording, "steps", None)
        if steps is not None:
            steps.append(bind(configured, args))
        else:
            configured(*args)

    @staticmethod
    def _scratch_for(out, *inputs, stream=0):
        """Where a call on ``stream`` computes: ``out`` itself, or a fresh array like it when ``out`` shares memory
        with an input (NumPy's result for ``out=`` aliasing an input; a kernel writing ``out`` would read its own
        results)."""
        if not arrays.overlaps(out, *inputs):
            return out
        return result_pool.empty(out.shape, out.dtype, "C", stream)

    def _into(self, out, target, run: Callable[[], None], stream=0) -> None:
        """``run()``, which writes ``target``, then ``target`` copied into ``out`` (on ``stream``) where they
        differ (bfloat16 as its bits: the simulator's copies cannot cast ml_dtypes' bfloat16)."""
        run()
        if target is not out:
            self._enqueue(functools.partial(kernel_view(out).copy_to_device, kernel_view(target), stream=stream))

    def _record(self, run: Callable[[], None]) -> list[Callable[[], Any]]:
        _recording.steps = steps = []
        try:
            run()
            return steps
        finally:
            _recording.steps = None

    def _plan(self, prepared: tuple) -> Plan:
        """A Plan of what ``run`` launches, from a kernel's ``_prepare`` result ``(output, run)``."""
        out, run = prepared
        return Plan(self._record(run), out)

    def _replayed_new(self, inputs: tuple, stream):
        """A new output computed by the kept plan of an earlier call on these device arrays and stream without
        ``out=``; None where there is none."""
        key = _new_output_key(inputs, stream)
        kept = self.__dict__.get("_plans", {}).get(key) if key is not None else None
        return None if kept is None else kept[1].replay(kept[0], stream)

    def _run_new(self, inputs: tuple, prepared: tuple, stream):
        """Run a checked call that makes a new output (``prepared``: ``_prepare``'s result) and return the output;
        on device arrays its plan is kept for the next such call where its launches can be moved."""
        result, run = prepared
        key = _new_output_key(inputs, stream)
        if key is None:
            run()
            return result
        plan = Plan(self._record(run), result)
        plan()
        if plan.movable:
            self._keep(key, (plan.detached(), Written.of(result)))
        return result

    def _keep(self, key: tuple, value) -> None:
        plans = self.__dict__.setdefault("_plans", {})
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plans[key] = value

    def _plan_for(self, inputs: tuple, out, make: Callable[[], Plan], stream=0) -> Plan | None:
        """The plan for a call on exactly these device arrays and stream (None when one of them is a host
        array)."""
        key = arrays.plan_key(*inputs, out)
        if key is None:
            return None
        key += (stream_key(stream),)
        plan = self.__dict__.get("_plans", {}).get(key)
        if plan is None:
            plan = make()
            self._keep(key, plan)
        return plan


def _new_output_key(inputs: tuple, stream) -> tuple | None:
    key = arrays.plan_key(*inputs)
    return None if key is None else key + (stream_key(stream), "new output")
