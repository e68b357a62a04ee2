"""The ``autotune`` command line.

    autotune matmul --device 0 [--shape 4096x4096x4096 ...]    tune, write tuned_db/<gpu-model>.yaml
    autotune reduce --device 0 --op sum --shape 268435456      tune reductions
    autotune bench matmul|reduce --device 0                    tuned vs cuBLAS/CuPy/torch and the seed kernels
    autotune selftest --device 0                               correctness of every parameter value on the GPU
    autotune render KIND --param NAME=VALUE ...                print a variant's generated source
    autotune show / db check / db merge OTHER.yaml             the tuned database

Heavy imports happen after the arguments are read: ``--simulator`` must switch Numba to its CUDA simulator
before Numba is first imported.
"""
from __future__ import annotations

import argparse
import os
import sys

MATMUL_SUITE = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192",
                "4096x4096x256", "8192x128x8192", "1000x1000x1000", "127x3000x511"]
REDUCE_SUITE = ["1024", "65536", "1048576", "16777216", "268435456"]
SIMULATOR_SHAPES = {"matmul": ["37x29x11"], "reduce": ["4099"]}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "simulator", False):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # small grids are deliberate here
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted; everything measured so far is in the study and is used when you run again",
              file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError) as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune", description="Generate, tune and look up Numba CUDA kernels "
                                "for matmul and reductions.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    for kind, help_text in (("matmul", "tune C = A @ B"), ("reduce", "tune sum/max/min/dot reductions")):
        t = sub.add_parser(kind, help=help_text, description=f"{help_text} on the attached GPU; the winners go to "
                           "the tuned database.")
        _tune_args(t, kind)
        t.set_defaults(run=run_tune, kind=kind)
    b = sub.add_parser("bench", help="time tuned kernels against vendor libraries and the seed kernels")
    b.add_argument("kind", choices=["matmul", "reduce"])
    _problem_args(b)
    b.add_argument("--device", default="0", help="GPU index (default 0)")
    b.add_argument("--db", help="database folder (default $AUTOTUNE_DB or ./tuned_db)")
    b.add_argument("--out", default="bench", help="folder for the Markdown table and plot (default bench/)")
    b.set_defaults(run=run_bench)
    s = sub.add_parser("selftest", help="check every parameter value's variants against NumPy on the GPU")
    s.add_argument("--device", default="0")
    s.add_argument("--simulator", action="store_true", help="run in the CUDA simulator (small sample)")
    s.add_argument("--kind", action="append", choices=["matmul", "reduce"], help="only this family (repeatable)")
    s.add_argument("--dtype", action="append", choices=["float32", "float64"], help="only this dtype (repeatable)")
    s.set_defaults(run=run_selftest)
    r = sub.add_parser("render", help="print the generated source of one variant")
    r.add_argument("kind", choices=["matmul", "reduce"])
    r.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    r.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    r.add_argument("--layout", default="nn")
    r.add_argument("--op", default="sum")
    r.add_argument("--axis", default="all", choices=["all", "0", "1"])
    r.add_argument("--simulator", action="store_true", help="the rendering for the CUDA simulator")
    r.set_defaults(run=run_render)
    show = sub.add_parser("show", help="print the tuned database as a table")
    show.add_argument("--db")
    show.add_argument("--device", help="GPU model (name or file slug); default all")
    show.add_argument("--kernel", choices=["matmul", "reduce"])
    show.set_defaults(run=run_show)
    db = sub.add_parser("db", help="check or merge database files")
    dbsub = db.add_subparsers(required=True, metavar="ACTION")
    check = dbsub.add_parser("check", help="validate every file of the database (exit 1 on any problem)")
    check.add_argument("--db")
    check.set_defaults(run=run_db_check)
    merge = dbsub.add_parser("merge", help="merge another machine's file into the database")
    merge.add_argument("other")
    merge.add_argument("--db")
    merge.add_argument("--force", action="store_true", help="replace entries even when the new one is slower")
    merge.set_defaults(run=run_db_merge)
    return p


def _problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", metavar="SHAPE",
                   help="MxNxK for matmul, N or MxN for reduce (repeatable; default: the standard suite)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--layout", default="nn", choices=["nn", "nt", "tn", "tt"],
                   help="matmul: which of A, B are given transposed (default nn)")
    p.add_argument("--op", default="sum", choices=["sum", "max", "min", "dot"], help="reduce: the operation")
    p.add_argument("--axis", default="all", choices=["all", "0", "1"], help="reduce: all, or the axis of a 2-D array")


def _tune_args(p: argparse.ArgumentParser, kind: str) -> None:
    _problem_args(p)
    p.add_argument("--device", default="0", help="GPU index, or several: 0,1 (one worker per GPU, one study)")
    p.add_argument("--trials", type=int, help="measured variants per shape (default 60; 6 in the simulator)")
    p.add_argument("--timeout", type=float, help="stop sampling after this many seconds per shape")
    p.add_argument("--sampler", default="tpe", choices=["tpe", "random", "grid", "cmaes"])
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db (default: a journal "
                   "file per GPU model under --state-dir)")
    p.add_argument("--state-dir", default="autotune-out", help="where studies live (default autotune-out/)")
    p.add_argument("--space", help="your own search-space YAML (narrows the built-in one)")
    p.add_argument("--db", help="database folder (default $AUTOTUNE_DB or ./tuned_db)")
    p.add_argument("--force", action="store_true", help="replace database entries even when slower")
    p.add_argument("--no-db", action="store_true", help="do not write the database")
    p.add_argument("--compile-workers", type=int, help="CPU processes compiling ahead of the GPU")
    p.add_argument("--job-timeout", type=float, default=90.0,
                   help="seconds a variant may take to check and time before its worker is restarted (default 90)")
    p.add_argument("--compile-timeout", type=float, default=300.0,
                   help="seconds a variant may take to compile before it counts as failed (default 300; "
                        "16x8-per-thread matmul tiles take 1-2 min in Numba's front end)")
    p.add_argument("--simulator", action="store_true",
                   help="dry run in Numba's CUDA simulator: tiny shape, meaningless timings, no database write "
                        "unless --write-db")
    p.add_argument("--write-db", action="store_true", help="with --simulator: write the database anyway")


def family_of(args, kind: str) -> dict:
    if kind == "matmul":
        return {"layout": args.layout}
    return {"op": args.op, "axis": None if args.axis == "all" else int(args.axis)}


def problems_of(args, kind: str, default_suite: list[str]):
    from .problem import Problem, parse_shape

    shapes = args.shape or default_suite
    return [Problem(kind, parse_shape(s), args.dtype, family_of(args, kind)) for s in shapes]


def _devices(text: str) -> tuple[int, ...]:
    try:
        devices = tuple(int(d) for d in str(text).split(","))
    except ValueError:
        raise ValueError(f"--device takes GPU indices such as 0 or 0,1; got {text!r}") from None
    return devices


def require_gpu(args, command: str) -> bool:
    from .device import gpu_available

    if getattr(args, "simulator", False) or gpu_available():
        return True
    print(f"autotune: no CUDA GPU is visible on this machine, so `autotune {command}` cannot measure anything.\n"
          f"  For a dry run of the whole pipeline in Numba's CUDA simulator (tiny shape, meaningless timings):\n"
          f"      autotune {command} --simulator", file=sys.stderr)
    return False


# -- tune ---------------------------------------------------------------------------------------------
def run_tune(args) -> int:
    kind = args.kind
    if not require_gpu(args, kind):
        return 3
    from . import report
    from .db import db_dir, db_path
    from .device import current_device
    from .lookup import tuning_starts
    from .tuner import TuneConfig, Tuner

    sim = args.simulator
    devices = _devices(args.device)
    if not sim:
        from numba import cuda

        cuda.select_device(devices[0])
    device = current_device()
    suite = SIMULATOR_SHAPES[kind] if sim and not args.shape else (MATMUL_SUITE if kind == "matmul" else REDUCE_SUITE)
    problems = problems_of(args, kind, suite)
    config = TuneConfig(trials=args.trials or (6 if sim else 60), timeout_s=args.timeout, sampler=args.sampler,
                        seed=args.seed, storage=args.storage, state_dir=args.state_dir, devices=devices,
                        space_path=args.space, job_timeout_s=args.job_timeout,
                        compile_timeout_s=args.compile_timeout)
    if args.compile_workers:
        config.compile_workers = args.compile_workers
    elif sim:
        config.compile_workers = 1
    if sim:
        print("SIMULATOR DRY RUN: kernels run in Numba's CUDA simulator on the CPU; timings are meaningless.",
              file=sys.stderr)
    results = []
    db_file = db_path(db_dir(args.db), device.name)
    for problem in problems:
        print(f"tuning {problem.key} on {device.name} ({config.trials} variants, sampler {config.sampler})",
              file=sys.stderr)
        incumbent, neighbours = tuning_starts(db_file, problem)
        results.append(Tuner(problem, config, device, incumbent=incumbent, neighbours=neighbours).run())
    print(report.tune_table(results, device))
    write = (args.write_db or not sim) and not args.no_db
    if write:
        for line in report.write_results(results, device, args.db, config, force=args.force):
            print(line)
    elif sim:
        print("(simulator: nothing written to the database; --write-db to write anyway)")
    return 0 if all(r.best for r in results) else 1


# -- bench, selftest ---------------------------------------------------------------------------------
def run_bench(args) -> int:
    if not require_gpu(args, f"bench {args.kind}"):
        return 3
    from numba import cuda

    from .bench import run_suite

    cuda.select_device(_devices(args.device)[0])
    suite = MATMUL_SUITE if args.kind == "matmul" else REDUCE_SUITE
    run_suite(problems_of(args, args.kind, suite), db=args.db, out_dir=args.out)
    return 0


def run_selftest(args) -> int:
    if not require_gpu(args, "selftest"):
        return 3
    from .selftest import selftest

    if not args.simulator:
        from numba import cuda

        cuda.select_device(_devices(args.device)[0])
    return 0 if selftest(small=args.simulator, kinds=tuple(args.kind or ("matmul", "reduce")),
                         dtypes=tuple(args.dtype or ("float32", "float64"))) else 1


# -- render -----------------------------------------------------------------------------------------
def parse_param(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--param takes NAME=VALUE, got {text!r}")
    return name.strip(), int(value) if value.strip().lstrip("-").isdigit() else value.strip()


def run_render(args) -> int:
    from .build import render_source

    params = dict(parse_param(p) for p in args.param)
    family = family_of(args, args.kind)
    _, _, source = render_source(args.kind, params, args.dtype, simulator=args.simulator, **family)
    print(source, end="")
    return 0


# -- database ---------------------------------------------------------------------------------------
def run_show(args) -> int:
    from . import report
    from .db import db_dir, load_folder
    from .device import device_slug

    files = load_folder(db_dir(args.db))
    if args.device:
        files = [f for f in files if device_slug(args.device) in (f.path.stem, device_slug(f.device["name"]))]
    print(report.db_table(files, args.kernel))
    return 0


def run_db_check(args) -> int:
    from .db import DatabaseError, db_dir, load_file

    folder = db_dir(args.db)
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        print(f"{folder}: no database files")
        return 0
    bad = 0
    for path in paths:
        try:
            f = load_file(path)
        except DatabaseError as exc:
            print(f"FAIL {exc}")
            bad += 1
            continue
        for problem in f.problems:
            print(f"FAIL {problem}")
        bad += len(f.problems)
        print(f"{'ok  ' if not f.problems else 'FAIL'} {path}: {len(f.entries)} valid entries ({f.device['name']})")
    return 1 if bad else 0


def run_db_merge(args) -> int:
    from pathlib import Path

    from .db import db_dir, load_file, write_entries

    other = load_file(Path(args.other), strict=True)
    target = db_dir(args.db) / Path(args.other).name
    for line in write_entries(target, other.device, other.entries, force=args.force):
        print(line)
    print(f"merged into {target}")
    return 0
