"""The toolkit for family authors: what the built-in families' kernels and NumPy-style functions are made of.

A kernel family of your own (docs/families.md) needs two callables on top of its template: a ``Kernel`` (what
``make_kernel`` returns: ``k(x, out=None, stream=None)``) and, optionally, NumPy-style functions
(``KernelFamily.functions``: ``autotune.softmax(x)``). These names give them what ``autotune.sum`` and
``autotune.matmul`` have, so that a family's functions behave like the built-in ones.

Device arrays (the caller's arrays in any form):
    ``device_input(x, name)``   NumPy copied to the GPU; Numba, CuPy, PyTorch CUDA, DLPack arrays read in place
    ``is_host(x)``, ``to_host(x)``, ``host_to_device(x)``, ``device_to_host(d)``
    ``input_dtype(family, op, d)``, ``same_dtype(family, op, a, b)``: the dtype, one the family computes
    ``order_of(d, name)`` ('C' or 'F', else a clear error), ``is_c_contiguous``, ``is_f_contiguous``, ``c_base``,
    ``flat(d, order)``, ``aligned(d, width)`` (vector loads allowed), ``overlaps(out, *inputs)``,
    ``device_pointer(d)``, ``normalize_axis(axis, ndim)``, ``collapse(shape, axes)``

Streams (the caller's stream in any form: Numba, CuPy, PyTorch, cuda.core, a handle):
    ``as_stream(stream)``       as the Numba stream kernels launch on (0: the legacy default stream)
    ``follow(stream, producers)``  wait on the GPU for the streams the inputs were made on (``producer_stream``)
    ``stream_key(stream)``      what keys per-stream caches (launch configurations, workspaces)

Plans (a call on device arrays checked once, then replayed for the cost of its launches):
    ``Planned``                 mixin for a ``Kernel``: ``_enqueue`` launches (recorded into plans), ``_plan``,
                                ``_plan_for``, ``_run_new``, ``_replayed_new``, ``_scratch_for``, ``_into``
    ``Plan``                    the launches of one call; ``plan()`` runs them and returns the output
    ``configure(kernel, grid, block, shared, simulator, stream)``  a launch configuration safe to keep
    ``Replay``                  a NumPy-style function's repeated calls on the same device arrays, replayed

Results:
    ``result_array(out, shape, dtype, order, stream)``  ``out=`` checked, or a new array from the result pool
    ``empty(shape, dtype, order, stream)``  a new device array from the result pool (uninitialised)
    ``free_all_blocks()``       give the pool's cached blocks back
    ``library_of(*args)``       the caller's array library (NumPy, PyTorch, CuPy, Numba...): the first argument's
                                that is not a NumPy array
    ``returned(result, library, out, scalar)``  the result in that library (NumPy in, NumPy out; PyTorch in,
                                PyTorch out...), or ``out`` itself
    ``zero_fill(d, stream)``, ``copy_into(result, d, stream)``  the answers of empty cases

Kernels and errors:
    ``tuned_kernel(family, shape, dtype, **args)``  the tuned kernel, kept per problem for the process
    ``gpu_required()``          a context manager turning Numba's missing-driver error into ``NoGPUError``
    ``NoGPUError``

``examples/softmax/`` is built on these names only. Imports are lazy (see autotune/__init__.py).
"""
from __future__ import annotations

_WHERE = {
    "device_input": "runtime.calls", "input_dtype": "runtime.calls", "same_dtype": "runtime.calls",
    "order_of": "runtime.calls", "c_base": "runtime.calls", "normalize_axis": "runtime.calls",
    "collapse": "runtime.calls", "result_array": "runtime.calls", "returned": "runtime.calls",
    "zero_fill": "runtime.calls", "copy_into": "runtime.calls", "tuned_kernel": "runtime.calls",
    "Replay": "runtime.calls", "library_of": "runtime.calls",
    "is_host": "runtime.arrays", "to_host": "runtime.arrays", "host_to_device": "runtime.arrays",
    "device_to_host": "runtime.arrays", "is_c_contiguous": "runtime.arrays", "is_f_contiguous": "runtime.arrays",
    "flat": "runtime.arrays", "aligned": "runtime.arrays", "overlaps": "runtime.arrays",
    "device_pointer": "runtime.arrays", "producer_stream": "runtime.arrays",
    "as_stream": "runtime.streams", "follow": "runtime.streams", "stream_key": "runtime.streams",
    "Planned": "runtime.launch", "Plan": "runtime.launch", "configure": "runtime.launch",
    "empty": "runtime.result_pool", "free_all_blocks": "runtime.result_pool",
    "gpu_required": "core.device", "NoGPUError": "core.device",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """The toolkit's names, imported at first use and then kept here."""
    if name in _WHERE:
        import importlib

        value = globals()[name] = getattr(importlib.import_module(f"autotune.{_WHERE[name]}"), name)
        return value
    raise AttributeError(f"module 'autotune.toolkit' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
