"""What is being tuned: a kernel family, a shape, a dtype and the family's arguments (layout, op, axis...).

A ``Problem`` is the key of a study and of a database entry (autotune/tuning/instance.py holds its data on the
device).
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .dtypes import numpy_dtype
from .registry import family as family_named

MAX_DIMENSION = 2**48  # no GPU holds an array with a longer axis; the database refuses longer ones too
MAX_SHAPE_TEXT = 200

if TYPE_CHECKING:
    from .family import KernelFamily

_DIMS = re.compile(r"^\d+(x\d+)*$")
_POWER = re.compile(r"^(\d+)(\*\*|<<)(\d+)$")


def parse_shape(text: str, impl: "KernelFamily | None" = None) -> tuple[int, ...]:
    """'4096x4096x4096' -> (4096, 4096, 4096); a 1-D size may also be written '2**24' or '1<<24'. A shape that
    is not of this form is refused in the terms of ``impl`` (its ``shape_help`` and an example from its suite)."""
    text = str(text).strip().lower().replace(" ", "")
    if len(text) > MAX_SHAPE_TEXT:
        raise ValueError(f"shape {text[:40]!r}...: {len(text)} characters; no shape is written in more than "
                         f"{MAX_SHAPE_TEXT}")
    power = _POWER.match(text)
    if power:
        base, op, exp = power.groups()
        if int(exp) > 64:
            raise ValueError(f"shape {text!r} is too large")
        return check_dims((int(base) ** int(exp) if op == "**" else int(base) << int(exp),), text)
    if not _DIMS.match(text):
        raise ValueError(f"shape {text!r} is not of the form {_shape_form(impl)}")
    return check_dims(tuple(int(d) for d in text.split("x")), text)


def _shape_form(impl: "KernelFamily | None") -> str:
    """How a family's shapes are written, for messages: '4096x4096 (softmax: M x N, M rows of N)'."""
    example = (impl.suite or impl.dry_run_shapes or ("",))[0] if impl is not None else ""
    form = f"{example or '4096x4096'} (dimensions joined by x)"
    if impl is not None and impl.shape_help:
        form = f"{example or '4096x4096'} ({impl.name}: {impl.shape_help})"
    return form


def check_dims(shape: Any, text: Any = None) -> tuple[int, ...]:
    """A problem shape as a tuple of Python ints, each from 1 to MAX_DIMENSION (NumPy integers accepted);
    ValueError else."""
    dims = (shape,) if not isinstance(shape, (tuple, list)) else shape
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ValueError(f"shape {text or shape!r}: dimensions must be integers") from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"shape {text or shape!r}: every dimension must be at least 1 (a problem is tuned and "
                         f"looked up for a non-empty shape)")
    if any(d > MAX_DIMENSION for d in dims):
        raise ValueError(f"shape {_short(text or shape)}: a dimension above 2**48 ({MAX_DIMENSION}); no GPU holds "
                         f"such an array")
    return dims


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def dtype_name(dtype: Any) -> str:
    """'float32' for np.float32, 'f4', np.dtype('float32') or 'float32'; ValueError for what is no dtype."""
    try:
        return numpy_dtype(dtype).name
    except TypeError:
        raise ValueError(f"dtype {dtype!r} is not a NumPy dtype") from None


def family_dtype(impl, dtype: Any) -> str:
    """``dtype``'s name where the family ``impl`` computes it; ValueError naming the family's dtypes otherwise."""
    name = dtype_name(dtype)
    if name not in impl.dtypes:
        raise ValueError(f"dtype {name!r} is not supported by {impl.name}; supported: {', '.join(impl.dtypes)}")
    return name


@dataclass(frozen=True)
class Problem:
    """``family``: the family's name; ``args``: its arguments, validated and completed with defaults."""

    family: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        impl = family_named(self.family)
        try:
            args = impl.family_args(**dict(self.args))
        except TypeError as exc:
            raise ValueError(f"{self.family}: {exc}") from None
        object.__setattr__(self, "dtype", family_dtype(impl, self.dtype))
        object.__setattr__(self, "shape", check_dims(self.shape))
        args = impl.canonical_args(self.shape, args)
        object.__setattr__(self, "args", args)
        impl.check_shape(self.shape, args)
        impl.check_dtype(self.dtype, args)

    @property
    def impl(self):
        """The ``KernelFamily`` this problem belongs to."""
        return family_named(self.family)

    @property
    def key(self) -> str:
        """A stable name: 'matmul/float32/nn/4096x4096x4096', 'reduce/float32/sum/axis1/16384x16384'."""
        return f"{self.family}/{self.dtype}/{self.impl.key_tag(self.args)}/{shape_text(self.shape)}"

    @property
    def work(self) -> float:
        """Floating-point operations or the fewest bytes moved, as the family counts them."""
        return self.impl.work(self)

    @property
    def unit(self) -> str:
        return self.impl.unit

    def rate(self, seconds: float) -> float:
        """Throughput in ``unit``."""
        return self.impl.rate(self, seconds)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.impl.out_shape(self)

    @property
    def out_dtype(self) -> str:
        """The output's dtype: the input's, unless the family says otherwise (an int32 sum gives int64)."""
        return self.impl.out_dtype(self)
