"""From a configuration to a callable kernel: validate -> render -> load (compile on first launch).

This is the one path every kernel takes, whether the user asks for a configuration, the tuner samples it
or the database supplies it.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from . import matmul, reduce
from .device import simulator_active
from .space import load_space
from .render import render
from .compiler import load_source

FAMILIES = {"matmul": matmul, "reduce": reduce}
KERNEL_CLASSES = {"matmul": matmul.MatmulKernel, "reduce": reduce.ReduceKernel}

_cache: dict[tuple, Any] = {}
_lock = threading.Lock()


def family_args(kind: str, args: Mapping[str, Any]) -> dict[str, Any]:
    if kind not in FAMILIES:
        raise ValueError(f"unknown kernel kind {kind!r}; known: {', '.join(FAMILIES)}")
    try:
        return FAMILIES[kind].family_args(**args)
    except TypeError as exc:
        raise ValueError(f"{kind}: {exc}") from None


def render_source(kind: str, params: Mapping[str, Any], dtype: str = "float32", *, simulator: bool | None = None,
                  space=None, **args) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Validated parameters, family arguments and the rendered source."""
    family = family_args(kind, args)
    space = space or load_space(kind)
    checked = space.validate(params, dtype=dtype, family=family)
    sim = simulator_active() if simulator is None else simulator
    source = render(kind, FAMILIES[kind].template_context(checked, dtype, family, sim))
    return checked, family, source


def build_kernel(kind: str, params: Mapping[str, Any] | None = None, dtype: str = "float32", *, space=None,
                 **family_args):
    """The callable kernel object for one configuration (validated against the kernel's search space).

    ``build_kernel("matmul", {"BM": 128, ...})(A, B)``; ``build_kernel("reduce", {...}, op="max", axis=1)(x)``.
    Missing parameters take the search space's defaults; ``space`` is a loaded ``SearchSpace`` to validate
    against instead of the built-in one. Built kernels are cached in this process.
    """
    checked, family, source = render_source(kind, params or {}, dtype, space=space, **family_args)
    key = (kind, dtype, tuple(sorted(family.items(), key=str)), source)
    with _lock:
        if key not in _cache:
            module = load_source(source)
            _cache[key] = KERNEL_CLASSES[kind](module, checked, dtype, family, source)
        return _cache[key]
