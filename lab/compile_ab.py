"""Cold compile time and SASS of every committed winner: the current renders against a saved render set.

    python lab/compile_ab.py --before REV [--before-env NAME=VALUE] [--entries matmul/float32] [--changed-only]
                             [--runs 3] [--out FILE.md]

REV is a git revision whose tests/golden/ holds the "before" renders (the golden renders of the committed database
at that revision). For each distinct configuration of the committed database (both GPU files), each side is compiled
in a fresh process, cold, with the real compiler for sm_90 (Numba -> NVVM -> PTX, nvJitLink -> cubin; no GPU
needed), RUNS times; the median wall time of the compile call is reported. The cubin's SASS (nvdisasm, from
`pip install nvidia-cuda-nvdisasm`) gives the hottest loop's instruction counts per trip: FFMA, DMMA, HMMA or HGMMA
(the math), LDS, LDG and all instructions, and ptxas gives registers and spills; "same SASS" compares the whole
SASS of both sides with the kernel's name taken out. ``--changed-only`` skips configurations whose render did not
change. An entry new since REV, or tuned to other parameters, is compiled on the after side only ("-" before).
Prints a Markdown table. ``--before-env`` sets environment variables for the before side only
(``AUTOTUNE_NUMBA_PATCH=0``: numba-cuda's own passes; ``=lowering``: only the linear lowering pass).
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sass_mix import hottest_loop, opcode  # lab/ is the first entry of sys.path when run as a script
from tables import emit

ROOT = Path(__file__).resolve().parent.parent
CHILD = r'''
import json, sys, time
from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import DEFAULT_CC, arch, load_source, ptx_of, resource_report
from autotune.core.problem import Problem
job = json.loads(sys.argv[1])
problem = Problem(job["kind"], tuple(job["shape"]), job["dtype"], job["args"])
kernel = build_kernel(job["kind"], job["params"], job["dtype"], **problem.args)
if job["source"] is not None:
    kernel = problem.impl.make_kernel(load_source(job["source"]), kernel.params, kernel.dtype, kernel.args,
                                      job["source"], False)
t = time.perf_counter()
report = resource_report(kernel.entry, kernel.signature)
seconds = time.perf_counter() - t
from cuda.core import Linker, LinkerOptions, ObjectCode
ptx = ptx_of(kernel.entry, kernel.signature)
cubin = Linker(ObjectCode.from_ptx(ptx.encode()), options=LinkerOptions(arch=arch(DEFAULT_CC))).link("cubin").code
open(job["cubin"], "wb").write(cubin)
print(json.dumps({"seconds": seconds, "registers": report.registers,
                  "spill": report.spill_stores + report.spill_loads, "lines": kernel.source.count("\n")}))
'''


def nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    import nvidia

    for base in nvidia.__path__:
        for candidate in Path(base).glob("cu*/bin/nvdisasm"):
            return str(candidate)
    raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm")


def loop_counts(cubin: Path) -> dict[str, int | str]:
    """The hottest loop's instruction counts, and a digest of the whole SASS with the kernel's name taken out
    (mangled names hold a hash of the source, so equal digests mean the GPU runs the same instructions)."""
    sass = subprocess.run([nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    mix = collections.Counter(op.split(".")[0] for line in hottest_loop(sass) if (op := opcode(line)))
    unnamed = re.sub(r"_ZN\w+", "NAME", sass)
    return {"math": mix["FFMA"] + mix["DMMA"] + mix["HMMA"] + mix["HGMMA"], "LDS": mix["LDS"], "LDG": mix["LDG"],
            "all": sum(mix.values()), "sass": hashlib.sha256(unnamed.encode()).hexdigest()[:12]}


def measure(job: dict, source: str | None, runs: int, extra_env: dict[str, str] | None = None) -> dict:
    times, result = [], {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            cubin = Path(cache) / "k.cubin"
            env = {**{k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"},
                   "AUTOTUNE_CACHE_DIR": cache, "PYTHONPATH": str(ROOT), **(extra_env or {})}
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps({**job, "source": source,
                                                                            "cubin": str(cubin)})],
                                 capture_output=True, text=True, env=env)
            if out.returncode:
                raise SystemExit(f"compile failed for {job['key']}:\n{out.stderr[-2000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            times.append(result["seconds"])
            result["loop"] = loop_counts(cubin)
    return {**result, "seconds": statistics.median(times)}


def golden_at(rev: str) -> dict[str, str]:
    import yaml

    show = lambda path: subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,  # noqa: E731
                                       capture_output=True, text=True).stdout
    index = yaml.safe_load(show("tests/golden/index.yaml"))
    return {name: show(f"tests/golden/renders/{sha}.py") for name, sha in index.items() if name.endswith(" gpu")}


def golden_now() -> dict[str, str]:
    """The current renders, named as in tests/golden/index.yaml."""
    sys.path.insert(0, str(ROOT / "tests"))
    from golden import current_renders

    return current_renders()


def params_at(rev: str) -> dict[str, dict]:
    """The parameters of each entry of the database files at ``rev``, named as in tests/golden/index.yaml."""
    sys.path.insert(0, str(ROOT))
    from autotune.runtime.db import load_file

    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "tuned_db/"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in (n for n in names if n.endswith(".yaml")):
            path = Path(folder) / Path(name).name
            path.write_text(subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, check=True,
                                           capture_output=True, text=True).stdout)
            for e in load_file(path, strict=True).entries:
                found[f"{path.name}: {e.problem.key} gpu"] = e.params
    return found


def jobs(prefix: str) -> list[tuple[dict, str]]:
    """One job per distinct configuration of the committed database, with the golden index name of one entry."""
    sys.path.insert(0, str(ROOT))
    from autotune.runtime.db import load_file

    seen, found = set(), []
    for path in sorted((ROOT / "tuned_db").glob("*.yaml")):
        for e in load_file(path, strict=True).entries:
            if not e.problem.key.startswith(prefix):
                continue
            config = (e.problem.family, e.problem.dtype, json.dumps(e.problem.args, sort_keys=True),
                      json.dumps(e.params, sort_keys=True))
            if config in seen:
                continue
            seen.add(config)
            job = {"key": e.problem.key, "kind": e.problem.family, "shape": list(e.problem.shape),
                   "dtype": e.problem.dtype, "args": e.problem.args, "params": e.params}
            found.append((job, f"{path.name}: {e.problem.key} gpu"))
    return found


def table_row(job: dict, old: dict | None, new: dict) -> str:
    """One entry's row; an entry new since the before revision, or tuned to other parameters, has "-" on its
    before side."""
    def pair(field) -> str:
        return f"{'-' if old is None else field(old)} / {field(new)}"

    def seconds(m: dict) -> str:
        return f"{m['seconds']:.1f}"

    loop = new["loop"]
    same = old is None or all(old["loop"][k] == loop[k] for k in ("math", "LDS", "LDG"))
    same_sass = "-" if old is None else "yes" if old["loop"]["sass"] == loop["sass"] else "no"
    cells = [job["key"], pair(lambda m: m["lines"]), pair(seconds), pair(lambda m: m["registers"]),
             pair(lambda m: m["spill"])]
    cells += [pair(lambda m, k=k: m["loop"][k]) for k in ("math", "LDS", "LDG")]
    cells += [pair(lambda m: m["loop"]["all"]) + ("" if same else " (DIFFERENT)"), same_sass]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="git revision whose tests/golden/ holds the before renders")
    ap.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the before side only (repeatable)")
    ap.add_argument("--entries", default="", help="only keys starting with this (e.g. matmul/float32)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--changed-only", action="store_true", help="skip configurations whose render is unchanged")
    ap.add_argument("--out", help="also write the table to this file")
    a = ap.parse_args()
    before = golden_at(a.before)
    before_env = dict(item.split("=", 1) for item in a.before_env)
    rows = ["| entry | lines before / after | compile s before / after | registers before / after | spill B | "
            "math per trip | LDS | LDG | all instructions per trip before / after | same SASS |", "|" + "---|" * 10]
    current = golden_now() if a.changed_only else {}
    before_params = params_at(a.before)
    for job, golden_name in jobs(a.entries):
        # None: an entry the database did not have at REV, or with other parameters (another kernel)
        source = before.get(golden_name) if before_params.get(golden_name) == job["params"] else None
        if a.changed_only and source is not None and current[golden_name] == source:
            continue
        old = measure(job, source, a.runs, before_env) if source is not None else None
        rows.append(table_row(job, old, measure(job, None, a.runs)))
        print(rows[-1], flush=True)
    emit(rows, a.out)


if __name__ == "__main__":
    main()
