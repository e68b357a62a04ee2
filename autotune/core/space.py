"""Search spaces: load a YAML file safely, validate configurations against it, sample from it.

A configuration reaches a template only through ``SearchSpace.validate``: every value must be one the
space allows (an ``int`` for integer parameters, one of the listed names for the others) and every
constraint must hold. The rendered source is executed, so this is the one gate between user input and code.
A user's own space file (``--space``) may only narrow the family's built-in space: fewer values, a parameter
applying in fewer places, more constraints; anything else is refused when the file is loaded, with the file,
the parameter or constraint and what is allowed.
"""
from __future__ import annotations

import functools
import os
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .constraints import HARDWARE_LIMITS, PREDICATES, Context, Rule, predicates_of, rule
from .registry import family as family_named
from .yamlfast import read_yaml_fast
from .yamlfile import YamlFileError

if TYPE_CHECKING:
    from .family import KernelFamily

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_TOP_LEVEL = ("family", "params", "constraints", "starts")
_OLD_NAMES = {"kernel": "family"}  # a space file's keys as the first releases named them, still read


class SpaceError(ValueError):
    """A search-space file is malformed."""


@dataclass(frozen=True)
class Param:
    name: str
    values: tuple
    default: Any
    when: Mapping[str, tuple] = field(default_factory=dict)
    doc: str = ""

    def applies(self, context: Mapping[str, Any]) -> bool:
        for key, allowed in self.when.items():  # a loop, not all() over a generator: sampling calls this millions of times
            if context.get(key) not in allowed:
                return False
        return True

    def check(self, value: Any) -> None:
        kind = type(self.values[0])
        if type(value) is not kind or value not in self.values:
            allowed = ", ".join(map(str, self.values))
            raise ValueError(f"parameter {self.name}={value!r} is not allowed; allowed values: {allowed}")


@dataclass(frozen=True)
class SearchSpace:
    family: str
    params: Mapping[str, Param]
    constraints: tuple[Rule, ...]
    path: str
    starts: tuple[Mapping[str, Any], ...] = ()
    impl: "KernelFamily" = field(default=None, repr=False, compare=False)

    def _context(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """What ``when`` conditions see before any value is chosen: every parameter at its default (one that
        does not apply has its default's meaning, as in database entries), then the family arguments, those not
        given at their defaults (as ``family_args`` completes them; a reduction's axis None is 'all')."""
        context = {p.name: p.default for p in self.params.values()}
        context.update({arg.name: arg.default for arg in self.impl.args})
        context.update(args)
        for arg in self.impl.args:
            if arg.name in context:
                context[arg.name] = arg.text(context[arg.name])
        return context

    # -- which parameters apply -------------------------------------------------------------------
    def active(self, partial: Mapping[str, Any], args: Mapping[str, Any]) -> list[Param]:
        """Parameters that apply given the values chosen so far, in file order (conditions look back only; a
        parameter not chosen, because it does not apply, reads as its default)."""
        context = {**self._context(args), **partial}
        return [p for p in self.params.values() if p.applies(context)]

    def applies(self, param: Param, chosen: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
        """Whether ``param`` applies given the values chosen so far and the family arguments."""
        return param.applies({**self._context(args), **chosen})

    def defaults(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._applicable({}, args)

    # -- validation -------------------------------------------------------------------------------
    def validate(self, params: Mapping[str, Any], *, dtype: str, args: Mapping[str, Any] | None = None,
                 fill_defaults: bool = True) -> dict[str, Any]:
        """The configuration as checked, in file order; ValueError naming the parameter otherwise."""
        args = args or {}
        if dtype not in self.impl.dtypes:
            raise ValueError(f"dtype {dtype!r} is not supported by {self.family}; allowed: {', '.join(self.impl.dtypes)}")
        if not isinstance(params, Mapping):
            raise ValueError(f"parameters must be a mapping of names to values, got {type(params).__name__}")
        unknown = [k for k in params if k not in self.params]
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} for {self.family}; known: {', '.join(self.params)}")
        chosen: dict[str, Any] = {}
        context = self._context(args)
        for p in self.params.values():
            if not p.applies({**context, **chosen}):
                if p.name in params:
                    raise ValueError(f"parameter {p.name} does not apply here (it needs {_when_text(p.when)})")
                continue
            if p.name in params:
                p.check(params[p.name])
                chosen[p.name] = params[p.name]
            elif fill_defaults:
                chosen[p.name] = p.default
            else:
                raise ValueError(f"parameter {p.name} is missing")
        problem = self.violation(chosen, dtype=dtype, args=args)
        if problem:
            raise ValueError(f"invalid {self.family} configuration: {problem}")
        return chosen

    def restrict(self, params: Mapping[str, Any], *, dtype: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` validated after dropping those that do not apply to ``family`` (seed kernels are written
        once for every family, e.g. a COMBINE that only whole-array reductions have)."""
        applicable = self.defaults({**args, **params})
        return self.validate({k: v for k, v in params.items() if k in applicable}, dtype=dtype, args=args)

    def checked_or_none(self, params: Mapping[str, Any], *, dtype: str,
                        args: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """``validate``'s configuration, or None where it is not valid here (a configuration listed once for a
        family that may not apply to this dtype or problem: a start, a selftest extra)."""
        try:
            return self.validate(params, dtype=dtype, args=args)
        except ValueError:
            return None

    def violation(self, params: Mapping[str, Any], *, dtype: str, args: Mapping[str, Any]) -> str | None:
        """The first constraint the (type-checked) configuration breaks, as a sentence, or None."""
        ctx = Context(dtype=dtype, args=args, impl=self.impl)
        for constraint in (*self.constraints, *_hardware_limits()):
            if not constraint.needs() <= params.keys():
                continue
            message = constraint.violation(params, ctx)
            if message:
                return message
        return None

    def for_dtype(self, dtype: str, args: Mapping[str, Any]) -> SearchSpace:
        """This space without the values no configuration may take for ``dtype``: those that a constraint on
        that parameter alone rules out (VEC 8 of a 4-byte dtype breaks the 16-byte vector limit whatever else is
        chosen). A tuner samples from it, so a value added for one dtype is never offered for another and leaves
        that dtype's search as it was; the values kept keep their order (and so their sampler indices)."""
        ctx = Context(dtype=dtype, args=args, impl=self.impl)
        rules = (*self.constraints, *_hardware_limits())
        params = dict(self.params)
        for name, p in self.params.items():
            own = [r for r in rules if r.needs() == {name}]
            kept = tuple(v for v in p.values if not any(r.violation({name: v}, ctx) for r in own))
            if kept and kept != p.values:
                params[name] = replace(p, values=kept)
        return replace(self, params=params)

    # -- enumeration and sampling -----------------------------------------------------------------
    def configurations(self, args: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Every assignment of the applicable parameters (constraints not applied), in a fixed order."""
        context = self._context(args)

        def extend(chosen: dict[str, Any], rest: list[Param]) -> Iterator[dict[str, Any]]:
            if not rest:
                yield dict(chosen)
                return
            head, tail = rest[0], rest[1:]
            if not head.applies({**context, **chosen}):
                yield from extend(chosen, tail)
                return
            for value in head.values:
                yield from extend({**chosen, head.name: value}, tail)
        yield from extend({}, list(self.params.values()))

    def covering_sample(self, *, dtype: str, args: Mapping[str, Any], seed: int = 0, tries: int = 20000,
                        cheap: Mapping[str, tuple] | None = None,
                        candidates: int = 1) -> tuple[list[dict[str, Any]], set[tuple[str, Any]]]:
        """Valid configurations that together use every allowed value of every applicable parameter.

        Greedy: random valid configurations are kept while they add an unseen (parameter, value) pair.
        ``cheap`` narrows the values drawn for the parameters not being pinned (e.g. small blocks in the
        simulator, where every thread is a Python thread); each value is still pinned once. With ``candidates``
        above 1, that many valid configurations are drawn per pinned value and the one with the fewest values
        outside ``cheap`` is kept: where a value needs others freed, the fewest expensive ones come with it.
        Returns the sample and the pairs no valid configuration was found for (e.g. VEC=4 in float64). Once only
        pairs that ``for_dtype`` rules out are left, no more are drawn: none of them can be valid.
        """
        rng = random.Random(seed)
        wanted = {(p.name, v) for p in self.params.values() if self._reachable(p.name, args) for v in p.values}
        possible = {(p.name, v) for p in self.for_dtype(dtype, args).params.values() for v in p.values}
        kept: list[dict[str, Any]] = []
        cheap = dict(cheap or {})
        # Narrowed as asked first; then, for values the narrowing cannot reach, with one parameter at a time
        # set free, and last with none narrowed.
        narrowings = [cheap, *({k: v for k, v in cheap.items() if k != free} for free in cheap), {}] if cheap else [{}]
        context = self._context(args)
        for narrowing in narrowings:
            drawable = self._drawable(narrowing)
            for _ in range(tries // len(narrowings)):
                if not wanted & possible:
                    break
                target = rng.choice(sorted(wanted, key=repr))
                drawn = (self._random_config(rng, args, pin=target, drawable=drawable, context=context)
                         for _ in range(candidates))
                valid = [c for c in drawn if c is not None and not self.violation(c, dtype=dtype, args=args)]
                if not valid:
                    continue
                config = min(valid, key=lambda c: sum(v not in cheap.get(k, (v,)) for k, v in c.items()))
                new = set(config.items()) & wanted
                if new:
                    kept.append(config)
                    wanted -= new
        return kept, wanted

    def random_valid(self, rng: random.Random, *, dtype: str, args: Mapping[str, Any], tries: int = 100000,
                     barren: set | None = None) -> dict[str, Any] | None:
        """A random configuration that satisfies every constraint: the first parameter's value (a matmul's
        strategy) drawn uniformly, then the others uniformly by rejection sampling; a value none of whose
        configurations is found valid gives way to the next. Drawing the whole configuration uniformly would
        nearly always give the strategies without parameters, each valid as drawn, and almost never a tiled
        configuration, of which few of the drawn ones are valid (for bfloat16 only tensor-core tiles).
        ``barren``, a set the caller keeps for one problem, records such values so later calls skip them."""
        first = next(iter(self.params.values()))
        values = [v for v in first.values if barren is None or v not in barren]
        rng.shuffle(values)
        for value in values:
            for _ in range(tries // len(first.values)):
                config = self._random_config(rng, args, pin=(first.name, value))
                if config is None:  # the first parameter does not apply for these family arguments
                    break
                if not self.violation(config, dtype=dtype, args=args):
                    return config
            if barren is not None:
                barren.add(value)
        return None

    def neighbours(self, config: Mapping[str, Any], *, dtype: str,
                   args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The valid configurations one step from ``config``: one parameter moved to the next value up or down
        (integers, whose values are ordered) or to any other value (names). Parameters the move makes apply
        take their defaults, or each of their values where the move brings in just one (SPLIT_K 1 -> 2 brings
        each SPLIT_ADD); those it makes inapplicable are dropped. In file order, so that moves of the early,
        structural parameters come first."""
        found: dict[str, dict[str, Any]] = {}
        for p in self.params.values():
            if p.name not in config:
                continue
            index = p.values.index(config[p.name])
            if isinstance(p.values[0], int):
                moves = [p.values[i] for i in (index - 1, index + 1) if 0 <= i < len(p.values)]
            else:
                moves = [v for v in p.values if v != config[p.name]]
            for value in moves:
                base = self._applicable({**config, p.name: value}, args)
                new = [name for name in base if name not in config]
                variants = [base] if len(new) != 1 else \
                    [self._applicable({**base, new[0]: v}, args) for v in self.params[new[0]].values]
                for candidate in variants:
                    if not self.violation(candidate, dtype=dtype, args=args):
                        found.setdefault(config_key(candidate), candidate)
        return list(found.values())

    def _applicable(self, given: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
        """``given``'s values of the parameters that apply with them, the others that apply at their defaults."""
        chosen: dict[str, Any] = {}
        seen = self._context(args)  # the context with the values chosen so far: {**context, **chosen}
        for p in self.params.values():
            if p.applies(seen):
                chosen[p.name] = seen[p.name] = given.get(p.name, p.default)
        return chosen

    def _drawable(self, cheap: Mapping[str, tuple]) -> dict[str, tuple]:
        """Each parameter's values that ``cheap`` leaves to draw from (all of them where it leaves none)."""
        return {p.name: tuple(v for v in p.values if v in cheap.get(p.name, p.values)) or p.values
                for p in self.params.values()}

    def _random_config(self, rng: random.Random, args, pin, drawable: Mapping[str, tuple] | None = None,
                       context: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """A configuration with ``pin`` (name, value) and each other applicable parameter drawn uniformly from its
        ``drawable`` values (``_drawable``; default all); None where the pinned parameter does not apply.
        ``context``: ``_context(args)``, where the caller has it."""
        chosen: dict[str, Any] = {}
        seen = dict(self._context(args) if context is None else context)  # the context and the values chosen so far
        for p in self.params.values():
            if not p.applies(seen):
                if p.name == pin[0]:
                    return None
                continue
            chosen[p.name] = seen[p.name] = pin[1] if p.name == pin[0] else \
                rng.choice(p.values if drawable is None else drawable[p.name])
        return chosen

    def _reachable(self, name: str, args) -> bool:
        """Whether the parameter can apply at all for these family arguments (conditions on other parameters
        may yet hold)."""
        context = self._context(args)
        args = {arg.name for arg in self.impl.args}
        when = self.params[name].when
        return all(key not in args or key not in context or context[key] in allowed for key, allowed in when.items())


def config_key(config: Mapping[str, Any]) -> str:
    """A configuration's identity as text: its parameters in name order."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


@functools.lru_cache(maxsize=None)
def _hardware_limits() -> tuple[Rule, ...]:
    return tuple(rule(spec, PREDICATES, {}) for spec in HARDWARE_LIMITS)


def _when_text(when: Mapping[str, tuple]) -> str:
    return " and ".join(f"{k} in {list(v)}" for k, v in when.items())


# -- loading ----------------------------------------------------------------------------------------
def load_space(family: str, path: str | Path | None = None) -> SearchSpace:
    """The family's search space, narrowed by the user's file at ``path`` if given (ValueError for an unknown
    family, SpaceError naming the file for a bad one). Each file is parsed once per process while unchanged."""
    impl = family_named(family)
    builtin = _cached(impl, str(impl.space_file), None)
    if path is None:
        return builtin
    return _cached(impl, str(Path(path).absolute()), builtin)  # named as given: a link's target may be no file


def _cached(impl: "KernelFamily", path: str, builtin: SearchSpace | None) -> SearchSpace:
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise SpaceError(f"{path}: cannot read search space: {exc.strerror or exc}") from None
    key = (impl.name, impl.source, path, stat.st_mtime_ns, stat.st_size, builtin.path if builtin else None)
    if key not in _spaces:
        if len(_spaces) >= 64:
            _spaces.clear()
        _spaces[key] = _parse_space(Path(path), impl, builtin)
    return _spaces[key]


_spaces: dict[tuple, SearchSpace] = {}


def _parse_space(path: Path, impl: "KernelFamily", builtin: SearchSpace | None) -> SearchSpace:
    where = str(path)
    try:
        data = read_yaml_fast(path)
    except YamlFileError as exc:
        raise SpaceError(f"cannot read search space: {exc}") from None
    family = impl.name
    if isinstance(data, dict):
        data = _renamed(where, data)
    if not isinstance(data, dict) or data.get("family") != family or not isinstance(data.get("params"), dict):
        raise SpaceError(f"{where}: expected a mapping with 'family: {family}' and a 'params' mapping")
    unknown = sorted(str(k) for k in data if k not in _TOP_LEVEL)
    if unknown:
        raise SpaceError(f"{where}: unknown key {unknown[0]!r}; a search space has {', '.join(_TOP_LEVEL)}")
    arg_names = {a.name for a in impl.args}
    params = {}
    for name, spec in data["params"].items():
        params[name] = _parse_param(where, name, spec, builtin)
    if builtin is not None:  # a user's file narrows ours: parameters it leaves out stay at their defaults
        params = {name: params.get(name) or replace(p, values=(p.default,)) for name, p in builtin.params.items()}
    for p in params.values():
        bad = sorted(k for k in p.when if k not in params and k not in arg_names)
        if bad:
            raise SpaceError(f"{where}: parameter {p.name!r}: 'when' names {bad[0]!r}, which is neither a parameter "
                             f"nor an argument of {family} ({', '.join([*params, *sorted(arg_names)])})")
    known = predicates_of(impl)
    constraints = []
    for i, spec in enumerate(_list_of(where, data, "constraints")):
        try:
            constraints.append(rule(spec, known, params))
        except ValueError as exc:
            raise SpaceError(f"{where}: constraint #{i + 1}: {exc}") from None
    if builtin is not None:
        constraints = [*builtin.constraints, *constraints]
    starts = tuple(_parse_start(where, i, c, params) for i, c in enumerate(_list_of(where, data, "starts")))
    if builtin is not None:
        starts = builtin.starts + starts
    return SearchSpace(family=family, params=params, constraints=tuple(constraints), path=where, starts=starts,
                       impl=impl)


def _renamed(where: str, data: dict) -> dict:
    """``data`` with its keys under today's names (``kernel`` is read as ``family``); both given is an error."""
    for old, new in _OLD_NAMES.items():
        if old in data:
            if new in data:
                raise SpaceError(f"{where}: both {old!r} and {new!r} are given; {old!r} is the old name of {new!r}")
            data = {(new if k == old else k): v for k, v in data.items()}
    return data


def _list_of(where: str, data: Mapping[str, Any], key: str) -> list:
    """The list under ``key`` (none: empty); anything else is refused, naming the file and the key."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpaceError(f"{where}: '{key}' must be a list, got {type(value).__name__}")
    return value


def _parse_start(where: str, index: int, spec: Any, params: Mapping[str, Param]) -> dict[str, Any]:
    """A configuration to measure first (parameters left out take their defaults); values are checked here,
    the whole configuration when a tuner validates it for its dtype and shape."""
    here = f"{where}: start #{index + 1}"
    if not isinstance(spec, dict):
        raise SpaceError(f"{here}: must map parameter names to values")
    for name, value in spec.items():
        if name not in params:
            raise SpaceError(f"{here}: unknown parameter {name!r}; known: {', '.join(params)}")
        try:
            params[name].check(value)
        except ValueError as exc:
            raise SpaceError(f"{here}: {exc}") from None
    return dict(spec)


def _parse_param(where: str, name: Any, spec: Any, builtin: SearchSpace | None) -> Param:
    here = f"{where}: parameter {name!r}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpaceError(f"{here}: a parameter name must be an identifier")
    if builtin is not None and name not in builtin.params:
        raise SpaceError(f"{here}: not a parameter of the {builtin.family} templates; known: {', '.join(builtin.params)}")
    if not isinstance(spec, dict) or not isinstance(spec.get("values"), list) or not spec["values"]:
        raise SpaceError(f"{here}: needs a non-empty 'values' list")
    extra = sorted(str(k) for k in spec if k not in ("values", "default", "when", "doc"))
    if extra:
        raise SpaceError(f"{here}: unknown key {extra[0]!r}; a parameter has values, default, when, doc")
    values = tuple(spec["values"])
    kinds = {type(v) for v in values}
    if kinds == {int}:
        if any(v < 0 for v in values):
            raise SpaceError(f"{here}: values must be non-negative integers")
    elif kinds == {str}:
        bad = [v for v in values if not _NAME.fullmatch(v)]
        if bad:
            raise SpaceError(f"{here}: value {bad[0]!r} is not a plain name")
    else:
        raise SpaceError(f"{here}: values must be all integers or all names, got {sorted(k.__name__ for k in kinds)}")
    if len(set(values)) != len(values):
        raise SpaceError(f"{here}: a value is listed twice")
    if builtin is not None:
        known = builtin.params[name].values
        if kinds != {type(known[0])} or not set(values) <= set(known):
            outside = sorted(set(values) - set(known), key=str)
            raise SpaceError(f"{here}: values {outside or list(values)} are unknown to the built-in space (yours narrows "
                             f"it); allowed: {list(known)}")
    inherited = builtin.params[name].default if builtin is not None else None
    default = spec.get("default", inherited if inherited in values else values[0])
    if default not in values or type(default) is not type(values[0]):
        raise SpaceError(f"{here}: default {default!r} is not among its values")
    when = spec.get("when") or {}
    if not isinstance(when, dict) or not all(isinstance(k, str) for k in when):
        raise SpaceError(f"{here}: 'when' must map names to lists of values")
    when = {k: tuple(v if isinstance(v, list) else [v]) for k, v in when.items()}
    if builtin is not None:
        when = _narrowed_when(here, dict(builtin.params[name].when), when)
    return Param(name=name, values=values, default=default, when=when, doc=str(spec.get("doc", "")))


def _narrowed_when(here: str, builtin: dict[str, tuple], given: dict[str, tuple]) -> dict[str, tuple]:
    """A user's ``when`` may only narrow where a parameter applies (the templates expect it nowhere else);
    left out, the built-in one holds."""
    merged = dict(builtin)
    for key, allowed in given.items():
        if key in builtin and not set(allowed) <= set(builtin[key]):
            raise SpaceError(f"{here}: 'when' may only narrow where it applies; {key} in {list(allowed)} goes "
                             f"beyond the built-in {key} in {list(builtin[key])}")
        merged[key] = allowed
    return merged


__all__ = ["SearchSpace", "Param", "SpaceError", "load_space"]
