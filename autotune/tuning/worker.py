"""Child processes: one per GPU that runs measurement jobs, so that a variant which crashes or hangs kills only
it, and the pool that compiles variants on the CPU.

An illegal memory access leaves a CUDA context unusable, and a hung kernel never returns: either would end
the tuning run if variants ran in the tuner's own process. The worker is restarted on its next job; the
job that broke it is reported as failed with the reason.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import threading
import time

from .records import CompileResult, Job, Measurement


def exit_with_parent(parent_pid: int, poll_s: float = 1.0) -> None:
    """Make this child process exit when ``parent_pid`` dies (a pool initializer).

    A compile-pool worker blocks on a queue whose write end it holds itself, so it never sees end-of-file when
    the tuner is killed with SIGKILL; without this it would sleep on as an orphan.
    """
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def start_child(parent_pid: int, gpus: tuple[str, ...] = ()) -> None:
    """What every child process of ours does first: leave Ctrl-C to the parent, which stops its children itself
    (a terminal sends SIGINT to the whole process group; a child that raised KeyboardInterrupt mid-job would
    print a traceback and hand the parent a failure that is really an interruption), exit with the parent, and
    turn off Numba's error highlighting (``plain_numba_errors``). Given ``gpus`` (``visible_names``), the
    process sees one of them alone, chosen by its process id: CUDA is not started yet in a fresh child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(parent_pid)
    plain_numba_errors()
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[os.getpid() % len(gpus)]


def visible_names(devices) -> tuple[str, ...]:
    """How a child process names each of our GPU indices ``devices`` in ``CUDA_VISIBLE_DEVICES``: the entry of our
    own list where we have one (our indices count within it), else the index.

    On a GPU machine a compile process compiles its variant for the GPU it sees first and keeps a CUDA context
    there. Left to itself that is GPU 0 whatever ``--device`` says: a run on GPU 1 would take memory on GPU 0 and
    compile for GPU 0's architecture, and several runs on one host would put every compile process's context on
    GPU 0 until it runs out of memory."""
    own = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in own.split(",")] if own else None
    return tuple(names[d] if names is not None and 0 <= d < len(names) else str(d) for d in devices)


def plain_numba_errors() -> None:
    """Numba's error messages without terminal colours in this process (effective where Numba is not imported
    yet, as in our freshly spawned children).

    Where colorama is installed, Numba marks up the message of every error it creates, and a compile creates thousands
    that type inference raises and catches, each markup wrapping the standard streams through colorama anew: a
    measurable part of every compile. A child's errors are recorded as text, where escape codes are noise anyway."""
    os.environ["NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"] = "1"


def start_real_compiler_child(parent_pid: int) -> None:
    """``start_child`` for a process that compiles with the real compiler although its parent runs the simulator:
    the simulator is chosen when Numba is first imported, which in a freshly spawned child comes after this."""
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    start_child(parent_pid)


STOP_WAIT_S = 10.0


def default_compile_workers() -> int:
    """Compile processes when none are asked for: one per CPU but one (left to the GPU threads), at most 16."""
    return max(1, min(16, (os.cpu_count() or 2) - 1))


def warm_compiler() -> None:
    """A compile process's first job in a warmed pool: what its first compile would otherwise pay once (the
    compile path's imports; on a GPU machine the CUDA context and Numba's CUDA target with NVVM and libdevice,
    through a one-line kernel), paid while the tuner starts or the previous problem ends."""
    import importlib

    from ..core import backend
    from ..core.device import gpu_available

    importlib.import_module(f"{__package__}.evaluate")  # the compile jobs' module and what it imports

    if backend.simulator() or not gpu_available():
        return
    from numba import cuda

    def touch(a):
        a[0] = 1.0

    cuda.jit("void(float32[::1])")(touch)  # compiled here: a signature given compiles eagerly


class CompilePool(cf.ProcessPoolExecutor):
    """Processes that compile variants on the CPU (spawned: CUDA cannot survive a fork); they exit with us.

    Leaving a ``with`` block by an exception (Ctrl-C included) stops the compiles still running instead of
    waiting for them, as does ``stop()``. ``warm`` starts every process at once with ``warm_compiler``, instead of
    one by one as jobs come."""

    def __init__(self, workers: int, warm: bool = False, real_compiler: bool = False, devices=()):
        """``real_compiler``: the processes compile for real targets even where this process runs the simulator
        (for a compute capability given, no GPU). ``devices``: the GPUs (our indices) whose work the processes
        compile, each process seeing one of them alone (``visible_names``); none: every GPU, as this process."""
        if real_compiler:
            initializer, initargs = start_real_compiler_child, (os.getpid(),)
        else:
            initializer, initargs = start_child, (os.getpid(), visible_names(devices))
        super().__init__(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=initializer,
                         initargs=initargs)
        self.stopped = False
        self._submitted: list[cf.Future] = []
        if warm:
            for _ in range(workers):
                self.submit(warm_compiler)

    def submit(self, fn, /, *args, **kwargs) -> cf.Future:
        future = super().submit(fn, *args, **kwargs)
        self._submitted = [f for f in self._submitted if not f.done()] + [future]
        return future

    def busy(self) -> bool:
        """Whether a job submitted is still waiting or running."""
        return any(not f.done() for f in self._submitted)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.stop()
        return super().__exit__(exc_type, exc, tb)

    def stop(self) -> None:
        """Drop compiles not yet started and end those still running: a compile that outlived its trial (timed
        out, past the deadline, interrupted) must not hold the run open, nor the interpreter's exit, which joins
        the executor's manager thread until its jobs end. The executor has no public way to end a running job,
        hence its process table and thread, read before ``shutdown`` drops them."""
        self.stopped = True
        processes = list((getattr(self, "_processes", None) or {}).values())
        manager = getattr(self, "_executor_manager_thread", None)
        self.shutdown(wait=False, cancel_futures=True)  # forgets both: they were taken first
        for process in processes:
            process.terminate()
        if manager is not None:
            manager.join(STOP_WAIT_S)


def compile_for_target(job: Job, cc: tuple[int, int], timeout_s: float) -> CompileResult:
    """Compile one variant for the compute capability ``cc`` with the real compiler (PTX, then a cubin through
    nvJitLink; no GPU needed) in a process of its own, so that a simulator run can prove what it writes builds
    for a GPU; a failed CompileResult says why it does not, or that it took longer than ``timeout_s``."""
    from .evaluate import compile_for

    pool = CompilePool(1, real_compiler=True)
    try:
        return pool.submit(compile_for, job, cc).result(timeout=timeout_s)
    except cf.TimeoutError:
        return CompileResult(ok=False, stage="timeout", reason=f"compile took longer than {timeout_s:.0f} s")
    except Exception as exc:  # the compile process itself died
        return CompileResult(ok=False, stage="run", reason=f"compile process failed: {type(exc).__name__}: {exc}")
    finally:
        pool.stop()


class CompilePools:
    """One warmed compile pool handed from problem to problem of a tuning run, so that each problem's first
    compiles do not wait for processes to start and warm up. A problem that leaves compiles running (its time
    limit, Ctrl-C) stops the pool, and the next one gets a fresh pool."""

    def __init__(self, workers: int, devices=()):
        self.workers = workers
        self.devices = tuple(devices)
        self._pool: CompilePool | None = None

    def get(self) -> CompilePool:
        if self._pool is None or self._pool.stopped:
            self._pool = CompilePool(self.workers, warm=True, devices=self.devices)
        return self._pool

    def release(self, pool: CompilePool) -> None:
        """A problem is done with ``pool``: kept for the next unless compiles still run in it (``get`` then starts
        a fresh one)."""
        if not pool.stopped and pool.busy():
            pool.stop()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool = None

    def __enter__(self) -> "CompilePools":
        self.get()  # its processes start now, while the caller prepares the first problem
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(conn, parent_pid: int, device: int | None, simulator: bool) -> None:
    start_child(parent_pid)
    if simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before Numba loads in this fresh process
    elif device is not None:
        from numba import cuda

        cuda.select_device(device)
    from .evaluate import measure_variant

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        conn.send(measure_variant(job))


STOPPED = "the worker was stopped (the run is ending)"


class Worker:
    """Runs ``measure_variant`` jobs in a child process on one GPU, with a timeout per job."""

    def __init__(self, device: int | None = None, timeout_s: float = 120.0, simulator: bool = False):
        self.device = device
        self.simulator = simulator
        self.timeout_s = timeout_s
        self.restarts = 0
        self._process = None
        self._conn = None
        self._stopped = False
        self._starting = threading.Lock()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # CUDA cannot survive a fork
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, os.getpid(), self.device, self.simulator),
                                    daemon=True, name=f"autotune-gpu{self.device}")
        self._process.start()
        child.close()

    def run(self, job: Job) -> Measurement:
        """The job's measurement, or a failed one if the worker timed out or died on it, or was stopped."""
        with self._starting:
            if self._stopped:
                return Measurement(ok=False, stage="run", reason=STOPPED)
            if self._process is None or not self._process.is_alive():
                self._start()
            process, conn = self._process, self._conn
        try:
            conn.send(job)
            if not conn.poll(self.timeout_s):
                self._kill()
                return Measurement(ok=False, stage="timeout",
                                   reason=f"timed out after {self.timeout_s:.0f} s (hang?); worker restarted")
            return conn.recv()
        except (EOFError, ConnectionError, OSError):
            if self._stopped:  # ended by stop(): the run is being interrupted, the job did not crash it
                return Measurement(ok=False, stage="run", reason=STOPPED)
            process.join(5)
            code = process.exitcode
            self._kill()
            return Measurement(ok=False, stage="run", reason=f"worker process died (exit code {code}: crash or "
                                                             f"illegal memory access); worker restarted")

    def _kill(self) -> None:
        self.restarts += 1
        self.kill()

    def stop(self) -> None:
        """End the child now, mid-job or not, and start none again (a run being interrupted): a GPU thread that
        got its variant's compile just before the interruption must not spawn a fresh worker and measure it."""
        with self._starting:
            self._stopped = True
        self.kill()

    def kill(self) -> None:
        """End the child now, mid-job or not; the next job starts a new one."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self._process = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._conn.close()
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
        self._process = None
