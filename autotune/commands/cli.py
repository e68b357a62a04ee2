"""The ``autotune`` command line.

    autotune matmul --device 0 [--shape 4096x4096x4096 ...]    tune matrix products, write tuned_db/<gpu-model>.yaml
    autotune reduce --device 0 --op sum --shape 268435456      tune reductions
    autotune tune --family examples/softmax --shape 4096x4096  tune any kernel family, a file of your own too
    autotune bench matmul|reduce|FAMILY --device 0             tuned vs cuBLAS/CuPy/torch and the seed kernels
    autotune selftest --device 0                               correctness of every parameter value on the GPU
    autotune render FAMILY -p NAME=VALUE ...                   print a variant's generated source
    autotune warm [--cc 9.0]                                   compile the database's kernels ahead
    autotune show / db check / db merge OTHER.yaml             the tuned database

Heavy imports happen after the arguments are read: ``--simulator`` must switch Numba to its CUDA simulator
before Numba is first imported. A family given as a path (``--family PATH``, or ``render PATH``/``bench PATH``) is
loaded before the arguments are parsed, so that its own arguments become options.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..core.registry import BUILTIN, FamilyError, known, register_family
from ..core.registry import family as family_named
from ..tuning.records import COMPILE_TIMEOUT_S

SUITE_TIME_LIMIT_S = 800.0  # a family's standard suite is tuned within about 14 minutes unless told otherwise
MIN_SHAPE_S = 30.0  # under a time limit, each shape still gets this long

EXIT_ERROR, EXIT_NO_GPU = 2, 3
TUNING = ("matmul", "reduce")  # the two tuning commands named after built-in families


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--simulator" in argv:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # small grids are deliberate here
    try:
        aliases = preload_families(argv)
        args = parser(aliases, argv).parse_args(argv)
        args.argv = argv
        return args.run(args)
    except KeyboardInterrupt:
        return _interrupted()
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        if _raised_while_interrupted(exc):
            return _interrupted()
        print(f"autotune: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _interrupted() -> int:
    print("interrupted; everything measured so far is in the study and is used when you run again", file=sys.stderr)
    return 130


def _raised_while_interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a Ctrl-C was being handled: Optuna's journal lock, cut short by the
    interrupt, raises its own error from its clean-up (a lock file already renamed, or not yet), which is the
    interrupt's consequence, not a failure of the run."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def preload_families(argv: list[str]) -> dict[str, list[str]]:
    """Register the families the command line names by path or module (``--family X``, ``render X``,
    ``bench X``) and return, per family name, the spellings used, which the parser accepts as aliases."""
    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--family", "--kind")]
    named += [a.split("=", 1)[1] for a in argv if a.startswith(("--family=", "--kind="))]
    if len(argv) > 1 and argv[0] in ("render", "bench") and not argv[1].startswith("-"):
        named.append(argv[1])
    aliases: dict[str, list[str]] = {}
    for spec in named:
        if spec in known():
            continue
        try:
            fam = register_family(spec)
        except FamilyError as exc:
            raise ValueError(str(exc)) from None
        aliases.setdefault(fam.name, []).append(spec)
    return aliases


# -- the parser ---------------------------------------------------------------------------------------
def parser(aliases: dict[str, list[str]] | None = None, argv: list[str] | None = None) -> argparse.ArgumentParser:
    aliases = aliases or {}
    p = argparse.ArgumentParser(prog="autotune", description="Generate, tune and look up Numba CUDA kernels: "
                                "matrix products, reductions, and kernel families of your own.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    for name in TUNING:
        impl = family_named(name)
        help_text = f"tune {impl.summary or name}"
        t = sub.add_parser(name, help=help_text, description=f"{help_text} on the attached GPU; the winners go to the "
                           "tuned database. Without --shape, the standard suite: " + ", ".join(impl.suite) + ".")
        _family_flags(t, impl)
        _tune_args(t)
        t.set_defaults(run=run_tune, kind=name, command=name)
    chosen = _chosen_family(aliases, argv or [])
    t = sub.add_parser("tune", help="tune any kernel family (a built-in one or your own: --family PATH)",
                       description="Tune a kernel family: a built-in one by name, or your own from a Python file or "
                       "folder (its template and search space beside it), a module, or an installed package.")
    t.add_argument("--family", required=True, metavar="NAME|PATH", help="the family: " + ", ".join(known()) +
                   ", or a path to your own")
    if chosen is not None:
        _family_flags(t, chosen)
    _tune_args(t)
    t.set_defaults(run=run_tune, kind=chosen.name if chosen else None, command="tune")
    _bench_parser(sub, aliases)
    _selftest_parser(sub)
    _render_parser(sub, aliases)
    _warm_parser(sub)
    _replay_parser(sub)
    _db_parsers(sub)
    from .coverage import add_parsers  # coverage, rule, met: shapes nobody tuned

    add_parsers(sub, aliases)
    return p


def _chosen_family(aliases: dict[str, list[str]], argv: list[str]):
    """The family of a `tune --family X` command line, once preloaded (None while parsing for help)."""
    for i, a in enumerate(argv[:-1]):
        if a == "--family":
            return _family_or_none(argv[i + 1], aliases)
    for a in argv:
        if a.startswith("--family="):
            return _family_or_none(a.split("=", 1)[1], aliases)
    return None


def _family_or_none(spec: str, aliases: dict[str, list[str]]):
    for name, spellings in aliases.items():
        if spec in spellings:
            return family_named(name)
    try:
        return family_named(spec)
    except FamilyError:
        return None


def _family_flags(p: argparse.ArgumentParser, impl) -> None:
    """One option per family argument, e.g. --layout, --op, --axis, with its allowed values."""
    for arg in impl.args:
        choices = [str(arg.text(c)) for c in arg.choices]
        p.add_argument(f"--{arg.name.replace('_', '-')}", dest=f"arg_{arg.name}", default=str(arg.text(arg.default)),
                       choices=choices, help=f"{impl.name}: {arg.help} (default {arg.text(arg.default)})")


def _family_values(args, impl) -> dict:
    return {a.name: a.parse(getattr(args, f"arg_{a.name}", str(a.text(a.default)))) for a in impl.args}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", help="element type (default float32; the family says which it has)")


def _tune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", metavar="SHAPE",
                   help="problem shape, e.g. MxNxK for matmul, N or MxN for reduce (repeatable; default: the "
                        "family's standard suite)")
    _dtype_arg(p)
    p.add_argument("--device", default="0", help="GPU index, or several: 0,1 (one worker per GPU, one study)")
    p.add_argument("--trials", type=_positive_int, help="measured variants per shape (default 60; 6 in the simulator)")
    p.add_argument("--timeout", type=_positive_float,
                   help="end each shape after about this many seconds: what is compiled is measured, compiles "
                        "still running are queued for the next run")
    p.add_argument("--time-limit", type=_non_negative_float, metavar="SECONDS",
                   help="end the whole run after about this many seconds, each shape taking the time left over the "
                        "shapes left (at most --timeout); 0: no limit (default: %g s for the standard suite, "
                        "none for shapes given with --shape)" % SUITE_TIME_LIMIT_S)
    p.add_argument("--sampler", default="tpe", choices=["tpe", "random", "grid", "cmaes"])
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--no-refine", action="store_true",
                   help="leave every trial to the sampler (by default, after the start-up trials two in three "
                        "measure the unmeasured neighbours of the fastest configurations so far)")
    p.add_argument("--storage", help="Optuna storage URL shared by several tuners, e.g. "
                   "postgresql://user:password@host/db (pip install \"autotune[postgres]\"; default: a journal file "
                   "per GPU model under --state-dir)")
    p.add_argument("--state-dir", default="autotune-out", help="where studies live (default autotune-out/)")
    p.add_argument("--space", help="your own search-space YAML (narrows the built-in one)")
    p.add_argument("--db", help="database folder to write (default $AUTOTUNE_DB or ./tuned_db)")
    p.add_argument("--force", action="store_true", help="replace database entries even when slower")
    p.add_argument("--no-db", action="store_true", help="do not write the database")
    p.add_argument("--compile-workers", type=_positive_int,
                   help="CPU processes compiling ahead of the GPU (default: one fewer than the CPUs, at most 16)")
    p.add_argument("--job-timeout", type=_positive_float, default=90.0,
                   help="seconds a variant may take to check and time before its worker is restarted (default 90)")
    p.add_argument("--compile-timeout", type=_positive_float, default=COMPILE_TIMEOUT_S,
                   help="seconds a variant may take to compile before it counts as failed (default %(default)g)")
    p.add_argument("--simulator", action="store_true",
                   help="dry run in Numba's CUDA simulator: tiny shape, meaningless timings, no database write "
                        "unless --write-db")
    p.add_argument("--write-db", action="store_true", help="with --simulator: write the database anyway")
    p.add_argument("--record-sweep", metavar="FILE",
                   help="measure every valid configuration of one --shape (the grid, in a study of its own that "
                        "resumes if stopped) and write them to FILE for `autotune replay`; the database is not "
                        "written")


def _family_subparsers(sub, command: str, aliases: dict[str, list[str]], help_text: str, description: str):
    """A sub-command per known family under ``command`` (``render matmul``, ``render examples/softmax``)."""
    p = sub.add_parser(command, help=help_text, description=description)
    families = p.add_subparsers(required=True, metavar="FAMILY", dest="family_name")
    made = []
    for name in known():
        impl = family_named(name)
        f = families.add_parser(name, aliases=aliases.get(name, []), help=f"{name} ({impl.source or 'built in'})",
                                description=description, epilog=_parameters_text(impl),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        _family_flags(f, impl)
        f.set_defaults(kind=name)
        made.append(f)
    return p, made


def _parameters_text(impl) -> str:
    """The family's template parameters with their allowed values, for --help."""
    try:
        from ..core.space import load_space

        space = load_space(impl.name)
    except Exception as exc:  # a broken space must not break --help
        return f"(the search space of {impl.name} cannot be read: {exc})"
    lines = [f"parameters of {impl.name} (-p NAME=VALUE; left out: the default, marked *):"]
    for param in space.params.values():
        values = " ".join(f"{v}*" if v == param.default else str(v) for v in param.values)
        where = f"  [where {' and '.join(f'{k} in {list(v)}' for k, v in param.when.items())}]" if param.when else ""
        lines.append(f"  {param.name}: {values}{where}")
    return "\n".join(lines)


def _bench_parser(sub, aliases) -> None:
    _, made = _family_subparsers(sub, "bench", aliases, "time tuned kernels against vendor libraries and the seed "
                                 "kernels", "Time the tuned kernels next to the library calls that compute the same "
                                 "(CuPy, PyTorch: pip install \"autotune[bench]\") and the seed kernels, in one "
                                 "process; write a Markdown table and a plot per family, arguments and dtype.")
    for b in made:
        b.add_argument("--shape", action="append", metavar="SHAPE", help="problem shape (repeatable; default: the "
                       "family's standard suite)")
        _dtype_arg(b)
        b.add_argument("--device", default="0", help="GPU index (default 0)")
        b.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db; the shipped one after)")
        b.add_argument("--out", help="folder for the Markdown table, its JSON rows and the plot (default bench/; "
                                     "benchmarks/ with --held-out)")
        b.add_argument("--held-out", action="store_true",
                       help="the family's held-out shapes (never tuned; `autotune coverage FAMILY --list --set "
                            "held-out`) and its standard suite; the rows join <gpu-model>-held-out.json, summarised "
                            "in <gpu-model>-held-out.md")
        b.add_argument("--against-db", metavar="DIR", action="append", default=[],
                       help="also time the entry tuned for each shape in this database folder, where it has one "
                            "(what the lookup's choice reaches of a shape's own tuned best)")
        b.set_defaults(run=run_bench)


def _selftest_parser(sub) -> None:
    s = sub.add_parser("selftest", help="check every parameter value's variants against NumPy on the GPU",
                       description="Check a covering sample of every family's search space (every value of every "
                       "parameter at least once) against float64 NumPy on odd shapes, with NaN and infinities for "
                       "max and min and with out= overlapping an input. --simulator runs a small sample (one "
                       "variant per family and arguments on one odd shape, about a minute) in Numba's CUDA simulator.")
    s.add_argument("--device", default="0")
    s.add_argument("--simulator", action="store_true", help="run a small sample in the CUDA simulator")
    s.add_argument("--kind", "--family", action="append", dest="kinds", metavar="FAMILY",
                   help="only this family (repeatable; default: the built-in ones)")
    s.add_argument("--dtype", action="append", help="only this dtype (repeatable; default: every dtype of each family)")
    s.add_argument("--compile-timeout", type=_positive_float, default=COMPILE_TIMEOUT_S,
                   help="seconds a variant may take to compile; longer ones are named and not checked, as tuning "
                        "would skip them (default %(default)g, as tune's)")
    s.set_defaults(run=run_selftest)


def _replay_parser(sub) -> None:
    r = sub.add_parser("replay", help="score a search strategy against a recorded sweep, on the CPU",
                       description="Run the tuner's own search (starts, pruning, duplicates, tie rule) against a "
                       "sweep recorded with --record-sweep instead of a GPU, once per seed, and report per budget "
                       "(trials, and minutes on a simulated clock charged with the recorded compile and measure "
                       "seconds) the fraction of the sweep's optimum reached (median and 10th percentile over the "
                       "seeds) and the score (fraction - random) / (1 - random), random being the expected fraction "
                       "of random sampling at the same number of trials.")
    r.add_argument("sweep", metavar="SWEEP", help="a sweep file (benchmarks/sweeps/*.yaml)")
    r.add_argument("--sampler", default="tpe", choices=["tpe", "random", "grid", "cmaes"])
    r.add_argument("--trials", type=_positive_int, default=100, help="trials per search (default 100)")
    r.add_argument("--seeds", type=_positive_int, default=30, help="searches, seeds 0..S-1 (default 30)")
    r.add_argument("--startup-trials", type=_positive_int, default=10,
                   help="tpe: random trials before it models the results (default 10, as tune)")
    r.add_argument("--no-starts", action="store_true", help="without the search space's starting configurations")
    r.add_argument("--no-refine", action="store_true", help="without the neighbours of the fastest so far, as tune")
    r.add_argument("--neighbours", metavar="DB_FILE", action="append",
                   help="start from the winners of the 3 nearest other shapes in this database file, as tune does "
                        "(repeatable; the sweep's own shape is left out)")
    r.add_argument("--compile-workers", type=_positive_int, help="compile processes the clock assumes (default: "
                   "as recorded)")
    r.add_argument("--json", action="store_true", help="print one JSON object: a list of budgets, each with trials, "
                   "median_fraction, p10_fraction, score")
    r.set_defaults(run=run_replay)


def run_replay(args) -> int:
    import json

    from ..tuning.replay import Settings, neighbours_from, replay, score_replays, table
    from ..tuning.sweep import load_sweep

    sweep = load_sweep(args.sweep)
    neighbours = neighbours_from([Path(f) for f in args.neighbours], sweep) if args.neighbours else ()
    settings = Settings(sampler=args.sampler, trials=args.trials, startup_trials=args.startup_trials,
                        starts=not args.no_starts, refine=not args.no_refine, neighbours=neighbours,
                        compile_workers=args.compile_workers)
    if not args.json:
        print(f"replaying {args.sampler} on {sweep.problem.key} ({len(sweep.rows)} configurations, "
              f"{sweep.device.name}): {args.seeds} searches of {args.trials} trials", file=sys.stderr)
    runs = replay(sweep, settings, range(args.seeds))
    scores = score_replays(sweep, runs)
    if args.json:
        print(json.dumps({"sweep": str(args.sweep), "sampler": args.sampler, "seeds": args.seeds,
                          "budgets": [s.as_dict() for s in scores]}))
    else:
        print(table(scores))
    return 0


def _render_parser(sub, aliases) -> None:
    _, made = _family_subparsers(sub, "render", aliases, "print the generated source of one variant",
                                 "Print the Numba CUDA source of one configuration, validated against the family's "
                                 "search space.")
    for r in made:
        r.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
        _dtype_arg(r)
        r.add_argument("--simulator", action="store_true", help="the rendering for the CUDA simulator")
        r.set_defaults(run=run_render)


def _warm_parser(sub) -> None:
    w = sub.add_parser("warm", help="compile every database entry ahead (fills Numba's disk cache)",
                       description="Compile the kernels the database holds for this GPU, in parallel processes, so that "
                       "later processes load them instead of compiling (run it once when building a container). "
                       "With --cc and no GPU: compile to PTX and cubin for that compute capability and report "
                       "registers and spills. Prints each entry's compile seconds, registers and spills.")
    w.add_argument("--db", help="a database file or folder (default: the folders lookups read)")
    w.add_argument("--cc", help="compute capability such as 9.0: compile for it without a GPU (files of GPUs with it)")
    w.add_argument("--jobs", type=_positive_int, help="compile processes (default: the CPUs)")
    w.add_argument("--family", action="append", default=[], metavar="PATH", help="a family of your own to load")
    w.set_defaults(run=run_warm)


def _db_parsers(sub) -> None:
    show = sub.add_parser("show", help="print the tuned database as a table",
                          description="Print every entry the lookups can use, file by file, in the order "
                          "get_best_kernel reads them (your folder, then the shipped database).")
    show.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    show.add_argument("--device", help="only GPU models whose name contains this (e.g. h100); default all")
    show.add_argument("--kernel", metavar="FAMILY", help="only this family")
    show.add_argument("--family", action="append", default=[], metavar="PATH", help="a family of your own to load")
    show.set_defaults(run=run_show)
    db = sub.add_parser("db", help="check or merge database files", description="Check or merge the tuned database: "
                        "one YAML file per GPU model, in your folder and shipped with the package.")
    dbsub = db.add_subparsers(required=True, metavar="ACTION")
    check = dbsub.add_parser("check", help="validate every file lookups read (exit 1 on any problem)",
                             description="Validate every database file that lookups read, in their order (your folder, "
                             "then the shipped database): each entry against the schema and its family's search space, "
                             "duplicates, unreadable files. Exit 1 on any problem.")
    check.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    check.add_argument("--family", action="append", default=[], metavar="PATH", help="a family of your own to load")
    check.set_defaults(run=run_db_check)
    merge = dbsub.add_parser("merge", help="merge another machine's file into the database",
                             description="Merge a database file (e.g. from a colleague's GPU) into the file of the "
                             "GPU model it declares in your folder; an entry is replaced only by a faster one.")
    merge.add_argument("other")
    merge.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    merge.add_argument("--force", action="store_true", help="replace entries even when the new one is slower")
    merge.set_defaults(run=run_db_merge)


# -- shared steps ---------------------------------------------------------------------------------------
def problems_of(args, kind: str, default_suite) -> list:
    from ..core.problem import Problem, parse_shape

    impl = family_named(kind)
    family = _family_values(args, impl)
    shapes = args.shape or list(default_suite)
    if not shapes:
        raise ValueError(f"{kind} has no standard suite: give --shape")
    return [Problem(kind, parse_shape(s), args.dtype, family) for s in shapes]


def _devices(text: str) -> tuple[int, ...]:
    try:
        devices = tuple(int(d) for d in str(text).split(","))
    except ValueError:
        raise ValueError(f"--device takes GPU indices such as 0 or 0,1; got {text!r}") from None
    if any(d < 0 for d in devices):
        raise ValueError(f"--device takes GPU indices such as 0 or 0,1; got {text!r}")
    return devices


def require_gpu(args, command: str, dry_run: bool = True) -> bool:
    from ..core.device import gpu_available

    if getattr(args, "simulator", False) or gpu_available():
        return True
    hint = (f"  For a dry run of the whole pipeline in Numba's CUDA simulator (tiny shape, meaningless timings):\n"
            f"      autotune {command} --simulator" if dry_run else
            "  It times kernels against vendor libraries, which needs a GPU; `autotune selftest --simulator` checks "
            "kernels without one.")
    print(f"autotune: no CUDA GPU is visible on this machine, so `autotune {command}` cannot measure anything.\n"
          f"{hint}", file=sys.stderr)
    return False


# -- tune -----------------------------------------------------------------------------------------------
def run_tune(args) -> int:
    kind = args.kind
    if kind is None:
        raise ValueError(f"--family {args.family!r}: no such family")
    command = f"tune --family {args.family}" if args.command == "tune" else kind
    if not require_gpu(args, command):
        return EXIT_NO_GPU
    from ..tuning.worker import CompilePools, default_compile_workers

    workers = args.compile_workers or (1 if args.simulator else default_compile_workers())
    with CompilePools(workers) as pools:  # its processes start and warm up while this one prepares the run
        return tune_problems(args, kind, pools)


def tune_problems(args, kind: str, pools) -> int:
    """The tuning run of ``run_tune``: each problem in turn, its compiles in ``pools``."""
    from ..core.device import current_device
    from ..runtime.db import database_folders, db_dir, db_path
    from ..runtime.lookup import tuning_starts
    from ..tuning import report
    from ..tuning.settings import TuneConfig
    from ..tuning.tuner import Tuner

    impl = family_named(kind)
    sim = args.simulator
    devices = _devices(args.device)
    if not sim:
        from numba import cuda

        cuda.select_device(devices[0])
    device = current_device()
    suite = impl.dry_run_shapes if sim and not args.shape else impl.suite
    problems = problems_of(args, kind, suite)
    config = TuneConfig(trials=args.trials or (6 if sim else 60), timeout_s=args.timeout, sampler=args.sampler,
                        seed=args.seed, storage=args.storage, state_dir=Path(args.state_dir), devices=devices,
                        space_path=args.space, job_timeout_s=args.job_timeout,
                        compile_timeout_s=args.compile_timeout, refine=not args.no_refine,
                        compile_workers=pools.workers)
    if sim:
        print("SIMULATOR DRY RUN: kernels run in Numba's CUDA simulator on the CPU; timings are meaningless.",
              file=sys.stderr)
    if args.record_sweep:
        return record_sweep(args, problems, config, device, pools)
    results = []
    target = db_path(db_dir(args.db), device.name)
    start_files = [target] + [db_path(f, device.name) for f in database_folders(args.db) if f != target.parent]
    write = (args.write_db or not sim) and not args.no_db
    limit = run_time_limit(args)
    deadline = time.monotonic() + limit if limit else None
    for left, problem in zip(range(len(problems), 0, -1), problems):
        shape_config = config if deadline is None else \
            replace(config, timeout_s=min(config.timeout_s or math.inf, shape_share(deadline - time.monotonic(),
                                                                                    left, first=not results)))
        budget = f", at most {shape_config.timeout_s:.0f} s" if shape_config.timeout_s else ""
        print(f"tuning {problem.key} on {device.name} ({config.trials} variants, sampler {config.sampler}{budget})",
              file=sys.stderr)
        incumbent, neighbours = tuning_starts(start_files, problem)
        tuner = Tuner(problem, shape_config, device, incumbent=incumbent, neighbours=neighbours)
        results.append(tuner.run(pools))
        if write:  # each shape's winner as soon as it is found: a run stopped later keeps it
            for line in report.write_results(results[-1:], device, args.db, config, force=args.force)[:-1]:
                print(line, file=sys.stderr)
    print(report.tune_table(results, device))
    if write:
        print(f"database: {target}")
    elif sim:
        print("(simulator: nothing written to the database; --write-db to write anyway)")
    return 0 if all(r.best for r in results) else 1


def shape_share(seconds_left: float, shapes_left: int, first: bool) -> float:
    """A shape's time under a run's time limit: an equal share of what is left, twice that for the run's first
    shape of several, which compiles cold the starting configurations that the later shapes then load from
    Numba's disk cache; at least MIN_SHAPE_S."""
    weight = 2 if first and shapes_left > 1 else 1
    return max(MIN_SHAPE_S, seconds_left * weight / (shapes_left + weight - 1))


def run_time_limit(args) -> float | None:
    """Seconds the whole tuning run may take: --time-limit (0: none), else SUITE_TIME_LIMIT_S for a family's
    standard suite on a GPU (so that the default command ends in a known time), else none."""
    if args.time_limit is not None:
        return args.time_limit or None
    return None if args.shape or args.simulator or args.record_sweep else SUITE_TIME_LIMIT_S


def record_sweep(args, problems: list, config, device, pools) -> int:
    """``--record-sweep FILE``: the tuner's grid over every valid configuration of one problem, then the file."""
    from ..core.space import config_key, load_space
    from ..tuning.sweep import new_sweep, rows_from_study, valid_configurations, write_sweep
    from ..tuning.tuner import Tuner

    if len(problems) != 1:
        raise ValueError("--record-sweep records one problem: give exactly one --shape")
    problem, path = problems[0], Path(args.record_sweep)
    valid = valid_configurations(load_space(problem.family, config.space_path), problem)
    config.sampler, config.trials, config.baseline = "grid", len(valid), False
    space_tag = Path(config.space_path).name if config.space_path else "built-in space"
    print(f"recording a sweep of {problem.key} on {device.name}: {len(valid)} valid configurations "
          f"(search space: {space_tag})", file=sys.stderr)
    tuner = Tuner(problem, config, device, name=f"{problem.key}@{device.slug}/sweep/{space_tag}")
    tuner.run(pools)
    keys = {config_key(c) for c in valid}
    rows = [r for r in rows_from_study(tuner.study) if config_key(r.config) in keys]
    if len(rows) < len(valid):
        print(f"{len(rows)} of {len(valid)} configurations have an outcome; run the same command again to measure "
              f"the rest (the study resumes); nothing written yet", file=sys.stderr)
        return 1
    command = " ".join(["autotune", *args.argv])
    write_sweep(path, new_sweep(problem, device, config.space_path, config.compile_workers, rows, command))
    best = min((r for r in rows if r.ok), key=lambda r: r.timing.median_ms, default=None)
    print(f"sweep: {path}: {sum(r.ok for r in rows)} measured, {sum(not r.ok for r in rows)} failed; fastest "
          f"{best.timing.median_ms:.4g} ms" if best else f"sweep: {path}: nothing measured")
    return 0 if best else 1


# -- bench, selftest, render, warm ---------------------------------------------------------------------------
def run_bench(args) -> int:
    if not require_gpu(args, f"bench {args.family_name}", dry_run=False):
        return EXIT_NO_GPU
    from numba import cuda

    from .bench import run_suite

    cuda.select_device(_devices(args.device)[0])
    problems = held_out_problems(args) if args.held_out else problems_of(args, args.kind,
                                                                          family_named(args.kind).suite)
    run_suite(problems, db=args.db, out_dir=args.out or ("benchmarks" if args.held_out else "bench"),
              held_out=args.held_out, tuned=[Path(d) for d in args.against_db])
    return 0


def held_out_problems(args) -> list:
    """``bench --held-out``: the family's held-out shapes, then its suite (``--shape`` adds to them)."""
    from ..core.problem import Problem, parse_shape

    impl = family_named(args.kind)
    family = _family_values(args, impl)
    extra = [parse_shape(s) for s in (*impl.suite, *(args.shape or []))]
    shapes = impl.shape_set("held-out", args.dtype, family) + extra
    return [Problem(args.kind, s, args.dtype, family) for s in dict.fromkeys(shapes)]


def run_selftest(args) -> int:
    if not require_gpu(args, "selftest"):
        return EXIT_NO_GPU
    from .selftest import selftest

    if not args.simulator:
        from numba import cuda

        cuda.select_device(_devices(args.device)[0])
    kinds = tuple(family_named(k).name for k in (args.kinds or BUILTIN))
    return 0 if selftest(small=args.simulator, kinds=kinds, dtypes=tuple(args.dtype) if args.dtype else None,
                         compile_timeout_s=args.compile_timeout) else 1


def parse_param(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--param takes NAME=VALUE, got {text!r}")
    return name.strip(), int(value) if value.strip().lstrip("-").isdigit() else value.strip()


def run_render(args) -> int:
    from ..runtime.build import render_source

    params = dict(parse_param(p) for p in args.param)
    family = _family_values(args, family_named(args.kind))
    _, _, source = render_source(args.kind, params, args.dtype, simulator=args.simulator, **family)
    print(source, end="")
    return 0


def run_warm(args) -> int:
    from .warm import warm

    for spec in args.family:
        register_family(spec)
    return warm(db=args.db, cc=args.cc, jobs=args.jobs)


# -- database ---------------------------------------------------------------------------------------
def _database_files(args) -> tuple[list, list[str], list]:
    """Every file lookups read, in their order, with a sentence per file that cannot be read; ValueError when
    the folder named with --db does not exist."""
    from ..runtime.db import database_folders, load_folder

    for spec in getattr(args, "family", []) or []:
        register_family(spec)
    if args.db and not Path(args.db).is_dir():
        raise ValueError(f"--db {args.db}: no such folder")
    folders = database_folders(args.db)
    files, problems = [], []
    for folder in folders:
        found, bad = load_folder(folder)
        files += found
        problems += bad
    return files, problems, folders


def run_show(args) -> int:
    from ..core.device import device_slug
    from ..tuning import report

    files, problems, folders = _database_files(args)
    print("reading, in this order: " + ", ".join(map(str, folders)))
    if args.device:
        wanted = device_slug(args.device)
        files = [f for f in files if wanted in f.path.stem or wanted in device_slug(f.device["name"])]
    print(report.db_table(files, args.kernel))
    for problem in problems:
        print(f"  unreadable: {problem}")
    return 1 if problems else 0


def run_db_check(args) -> int:
    from ..runtime.db import family_of

    files, problems, folders = _database_files(args)
    print("checking, in the order lookups read them: " + ", ".join(map(str, folders)))
    if not files and not problems:
        print("no database files")
    bad = len(problems)
    for problem in problems:
        print(f"FAIL {problem}")
    for f in files:
        for problem in f.problems:
            print(f"FAIL {problem}")
        bad += len(f.problems)
        rules = f", {len(f.rules)} valid rules" if f.rules else ""
        print(f"{'ok  ' if not f.problems else 'FAIL'} {f.path}: {len(f.entries)} valid entries{rules} "
              f"({f.device['name']})")
        for name in f.foreign_families:
            count = sum(family_of(raw) == name for raw in f.foreign)
            print(f"     {count} entries of the family {name!r}, not registered here: kept, not checked "
                  f"(--family PATH checks them)")
    return 1 if bad else 0


def run_db_merge(args) -> int:
    from ..runtime.db import db_dir, db_path, load_file, write_entries

    other = load_file(Path(args.other), strict=True)
    target = db_path(db_dir(args.db), other.device["name"])
    if target.exists() and target.resolve() == Path(args.other).resolve():
        raise ValueError(f"{args.other} is the database file it would be merged into")
    for line in write_entries(target, other.device, other.entries, force=args.force):
        print(line)
    if other.rules:  # a rule is replaced only with --force: the file's own was fitted on its own coverage
        from ..runtime.db import write_rules

        for line in write_rules(target, other.device, other.rules, replace=args.force):
            print(line)
    if other.foreign:
        print(f"(not merged: {len(other.foreign)} entries of families not registered here: "
              f"{', '.join(other.foreign_families)})")
    print(f"merged into {target} (the file of {other.device['name']})")
    return 0
