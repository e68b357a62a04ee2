"""The commands of shapes nobody tuned: ``autotune coverage`` (measure a family over its documented shape set),
``autotune rule fit|show|score|adopt`` (the fitted choice for untuned shapes) and ``autotune met list|tune|clear`` (the
shapes your programs met without an exact entry).

    autotune coverage matmul --dtype float32 --device 0,1,2,3 --time-limit 600   # the cross-time matrix
    autotune coverage matmul --list                                                # the shapes, no GPU needed
    autotune rule fit benchmarks/coverage/nvidia-h100-80gb-hbm3-matmul-float32-nn.json
    autotune rule show
    autotune met list; autotune met tune --device 0
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..core.registry import family as family_named
from .options import EXIT_NO_GPU, gpu_indices, dtype_arg, non_negative_float, positive_float, positive_int, require_gpu
from .family_option import add_family_option, chosen_one, family_values


def add_parsers(sub, common, chosen: list) -> None:
    """The parsers of ``coverage``, ``rule`` and ``met`` (called by cli.parser); ``common``: the options every
    command takes, ``chosen``: the families the command line names, loaded."""
    _coverage_parser(sub, common, chosen)
    _rule_parser(sub, common)
    _met_parser(sub, common)


# -- coverage -----------------------------------------------------------------------------------------
def _coverage_parser(sub, common, chosen: list) -> None:
    description = ("Measure a family, dtype and arguments over its documented shape set on every GPU given, so that "
                   "`autotune rule fit` can fit the choice for shapes nobody tuned. Method cross (default): every "
                   "candidate configuration (the database's winners, rule portfolios, also those of other GPU "
                   "models of the same compute capability, the space's starts, the default), fitted to each shape, "
                   "checked and timed on each (a cross-time matrix, written as JSON); method tune: a search per "
                   "shape. Each finished shape's fastest is written to the database at "
                   "once; a stopped run resumes where it stopped; several GPUs (--device 0,1) and hosts (--storage) "
                   "share the shapes.")
    p = sub.add_parser("coverage", parents=[common], description=description,
                       help="measure a family over its documented shapes (for a fitted rule)")
    add_family_option(p, chosen[:1], what="the family to measure", required=True, arguments=True)
    dtype_arg(p)
    p.add_argument("--set", dest="shape_set", default="coverage", choices=["coverage", "held-out"],
                   help="the shape set (default coverage; held-out: the shapes rules are judged on, never "
                        "written to the database unless --write-db)")
    p.add_argument("--list", action="store_true", help="print the shapes and how they are drawn, and stop")
    p.add_argument("--shapes", type=positive_int, metavar="N",
                   help="only the first N shapes of the set (a spread-out prefix)")
    p.add_argument("--method", choices=["cross", "tune"], default="cross",
                   help="cross: the cross-time matrix (default); tune: a search per shape")
    p.add_argument("--device", default="0", help="GPU indices, e.g. 0,1,2,3: one worker per GPU")
    p.add_argument("--time-limit", type=non_negative_float, metavar="SECONDS",
                   help="claim no new shape after this many seconds (the shapes in flight finish); 0: none")
    p.add_argument("--rep-ms", type=positive_float, default=20.0,
                   help="cross: milliseconds of timed runs per candidate and shape (default 20)")
    p.add_argument("--max-candidates", type=positive_int, default=64,
                   help="cross: at most this many candidates (default 64)")
    p.add_argument("--min-candidates", type=positive_int, default=24,
                   help="cross: where fewer configurations are known (winners, starts, the default), add their "
                        "one-step neighbours and a covering sample of the space up to this many (default 24)")
    p.add_argument("--trials", type=positive_int, default=40, help="tune: variants per shape (default 40)")
    p.add_argument("--budget-s", type=positive_float, default=20.0,
                   help="tune: seconds per shape (default 20)")
    p.add_argument("--storage", help="Optuna storage shared by several hosts (default: the journal file per GPU "
                                     "model under --state-dir)")
    p.add_argument("--state-dir", default="autotune-out", help="where the journal lives (default autotune-out/)")
    p.set_defaults(keeps_studies=True)  # an interrupted run says its measurements are kept (cli._interrupted)
    p.add_argument("--study", help="the study's name (default: coverage/<case>/<set>/<method>@<gpu>), to which the "
                                   "digest of the code that makes the kernels is added; another name starts afresh, "
                                   "e.g. with new candidates")
    p.add_argument("--db", help="database folder to write (default $AUTOTUNE_DB or ./tuned_db)")
    p.add_argument("--no-db", action="store_true", help="write no database entries")
    p.add_argument("--write-db", action="store_true", help="write entries also for --set held-out or --simulator")
    p.add_argument("--matrix", help="the matrix file to write (default benchmarks/coverage/<gpu>-<case>.json)")
    p.add_argument("--compile-workers", type=positive_int,
                   help="CPU processes compiling (default: the CPUs less one per GPU)")
    p.add_argument("--job-timeout", type=positive_float, default=90.0,
                   help="seconds a candidate may take to check and time on a shape (default 90)")
    p.add_argument("--simulator", action="store_true",
                   help="dry run in Numba's CUDA simulator on the family's tiny shapes (meaningless timings)")
    p.set_defaults(run=run_coverage)


def run_coverage(args) -> int:
    from ..core.device import current_device

    from ..core.problem import family_dtype

    impl = chosen_one(args)
    family_args = family_values(args, impl)
    impl.check_dtype(family_dtype(impl, args.dtype), family_args)  # before the shape sets, drawn per dtype
    shape_set = "simulator" if args.simulator and not args.list else args.shape_set
    shapes = impl.shape_set(shape_set, args.dtype, family_args)
    shapes = shapes[:args.shapes] if args.shapes else shapes
    if args.list:
        return _list(impl, args.dtype, family_args, shape_set, shapes)
    if not require_gpu(args, f"coverage --family {impl.name}"):
        return EXIT_NO_GPU
    from ..runtime.db import database_folders, db_path, load_file, same_cc_files
    from ..tuning.coverage import CoverageConfig, CoverageRun, default_compile_workers

    devices = gpu_indices(args.device)
    if not args.simulator:
        from numba import cuda

        cuda.select_device(devices[0])
    device = current_device()
    write = not args.no_db and (args.write_db or (args.shape_set == "coverage" and not args.simulator))
    config = CoverageConfig(method=args.method, shape_set=args.shape_set, devices=devices, shapes=args.shapes,
                            time_limit_s=args.time_limit or None, storage=args.storage,
                            state_dir=Path(args.state_dir),
                            compile_workers=args.compile_workers or (1 if args.simulator
                                                                     else default_compile_workers(len(devices))),
                            db=args.db, write_db=write, matrix=Path(args.matrix) if args.matrix else None,
                            rep_ms=args.rep_ms, max_candidates=args.max_candidates,
                            min_candidates=args.min_candidates, trials=args.trials,
                            budget_s=args.budget_s, study=args.study, job_timeout_s=args.job_timeout,
                            command="autotune " + " ".join(args.argv))
    if args.simulator:
        print("SIMULATOR DRY RUN: the family's tiny shapes in Numba's CUDA simulator; timings are meaningless.",
              file=sys.stderr)
    run = CoverageRun(impl.name, args.dtype, family_args, shapes, config, device)
    if args.method == "cross":
        folders = database_folders(args.db)
        files = [load_file(p) for p in (db_path(f, device.name) for f in folders) if p.exists()]
        same_cc, unread = ([], []) if args.simulator else same_cc_files(folders, device.name, device.cc)
        for problem in unread:
            print(f"skipped a database file that cannot be used: {problem}", file=sys.stderr)
        result = run.run_cross(files, same_cc)
    else:
        result = run.run_tune()
    print(f"{result.case} on {device.name}: {result.done} of {result.total} shapes done ({result.done_here} by this "
          f"run in {result.elapsed_s:.0f} s on {len(devices)} GPU(s): {result.shapes_per_hour:.0f} shapes/h)"
          + (f"; matrix: {result.matrix}" if result.matrix else ""))
    for line in result.failures:
        print(f"  {line}")
    return 0 if result.done == result.total else 1


def _list(impl, dtype: str, family_args: dict, shape_set: str, shapes: list[tuple[int, ...]]) -> int:
    from ..core.problem import Problem, shape_text

    first = Problem(impl.name, shapes[0], dtype, family_args)
    print(f"{len(shapes)} shapes of the {shape_set} set of {first.key.rsplit('/', 1)[0]}, in spread order:")
    for shape in shapes:
        print(f"  {shape_text(shape)}")
    rule = impl.shape_set_rule()
    if rule:
        print("\n" + rule)
    return 0


# -- rule -----------------------------------------------------------------------------------------------
def served_text(matrix) -> str:
    """'89 shapes (1 left out: their shapes set family arguments of their own)': the rows a rule is fitted and
    scored on, and those it never serves."""
    served, measured = len(matrix.ruled_rows()), len(matrix.measured_rows())
    if measured == served:
        return f"{served} shapes"
    return f"{served} shapes ({measured - served} left out: their shapes set family arguments of their own)"


def _rule_parser(sub, common) -> None:
    from ..tuning.fit import FEATURE_CHOICES, SELECTION_CHOICES, FitSettings

    default = FitSettings()
    p = sub.add_parser("rule", parents=[common], help="fit, show or score the choice for untuned shapes",
                       description="A rule picks a configuration for any shape that has no database entry, from a "
                       "small portfolio, by a shallow decision tree or the nearest coverage shape; it is fitted on a "
                       "cross-time matrix (autotune coverage) and stored in the database file of its GPU model.")
    rsub = p.add_subparsers(required=True, metavar="ACTION")
    fit = rsub.add_parser("fit", help="fit rules from matrices into the database",
                          description="Fit a rule per matrix: a portfolio covering each shape within --threshold of "
                          "its best, a model choosing among it, cross-validated (the quality on shapes it was not "
                          "fitted on: best time over chosen time, geometric mean and worst), then written into the "
                          "database file of the matrix's GPU model (replacing that family's, dtype's and arguments' "
                          "earlier rule).")
    fit.add_argument("matrix", nargs="+", metavar="MATRIX", help="cross-time matrix files (JSON)")
    fit.add_argument("--db", help="database folder to write (default $AUTOTUNE_DB or ./tuned_db)")
    fit.add_argument("--max-portfolio", type=positive_int, default=default.max_portfolio,
                     help=f"configurations at most (default {default.max_portfolio})")
    fit.add_argument("--threshold", type=positive_float, default=default.threshold,
                     help=f"the portfolio grows until every shape has a member this close to its best (default "
                          f"{default.threshold})")
    fit.add_argument("--depth", type=positive_int, default=default.max_depth,
                     help=f"tree depth at most (default {default.max_depth})")
    fit.add_argument("--min-leaf", type=positive_int, default=default.min_leaf,
                     help=f"shapes per leaf at least (default {default.min_leaf})")
    fit.add_argument("--neighbours", type=positive_int, default=default.neighbours,
                     help=f"nearest model: how many nearest coverage shapes vote, weighted by closeness (default "
                          f"{default.neighbours}; 1: the nearest one's ranking)")
    fit.add_argument("--features", choices=FEATURE_CHOICES, default=default.features,
                     help="nearest model: what the distance measures: the family's features (default; matmul: M, "
                          "N, K and M*N) or the dimensions alone")
    fit.add_argument("--fill-alphas", default=default.fill_alphas, metavar="A,B,...",
                     help=f"nearest model: the corrections of the neighbours' slowdowns by how each configuration "
                          f"fills the new shape (the family's filled_fraction) to try, chosen like the model "
                          f"(default {default.fill_alphas}; 0: uncorrected)")
    fit.add_argument("--folds", type=positive_int, default=default.folds,
                     help=f"cross-validation folds (default {default.folds})")
    fit.add_argument("--seed", type=int, default=default.seed, help=f"seed of the folds (default {default.seed})")
    fit.add_argument("--model", choices=["auto", "tree", "nearest"], default=default.model,
                     help="auto (default): the better cross-validated of tree and nearest")
    fit.add_argument("--selection", choices=SELECTION_CHOICES, default=default.selection,
                     help="auto: the held-out quality picks the model inside each fold from its training shapes "
                          "alone (nested, default), or once from all shapes (whole: slightly optimistic)")
    fit.add_argument("--min-quality", type=positive_float, default=0.75, metavar="FRACTION",
                     help="write a rule only where its cross-validated geometric mean reaches this fraction of the "
                          "best time (default 0.75): a rule below it likely serves unseen shapes worse than the "
                          "nearest tuned entry would, as one fitted on a matrix whose candidates mostly failed does")
    fit.add_argument("--dry-run", action="store_true", help="report, write nothing")
    fit.set_defaults(run=run_rule_fit)
    show = rsub.add_parser("show", help="print the rules lookups read",
                           description="Print each rule of the database files lookups read: its portfolio, its "
                           "model and its quality.")
    show.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    show.set_defaults(run=run_rule_show)
    score = rsub.add_parser("score", help="score the database's rule on a matrix (e.g. of the held-out shapes)",
                            description="For each shape of MATRIX, the configuration the database's rule chooses, "
                            "looked up among the matrix's measured cells: the best time of the shape over the "
                            "chosen one's, geometric mean and worst (shapes whose choice the matrix did not measure "
                            "are counted apart).")
    score.add_argument("matrix", metavar="MATRIX")
    score.add_argument("--db", help="your database folder (default $AUTOTUNE_DB or ./tuned_db)")
    score.set_defaults(run=run_rule_score)
    adopt = rsub.add_parser("adopt", help="serve cases with the rules of another GPU model of the same compute "
                            "capability and multiprocessor count",
                            description="Copy FROM_FILE's rules for each KEY into INTO_FILE, marked with the model "
                            "they were fitted on (lookups and `autotune rule show` name it). For a model without "
                            "coverage of its own, where a held-out bench showed the sibling's rule wins over the "
                            "nearest entry: `autotune bench --held-out --db FOLDER` with the rules in a folder of "
                            "their own read first. A later `autotune rule fit` of the model's own coverage replaces "
                            "them.")
    adopt.add_argument("source", metavar="FROM_FILE", help="the database file whose rules are taken "
                       "(e.g. tuned_db/nvidia-h200.yaml)")
    adopt.add_argument("into", metavar="INTO_FILE", help="the database file of the model they are to serve "
                       "(e.g. tuned_db/nvidia-h100-80gb-hbm3.yaml); it must exist: its device record is what the "
                       "rules are checked against")
    adopt.add_argument("keys", nargs="+", metavar="KEY", help="the cases, as `autotune rule show` names them "
                       "(matmul/float32/nn)")
    adopt.add_argument("--force", action="store_true", help="replace a rule INTO_FILE fitted on its own coverage")
    adopt.set_defaults(run=run_rule_adopt)


def run_rule_fit(args) -> int:
    from ..core.rule import parse_rule
    from ..runtime.db import db_dir, db_path, write_rules
    from ..tuning.fit import FitSettings, fit_rule
    from ..tuning.matrix import read_matrix

    settings = FitSettings(max_portfolio=args.max_portfolio, threshold=args.threshold, max_depth=args.depth,
                           min_leaf=args.min_leaf, folds=args.folds, seed=args.seed, model=args.model,
                           neighbours=args.neighbours, features=args.features, selection=args.selection,
                           fill_alphas=args.fill_alphas)
    refused = 0
    for name in args.matrix:
        matrix = read_matrix(name)
        result = fit_rule(matrix, settings, data=str(name))
        print(f"{matrix.case} on {matrix.device['name']} ({served_text(matrix)}, "
              f"{len(matrix.candidates)} candidates):\n{result.report()}")
        if args.dry_run:
            continue
        quality = result.held_out.geomean
        if not quality >= args.min_quality:
            print(f"  not written: cross-validated {quality:.3f} of the best time is below --min-quality "
                  f"{args.min_quality} (look at the matrix's failed cells; --min-quality lower writes it anyway)")
            refused += 1
            continue
        path = db_path(db_dir(args.db), matrix.device["name"])
        for line in write_rules(path, matrix.device, [parse_rule(result.record)]):
            print(f"  {line} -> {path}")
    return 1 if refused else 0


def run_rule_show(args) -> int:
    from ..core.rule import tree_lines
    from ..runtime.db import database_folders, load_folder

    printed = 0
    for folder in database_folders(args.db):
        files, problems = load_folder(folder)
        for problem in problems:
            print(f"unreadable: {problem}")
        for f in files:
            for rule in f.rules:
                printed += 1
                print(f"{f.path}: {rule.key} ({f.device.get('name')}): {rule.summary()}")
                for line in tree_lines(rule, family_named(rule.family).dim_names or None):
                    print(f"    {line}")
                for i, params in enumerate(rule.portfolio):
                    print(f"  #{i}: {params}")
    if not printed:
        print("no rules in " + ", ".join(map(str, database_folders(args.db))))
    return 0


def run_rule_score(args) -> int:
    from ..core.device import DeviceInfo
    from ..core.space import config_key, load_space
    from ..runtime.db import database_folders, db_path, load_file
    from ..runtime.rules import ranking, rule_for
    from ..tuning.fit import Quality
    from ..tuning.matrix import read_matrix

    matrix = read_matrix(args.matrix)
    files = [load_file(p) for p in (db_path(f, matrix.device["name"]) for f in database_folders(args.db))
             if p.exists()]
    rows = matrix.ruled_rows()
    if not rows:
        print(f"{args.matrix}: no measured shape that a rule for {matrix.case} serves; nothing to score")
        return 1
    print(f"{matrix.case}: {served_text(matrix)}")
    found = rule_for(matrix.problem(matrix.shapes[rows[0]]), files)
    if found is None:
        print(f"no rule for {matrix.case} on {matrix.device['name']} in the database")
        return 1
    rule, db_file = found
    device, space = DeviceInfo.from_record(db_file.device), load_space(matrix.family)
    efficiencies, unknown = [], []
    for r in rows:
        problem = matrix.problem(matrix.shapes[r])
        chosen = config_key(problem.impl.fit_config(rule.portfolio[ranking(rule, problem, db_file.device)[0]],
                                                    problem, device, space))
        cells = {config_key(problem.impl.fit_config(c, problem, device, space)): i
                 for i, c in enumerate(matrix.candidates)}
        column = cells.get(chosen)
        t = matrix.ms[r][column] if column is not None else None
        if t is None:
            unknown.append("x".join(map(str, problem.shape)))
        else:
            efficiencies.append(matrix.best_ms(r) / t)
    quality = Quality.of(efficiencies)
    print(f"the rule for {rule.key} in {db_file.path} on {args.matrix}: {quality.text()}")
    if unknown:
        print(f"  {len(unknown)} shapes where the matrix did not measure the rule's choice: {', '.join(unknown[:10])}")
    return 0


def run_rule_adopt(args) -> int:
    from ..runtime.db import DatabaseError, load_file
    from ..runtime.rules import adopt_rules

    try:
        source = load_file(Path(args.source), strict=True)
        for line in adopt_rules(source, Path(args.into), args.keys, force=args.force):
            print(f"  {line} -> {args.into}")
    except DatabaseError as exc:
        print(f"autotune rule adopt: {exc}", file=sys.stderr)
        return 1
    return 0


# -- met ------------------------------------------------------------------------------------------------
def _met_parser(sub, common) -> None:
    p = sub.add_parser("met", parents=[common], help="the shapes your programs met without a tuned entry: list, tune, clear",
                       description="Every lookup without an exact database entry records its problem in the cache "
                       "folder (met/<gpu-model>.jsonl; AUTOTUNE_RECORD_MET=0 turns that off). List them, tune "
                       "exactly those (a search per shape, on one or several GPUs), or clear the record.")
    msub = p.add_subparsers(required=True, metavar="ACTION")
    lst = msub.add_parser("list", help="print the recorded problems")
    lst.add_argument("--gpu", help="only GPU models whose name contains this (default: all)")
    lst.set_defaults(run=run_met_list)
    tune = msub.add_parser("tune", help="tune the recorded problems of this GPU model")
    tune.add_argument("--device", default="0", help="GPU indices, e.g. 0,1 (default 0)")
    tune.add_argument("--trials", type=positive_int, default=40, help="variants per shape (default 40)")
    tune.add_argument("--budget-s", type=positive_float, default=60.0, help="seconds per shape (default 60)")
    tune.add_argument("--time-limit", type=non_negative_float, metavar="SECONDS",
                      help="claim no new shape after this many seconds; 0: none")
    tune.add_argument("--db", help="database folder to write (default $AUTOTUNE_DB or ./tuned_db)")
    tune.add_argument("--storage", help="Optuna storage shared by several hosts")
    tune.add_argument("--state-dir", default="autotune-out", help="where the journal lives (default autotune-out/)")
    tune.set_defaults(keeps_studies=True)
    tune.add_argument("--keep", action="store_true", help="keep the record after tuning (default: cleared when "
                                                          "every problem was tuned)")
    tune.add_argument("--simulator", action="store_true", help="dry run in Numba's CUDA simulator (nothing written "
                                                               "to the database unless --write-db)")
    tune.add_argument("--write-db", action="store_true", help="with --simulator: write the database anyway")
    tune.set_defaults(run=run_met_tune)
    clear = msub.add_parser("clear", help="forget the recorded problems")
    clear.add_argument("--gpu", help="only GPU models whose name contains this (default: all)")
    clear.set_defaults(run=run_met_clear)


def _met_files(gpu: str | None) -> list[Path]:
    from ..core.device import device_slug
    from ..runtime.met import met_path

    folder = met_path("x").parent
    wanted = device_slug(gpu) if gpu else ""
    return sorted(p for p in folder.glob("*.jsonl") if wanted in p.stem) if folder.is_dir() else []


def run_met_list(args) -> int:
    from ..runtime.met import read_met

    files = _met_files(args.gpu)
    if not files:
        print("no shapes recorded")
    for path in files:
        met = read_met(path)
        print(f"{path}: {len(met.problems)} problems" + (f" ({met.skipped} lines skipped: damaged or of families "
                                                          f"not registered here)" if met.skipped else ""))
        for problem in met.problems:
            print(f"  {problem.key}")
    return 0


def run_met_clear(args) -> int:
    from ..runtime.met import clear

    files = _met_files(args.gpu)
    for path in files:
        clear(path)
        print(f"cleared {path}")
    if not files:
        print("no shapes recorded")
    return 0


def run_met_tune(args) -> int:
    if not require_gpu(args, "met tune"):
        return EXIT_NO_GPU
    from ..core.device import current_device
    from ..runtime.met import clear, met_path, read_met
    from ..tuning.coverage import CoverageConfig, CoverageRun, default_compile_workers

    devices = gpu_indices(args.device)
    if not args.simulator:
        from numba import cuda

        cuda.select_device(devices[0])
    device = current_device()
    path = met_path(device.name)
    met = read_met(path)
    if not met.problems:
        print(f"no shapes recorded for {device.name} ({path})")
        return 0
    cases: dict[str, list] = {}
    for problem in met.problems:
        cases.setdefault(problem.key.rsplit("/", 1)[0], []).append(problem)
    write = args.write_db or not args.simulator
    config = CoverageConfig(method="tune", shape_set="met", devices=devices, storage=args.storage,
                            state_dir=Path(args.state_dir), trials=args.trials if not args.simulator else 2,
                            budget_s=args.budget_s, time_limit_s=args.time_limit or None, db=args.db,
                            write_db=write,
                            compile_workers=1 if args.simulator else default_compile_workers(len(devices)))
    if not write:
        print("SIMULATOR DRY RUN: nothing is written to the database (--write-db writes anyway), and the record "
              "is kept.", file=sys.stderr)
    done = 0
    for case, problems in cases.items():
        first = problems[0]
        run = CoverageRun(first.family, first.dtype, dict(first.args), [p.shape for p in problems], config, device)
        result = run.run_tune()
        done += result.done
        print(f"{case}: {result.done} of {result.total} shapes tuned ({result.shapes_per_hour:.0f} shapes/h)")
    if done == len(met.problems) and write and not args.keep:
        clear(path)
        print(f"every recorded shape is tuned; cleared {path}")
    return 0 if done == len(met.problems) else 1
