"""The kernel families known in this process: the built-in ones, those registered by the user, and those that
installed packages expose through the ``autotune.families`` entry-point group.

A family is found by name (``family("matmul")``); ``register_family`` adds one from a Python file, a folder
holding ``family.py`` or ``__init__.py``, an importable module name, or a ``KernelFamily`` object; ``resolve``
takes either (a name, else what ``register_family`` takes), as every command's ``--family NAME|PATH`` does. A
module or file exposes its family as the attribute ``family`` (an instance) or ``Family`` (a subclass). Each family
remembers where it came from (``KernelFamily.source``), so that the compile and GPU worker processes, which are
spawned fresh, load the same family again (``load_family``).

A family's NumPy-style functions (``KernelFamily.functions``) are checked when it is registered: each name must
be an identifier that neither autotune nor another registered family uses. ``function`` finds one by name (the
``autotune`` package's attribute lookup asks it, so ``autotune.softmax`` exists once its family is registered).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from .caller import note_family, warn
from .family import KernelFamily

#: The built-in families: name -> module. The only place besides the command line's two tuning commands where
#: their names appear as code.
BUILTIN = {"matmul": "autotune.families.matmul.family", "reduce": "autotune.families.reduce.family"}
ENTRY_POINT_GROUP = "autotune.families"

_families: dict[str, KernelFamily] = {}
_lock = threading.RLock()
_entry_points_read = False


class FamilyError(ValueError):
    """A family cannot be found, loaded or registered; the message says which and why."""


def family(name: str) -> KernelFamily:
    """The registered family called ``name``; FamilyError naming the known ones otherwise."""
    with _lock:
        if name in _families:
            return _families[name]
        if name in BUILTIN:
            return _builtin(name)
        _read_entry_points()
        if name in _families:
            return _families[name]
    raise FamilyError(f"unknown kernel family {name!r}; known: {', '.join(known())} (a family of your own is "
                      f"registered with autotune.register_family(PATH), or named by path: `--family PATH`)")


def resolve(spec: Any) -> KernelFamily:
    """The family ``spec`` names: a known family's name, else a family file, folder, module or object as
    ``register_family`` takes it (registered on the way); FamilyError naming the known families otherwise."""
    if isinstance(spec, str):
        with _lock:
            if spec in known():
                return family(spec)
            for fam in _families.values():
                if spec == fam.source:
                    return fam
        try:
            return register_family(spec)
        except FamilyError as exc:
            raise FamilyError(f"{exc}. Known families: {', '.join(known())}") from None
    return register_family(spec)


def command_spec(fam: KernelFamily) -> str:
    """How a command line names ``fam`` so that it is found again: its name where that suffices (built-in,
    installed), else the file, folder or module it was registered from."""
    if fam.name in BUILTIN or fam.source == fam.name or not fam.source:
        return fam.name
    return fam.source


def function(name: str):
    """The NumPy-style function ``name`` of a registered family (installed ones included), or None."""
    with _lock:
        _read_entry_points()
        for fam in _families.values():
            found = _functions_of(fam).get(name)
            if found is not None:
                return found
    return None


def registered() -> list[KernelFamily]:
    """The families registered in this process so far (built-in ones once they were first used)."""
    with _lock:
        return list(_families.values())


def function_names() -> list[str]:
    """The names of every registered family's NumPy-style functions."""
    with _lock:
        return sorted(n for fam in _families.values() for n in _functions_of(fam))


def known() -> list[str]:
    """Names of the families available: built-in, entry points, registered."""
    with _lock:
        _read_entry_points()
        return sorted({*BUILTIN, *_families})


def is_known(name: str) -> bool:
    try:
        family(name)
        return True
    except FamilyError:
        return False


def register_family(spec: Any) -> KernelFamily:
    """Make a family known to build_kernel, get_best_kernel, the tuner and the database commands.

    ``spec``: a path to a ``.py`` file or to a folder with ``family.py`` or ``__init__.py`` (its template and
    search space beside it), an importable module name, a module, a ``KernelFamily`` subclass or instance.
    Registering the same family again is harmless; another family under a taken name is refused."""
    if isinstance(spec, KernelFamily):
        return _register(spec, source=spec.source or type(spec).__module__)
    if inspect.isclass(spec) and issubclass(spec, KernelFamily):
        return _register(spec(), source=spec.__module__)
    if isinstance(spec, ModuleType):
        return _register(_from_module(spec, spec.__name__), source=spec.__name__)
    text = str(spec)
    path = Path(text).expanduser()
    if path.exists() or text.endswith(".py") or "/" in text:
        return _register(_from_module(_import_path(path), text), source=str(path.resolve()))
    if text in BUILTIN:
        return family(text)
    try:
        module = importlib.import_module(text)
    except ImportError as exc:
        raise FamilyError(f"cannot load kernel family {text!r}: no such file or folder, and importing it as a "
                          f"module failed ({exc})") from None
    return _register(_from_module(module, text), source=text)


def load_family(source: str) -> KernelFamily:
    """The family that ``KernelFamily.source`` names: a registered name, else loaded from the path or module."""
    with _lock:
        for attempt in range(2):
            for fam in _families.values():
                if source in (fam.name, fam.source):
                    return fam
            if source in BUILTIN:
                return family(source)
            _read_entry_points()
    return register_family(source)


def _builtin(name: str) -> KernelFamily:
    """The built-in family ``name``, loaded and registered on first use."""
    with _lock:
        fam = _families.get(name)
        if fam is None:
            fam = _from_module(importlib.import_module(BUILTIN[name]), name)
            fam.source = fam.source or name
            _families[name] = fam
            note_family(fam)
        return fam


def _register(fam: KernelFamily, source: str) -> KernelFamily:
    """Register ``fam``; the built-in names are always reserved for the built-in families, whether or not they have
    been used yet in this process (else a family registered first under "matmul" would serve autotune.matmul)."""
    name = getattr(fam, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise FamilyError(f"{source}: a kernel family needs a 'name' that is an identifier, got {name!r}")
    with _lock:
        if name in BUILTIN:
            builtin = _builtin(name)
            if fam is builtin or type(fam) is type(builtin):
                return builtin
            raise FamilyError(f"{source}: {name!r} is the name of a built-in kernel family ({', '.join(BUILTIN)} "
                              f"are reserved); give your family another name")
        current = _families.get(name)
        if current is not None:
            if current.source == (fam.source or source) or type(current) is type(fam):
                return current
            raise FamilyError(f"{source}: a kernel family named {name!r} is already registered from "
                              f"{current.source}")
        _check_functions(fam, source)
        if not fam.source:
            fam.source = source
        _families[name] = fam
        note_family(fam)
        return fam


def _functions_of(fam: KernelFamily) -> dict[str, Any]:
    found = fam.functions()
    return dict(found) if found else {}


def reserved_names() -> set[str]:
    """Names of the ``autotune`` namespace that a family's function may not take: the public API, the
    package's modules and its module attributes."""
    import pkgutil

    import autotune

    modules = {m.name for m in pkgutil.iter_modules(autotune.__path__)}
    return {*autotune.__all__, *getattr(autotune, "_WHERE", {}), *modules, "FUNCTIONS", "__version__"}


def _check_functions(fam: KernelFamily, source: str) -> None:
    """FamilyError unless every NumPy-style function of ``fam`` has a name of its own and is callable."""
    try:
        found = fam.functions()
    except Exception as exc:
        raise FamilyError(f"{source}: the family {fam.name!r}: functions() failed: {type(exc).__name__}: {exc}") \
            from None
    if found is None:
        return
    if not isinstance(found, Mapping):
        raise FamilyError(f"{source}: the family {fam.name!r}: functions() must return a mapping of names to "
                          f"functions, got {type(found).__name__}")
    reserved = reserved_names()
    for name, fn in found.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise FamilyError(f"{source}: the family {fam.name!r} declares a function named {name!r}: a name must be "
                              f"an identifier that does not start with '_'")
        if not callable(fn):
            raise FamilyError(f"{source}: the family {fam.name!r} declares {name!r}, which is not callable")
        if name in reserved:
            raise FamilyError(f"{source}: the family {fam.name!r} declares a function {name!r}, a name autotune "
                              f"uses itself (autotune.{name}); rename it")
        for other in _families.values():
            if other is not fam and name in _functions_of(other):
                raise FamilyError(f"{source}: the family {fam.name!r} declares a function {name!r}, which the "
                                  f"family {other.name!r} ({other.source}) already declares")


def _from_module(module: ModuleType, where: str) -> KernelFamily:
    found = getattr(module, "family", None)
    if isinstance(found, KernelFamily):
        return found
    cls = getattr(module, "Family", None)
    if inspect.isclass(cls) and issubclass(cls, KernelFamily):
        return cls()
    raise FamilyError(f"{where}: defines no kernel family (expected a module attribute 'family', an instance of "
                      f"autotune.KernelFamily, or 'Family', a subclass)")


def _import_path(path: Path) -> ModuleType:
    """Import a family's file or folder under a private module name derived from its path."""
    path = path.resolve()
    if path.is_dir():
        for candidate in ("family.py", "__init__.py"):
            if (path / candidate).is_file():
                path = path / candidate
                break
        else:
            raise FamilyError(f"{path}: a family folder needs family.py or __init__.py")
    if not path.is_file():
        raise FamilyError(f"{path}: no such family file")
    name = "autotune_family_" + "_".join(part for part in path.with_suffix("").parts if part.isidentifier())[-80:]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise FamilyError(f"{path}: importing the family failed: {type(exc).__name__}: {exc}") from None
    return module


def _read_entry_points() -> None:
    """Families that installed packages expose (``[project.entry-points."autotune.families"]``), read once."""
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
            if inspect.isfunction(loaded):
                loaded = loaded()
            if isinstance(loaded, ModuleType):
                loaded = _from_module(loaded, point.value)
            elif inspect.isclass(loaded) and issubclass(loaded, KernelFamily):
                loaded = loaded()
            if not isinstance(loaded, KernelFamily):
                raise FamilyError("it is not a kernel family")
            loaded.source = point.name  # a spawned process finds it by name through the entry point again
            fam = _register(loaded, point.name)
        except Exception as exc:  # one broken package must not hide the others
            warn(f"kernel family entry point {point.name!r} ({point.value}) failed to load: {exc}")
            continue
        if fam.name != point.name:
            warn(f"entry point {point.name!r} gave a family named {fam.name!r}")


__all__ = ["family", "known", "resolve", "register_family", "load_family", "registered", "function",
           "function_names", "command_spec", "reserved_names", "FamilyError", "BUILTIN"]
