"""autotune: Jinja-generated Numba CUDA kernels, tuned per GPU model: matrix products, reductions, and kernel
families of your own.

    from autotune import get_best_kernel
    k = get_best_kernel("reduce", (1 << 24,))
    total = k(x)

Imports are lazy so that ``autotune --simulator`` can switch Numba to its CUDA simulator before Numba loads.
"""
__all__ = ["build_kernel", "get_best_kernel", "register_family", "KernelFamily", "FamilyArg", "Kernel", "Case",
           "TunedKernelWarning", "compare_exact", "compare_close", "unwritten"]
__version__ = "0.2.0"

_WHERE = {"build_kernel": "build", "get_best_kernel": "lookup", "TunedKernelWarning": "lookup",
          "register_family": "registry", "KernelFamily": "family", "FamilyArg": "family", "Kernel": "family",
          "Case": "family", "compare_exact": "oracle", "compare_close": "oracle", "unwritten": "oracle"}


def __getattr__(name):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(name)
