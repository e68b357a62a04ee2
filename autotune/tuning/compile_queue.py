"""Variants on their way from the compile pool to the GPU threads, handed on in the order their compiles finish.

Compile times within one search differ by more than a hundredfold (a cached variant loads at once, a large
register tile compiles for a minute), so a variant reaches a GPU thread as soon as its own compile ends. Handed on in the order
submitted, with the number in flight bounded, one slow compile would hold every finished one behind it and leave
the pool idle until it ended.
"""
from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

IDLE_POLL_S = 0.5  # how often a waiting GPU thread looks for compiles past their timeout


@dataclass(eq=False)
class Compiling:
    """One variant: what the tuner needs back (``payload``), its compile, and when that compile is given up."""

    payload: Any
    future: cf.Future
    deadline: float
    timed_out: bool = False


class CompileQueue:
    """At most ``limit`` variants at once between submission and ``release`` (compiling, compiled and waiting, or
    being measured), so that a run stopped at its trial count or time limit leaves few compiles unused.

    ``get`` returns each submitted variant once: when its compile has finished (or was cancelled), or, with
    ``timed_out`` set, once ``timeout_s`` has passed since its submission; ``None`` after ``close``."""

    def __init__(self, submit: Callable[[Any], cf.Future], limit: int, timeout_s: float):
        self._submit = submit
        self._slots = threading.BoundedSemaphore(limit)
        self._timeout_s = timeout_s
        self._ready: queue.Queue = queue.Queue()
        self._pending: set[Compiling] = set()  # submitted, not yet handed on
        self._lock = threading.Lock()

    def reserve(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for room for one more variant; True when there is (then ``submit`` it or
        ``release``)."""
        return self._slots.acquire(timeout=timeout_s)

    def release(self) -> None:
        """A reserved place is free again: its variant is told, queued again, or was never submitted."""
        self._slots.release()

    def submit(self, payload: Any, job: Any) -> None:
        """Compile ``job`` (in a place taken by ``reserve``); ``payload`` comes back with it from ``get``."""
        item = Compiling(payload, self._submit(job), time.monotonic() + self._timeout_s)
        with self._lock:
            self._pending.add(item)
        item.future.add_done_callback(lambda _: self._hand_on(item))

    def get(self) -> Compiling | None:
        """The next variant whose compile finished (or timed out); blocks until there is one or ``close``."""
        while True:
            try:
                return self._ready.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                self._expire_overdue()

    def take_waiting(self) -> list[Any]:
        """The payloads of every variant not yet taken by ``get`` (compiling, or compiled and waiting), which
        will then never be handed on; their places are released."""
        with self._lock:
            taken = [item.payload for item in self._pending]
            self._pending.clear()
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                taken.append(item.payload)
        for _ in taken:
            self.release()
        return taken

    def close(self, readers: int) -> None:
        """Wake ``readers`` GPU threads with ``None``: no more variants come."""
        for _ in range(readers):
            self._ready.put(None)

    def _hand_on(self, item: Compiling, timed_out: bool = False) -> None:
        with self._lock:
            if item not in self._pending:  # already handed on (timed out) or taken away
                return
            self._pending.discard(item)
        item.timed_out = timed_out
        self._ready.put(item)

    def _expire_overdue(self) -> None:
        now = time.monotonic()
        with self._lock:
            overdue = [item for item in self._pending if item.deadline <= now and not item.future.done()]
        for item in overdue:
            self._hand_on(item, timed_out=True)
