"""autotune: Jinja-generated Numba CUDA kernels for matmul and reductions, tuned per GPU model.

    from autotune import build_kernel, get_best_kernel
    k = get_best_kernel("reduce", (1 << 24,))
    total = k(x)

Imports are lazy so that ``autotune --simulator`` can switch Numba to its CUDA simulator before Numba loads.
"""
__all__ = ["build_kernel", "get_best_kernel"]
__version__ = "0.1.0"


def __getattr__(name):
    if name == "build_kernel":
        from .build import build_kernel

        return build_kernel
    if name == "get_best_kernel":
        from .lookup import get_best_kernel

        return get_best_kernel
    raise AttributeError(name)
