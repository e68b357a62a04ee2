"""``get_best_kernel``: the tuned variant for this GPU and shape, from the database, with stated fallbacks.

The folders read, in order (``db.database_folders``): yours (the ``db`` argument, else ``$AUTOTUNE_DB``, else
``./tuned_db`` where it exists), then the database shipped with the package. In the CUDA simulator, which is no
GPU model, only yours is read unless ``device`` names a model. For a problem on GPU model G:

1. the exact entry in G's file (``<folder>/<gpu-model-slug>.yaml``) of your folder, else of the shipped one;
2. else the fitted rule for the problem's family, dtype and arguments in G's files (yours first; see
   autotune/runtime/rules.py): its portfolio configuration for this shape, fitted to the shape by the family;
3. else the entry of the nearest shape of the same family, dtype and arguments in G's files, your folder's
   first on a tie, fitted to the shape by the family as a rule's choice is (its split-K, edges and row splits
   were another shape's). Distance is the sum over dimensions of |log2(a) - log2(b)|, so 4096 is as far from
   2048 as from 8192;
4. else a file of another GPU model with the same compute capability (the GPU's, or for a named model the one its
   own file declares), the same way (yours first);
5. else, where the family names stand-in arguments (``KernelFamily.stand_in_args``: matmul's layout nn for a
   transposed layout with nothing tuned of its own), steps 1-4 for them, used where valid for the problem's
   arguments (an exact entry's configuration as it was tuned, any other fitted to the problem);
6. else the family's default configuration for the shape.

Every fallback is announced with a ``TunedKernelWarning`` that says what was used; so is a file that cannot be
read (skipped), entries of a family not registered in this process (kept, unused), and an entry whose recorded
``source_hash`` is not the hash of what its parameters render to today (the templates or the family changed
since it was tuned: its time and checks are of another kernel). Kernels are cached per (problem, device,
folders) in this process; compiled code is stored on disk (runtime/code_cache.py), so a second process does not
compile again.
"""
from __future__ import annotations

import math
import shlex
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import backend
from ..core.caller import TunedKernelWarning, warn
from ..core.device import DeviceInfo, current_device
from ..core.problem import Problem, shape_text
from ..core.registry import command_spec
from ..core.space import load_space
from .build import build_kernel
from .db import (
    DatabaseError,
    DbFile,
    Entry,
    database_folders,
    db_dir,
    db_path,
    folder_problem,
    load_file,
    misnamed,
    named_folder,
    same_cc_files,
    shipped_folder,
    stale_note,
)
from .rules import fitted_entry, ranked_configs, ranking, rule_for, rule_phrase


_cache: dict[tuple, Any] = {}
_lock = threading.Lock()


def get_best_kernel(family: str, shape, dtype: Any = "float32", *, device: str | None = None,
                    db: str | Path | None = None, **family_args):
    """The callable kernel object tuned for ``shape`` on this GPU (or the GPU model named ``device``).

    ``get_best_kernel("matmul", (4096, 4096, 4096))(A, B)``;
    ``get_best_kernel("reduce", (1 << 24,), op="max")(x)``; ``get_best_kernel("reduce", (M, N), axis=1)``.

    The first call of a kernel whose code is neither in the code cache nor shipped with the package compiles it
    (seconds for a large matmul). ``autotune warm`` compiles every database entry ahead (run it once when you build
    a container or install on a machine); later processes load the compiled code through the driver.
    """
    problem = Problem(family, shape, dtype, family_args)
    folders = lookup_folders(db, device)
    key = (problem.key, device, tuple(map(str, folders)))
    with _lock:
        if key not in _cache:
            _announce_named_folder(db)
            chosen = choice(problem, folders, device)
            if chosen.note:
                chosen = _untuned(problem, chosen, folders, device, db)
            if chosen.note:
                warn(chosen.note, TunedKernelWarning)
            kernel = build_kernel(family, chosen.params, problem.dtype, **problem.args)
            stale = _stale(chosen, kernel)
            if stale:
                warn(stale, TunedKernelWarning)
            _cache[key] = kernel
        return _cache[key]


def _stale(chosen: "Choice", kernel) -> str | None:
    """A sentence where the entry used no longer describes the kernel its parameters render to (``db.stale_note``);
    the kernel's own source is that render except in the simulator, and except where the choice fitted the entry's
    parameters to another shape or took them for other arguments (then the entry's own are rendered)."""
    if chosen.entry is None:
        return None
    as_tuned = chosen.params == dict(chosen.entry.params) and chosen.entry.problem.args == getattr(kernel, "args", None)
    source = getattr(kernel, "source", None) if as_tuned and not backend.simulator() else None
    note = stale_note(chosen.entry, source)
    return f"{chosen.path}: the entry for {chosen.entry.problem.key}: {note}" if note else None


# -- shapes without an exact entry: the record of shapes met, tuning on first use --
_first_use = None


def set_first_use(hook) -> None:
    """Install (or, with None, remove) what runs for a problem without an exact entry: ``hook(problem, folders,
    db)`` returns (params, note) or None (autotune/tuning/first_use.py installs one; see
    ``autotune.tune_on_first_use``). Kernels already looked up in this process keep their configuration."""
    global _first_use
    _first_use = hook


def _untuned(problem: Problem, chosen: "Choice", folders: list[Path], device: str | None, db) -> "Choice":
    """A problem without an exact entry: recorded (runtime/met.py), and tuned on first use where that is on and
    it is for this GPU (then the configuration tuned, with its note)."""
    from .met import record

    record(problem, device or current_device().name)
    if _first_use is not None and device is None:
        tuned = _first_use(problem, folders, db)
        if tuned is not None:
            params, note = tuned
            return Choice(params, note, how="first use", using=note)
    return chosen
# --


def lookup_folders(db: str | Path | None = None, device: str | None = None) -> list[Path]:
    """The folders a lookup reads, in order (see the module docstring)."""
    folders = database_folders(db)
    if device is None and backend.simulator():
        mine = [f for f in folders if f != shipped_folder()]
        return mine or folders[:0]
    return folders


def database_folder(db: str | Path | None = None) -> Path:
    """The first folder a lookup reads (yours, else the shipped database)."""
    folders = database_folders(db)
    return folders[0] if folders else Path(db or "tuned_db")


@dataclass(frozen=True)
class Choice:
    """What a lookup chose: the parameters, a sentence on the fallback used (None for an exact entry), and the
    database entry they come from with its file (None for the family's default).

    ``how`` names the step that chose, as bench rows record it (``chosen_by``): "exact", "rule", "nearest",
    "other gpu", "default", "first use", or for stand-in arguments their tag and the step that chose for them
    ("nn: rule"). ``using`` is the note's phrase for what was used, which a stand-in's note quotes."""

    params: dict[str, Any]
    note: str | None
    entry: Entry | None = None
    path: Path | None = None
    how: str = "exact"
    using: str = ""

    @property
    def default(self) -> bool:
        """The family's untuned default: nothing tuned served."""
        return self.how == "default"


def choose(problem: Problem, folders: Path | list[Path],
           device: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The parameters for ``problem`` and a sentence on the fallback used (None for an exact entry)."""
    chosen = choice(problem, folders, device)
    return chosen.params, chosen.note


def choice(problem: Problem, folders: Path | list[Path], device: str | None = None) -> Choice:
    """``choose``, with the entry used and its file."""
    folders = [folders] if isinstance(folders, Path) else list(folders)
    if device is not None and (not isinstance(device, str) or not device.strip()):
        raise ValueError(f"device must name a GPU model (as a database file's device name does), got {device!r}")
    info = current_device() if device is None else None
    name = device or info.name
    own = []
    for folder in folders:  # this GPU model's file of each folder, read only until one has the exact entry
        db_file = _read(db_path(folder, name))
        if db_file is None:
            continue
        entry = exact_entry(problem, db_file.like(problem))
        if entry is not None:
            return Choice(dict(entry.params), None, entry, db_file.path)
        own.append(db_file)
    # -- the fitted rule of the GPU model --
    by_rule = rule_for(problem, own)
    if by_rule:
        rule, db_file = by_rule
        order = ranking(rule, problem, db_file.device)
        return _fallback(problem, name, ranked_configs(rule, problem, db_file.device, order=order)[0], "rule",
                         rule_phrase(rule, db_file, order[0]))
    # --
    found = _nearest_of(problem, own)
    if found:
        entry, db_file = found
        params, how = _fitted_nearest(entry, db_file.device, problem)
        return _fallback(problem, name, params, "nearest", f"the nearest entry, shape "
                         f"{shape_text(entry.problem.shape)}, from {db_file.path}{how}", entry, db_file.path)
    # the GPU this process runs on, or the named model as its own file declares it (its compute capability is known
    # only from there: a named model without a file has no other-GPU step)
    record = info.as_dict() if info is not None else next((f.device for f in own if "cc" in f.device),
                                                           own[0].device if own else None)
    if record is not None and "cc" in record:
        cc = DeviceInfo.from_record(record).cc
        found = _nearest_of(problem, _same_cc_files(folders, name, cc), exact_first=True)
        if found:
            entry, db_file = found
            what = "the entry" if entry.problem.shape == problem.shape else \
                f"the nearest entry, shape {shape_text(entry.problem.shape)}"
            params, how = _fitted_nearest(entry, record, problem)
            return _fallback(problem, name, params, "other gpu", f"{what} from {db_file.path} "
                             f"({db_file.device.get('name')}, same compute capability){how}", entry, db_file.path)
    stood_in, passed_over = _stand_in(problem, folders, device, record) if record else (None, [])
    if stood_in:
        return stood_in
    where = ", ".join(_folder_text(f) for f in folders) or "no database folder"
    return Choice(problem.impl.default_params(problem),
                  f"no tuned entry for {problem.key} on {name} in {where}{''.join(passed_over)}; using the default "
                  f"configuration (run `{tune_command(problem, folders[0] if folders else None)}` to tune it)",
                  how="default", using="the default configuration")


def _fallback(problem: Problem, device_name: str, params: dict[str, Any], how: str, using: str,
              entry: Entry | None = None, path: Path | None = None) -> Choice:
    """A choice other than the exact entry, announced as "no tuned entry for KEY on GPU; using USING"."""
    return Choice(params, f"no tuned entry for {problem.key} on {device_name}; using {using}", entry, path, how,
                  using)


def _stand_in(problem: Problem, folders: list[Path], device: str | None,
              record: dict[str, Any]) -> tuple[Choice | None, list[str]]:
    """Where nothing is tuned for the problem's arguments, the choice for the family's stand-in arguments of the
    same shape (``KernelFamily.stand_in_args``: matmul's layout nn for tn, nt and tt), fitted to the problem and
    valid for it; None where none is (then the default), with a clause for each stand-in choice that was tuned but
    is not valid for the problem's arguments (the default's note says so)."""
    space = load_space(problem.family)
    tag, passed_over = problem.impl.key_tag(problem.args), []
    for args in problem.impl.stand_in_args(problem.args):
        chosen = choice(Problem(problem.family, problem.shape, problem.dtype, args), folders, device)
        if chosen.default:
            continue
        exact = chosen.how == "exact"  # tuned for this very shape: taken as it is, not fitted again
        params = space.checked_or_none(chosen.params if exact else fitted_entry(chosen.params, problem, record),
                                       dtype=problem.dtype, args=problem.args)
        what = f"the entry for {chosen.entry.problem.key} from {chosen.path}" if exact else chosen.using
        stand_tag = problem.impl.key_tag(args)
        if params is None:
            passed_over.append(f" ({stand_tag}'s choice for this shape, {what}, is not valid for {tag})")
            continue
        using = f"{stand_tag}'s choice for this shape ({what})"
        return Choice(params, f"no tuned entry for {problem.key} on {record.get('name')}, and no rule or entry of "
                              f"another shape for {tag}; using {using}", chosen.entry, chosen.path,
                      f"{stand_tag}: {chosen.how}", using), passed_over
    return None, passed_over


def tune_command(problem: Problem, folder: Path | None = None) -> str:
    """The command that tunes ``problem`` and writes ``folder`` (the one lookups read first; --db where that is
    not the default folder): the family as the command line finds it (its path, for one of your own), its
    arguments, shape and dtype; in the simulator a dry run that writes the database."""
    impl = problem.impl
    text = impl.args_text(problem.args)
    words = ["autotune", "tune", "--family", command_spec(impl)]
    for arg in impl.args:
        if problem.args[arg.name] != arg.default:
            words += [f"--{arg.name.replace('_', '-')}", str(text[arg.name])]
    words += ["--shape", shape_text(problem.shape)] + (["--dtype", problem.dtype] if problem.dtype != "float32" else [])
    words += ["--simulator", "--write-db"] if backend.simulator() else ["--device", "0"]
    if folder is not None and folder != shipped_folder() and folder.absolute() != db_dir().absolute():
        words += ["--db", str(folder)]
    return shlex.join(words)


def _folder_text(folder: Path) -> str:
    problem = folder_problem(folder)
    return str(folder) if problem is None else f"{folder} (not a database folder: {problem.split(':')[0]})"


def _announce_named_folder(db: str | Path | None) -> None:
    """Warn where the folder named by ``db=`` or ``$AUTOTUNE_DB`` is no database folder: a lookup there finds
    nothing, and without this only the fallback's note ("no tuned entry ... in PATH") would hint at why."""
    named = named_folder(db)
    if named is None:
        return
    how, folder = named
    problem = folder_problem(folder)
    if problem is not None:
        warn(f"{how} is not a database folder ({problem}); lookups read only the database shipped with "
             f"the package (none in the CUDA simulator)", TunedKernelWarning)


def _fitted_nearest(entry: Entry, device: dict[str, Any], problem: Problem) -> tuple[dict[str, Any], str]:
    """The entry's configuration for ``problem``: fitted to its shape where the entry's is another (as a rule's
    choice is, for the GPU ``device`` records: this GPU model's), with the words the announcement adds."""
    if entry.problem.shape == problem.shape:
        return dict(entry.params), ""
    params = fitted_entry(dict(entry.params), problem, device)
    return params, ("" if params == dict(entry.params) else ", fitted to this shape")


def _nearest_of(problem: Problem, files: list[DbFile], exact_first: bool = False) -> tuple[Entry, DbFile] | None:
    """The entry nearest to ``problem`` over ``files``, the earlier file winning a tie."""
    best = None
    for db_file in files:
        entry, distance = nearest(problem, db_file.like(problem))
        if entry is not None and (best is None or distance < best[0]):
            best = (distance, entry, db_file)
    return (best[1], best[2]) if best else None


def _read(path: Path) -> DbFile | None:
    """One database file, its skipped entries and unused families announced; None (announced) if unreadable."""
    if not path.exists():
        return None
    try:
        db_file = load_file(path)
    except DatabaseError as exc:
        warn(f"skipped a database file that cannot be used: {exc}", TunedKernelWarning)
        return None
    wrong = misnamed(db_file)
    if wrong:
        warn(f"skipped a database file that cannot be used: {wrong}", TunedKernelWarning)
        return None
    _announce(db_file)
    return db_file


def _same_cc_files(folders: list[Path], name: str, cc: tuple[int, int]) -> list[DbFile]:
    """``db.same_cc_files``, what cannot be read and what is skipped in what can be announced."""
    files, problems = same_cc_files(folders, name, cc)
    for problem in problems:
        warn(f"skipped a database file that cannot be used: {problem}", TunedKernelWarning)
    for db_file in files:
        _announce(db_file)
    return files


def _announce(db_file: DbFile) -> None:
    for problem_text in db_file.problems:
        warn(f"skipped a bad database entry: {problem_text}", TunedKernelWarning)
    for name in db_file.foreign_families:
        warn(f"{db_file.path} holds entries of the kernel family {name!r}, which is not registered in this "
             f"process: they are kept but not used (autotune.register_family)", TunedKernelWarning)


def exact_entry(problem: Problem, entries: list[Entry]) -> Entry | None:
    """The first entry of ``problem`` itself (its shape, family, dtype and arguments), or None: what a lookup
    returns before any fallback, found without measuring a distance to every entry."""
    kind = _kind(problem)
    for entry in entries:
        if entry.problem.shape == problem.shape and _kind(entry.problem) == kind:
            return entry
    return None


def nearest(problem: Problem, entries: list[Entry]) -> tuple[Entry | None, float]:
    """The nearest entry of ``by_distance`` (the first of equals) and its distance; (None, inf) where none is of
    the same kind."""
    best: tuple[float, Entry | None] = (math.inf, None)
    for pair in _distances(problem, entries):
        if pair[0] < best[0]:
            best = pair
    return best[1], best[0]


def by_distance(problem: Problem, entries: list[Entry]) -> list[tuple[float, Entry]]:
    """The entries of the same family, dtype and arguments, nearest shape first (distance: sum of |log2| ratios)."""
    return sorted(_distances(problem, entries), key=lambda pair: pair[0])


def _distances(problem: Problem, entries: list[Entry]) -> Iterator[tuple[float, Entry]]:
    kind = _kind(problem)
    logs = [math.log2(n) for n in problem.shape]
    for entry in entries:
        other = entry.problem
        if len(other.shape) != len(logs) or _kind(other) != kind:
            continue
        yield sum(abs(a - math.log2(b)) for a, b in zip(logs, other.shape)), entry


def _kind(problem: Problem) -> tuple:
    """What entries that may stand for one another share: family, dtype and arguments."""
    return problem.family, problem.dtype, dict(problem.args)


def tuning_starts(path: Path | list[Path], problem: Problem, neighbours: int = 3) -> tuple[dict[str, Any] | None,
                                                                                          list[dict[str, Any]]]:
    """What a tuning run measures first: the entry for ``problem`` in the file the run writes (``path``, or the
    first of a list; the incumbent, None if there is none), then the winners of the ``neighbours`` nearest other
    entries of its family, dtype and arguments in the files given (the shipped file's entry for this very shape
    counts as the nearest). A neighbour is often close to this shape's best, or better than its recorded entry (a
    1024^3 winner, clamped at the edges, has beaten a 1000^3 entry)."""
    paths = [path] if isinstance(path, Path) else list(path)
    incumbent, ranked = None, []
    for index, p in enumerate(paths):
        db_file = _read(p)
        if db_file is None:
            continue
        for distance, entry in by_distance(problem, db_file.like(problem)):
            if index == 0 and distance == 0:
                incumbent = entry.params
            else:
                ranked.append((distance, index, entry.params))
    ranked.sort(key=lambda item: (item[0], item[1]))
    found = []
    for _, _, params in ranked:
        if params != incumbent and params not in found:
            found.append(params)
    return incumbent, found[:neighbours]


def default_params(problem: Problem) -> dict[str, Any]:
    """A reasonable untuned configuration: the family's for this dtype and size."""
    return problem.impl.default_params(problem)


__all__ = ["get_best_kernel", "TunedKernelWarning", "choose", "nearest", "default_params", "tune_command"]
