"""autotune: Jinja-generated Numba CUDA kernels, tuned per GPU model: matrix products, reductions, and kernel
families of your own.

    import autotune
    total = autotune.sum(x)                 # tuned for x's shape, NumPy's semantics
    rows = autotune.max(x, axis=-1)
    C = autotune.matmul(A, B, stream=s)     # s: a Numba, CuPy, PyTorch or cuda.core stream

    from autotune import get_best_kernel    # a kernel object for one shape
    k = get_best_kernel("reduce", (1 << 24,))

A kernel family of your own (docs/families.md) is registered with ``register_family``; the NumPy-style functions
it declares (``KernelFamily.functions``) then appear here too (``autotune.softmax(x)``), and ``autotune.toolkit``
holds the pieces the built-in functions are made of (device arrays, streams, plans, the result pool).

Imports are lazy so that ``autotune --simulator`` can switch Numba to its CUDA simulator before Numba loads.
"""
from .core.version import __version__

FUNCTIONS = ("sum", "max", "min", "nanmax", "nanmin", "dot", "matmul")
__all__ = [*FUNCTIONS, "build_kernel", "get_best_kernel", "register_family", "KernelFamily", "FamilyArg", "Kernel",
           "Case", "Predicate", "TunedKernelWarning", "compare_exact", "compare_close", "unwritten",
           "tune_on_first_use"]

_WHERE = {**{name: "functions" for name in FUNCTIONS},
          "build_kernel": "runtime.build", "get_best_kernel": "runtime.lookup", "TunedKernelWarning": "core.caller",
          "register_family": "core.registry", "KernelFamily": "core.family", "FamilyArg": "core.family",
          "Kernel": "core.family", "Case": "core.family", "Predicate": "core.constraints",
          "compare_exact": "core.oracle", "compare_close": "core.oracle", "unwritten": "core.oracle",
          "tune_on_first_use": "tuning.first_use"}


def __getattr__(name):
    """The public names, imported at first use and then kept here (so that a call like ``autotune.sum(x)`` in a
    loop finds ``sum`` as a plain attribute, not through this function)."""
    if name in _WHERE:
        import importlib

        value = globals()[name] = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        return value
    if name.startswith("__"):
        raise AttributeError(name)
    from .core.registry import function

    found = function(name)  # a registered family's NumPy-style function; names cannot be taken twice
    if found is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r} (a kernel family's NumPy-style "
                             f"functions appear here once it is registered: autotune.register_family(PATH))")
    globals()[name] = found
    return found


def __dir__():
    from .core.registry import function_names

    return sorted({*globals(), *__all__, *function_names()})


def _first_use_from_environment() -> None:
    """AUTOTUNE_TUNE_ON_FIRST_USE=1: tuning on first use from the start (autotune/tuning/first_use.py), read by
    ``first_use_switch``, which imports nothing; first_use.py is imported only where the switch is on, and loads
    neither Numba nor Optuna, so ``--simulator`` still switches Numba before it loads."""
    from .tuning.first_use_switch import first_use_requested

    if first_use_requested():
        from .tuning.first_use import tune_on_first_use

        tune_on_first_use()


_first_use_from_environment()
