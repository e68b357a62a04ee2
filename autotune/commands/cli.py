"""The ``autotune`` command line.

    autotune matmul --device 0 [--shape 4096x4096x4096 ...]    tune matrix products, write tuned_db/<gpu-model>.yaml
    autotune reduce --device 0 --op sum --shape 268435456      tune reductions
    autotune tune --family examples/softmax --shape 4096x4096  tune any kernel family, a file of your own too
    autotune bench --family matmul --device 0                  tuned vs cuBLAS/CuPy/torch and the seed kernels
    autotune selftest --device 0                               correctness of every parameter value on the GPU
    autotune render --family FAMILY -p NAME=VALUE ...          print a variant's generated source
    autotune warm [--cc 9.0 [--ship [--check]]]                compile the database's kernels ahead
    autotune show / db check / db merge OTHER.yaml / db refresh the tuned database
    autotune studies list / show / delete                      the tuning studies kept in a state folder
    autotune --version                                         versions and the compile-time replacements

Every command that takes a family takes it as ``--family NAME|PATH`` (commands/family_option.py). Heavy imports
happen after the arguments are read: ``--simulator`` must switch Numba to its CUDA simulator before Numba is first
imported. Messages go through the ``autotune`` logger (core/log.py): ``-v`` shows more, ``-q`` less.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..core.log import configure as configure_logging
from ..core.log import logger
from ..core.registry import BUILTIN, command_spec
from ..core.registry import family as family_named
from ..tuning.records import COMPILE_TIMEOUT_S
from .family_option import add_family_option, chosen_all, chosen_one, family_flags, family_values, preload, rewritten
from .options import (EXIT_ERROR, EXIT_NO_GPU, dtype_arg, gpu_indices, non_negative_float, positive_float,
                      positive_int, require_gpu)

SUITE_TIME_LIMIT_S = 800.0  # a family's standard suite is tuned within about 14 minutes unless told otherwise
MIN_SHAPE_S = 30.0  # under a time limit, each shape still gets this long

TUNING = ("matmul", "reduce")  # the two tuning commands named after built-in families


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--simulator" in argv:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # small grids are deliberate here
    args = None
    try:
        args = parse(argv)
        configure_logging(getattr(args, "verbose", 0), getattr(args, "quiet", 0))
        return args.run(args)
    except KeyboardInterrupt:
        return _interrupted(args)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        if _raised_while_interrupted(exc):
            return _interrupted(args)
        print(f"autotune: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line: a family given as ``render``/``bench``'s first word read as ``--family``, the
    families it names loaded first (so that their own options exist)."""
    argv = rewritten(argv)
    args = parser(preload_families(argv)).parse_args(argv)
    args.argv = argv
    return args


def _interrupted(args: argparse.Namespace | None) -> int:
    """Exit status 130; a command that measures into studies (``keeps_studies``: tune and its shorthands, coverage,
    met tune) says that its measurements are kept, the others (selftest, bench, studies, ...) do not claim it."""
    if getattr(args, "keeps_studies", False):
        print("interrupted; everything measured so far is in the study and is used when you run again",
              file=sys.stderr)
    else:
        print("interrupted", file=sys.stderr)
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


def preload_families(argv: list[str]) -> list:
    """The families ``argv`` names (``--family NAME|PATH``, or ``render``/``bench``'s first word), loaded."""
    return preload(rewritten(argv))


# -- the parser ---------------------------------------------------------------------------------------
class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print autotune's version, numba's, numba-cuda's and CUDA's, and which compile-time "
                              "replacements of numba-cuda are active, then exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from .version import version_report

        print(version_report())
        parser.exit()


def _verbosity() -> argparse.ArgumentParser:
    """-v and -q, accepted before and after the command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more messages (-v: details such as the tracebacks of failed variants)")
    common.add_argument("-q", "--quiet", action="count", default=argparse.SUPPRESS,
                        help="fewer messages (-q: warnings and errors only; -qq: errors only)")
    return common


def parser(chosen: list | None = None) -> argparse.ArgumentParser:
    """The parser; ``chosen``: the families the command line names, loaded (``preload_families``): a single
    one's own arguments become options of the commands that take one family."""
    chosen = list(chosen or [])
    common = _verbosity()
    p = argparse.ArgumentParser(prog="autotune", parents=[common], description="Generate, tune and look up Numba "
                                "CUDA kernels: matrix products, reductions, and kernel families of your own.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    for name in TUNING:
        impl = family_named(name)
        help_text = f"tune {impl.summary or name}"
        t = sub.add_parser(name, parents=[common], help=help_text, description=f"{help_text} on the attached GPU; "
                           "the winners go to the tuned database. Without --shape, the standard suite: "
                           + ", ".join(impl.suite) + f". The same as `autotune tune --family {name}`.")
        family_flags(t, impl)
        _tune_args(t, impl)
        t.set_defaults(run=run_tune, family=name, command=name)
    one = chosen[:1]
    t = sub.add_parser("tune", parents=[common], help="tune any kernel family (a built-in one or your own: "
                       "--family PATH)", description="Tune a kernel family: a built-in one by name, or your own "
                       "from a Python file or folder (its template and search space beside it), a module, or an "
                       "installed package.")
    add_family_option(t, one, what="the family to tune", required=True, arguments=True)
    _tune_args(t, one[0] if one else None)
    t.set_defaults(run=run_tune, command="tune")
    _bench_parser(sub, common, one)
    _selftest_parser(sub, common, chosen)
    _render_parser(sub, common, one)
    _warm_parser(sub, common, chosen)
    _replay_parser(sub, common)
    _db_parsers(sub, common, chosen)
    _studies_parser(sub, common, chosen)
    from .coverage import add_parsers  # coverage, rule, met: shapes nobody tuned

    add_parsers(sub, common, chosen)
    return p


def _shape_arg(p: argparse.ArgumentParser, impl, default: str) -> None:
    form = impl.shape_help if impl is not None and impl.shape_help else "dimensions joined by x"
    p.add_argument("--shape", action="append", metavar="SHAPE",
                   help=f"problem shape: {form}" + (f" (e.g. {impl.suite[0]})" if impl is not None and impl.suite
                                                    else "") + f" (repeatable; default: {default})")


def _tune_args(p: argparse.ArgumentParser, impl=None) -> None:
    _shape_arg(p, impl, "the family's standard suite")
    dtype_arg(p)
    p.add_argument("--device", default="0", help="GPU index, or several: 0,1 (one worker per GPU, one study)")
    p.add_argument("--trials", type=positive_int, help="measured variants per shape (default 60; 6 in the simulator)")
    p.add_argument("--timeout", type=positive_float,
                   help="end each shape after about this many seconds: what is compiled is measured, compiles "
                        "still running are queued for the next run")
    p.add_argument("--time-limit", type=non_negative_float, metavar="SECONDS",
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
    p.set_defaults(keeps_studies=True)  # an interrupted run says its measurements are kept (_interrupted)
    p.add_argument("--space", help="your own search-space YAML (narrows the built-in one)")
    p.add_argument("--db", help="database folder to write (default $AUTOTUNE_DB or ./tuned_db)")
    p.add_argument("--force", action="store_true", help="replace database entries even when slower")
    p.add_argument("--no-db", action="store_true", help="do not write the database")
    p.add_argument("--compile-workers", type=positive_int,
                   help="CPU processes compiling ahead of the GPU (default: one fewer than the CPUs, at most 16)")
    p.add_argument("--job-timeout", type=positive_float, default=90.0,
                   help="seconds a variant may take to check and time before its worker is restarted (default 90)")
    p.add_argument("--compile-timeout", type=positive_float, default=COMPILE_TIMEOUT_S,
                   help="seconds a variant may take to compile before it counts as failed (default %(default)g)")
    p.add_argument("--simulator", action="store_true",
                   help="dry run in Numba's CUDA simulator: tiny shape, meaningless timings, no database write "
                        "unless --write-db")
    p.add_argument("--write-db", action="store_true", help="with --simulator: write the database anyway, each winner "
                   "first compiled for sm_90 with the real compiler (what does not compile is not written)")
    p.add_argument("--record-sweep", metavar="FILE",
                   help="measure every valid configuration of one --shape (the grid, in a study of its own that "
                        "resumes if stopped) and write them to FILE for `autotune replay`; the database is not "
                        "written")


def _bench_parser(sub, common, chosen: list) -> None:
    b = sub.add_parser("bench", parents=[common], help="time tuned kernels against vendor libraries and the seed "
                       "kernels", description="Time the tuned kernels next to the library calls that compute the "
                       "same (CuPy, PyTorch: pip install \"autotune[bench]\") and the seed kernels, in one process; "
                       "write a Markdown table and a plot per family, arguments and dtype. `autotune bench matmul` "
                       "is short for `autotune bench --family matmul`.")
    add_family_option(b, chosen, what="the family to bench", required=True, arguments=True)
    _shape_arg(b, chosen[0] if chosen else None, "the family's standard suite")
    dtype_arg(b)
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
    b.add_argument("--simulator", action="store_true", help="dry run in Numba's CUDA simulator: the family's own "
                   "kernels only, on its dry-run shape unless --shape, timings meaningless")
    b.set_defaults(run=run_bench)


def _selftest_parser(sub, common, chosen: list) -> None:
    s = sub.add_parser("selftest", parents=[common], help="check every parameter value's variants against NumPy on "
                       "the GPU", description="Check a covering sample of each family's search space (every value "
                       "of every parameter at least once) against float64 NumPy through the family's oracle on odd "
                       "shapes, with NaN and infinities where the family plants them and with out= overlapping an "
                       "input. --simulator runs a small sample (one variant per family and arguments on one odd "
                       "shape, about a minute) in Numba's CUDA simulator.")
    s.add_argument("--device", default="0", help="GPU index (default 0)")
    s.add_argument("--simulator", action="store_true", help="run a small sample in the CUDA simulator")
    add_family_option(s, chosen, what="only this family (default: the built-in ones)", repeatable=True)
    s.add_argument("--kind", action="append", dest="family", help=argparse.SUPPRESS)  # the first releases' name
    s.add_argument("--dtype", action="append", help="only this dtype (repeatable; default: every dtype of each family)")
    s.add_argument("--compile-timeout", type=positive_float, default=COMPILE_TIMEOUT_S,
                   help="seconds a variant may take to compile; longer ones are named and not checked, as tuning "
                        "would skip them (default %(default)g, as tune's)")
    s.add_argument("--part", type=selftest_part, default=(1, 1), metavar="I/N",
                   help="only the I-th of N interleaved shares of the cases (family, dtype, arguments): run 1/N ... "
                        "N/N on N GPUs or in N shorter runs to check everything (default 1/1)")
    s.set_defaults(run=run_selftest)


def _replay_parser(sub, common) -> None:
    r = sub.add_parser("replay", parents=[common], help="score a search strategy against a recorded sweep, on the CPU",
                       description="Run the tuner's own search (starts, pruning, duplicates, tie rule) against a "
                       "sweep recorded with --record-sweep instead of a GPU, once per seed, and report per budget "
                       "(trials, and minutes on a simulated clock charged with the recorded compile and measure "
                       "seconds) the fraction of the sweep's optimum reached (median and 10th percentile over the "
                       "seeds) and the score (fraction - random) / (1 - random), random being the expected fraction "
                       "of random sampling at the same number of trials.")
    r.add_argument("sweep", metavar="SWEEP", help="a sweep file (benchmarks/sweeps/*.yaml)")
    r.add_argument("--sampler", default="tpe", choices=["tpe", "random", "grid", "cmaes"])
    r.add_argument("--trials", type=positive_int, default=100, help="trials per search (default 100)")
    r.add_argument("--seeds", type=positive_int, default=30, help="searches, seeds 0..S-1 (default 30)")
    r.add_argument("--startup-trials", type=positive_int, default=10,
                   help="tpe: random trials before it models the results (default 10, as tune)")
    r.add_argument("--no-starts", action="store_true", help="without the search space's starting configurations")
    r.add_argument("--no-refine", action="store_true", help="without the neighbours of the fastest so far, as tune")
    r.add_argument("--neighbours", metavar="DB_FILE", action="append",
                   help="start from the winners of the 3 nearest other shapes in this database file, as tune does "
                        "(repeatable; the sweep's own shape is left out)")
    r.add_argument("--compile-workers", type=positive_int, help="compile processes the clock assumes (default: "
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
        logger.info(f"replaying {args.sampler} on {sweep.problem.key} ({len(sweep.rows)} configurations, "
                    f"{sweep.device.name}): {args.seeds} searches of {args.trials} trials")
    runs = replay(sweep, settings, range(args.seeds))
    scores = score_replays(sweep, runs)
    if args.json:
        print(json.dumps({"sweep": str(args.sweep), "sampler": args.sampler, "seeds": args.seeds,
                          "budgets": [s.as_dict() for s in scores]}))
    else:
        print(table(scores))
    return 0


def _render_parser(sub, common, chosen: list) -> None:
    r = sub.add_parser("render", parents=[common], help="print the generated source of one variant",
                       description="Print the Numba CUDA source of one configuration, validated against the family's "
                       "search space. `autotune render matmul` is short for `autotune render --family matmul`.")
    add_family_option(r, chosen, what="the family to render", required=True, arguments=True)
    r.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="a template parameter's value (repeatable); parameters left out take their defaults (the "
                        "family's parameters and values: --family NAME --help)")
    dtype_arg(r)
    r.add_argument("--simulator", action="store_true", help="the rendering for the CUDA simulator")
    r.set_defaults(run=run_render)


def _warm_parser(sub, common, chosen: list) -> None:
    w = sub.add_parser("warm", parents=[common], help="compile every database entry ahead (fills the code cache)",
                       description="Compile the kernels the database holds for this GPU, in parallel processes, and "
                       "store their code, so that later processes load them instead of compiling (run it once when "
                       "building a container). With --cc and no GPU: compile to PTX and cubin for that compute "
                       "capability, report registers and spills and store the cubins. With --cc and --ship: build "
                       "the code shipped with the package (tuned_db/code) for the shipped entries; --check only "
                       "checks it is complete. Prints each entry's compile seconds, registers and spills.")
    w.add_argument("--db", help="a database file or folder (default: the folders lookups read)")
    w.add_argument("--cc", help="compute capability such as 9.0: compile for it without a GPU (files of GPUs with it)")
    w.add_argument("--jobs", type=positive_int, help="compile processes (default: the CPUs)")
    w.add_argument("--ship", action="store_true",
                   help="with --cc: build the shipped database's code into tuned_db/code (only what is missing; "
                   "code no entry needs is removed)")
    w.add_argument("--check", action="store_true",
                   help="with --ship: compile nothing, exit 1 when shipped code is missing")
    add_family_option(w, chosen, what="only this family's entries (default: every family known here)",
                      repeatable=True)
    w.set_defaults(run=run_warm)


def _db_parsers(sub, common, chosen: list) -> None:
    show = sub.add_parser("show", parents=[common], help="print the tuned database as a table",
                          description="Print every entry the lookups can use, file by file, in the order "
                          "get_best_kernel reads them (your folder, then the shipped database).")
    show.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    show.add_argument("--device", help="only GPU models whose name contains this (e.g. h100); default all")
    add_family_option(show, chosen, what="only this family's entries (default: all)", repeatable=True)
    show.add_argument("--kernel", action="append", dest="family", help=argparse.SUPPRESS)  # the first releases' name
    show.set_defaults(run=run_show)
    db = sub.add_parser("db", parents=[common], help="check or merge database files", description="Check or merge "
                        "the tuned database: one YAML file per GPU model, in your folder and shipped with the package.")
    dbsub = db.add_subparsers(required=True, metavar="ACTION")
    check = dbsub.add_parser("check", parents=[common], help="validate every file lookups read (exit 1 on any problem)",
                             description="Validate every database file that lookups read, in their order (your folder, "
                             "then the shipped database): each entry against the schema and its family's search space, "
                             "duplicates, unreadable files, and entries whose parameters no longer render the kernel "
                             "they measured (their source_hash). Exit 1 on any problem.")
    check.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    add_family_option(check, chosen, what="a family to load, so that its entries are checked too (entries of a "
                      "family not known here are kept and counted, not checked)", repeatable=True)
    check.set_defaults(run=run_db_check)
    merge = dbsub.add_parser("merge", parents=[common], help="merge another machine's file into the database",
                             description="Merge a database file (e.g. from a colleague's GPU) into the file of the "
                             "GPU model it declares in your folder; an entry is replaced only by a faster one.")
    merge.add_argument("other", metavar="OTHER.yaml")
    merge.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    merge.add_argument("--force", action="store_true", help="replace entries even when the new one is slower")
    add_family_option(merge, chosen, what="a family to load, so that its entries are checked and merged too "
                      "(entries of families not known here are not merged)", repeatable=True)
    merge.set_defaults(run=run_db_merge)
    refresh = dbsub.add_parser("refresh", parents=[common], help="measure stale entries again on this GPU",
                               description="Measure again, on this GPU, each entry of its model's file in your folder "
                               "that `db check` finds stale (the templates changed since it was measured): its "
                               "configuration is built from the current templates, checked against NumPy on fresh "
                               "data and timed, and the entry written back with the new time. One that fails stays "
                               "stale (exit 1). The cheap way back after a template change meant to make the same "
                               "configurations faster; re-tuning (--force) searches again.")
    refresh.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    refresh.add_argument("--device", default="0", help="GPU index (default 0)")
    refresh.add_argument("--only", action="append", default=[], metavar="PREFIX",
                         help="only entries whose key starts with PREFIX, e.g. matmul/float16 (repeatable)")
    refresh.add_argument("--simulator", action="store_true", help="dry run in Numba's CUDA simulator: the stale "
                         "entries of its own file (cuda-simulator.yaml); timings are meaningless")
    add_family_option(refresh, chosen, what="a family to load, so that its entries are refreshed too",
                      repeatable=True)
    refresh.set_defaults(run=run_db_refresh)


def _studies_parser(sub, common, chosen: list) -> None:
    from .studies import add_studies_parser

    add_studies_parser(sub, common, chosen)


# -- shared steps ---------------------------------------------------------------------------------------
def problems_of(args, impl, default_suite) -> list:
    """The problems a command line asks for: each --shape (else ``default_suite``) with the family's arguments."""
    from ..core.problem import Problem, parse_shape

    values = family_values(args, impl)
    shapes = args.shape or list(default_suite)
    if not shapes:
        raise ValueError(f"{impl.name} has no standard suite: give --shape" +
                         (f" ({impl.shape_help})" if impl.shape_help else ""))
    return [Problem(impl.name, parse_shape(s, impl), args.dtype, values) for s in shapes]


# -- tune -----------------------------------------------------------------------------------------------
def run_tune(args) -> int:
    impl = chosen_one(args)
    command = f"tune --family {command_spec(impl)}" if args.command == "tune" else impl.name
    if not require_gpu(args, command):
        return EXIT_NO_GPU
    from ..runtime.render import check_templates
    from ..tuning.worker import CompilePools, default_compile_workers

    check_templates(impl)  # a template that does not parse stops the run here, with its file and line, once
    workers = args.compile_workers or (1 if args.simulator else default_compile_workers())
    devices = () if args.simulator else gpu_indices(args.device)
    # the pool's processes start and warm up while this one prepares the run
    with CompilePools(workers, devices=devices) as pools:
        return tune_problems(args, impl, pools)


def tune_problems(args, impl, pools) -> int:
    """The tuning run of ``run_tune``: each problem in turn, its compiles in ``pools``."""
    from ..core.device import current_device
    from ..runtime.compiler import DEFAULT_CC
    from ..runtime.db import database_folders, db_dir, db_path
    from ..runtime.lookup import tuning_starts
    from ..tuning import report
    from ..tuning.settings import TuneConfig
    from ..tuning.tuner import Tuner
    from .destinations import check_destinations

    impl = family_named(impl) if isinstance(impl, str) else impl
    sim = args.simulator
    devices = gpu_indices(args.device)
    if not sim:
        from numba import cuda

        cuda.select_device(devices[0])
    device = current_device()
    suite = impl.dry_run_shapes if sim and not args.shape else impl.suite
    problems = problems_of(args, impl, suite)
    target = db_path(db_dir(args.db), device.name)
    write = (args.write_db or not sim) and not args.no_db and not args.record_sweep
    check_destinations(database=target if write else None,
                       sweep=Path(args.record_sweep) if args.record_sweep else None)
    config = TuneConfig(trials=args.trials or (6 if sim else 60), timeout_s=args.timeout, sampler=args.sampler,
                        seed=args.seed, storage=args.storage, state_dir=Path(args.state_dir), devices=devices,
                        space_path=args.space, job_timeout_s=args.job_timeout,
                        compile_timeout_s=args.compile_timeout, refine=not args.no_refine,
                        compile_workers=pools.workers, target_cc=DEFAULT_CC if sim and write else None)
    if sim:
        logger.info("SIMULATOR DRY RUN: kernels run in Numba's CUDA simulator on the CPU; timings are meaningless.")
    if args.record_sweep:
        return record_sweep(args, problems, config, device, pools)
    results = []
    start_files = [target] + [db_path(f, device.name) for f in database_folders(args.db) if f != target.parent]
    limit = run_time_limit(args)
    deadline = time.monotonic() + limit if limit else None
    for left, problem in zip(range(len(problems), 0, -1), problems):
        shape_config = config if deadline is None else \
            replace(config, timeout_s=min(config.timeout_s or math.inf, shape_share(deadline - time.monotonic(),
                                                                                    left, first=not results)))
        budget = f", at most {shape_config.timeout_s:.0f} s" if shape_config.timeout_s else ""
        logger.info(f"tuning {problem.key} on {device.name} ({config.trials} variants, sampler "
                    f"{config.sampler}{budget})")
        incumbent, neighbours = tuning_starts(start_files, problem)
        tuner = Tuner(problem, shape_config, device, incumbent=incumbent, neighbours=neighbours)
        results.append(tuner.run(pools))
        if write:  # each shape's winner as soon as it is found: a run stopped later keeps it
            for line in report.write_results(results[-1:], device, args.db, config, force=args.force)[:-1]:
                logger.info(line)
    print(report.tune_table(results, device))
    if write:
        print(f"database: {target}")
    elif sim:
        print("(simulator: nothing written to the database, and the winners were not compiled for a GPU; --write-db "
              "writes them, each first compiled for sm_90 with the real compiler)")
    return 0 if all(r.best for r in results) else 1


def shape_share(seconds_left: float, shapes_left: int, first: bool) -> float:
    """A shape's time under a run's time limit: an equal share of what is left, twice that for the run's first
    shape of several, which compiles cold the starting configurations that the later shapes then load from the
    code cache; at least MIN_SHAPE_S."""
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
    logger.info(f"recording a sweep of {problem.key} on {device.name}: {len(valid)} valid configurations "
                f"(search space: {space_tag})")
    tuner = Tuner(problem, config, device, name=f"{problem.key}@{device.slug}/sweep/{space_tag}")
    tuner.run(pools)
    keys = {config_key(c) for c in valid}
    rows = [r for r in rows_from_study(tuner.study) if config_key(r.config) in keys]
    if len(rows) < len(valid):
        logger.warning(f"{len(rows)} of {len(valid)} configurations have an outcome; run the same command again to "
                       f"measure the rest (the study resumes); nothing written yet")
        return 1
    command = " ".join(["autotune", *args.argv])
    write_sweep(path, new_sweep(problem, device, config.space_path, config.compile_workers, rows, command))
    best = min((r for r in rows if r.ok), key=lambda r: r.timing.median_ms, default=None)
    print(f"sweep: {path}: {sum(r.ok for r in rows)} measured, {sum(not r.ok for r in rows)} failed; fastest "
          f"{best.timing.median_ms:.4g} ms" if best else f"sweep: {path}: nothing measured")
    return 0 if best else 1


# -- bench, selftest, render, warm ---------------------------------------------------------------------------
def run_bench(args) -> int:
    impl = chosen_one(args)
    if not require_gpu(args, f"bench --family {command_spec(impl)}"):
        return EXIT_NO_GPU
    from .bench import run_suite

    if not args.simulator:
        from numba import cuda

        cuda.select_device(gpu_indices(args.device)[0])
    suite = impl.dry_run_shapes if args.simulator and not args.shape else impl.suite
    problems = held_out_problems(args, impl) if args.held_out else problems_of(args, impl, suite)
    run_suite(problems, db=args.db, out_dir=args.out or ("benchmarks" if args.held_out else "bench"),
              simulator=args.simulator, held_out=args.held_out, tuned=[Path(d) for d in args.against_db])
    return 0


def held_out_problems(args, impl) -> list:
    """``bench --held-out``: the family's held-out shapes, then its suite (``--shape`` adds to them)."""
    from ..core.problem import Problem, parse_shape

    values = family_values(args, impl)
    extra = [parse_shape(s, impl) for s in (*impl.suite, *(args.shape or []))]
    shapes = impl.shape_set("held-out", args.dtype, values) + extra
    return [Problem(impl.name, s, args.dtype, values) for s in dict.fromkeys(shapes)]


def run_selftest(args) -> int:
    families = chosen_all(args) or [family_named(name) for name in BUILTIN]
    if not require_gpu(args, "selftest" + "".join(f" --family {command_spec(f)}" for f in chosen_all(args))):
        return EXIT_NO_GPU
    from .selftest import selftest

    if not args.simulator:
        from numba import cuda

        cuda.select_device(gpu_indices(args.device)[0])
    return 0 if selftest(small=args.simulator, kinds=tuple(f.name for f in families),
                         dtypes=tuple(args.dtype) if args.dtype else None,
                         compile_timeout_s=args.compile_timeout, part=args.part) else 1


def selftest_part(text: str) -> tuple[int, int]:
    """``--part I/N`` as (I, N), 1 <= I <= N."""
    index, sep, count = text.partition("/")
    try:
        part = (int(index), int(count))
    except ValueError:
        part = None
    if not sep or part is None or not 1 <= part[0] <= part[1]:
        raise argparse.ArgumentTypeError(f"takes I/N with 1 <= I <= N (e.g. 2/4), got {text!r}")
    return part


def parse_param(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--param takes NAME=VALUE, got {text!r}")
    return name.strip(), int(value) if value.strip().lstrip("-").isdigit() else value.strip()


def run_render(args) -> int:
    from ..runtime.build import render_source

    impl = chosen_one(args)
    params = dict(parse_param(p) for p in args.param)
    _, _, source = render_source(impl.name, params, args.dtype, simulator=args.simulator, **family_values(args, impl))
    print(source, end="")
    return 0


def run_warm(args) -> int:
    from .warm import warm

    families = chosen_all(args)
    return warm(db=args.db, cc=args.cc, jobs=args.jobs, families=[f.name for f in families] or None,
                ship=args.ship, check=args.check)


# -- database ---------------------------------------------------------------------------------------
def _database_files(args) -> tuple[list, list[str], list]:
    """Every file lookups read, in their order, with a sentence per file that cannot be read; ValueError when
    the folder named with --db or $AUTOTUNE_DB is no folder."""
    from ..runtime.db import database_folders, folder_problem, load_folder, named_folder

    chosen_all(args)  # families named by path are registered before the files are read
    named = named_folder(args.db)
    if named and (problem := folder_problem(named[1])):
        raise ValueError(f"{named[0].replace('db=', '--db ')}: not a database folder ({problem})")
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
    names = [f.name for f in chosen_all(args)]
    print("reading, in this order: " + ", ".join(map(str, folders)))
    if args.device:
        wanted = device_slug(args.device)
        files = [f for f in files if wanted in f.path.stem or wanted in device_slug(f.device["name"])]
    print(report.db_table(files, names or None))
    for line in _foreign_lines(files, names, "shows"):
        print(line)
    for problem in problems:
        print(f"  unreadable: {problem}")
    return 1 if problems else 0


def _foreign_lines(files: list, names: list[str], verb: str) -> list[str]:
    """A line per file and family whose entries are kept but not read here (the family is not registered)."""
    from ..runtime.db import family_of

    lines = []
    for f in files:
        for name in f.foreign_families:
            if names and name not in names:
                continue
            count = sum(family_of(raw) == name for raw in f.foreign)
            lines.append(f"     {f.path}: {count} entries of the family {name!r}, not registered here: kept, not "
                         f"read (--family PATH {verb} them)")
    return lines


def run_db_check(args) -> int:
    from ..runtime.db import stale_entries

    files, problems, folders = _database_files(args)
    print("checking, in the order lookups read them: " + ", ".join(map(str, folders)))
    if not files and not problems:
        print("no database files")
    bad = len(problems)
    for problem in problems:
        print(f"FAIL {problem}")
    for f in files:
        stale = stale_entries(f)
        for problem in f.problems + stale:
            print(f"FAIL {problem}")
        bad += len(f.problems) + len(stale)
        ok = not f.problems and not stale
        rules = f", {len(f.rules)} valid rules" if f.rules else ""
        print(f"{'ok  ' if ok else 'FAIL'} {f.path}: {len(f.entries)} valid entries{rules} ({f.device['name']})"
              + (f", {len(stale)} of them stale" if stale else ""))
    for line in _foreign_lines(files, [], "checks"):
        print(line)
    return 1 if bad else 0


def run_db_refresh(args) -> int:
    from ..core.device import current_device
    from ..runtime.db import db_dir, db_path
    from ..tuning.refresh import refresh_file

    chosen_all(args)  # families named by path are registered, so that their entries are read
    if not require_gpu(args, "db refresh", what="the stale entries of its own file, meaningless timings"):
        return EXIT_NO_GPU
    if not args.simulator:
        from numba import cuda

        cuda.select_device(gpu_indices(args.device)[0])
    device = current_device()
    path = db_path(db_dir(args.db), device.name)
    if not path.is_file():
        print(f"no database file of {device.name} in {path.parent}: nothing to refresh")
        return 0
    results = refresh_file(path, device, tuple(args.only))
    return 1 if any(r.error for r in results) else 0


def run_db_merge(args) -> int:
    from ..runtime.db import db_dir, db_path, load_file, write_entries

    chosen_all(args)  # families named by path are registered, so that their entries are read and merged
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
    if other.foreign or other.foreign_rules:
        families = sorted(set(other.foreign_families) | {str(raw.get("family")) for raw in other.foreign_rules})
        what = " and ".join(part for part in (f"{len(other.foreign)} entries" if other.foreign else "",
                                              f"{len(other.foreign_rules)} rules" if other.foreign_rules else "")
                            if part)
        print(f"(not merged: {what} of families not registered here: {', '.join(families)}; --family PATH loads "
              f"one)")
    print(f"merged into {target} (the file of {other.device['name']})")
    return 0
