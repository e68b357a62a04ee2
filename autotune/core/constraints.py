"""Named constraints between parameters, referenced by search-space files.

A search space never holds code: each of its constraints names one predicate and gives numeric arguments or
parameter names. The generic predicates are here; a family adds its own (``KernelFamily.predicates``). A
predicate returns None when the configuration is acceptable and a sentence saying what is wrong otherwise, and
declares the arguments it takes, so a constraint missing one, naming an unknown parameter or giving a zero
bound is refused when the file is loaded. Hardware limits (HARDWARE_LIMITS) apply to every space, a user's own
file included, because a configuration breaking them cannot launch; they ask the family how many threads and how
much shared memory a configuration takes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

if TYPE_CHECKING:
    from .family import KernelFamily

MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED_BYTES = 48 * 1024  # more is dynamic shared memory, opted into at launch
MAX_SHARED_BYTES = 227 * 1024  # the most one block may opt into (sm_90); a GPU with less fails the launch
SM_SHARED_BYTES = 228 * 1024  # one SM's shared memory (sm_90), of which the driver keeps SHARED_PER_BLOCK a block
SHARED_PER_BLOCK = 1024
SM_REGISTERS = 65536  # one SM's registers, which also bound one block's (sm_70 to sm_90)


@dataclass(frozen=True)
class Context:
    """What a predicate may look at besides the parameters."""

    dtype: str
    args: Mapping[str, Any]
    impl: "KernelFamily | None" = None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Predicate:
    """A named check. ``reads``: parameters it needs (the constraint is skipped where one does not apply);
    ``numbers``: its integer arguments, each at least 1; ``names``: how many parameter names ``args`` lists."""

    check: Callable[..., str | None]
    reads: frozenset[str] = frozenset()
    numbers: tuple[str, ...] = ()
    names: int = 0
    doc: str = ""


def _divides(p, ctx, args):
    small, big = args
    if p[big] % p[small]:
        return f"{small}={p[small]} must divide {big}={p[big]}"
    return None


def _threads_between(p, ctx, min, max):
    n = ctx.impl.threads(p)
    if not min <= n <= max:
        return f"threads per block = {n} must lie in [{min}, {max}]"
    return None


def _vector_bytes_at_most(p, ctx, max):
    if p["VEC"] * ctx.itemsize > max:
        return f"VEC={p['VEC']} x {ctx.itemsize}-byte {ctx.dtype} exceeds a {max}-byte vector access"
    return None


def _shared_bytes_at_most(p, ctx, max):
    n = ctx.impl.shared_bytes(p, ctx.itemsize)
    if n > max:
        return f"shared memory {n} bytes per block exceeds {max}"
    return None


PREDICATES: dict[str, Predicate] = {
    "divides": Predicate(_divides, names=2, doc="args: [SMALL, BIG]: SMALL divides BIG"),
    "threads_between": Predicate(_threads_between, numbers=("min", "max"), doc="threads per block in [min, max]"),
    "vector_bytes_at_most": Predicate(_vector_bytes_at_most, frozenset({"VEC"}), ("max",),
                                      doc="VEC elements of the dtype fit in max bytes"),
    "shared_bytes_at_most": Predicate(_shared_bytes_at_most, numbers=("max",), doc="shared memory per block"),
}

HARDWARE_LIMITS: tuple[dict[str, Any], ...] = (
    {"name": "threads_between", "min": 1, "max": MAX_THREADS_PER_BLOCK},
    {"name": "shared_bytes_at_most", "max": MAX_SHARED_BYTES},
    {"name": "vector_bytes_at_most", "max": 16},
)


def predicates_of(impl: "KernelFamily") -> dict[str, Predicate]:
    """The predicates a family's spaces may name: the generic ones and the family's own."""
    return {**PREDICATES, **dict(impl.predicates)}


@dataclass(frozen=True)
class Rule:
    """A constraint of a loaded space: its predicate and arguments, checked when the file was loaded."""

    name: str
    predicate: Predicate = field(repr=False)
    args: Mapping[str, Any] = field(default_factory=dict)

    def needs(self) -> set[str]:
        return set(self.predicate.reads) | set(self.args.get("args", ()))

    def violation(self, params: Mapping[str, Any], ctx: Context) -> str | None:
        return self.predicate.check(params, ctx, **self.args)


def rule(spec: Mapping[str, Any], known: Mapping[str, Predicate], params: Mapping[str, Any]) -> Rule:
    """A constraint spec (``{name: divides, args: [TM, BM]}``) checked against its predicate; ValueError says what
    is wrong."""
    name = spec.get("name") if isinstance(spec, Mapping) else None
    if name not in known:
        raise ValueError(f"must be a mapping whose 'name' is one of {', '.join(sorted(known))}")
    predicate = known[name]
    args = {k: v for k, v in spec.items() if k != "name"}
    expected = set(predicate.numbers) | ({"args"} if predicate.names else set())
    extra = sorted(set(args) - expected)
    if extra:
        raise ValueError(f"{name} takes no argument {extra[0]!r}"
                         + (f"; it takes {', '.join(sorted(expected))}" if expected else ""))
    for number in predicate.numbers:
        value = args.get(number)
        if type(value) is not int:
            raise ValueError(f"argument {number!r} must be an integer" if number in args
                             else f"{name} needs the integer argument {number!r}")
        if value < 1:
            raise ValueError(f"argument {number!r} must be at least 1, got {value}")
    if predicate.names:
        names = args.get("args")
        if not isinstance(names, list) or len(names) != predicate.names or \
                not all(isinstance(a, str) and a in params for a in names):
            raise ValueError(f"'args' must list {predicate.names} parameter names of this space")
    return Rule(name=name, predicate=predicate, args=args)
