"""From a configuration to a callable kernel: validate -> render -> load (compiled code from the code cache, else
compiled at the first launch).

This is the one path every kernel takes, whether the user asks for a configuration, the tuner samples it
or the database supplies it.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from ..core import backend
from ..core.problem import dtype_name
from ..core.registry import family as family_named
from ..core.space import load_space
from . import sources
from .compiler import kernel_module

_cache: dict[tuple, Any] = {}
_lock = threading.Lock()


def family_args(family: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The family's arguments, validated and completed (ValueError naming the family otherwise)."""
    try:
        return family_named(family).family_args(**args)
    except TypeError as exc:
        raise ValueError(f"{family}: {exc}") from None


def render_source(family: str, params: Mapping[str, Any], dtype: str = "float32", *, simulator: bool | None = None,
                  space=None, **args) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Validated parameters, family arguments and the rendered source (on a GPU remembered on disk,
    autotune/runtime/sources.py)."""
    impl = family_named(family)
    checked_args = family_args(family, args)
    space = space or load_space(family)
    checked = space.validate(params, dtype=dtype_name(dtype), args=checked_args)
    sim = backend.simulator() if simulator is None else simulator
    dtype = dtype_name(dtype)

    def rendered() -> str:
        from .render import render  # Jinja is imported only where something is rendered

        return render(impl, impl.template(checked), impl.template_context(checked, dtype, checked_args, sim))

    if sim:  # the simulator's renderings are for tests and dry runs: rendered afresh
        return checked, checked_args, rendered()
    return checked, checked_args, sources.remembered(impl, checked, dtype, checked_args, sim, rendered)


def build_kernel(family: str, params: Mapping[str, Any] | None = None, dtype: str = "float32", *, space=None,
                 **family_args):
    """The callable kernel object for one configuration (validated against the kernel's search space).

    ``build_kernel("matmul", {"BM": 128, ...})(A, B)``; ``build_kernel("reduce", {...}, op="max", axis=1)(x)``.
    Missing parameters take the search space's defaults; ``space`` is a loaded ``SearchSpace`` to validate
    against instead of the built-in one. Built kernels are cached in this process.
    """
    dtype = dtype_name(dtype)
    simulator = backend.simulator()
    checked, args, source = render_source(family, params or {}, dtype, space=space, simulator=simulator,
                                          **family_args)
    key = (family, dtype, tuple(sorted(args.items(), key=str)), source)
    with _lock:
        if key not in _cache:
            module = kernel_module(source, simulator)
            _cache[key] = family_named(family).make_kernel(module, checked, dtype, args, source, simulator)
        return _cache[key]
