"""PyTorch's current CUDA stream as a handle, read through PyTorch's private ``torch._C._cuda_getCurrentRawStream``:
the one private PyTorch function the project calls, fenced here.

A result tensor made for a replayed call comes from PyTorch's caching allocator, which ties its block to PyTorch's
current stream; the launches that write it run on the call's stream. Where the two differ, ``record_stream`` must
tell the allocator (about 1.3 us a call); where they are the same it is a no-op, and asking PyTorch's public API
which stream is current (``torch.cuda.current_stream()``, which builds a ``Stream`` object) costs more than the
call it would save. The private function returns the handle as an int; it is what the code ``torch.compile``
generates calls to find its launch stream, so it is kept stable in practice, but it is not a promise.

Where it is missing or fails (another PyTorch), ``current_handle`` returns None, callers record the stream as they
would without it, and a ``RuntimeWarning`` says once per process that the shortcut does not apply.
"""
from __future__ import annotations

from typing import Any

from ..core.caller import warn

PRIVATE_NAME = "_cuda_getCurrentRawStream"
_warned = False


def current_handle(torch: Any, index: int) -> int | None:
    """The handle of PyTorch's current stream on device ``index`` (0: PyTorch's default stream, the legacy default
    stream in standard builds), or None where PyTorch's private query is missing or fails (said once)."""
    query = getattr(getattr(torch, "_C", None), PRIVATE_NAME, None)
    if query is not None:
        try:
            return int(query(index))
        except Exception as e:  # noqa: BLE001 - any failure of a private function: fall back, and say so
            _warn_once(f"it raised {type(e).__name__}: {e}")
            return None
    _warn_once("this PyTorch has no such function")
    return None


def _warn_once(why: str) -> None:
    """Say it at the caller's line, once; counted as said only once the warning was issued (a filter that turns it
    into an error raises it again at the next call)."""
    global _warned
    if not _warned:
        warn(f"autotune: PyTorch's current stream cannot be read through torch._C.{PRIVATE_NAME} ({why}); results "
             f"made for replayed calls on tensors are recorded on their launch stream each time (record_stream, about "
             f"a microsecond a call)", RuntimeWarning)
        _warned = True
