"""The fields that a database entry and a fitted rule share, read from their files (user input, so every value is
checked and a message quotes it at a bounded length): the kernel family, its dtype and its arguments. Each reader
raises the caller's error type, naming the field."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Mapping

from .registry import FamilyError
from .registry import family as family_named

if TYPE_CHECKING:
    from .family import KernelFamily


def short(value: Any) -> str:
    """A value for a message, never long (a crafted value must not make the message huge)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def short_text(exc: Exception, limit: int) -> str:
    """An error's text for a message, cut at ``limit`` characters."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def family_field(raw: Mapping[str, Any], error: type[Exception]) -> KernelFamily:
    """The registered family that field 'family' names."""
    family = raw.get("family")
    if not isinstance(family, str):
        raise error(f"field 'family' must name a kernel family, got {short(family)}")
    try:
        return family_named(family)
    except FamilyError as exc:
        raise error(f"field 'family': {exc}") from None


def unknown_field(raw: Mapping[str, Any], impl: KernelFamily, fields: Collection[str]) -> str | None:
    """The first field name (in sorted order) that is neither one of ``fields`` nor an argument of the family; None
    where every field is known."""
    arg_names = {a.name for a in impl.args}
    unknown = sorted(str(k) for k in raw if k not in fields and k not in arg_names)
    return unknown[0] if unknown else None


def dtype_field(raw: Mapping[str, Any], impl: KernelFamily, error: type[Exception]) -> str:
    """Field 'dtype', one of the family's."""
    dtype = raw.get("dtype")
    if dtype not in impl.dtypes:
        raise error(f"field 'dtype' is {short(dtype)}; allowed: {', '.join(impl.dtypes)}")
    return dtype


def args_fields(raw: Mapping[str, Any], impl: KernelFamily, error: type[Exception]) -> dict[str, Any]:
    """The family's arguments, each from its field (its default where the field is left out)."""
    args = {}
    for arg in impl.args:
        try:
            args[arg.name] = arg.parse(raw.get(arg.name, arg.text(arg.default)))
        except ValueError as exc:
            raise error(f"field {arg.name}: {exc}") from None
    return args
