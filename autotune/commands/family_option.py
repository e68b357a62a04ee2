"""``--family NAME|PATH``: how every command names a kernel family, and the help that goes with it.

A family is named the same way in every command that takes one (tune, render, bench, selftest, show, warm, db,
studies): by the name of a known family (built-in, installed, registered) or by the file, folder or module it
is loaded from (``core.registry.resolve``). ``render``, ``bench`` and ``coverage`` also take it as their first word
(``autotune render matmul``), which is read as ``--family matmul``. Families named by path are loaded before
the parser is built, so that a single family's own arguments (``--op``, ``--layout``) become options and its
help lists its parameters with their allowed values; without one, the help lists the families known here.
"""
from __future__ import annotations

import argparse

from ..core.family import FamilyArg, KernelFamily
from ..core.registry import FamilyError, known, resolve
from ..core.registry import family as family_named

FLAGS = ("--family", "--kind", "--kernel")  # --kind (selftest) and --kernel (show): the first releases' spellings
POSITIONAL = ("render", "bench", "coverage")  # commands whose first word may name the family


def rewritten(argv: list[str]) -> list[str]:
    """``argv`` with a family given as the first word of a ``POSITIONAL`` command moved to ``--family``."""
    if len(argv) > 1 and argv[0] in POSITIONAL and not argv[1].startswith("-"):
        return [argv[0], "--family", argv[1], *argv[2:]]
    return list(argv)


def named(argv: list[str]) -> list[str]:
    """The family specs a command line names, in order."""
    found = []
    for i, arg in enumerate(argv):
        if arg in FLAGS and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith(tuple(f + "=" for f in FLAGS)):
            found.append(arg.split("=", 1)[1])
    return found


def preload(argv: list[str]) -> list[KernelFamily]:
    """The families the command line names, loaded, in its order (ValueError with the reason for one that cannot
    be). A name may refer to a family that a path later on the line loads (``--family layernorm --family
    ./my_layernorm``): names are resolved again after the others."""
    specs = named(argv)
    found: dict[str, KernelFamily] = {}
    for attempt in range(2):
        for spec in specs:
            if spec in found:
                continue
            try:
                found[spec] = resolve(spec)
            except FamilyError as exc:
                if attempt == 1:
                    raise ValueError(str(exc)) from None
    chosen = []
    for spec in specs:
        if found[spec] not in chosen:
            chosen.append(found[spec])
    return chosen


def families_text() -> str:
    """The families known here, one a line, for --help."""
    lines = ["kernel families known here (--family NAME, or --family PATH for a family file or folder of your "
             "own):"]
    for name in known():
        try:
            impl = family_named(name)
        except FamilyError:
            continue
        where = "built in" if impl.source == name else impl.source
        lines.append(f"  {name}: {impl.summary or '-'} ({where})")
    lines.append("`--family NAME --help` lists a family's arguments and its parameters with their allowed values.")
    return "\n".join(lines)


def add_family_option(p: argparse.ArgumentParser, chosen: list[KernelFamily], *, what: str,
                      repeatable: bool = False, required: bool = False, arguments: bool = False) -> None:
    """``--family NAME|PATH`` on ``p``: ``what`` it does for this command; with ``arguments``, the options of
    the chosen family's own arguments. The help's epilog lists the chosen family's parameters, else the known
    families."""
    p.add_argument("--family", action="append" if repeatable else "store", required=required,
                   default=[] if repeatable else None, metavar="NAME|PATH",
                   help=f"{what}: a known family's name ({', '.join(known())}) or the file, folder or module of "
                        f"one of your own" + (" (repeatable)" if repeatable else ""))
    single = chosen[0] if len(chosen) == 1 else None
    if arguments and single is not None:
        family_flags(p, single)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "\n\n".join(parameters_text(f) for f in chosen) if chosen else families_text()


def family_flags(p: argparse.ArgumentParser, impl: KernelFamily) -> None:
    """One option per family argument, e.g. --layout, --op, --axis, with its allowed values."""
    for arg in impl.args:
        flag = f"--{arg.name.replace('_', '-')}"
        default = str(arg.text(arg.default))
        if arg.kind is None:
            p.add_argument(flag, dest=f"arg_{arg.name}", default=default,
                           choices=[str(arg.text(c)) for c in arg.choices],
                           help=f"{impl.name}: {arg.help} (default {default})")
        else:
            p.add_argument(flag, dest=f"arg_{arg.name}", default=default, metavar=arg.kind.__name__.upper(),
                           help=f"{impl.name}: {arg.help} ({arg.allowed()}; default {default})")


def family_values(args: argparse.Namespace, impl: KernelFamily) -> dict:
    """The family's arguments from the parsed options (their defaults where the options are absent)."""
    return {a.name: _parsed(a, getattr(args, f"arg_{a.name}", str(a.text(a.default)))) for a in impl.args}


def _parsed(arg: FamilyArg, text: str):
    try:
        return arg.parse(text)
    except ValueError as exc:
        raise ValueError(f"--{arg.name.replace('_', '-')}: {exc}") from None


def parameters_text(impl: KernelFamily) -> str:
    """The family's summary, shape form, arguments and template parameters with their allowed values, for
    --help."""
    try:
        from ..core.space import load_space

        space = load_space(impl.name)
    except Exception as exc:  # a broken space must not break --help
        return f"(the search space of {impl.name} cannot be read: {exc})"
    where = "built in" if impl.source == impl.name else impl.source
    lines = [f"family {impl.name}: {impl.summary or '-'} ({where})"]
    if impl.shape_help:
        lines.append(f"  shapes (--shape): {impl.shape_help}")
    lines.append(f"  dtypes: {', '.join(impl.dtypes)}")
    for arg in impl.args:
        lines.append(f"  argument --{arg.name.replace('_', '-')}: {arg.allowed()} (default {arg.text(arg.default)})")
    lines.append(f"parameters of {impl.name} (-p NAME=VALUE; left out: the default, marked *):")
    for param in space.params.values():
        values = " ".join(f"{v}*" if v == param.default else str(v) for v in param.values)
        where = f"  [where {' and '.join(f'{k} in {list(v)}' for k, v in param.when.items())}]" if param.when else ""
        lines.append(f"  {param.name}: {values}{where}")
    return "\n".join(lines)


def chosen_one(args: argparse.Namespace) -> KernelFamily:
    """The family of a command that takes one (``--family`` given once)."""
    spec = args.family
    if isinstance(spec, list):
        if len(spec) != 1:
            raise ValueError("name one family: --family NAME|PATH")
        spec = spec[0]
    if spec is None:
        raise ValueError("name the family: --family NAME|PATH")
    try:
        return resolve(spec)
    except FamilyError as exc:
        raise ValueError(str(exc)) from None


def chosen_all(args: argparse.Namespace) -> list[KernelFamily]:
    """The families a command with a repeatable ``--family`` names, each once (empty: none named)."""
    specs = args.family if isinstance(args.family, list) else [args.family] if args.family else []
    chosen = []
    try:
        for spec in specs:
            fam = resolve(spec)
            if fam not in chosen:
                chosen.append(fam)
    except FamilyError as exc:
        raise ValueError(str(exc)) from None
    return chosen
