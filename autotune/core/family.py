"""The kernel-family protocol: everything autotune needs to know about one kind of kernel.

A family is a subclass of ``KernelFamily`` (one instance per process). The tuner, the database, the lookup, the
bench and the command line speak to kernels only through it, so a family written outside this package (a Python
file with its Jinja template and YAML search space beside it, or an installed package exposing it through the
``autotune.families`` entry-point group) is tuned, stored and looked up exactly like the built-in ones.

The contract, in the order data flows:

- **Arguments** (``args``): what distinguishes problems of one family besides shape and dtype (matmul's layout,
  a reduction's op and axis). Declared as ``FamilyArg`` records, validated by ``family_args``, written into
  database entries and offered as command-line flags.
- **Search space and templates**: ``space_file`` (YAML, see autotune/core/space.py), ``template_dir`` and
  ``template(params)``, the Jinja file that renders a configuration, fed by ``template_context``. Only validated
  integers and names from the space reach a template. ``predicates`` adds constraint predicates of the family's
  own to the generic ones; ``threads`` and ``shared_bytes`` let the hardware limits apply to every space.
- **Problems**: ``check_shape`` accepts shapes and ``check_dtype`` dtypes (given the arguments), ``out_shape`` and
  ``out_dtype`` describe the output, ``key_tag`` names the arguments in a problem's key, ``work`` and ``unit`` say
  what a second of it is worth (FLOP or bytes), ``peak`` the device's best rate in that unit.
- **Data and oracle**: ``inputs`` draws fresh random data (never zeros) for checking and for timing;
  ``verification`` lists the check cases (inputs and a float64 NumPy reference) and ``verify`` compares a
  kernel's output with one, exactly where the data make that possible, within a stated tolerance otherwise.
- **Kernels**: ``make_kernel`` wraps a loaded module in a ``Kernel`` (argument checks, launch configuration,
  plans), called as ``kernel(*inputs, out=...)``.
- **Search**: ``baseline`` (the seed kernel each tuning run times alongside), ``default_params`` for untuned
  shapes, ``problem_starts`` to fit known-good configurations to a problem, ``suite`` and ``dry_run_shapes``.
- **Optional hooks**, each with a default here: ``shape_help`` (the shape's form in the family's own terms, for
  messages and help), ``canonical_args``, ``check_dtype``, ``out_dtype``, ``peak``, ``result_error`` (the bench's
  error column: every contender's error against float64 on the timed data), ``templates``, ``shared_bytes``,
  ``default_params``, ``problem_starts``, ``unfit_for``, ``seeds``, ``peers`` (library calls ``autotune bench``
  times alongside), ``reference_peers``, ``selftest_cases``, ``selftest_extras`` (configurations the selftest
  checks besides its covering sample), ``functions`` (NumPy-style functions the family adds to the ``autotune``
  namespace once registered), ``bench_name``, ``shape_set`` (the documented coverage and held-out shapes that
  ``autotune coverage`` measures and rules are fitted on) and ``fit_config`` (a configuration of another shape
  fitted to this one, as a rule launches it); on ``Kernel``: ``bind`` and ``helper_kernels``.

docs/families.md is the reference for family authors: every method and hook, the template context, the shared
template macros and intrinsics, the constraint names and a checklist.
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from .device import DeviceInfo

# The protocol is the floor the rest of core/ stands on: a Problem (core/problem.py), a SearchSpace
# (core/space.py) and a constraint Predicate (core/constraints.py) appear in its annotations by name only, since
# each of those modules imports this one.


@dataclass(frozen=True)
class FamilyArg:
    """One family argument: its allowed values, its default and help.

    An argument takes one of ``choices`` (Python values: str, int or None), or, where ``kind`` is ``int`` or
    ``float``, any finite number of that kind within ``bounds`` (inclusive; None: unbounded), e.g. a
    layernorm's ``eps``: ``FamilyArg("eps", (), 1e-5, "added to the variance", kind=float, bounds=(0.0, 1.0))``.
    A number argument is part of the problem: each value has its own database entries (a lookup for another
    value falls back to the family's default configuration), and a template sees it as a Python literal.

    ``none_means`` names the word that stands for None in a database entry, a search space's ``when`` and on the
    command line (a reduction's ``axis: all``). ``implicit``: an argument added to a family after entries were
    written, left out of problem keys and database entries where it has its default, so that those keys and
    files stay as they were (an entry without it reads as the default)."""

    name: str
    choices: tuple = ()
    default: Any = None
    help: str = ""
    none_means: str | None = None
    implicit: bool = False
    kind: type | None = None
    bounds: tuple[float | None, float | None] = (None, None)

    def __post_init__(self):
        if self.kind not in (None, int, float):
            raise TypeError(f"FamilyArg {self.name!r}: kind must be int or float (or None with choices), "
                            f"got {self.kind!r}")
        if self.kind is None and not self.choices:
            raise TypeError(f"FamilyArg {self.name!r}: give its choices, or kind=int or kind=float")
        if self.kind is not None:
            object.__setattr__(self, "default", self.parse(self.default))

    def written(self, value: Any) -> bool:
        """Whether the value appears in keys and entries (see ``implicit``)."""
        return not (self.implicit and value == self.default)

    def text(self, value: Any) -> Any:
        """The value as written in database entries and seen by ``when`` conditions."""
        return self.none_means if value is None and self.none_means else value

    def allowed(self) -> str:
        """The allowed values as help and messages write them: '0, 1, all' or 'a float in [0, 1]'."""
        if self.kind is None:
            return ", ".join(str(self.text(c)) for c in self.choices)
        low, high = self.bounds
        what = "an integer" if self.kind is int else "a finite float"
        if low is None and high is None:
            return what
        return f"{what} in [{'-inf' if low is None else low}, {'inf' if high is None else high}]"

    def parse(self, value: Any) -> Any:
        """A value from a file or the command line (text or number) as one of ``choices``, or as a number of
        ``kind`` within ``bounds``; ValueError if it is none."""
        if self.kind is not None:
            return self._number(value)
        for choice in self.choices:
            if value is choice or (type(value) is type(choice) and value == choice):
                return choice
            if isinstance(value, str) and value == str(self.text(choice)):
                return choice
        raise ValueError(f"{self.name} {value!r} is not one of {self.allowed()}")

    def _number(self, value: Any) -> int | float:
        number = None
        if isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, str):
            try:
                number = self.kind(value) if self.kind is float else _integer(value)
            except (TypeError, ValueError, OverflowError):
                number = None
        low, high = self.bounds
        if number is None or (self.kind is float and not math.isfinite(number)) or \
                (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"{self.name} {value!r} is not {self.allowed()}")
        return number


def _integer(value: Any) -> int:
    """An int from an integer, a float with no fraction, or the text of an integer."""
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(value)
        return int(value)
    return int(value)


@dataclass(frozen=True)
class Case:
    """One verification case: device inputs' host copies, the float64 reference, what the case holds and, where
    the answer is not exact, the largest error the family's ``verify`` allows."""

    inputs: tuple[np.ndarray, ...]
    expected: np.ndarray | None  # None where verify works it out itself (a large matmul: Freivalds' test)
    what: str = "elements"
    tolerance: float | None = None

    @cached_property
    def inputs64(self) -> tuple[np.ndarray, ...]:
        """The inputs in float64, made once per case: a large matmul's exact test reads them at every check."""
        return tuple(np.asarray(a, dtype=np.float64) for a in self.inputs)


class Kernel:
    """A compiled variant, as families hand it out: ``kernel(*inputs, out=None, stream=None)``. The tuner and the
    selftest call it with device inputs and ``out=``; NumPy-style functions pass ``stream=`` (any stream
    ``autotune.toolkit.as_stream`` takes) and use ``bind`` for plans. A kernel built on ``autotune.toolkit.Planned``
    gets plans and streams the way the built-in families' kernels have them.

    ``entry`` is the Numba dispatcher compiled ahead and measured for registers; ``signature`` its argument types,
    so it can be compiled without a GPU (``cuda.compile_ptx``)."""

    family: "KernelFamily"
    params: dict[str, Any]
    dtype: str
    args: dict[str, Any]
    source: str
    entry: Any
    signature: str

    def __init__(self, family: "KernelFamily", module, params: Mapping[str, Any], dtype: str,
                 args: Mapping[str, Any], source: str, simulator: bool):
        """What every kernel keeps: its family, the loaded generated module, the validated parameters, dtype and
        family arguments, the rendered source, and whether it runs in the simulator."""
        self.family = family
        self.module = module
        self.params = dict(params)
        self.dtype = dtype
        self.args = dict(args)
        self.source = source
        self.simulator = simulator

    def __call__(self, *inputs, out=None, stream=None):  # pragma: no cover - the families implement it
        raise NotImplementedError

    def bind(self, *inputs, out=None, stream=None) -> Callable[[], Any]:
        """The call ``kernel(*inputs, out=out, stream=stream)`` as a plan: calling it computes again and returns
        the output. This default makes the full call each time (checks included); a kernel built on
        ``autotune.toolkit.Planned`` returns a ``Plan`` that only replays the launches."""
        def plan():
            return self(*inputs, out=out, stream=stream)

        return plan

    @property
    def kernel(self):
        """The Numba dispatcher (``entry``), by the name the first releases gave it."""
        return self.entry

    def helper_kernels(self) -> list[tuple[Any, str]]:
        """Fixed kernels a call launches besides ``entry``, as (dispatcher, signature): compiled ahead with it
        (``compiler.compile_ahead_report``), so a later process loads their stored code. None here."""
        return []


class KernelFamily(abc.ABC):
    """The protocol a kernel family implements; see the module docstring for the contract."""

    name: str
    #: what the family computes, for help texts ("C = A @ B")
    summary: str = ""
    #: the form of a problem shape in the family's own terms, for messages and help ("M x N x K", "M x N: M rows
    #: of N"); empty: the dimensions only
    shape_help: str = ""
    args: tuple[FamilyArg, ...] = ()
    dtypes: tuple[str, ...] = ("float32", "float64")
    unit: str = "GB/s"
    space_file: Path
    template_dir: Path
    baseline: Mapping[str, Any] = {}
    suite: tuple[str, ...] = ()
    dry_run_shapes: tuple[str, ...] = ()
    #: names of a shape's dimensions, for texts such as a rule's tree ("M", "N", "K"); empty: dim0, dim1, ...
    dim_names: tuple[str, ...] = ()
    predicates: Mapping[str, "Predicate"] = {}
    #: Where this family was loaded from (a path or module name), so child processes can load it again.
    source: str = ""
    #: modules of the family's package that make no kernel and no measurement and do nothing when imported (its
    #: shape sets, its NumPy-style functions): a study's provenance leaves them out, so that editing them keeps the
    #: studies (tuning/provenance.py); read from the class that says it, not inherited by a subclass
    measurement_free_modules: tuple[str, ...] = ()
    #: the protocol's methods that make no kernel and no measurement (which shapes, how a rule measures them, what
    #: a bench names and compares against, what a selftest checks): left out of a study's provenance likewise,
    #: where the family's class defines them undecorated and no other code of the family refers to them
    measurement_free_methods: frozenset[str] = frozenset({
        "rule_features", "shape_set", "shape_set_rule", "bench_name", "peers", "selftest_cases",
        "selftest_extras"})

    # -- arguments and problems ---------------------------------------------------------------------
    def family_args(self, **given: Any) -> dict[str, Any]:
        """The family arguments with defaults filled in and each value checked; ValueError otherwise."""
        names = {a.name for a in self.args}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"{self.name} takes no argument {unknown[0]!r}"
                             + (f"; its arguments: {', '.join(sorted(names))}" if names else ""))
        return {a.name: a.parse(given[a.name]) if a.name in given else a.default for a in self.args}

    def args_text(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as database entries and ``when`` conditions write them."""
        return {a.name: a.text(args[a.name]) for a in self.args}

    def canonical_args(self, shape: tuple[int, ...], args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments under the one name the family gives this problem (where two spellings mean the same
        computation on this shape, e.g. a reduction's axis -2 and axis 0 of a 2-D array), so that a problem has
        one key and one database entry."""
        return dict(args)

    def check_shape(self, shape: tuple[int, ...], args: Mapping[str, Any]) -> None:
        """Raise ValueError unless ``shape`` is a problem shape of this family (dimensions are >= 1 already)."""

    def check_dtype(self, dtype: str, args: Mapping[str, Any]) -> None:
        """Raise ValueError unless this family computes ``dtype`` (one of ``dtypes``) with these arguments."""

    def key_tag(self, args: Mapping[str, Any]) -> str:
        """The arguments as a key segment: 'nn', 'sum/axis1'."""
        text = self.args_text(args)
        return "/".join(str(text[a.name]) for a in self.args if a.written(args[a.name])) or "-"

    @abc.abstractmethod
    def work(self, problem: "Problem") -> float:
        """FLOP (unit TFLOP/s) or the fewest bytes moved (unit GB/s) of one call."""

    def rate(self, problem: "Problem", seconds: float) -> float:
        """Throughput in ``unit``."""
        return self.work(problem) / seconds / (1e12 if self.unit.startswith("TFLOP") else 1e9)

    def peak(self, device: "DeviceInfo", dtype: str) -> float | None:
        """The device's best rate in ``unit`` (for 'of peak' columns); by default its memory bandwidth."""
        return device.peak_gbps()

    def peak_for(self, problem: "Problem", device: "DeviceInfo") -> float | None:
        """The best rate for this problem (``peak`` of its dtype unless its arguments change the hardware used)."""
        return self.peak(device, problem.dtype)

    @abc.abstractmethod
    def out_shape(self, problem: "Problem") -> tuple[int, ...]:
        """Shape of the output array."""

    def out_dtype(self, problem: "Problem") -> str:
        """dtype of the output array: by default the input's."""
        return problem.dtype

    def result_error(self, problem: "Problem", inputs: Sequence[np.ndarray], result: np.ndarray) -> float | None:
        """The error of ``result`` (a host array) computed from the timing ``inputs``, against float64, for the
        bench's error column (every contender's on the same data); None where the family reports none."""
        return None

    # -- kernels --------------------------------------------------------------------------------
    def template(self, params: Mapping[str, Any]) -> str:
        """The template file (in ``template_dir``) that renders this configuration."""
        return f"{self.name}.py.j2"

    def templates(self) -> list[str]:
        """Every template file the family renders from: its own and the shared library's (hashed into entries)."""
        from .resources import templates_dir

        own = sorted(p.name for p in Path(self.template_dir).glob("*.j2"))
        return own + sorted(p.name for p in templates_dir().glob("*.j2") if p.name not in own)

    @abc.abstractmethod
    def template_context(self, params: Mapping[str, Any], dtype: str, args: Mapping[str, Any],
                         simulator: bool) -> dict[str, Any]:
        """What the template sees: the validated parameters and whatever it derives from them."""

    @abc.abstractmethod
    def make_kernel(self, module, params: dict[str, Any], dtype: str, args: dict[str, Any], source: str,
                    simulator: bool) -> Kernel:
        """The callable kernel object around a loaded generated module."""

    @abc.abstractmethod
    def threads(self, params: Mapping[str, Any]) -> int:
        """Threads per block of the variant's main kernel."""

    def shared_bytes(self, params: Mapping[str, Any], itemsize: int) -> int:
        """Shared memory per block of the variant's main kernel."""
        return 0

    # -- data and oracle ------------------------------------------------------------------------
    @abc.abstractmethod
    def inputs(self, problem: "Problem", rng: np.random.Generator, purpose: str) -> list[np.ndarray]:
        """Fresh random host inputs: ``purpose`` 'check' (data on which the answer is known well) or 'time'."""

    @abc.abstractmethod
    def verification(self, problem: "Problem", inputs: list[np.ndarray], rng: np.random.Generator) -> list[Case]:
        """The check cases for the check inputs: the first must be ``inputs`` themselves; more cases may plant
        special values."""

    @abc.abstractmethod
    def verify(self, problem: "Problem", case: Case, got: np.ndarray, rng: np.random.Generator) -> str | None:
        """None when ``got`` (the output, poisoned with NaN before the run) is right for ``case``; else what is
        wrong, as a sentence."""

    # -- search ---------------------------------------------------------------------------------
    def default_params(self, problem: "Problem") -> dict[str, Any]:
        """An untuned configuration for a shape (parameters left out take the space's defaults)."""
        return {}

    def problem_starts(self, start: Mapping[str, Any], problem: "Problem", device: "DeviceInfo",
                       space: "SearchSpace") -> list[dict[str, Any]]:
        """A starting configuration in the forms that fit ``problem``, best fit first (e.g. split-K for a matmul
        too small to fill the GPU); the start itself, where left out, is measured after them."""
        return []

    def fit_config(self, params: Mapping[str, Any], problem: "Problem", device: "DeviceInfo",
                   space: "SearchSpace") -> dict[str, Any]:
        """A configuration chosen for another shape, fitted to ``problem`` (a valid configuration; ``params``
        themselves where nothing needs fitting, the default). A rule's portfolio member is launched on a new
        shape in this form, and the cross-time matrix measures this form, so the two agree. Deterministic: it
        depends on the shape and the GPU's multiprocessor count only."""
        return dict(params)

    def filled_fraction(self, params: Mapping[str, Any], problem: "Problem", device: "DeviceInfo",
                        space: "SearchSpace") -> float:
        """The fraction of the work that ``params``, fitted to ``problem`` (``fit_config``), launches which is the
        problem's own: above 0, at most 1. A fitted rule's vote corrects each neighbour's slowdown of a
        configuration by how much better or worse it fills the new shape (core/rule.py), since a configuration
        whose tiles overhang a shape, or leave the last wave of blocks half empty, loses time there that its
        neighbours' timings do not show. The default, 1.0: no such notion (no correction)."""
        return 1.0

    def stand_in_args(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Arguments whose tuned choices may serve ``args`` where nothing is tuned for ``args`` themselves, best
        first (matmul: layout nn's for the transposed layouts, whose kernels take the same configurations): the
        lookup fits such a choice to the problem (``fit_config``) and uses it where it is valid, before the
        untuned default. The default: none."""
        return []

    def rule_features(self, rank: int) -> tuple:
        """What a fitted rule's nearest model measures of a shape of ``rank`` dimensions (core/rule.py): each a
        dimension index, or a tuple of indices whose product it is (matmul's M*N: how many output tiles fill the
        GPU). The default: the dimensions alone."""
        return tuple(range(rank))

    def shape_set(self, name: str, dtype: str, args: Mapping[str, Any]) -> list[tuple[int, ...]]:
        """The family's documented shapes (``core/shapesets.py``): 'coverage' (measured by ``autotune coverage``,
        rules are fitted on it), 'held-out' (drawn by the same rule with another seed, never tuned: the bench of
        unseen shapes) and 'simulator' (tiny shapes for a dry run). ValueError where the family has none."""
        raise ValueError(f"the family {self.name!r} documents no shape sets: give the shapes (--shape)")

    def shape_set_rule(self) -> str:
        """How the family's shape sets are drawn, in words (``autotune coverage --list`` prints it)."""
        return ""

    def unfit_for(self, params: Mapping[str, Any], device: "DeviceInfo") -> str | None:
        """Why a valid configuration cannot run on ``device`` (instructions its GPU lacks), or None; the tuner
        prunes such configurations instead of compiling them."""
        return None

    def seeds(self) -> list[tuple[str, dict[str, Any]]]:
        """Named seed configurations ``autotune bench`` times beside the tuned one."""
        return [("seed", dict(self.baseline))] if self.baseline else []

    # -- optional: bench and selftest ----------------------------------------------------------------
    def peers(self, problem: "Problem", inputs: Sequence) -> dict[str, Callable[[], object]]:
        """Library calls computing the same on the same device inputs, for ``autotune bench`` (installed ones)."""
        return {}

    reference_peers: tuple[str, ...] = ()

    def selftest_cases(self, small: bool) -> list[tuple[str, dict[str, Any], list[tuple[int, ...]]]]:
        """(dtype, arguments, shapes) that ``autotune selftest`` checks every parameter value on; with ``small``
        (the simulator) it checks one variant on the second shape of each case (the first where there is one).
        By default: each dtype (the first only where ``small``) with the default arguments on ``dry_run_shapes``."""
        return [(dtype, self.family_args(), [tuple(int(d) for d in s.split("x")) for s in self.dry_run_shapes])
                for dtype in self.dtypes[:1 if small else None]]

    def selftest_extras(self) -> list[dict[str, Any]]:
        """Configurations ``autotune selftest`` checks besides its covering sample of the space, where they are
        valid for the case's dtype and arguments (a seed kernel, a rare combination the random sample misses)."""
        return []

    def functions(self) -> Mapping[str, Callable[..., Any]]:
        """NumPy-style functions this family adds to the ``autotune`` namespace once it is registered (``{"softmax":
        softmax}`` makes ``autotune.softmax(x)``). A name autotune uses itself, or another registered family's,
        is refused at registration. Build them on ``autotune.toolkit``."""
        return {}

    def bench_name(self, problem: "Problem") -> str:
        """File name stem of a bench table (one per family, arguments and dtype)."""
        text = self.args_text(problem.args)
        parts = [self.name, *(str(text[a.name]) for a in self.args if a.written(problem.args[a.name]))]
        return "-".join(parts) + ("" if problem.dtype == "float32" else f"-{problem.dtype}")

    def __repr__(self) -> str:
        return f"<kernel family {self.name!r} from {self.source or type(self).__module__}>"


__all__ = ["KernelFamily", "FamilyArg", "Kernel", "Case"]
