"""On the CPU: how long a fresh process takes to read a large database file, with and without the parse cache.

    python lab/db_load.py [--entries 10000] [--runs 5]          (prints a Markdown table)

Writes a database file of ``--entries`` entries for one GPU model (the committed H100 entries, each shape scaled
by a random factor of 0.5-2 per dimension, so every problem is distinct and every entry valid), then times, each
in a new Python process with autotune imported beforehand (as a program that calls ``autotune.matmul`` has):

- ``cold``: ``db.load_file`` with an empty cache folder (parse with libyaml, validate every entry, store the
  cache), then the entries of one kind (``DbFile.like``);
- ``cached``: the same in a later process (the file read and hashed, the cache read and checked, one kind
  unpickled);
- ``lookup``: ``lookup.choose`` of a 4096^3 float32 matmul against the file's folder, cached (what
  ``get_best_kernel`` spends in the database).

Times are wall and CPU seconds, the median over ``--runs`` processes (CPU time is steadier on a shared machine).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEVICE = "NVIDIA H100 80GB HBM3"

TIMED = r"""
import json, sys, time
from pathlib import Path
import autotune.families.matmul.family, autotune.families.reduce.family  # imported by any call
from autotune.core.problem import Problem
from autotune.runtime import db, lookup
path, what = Path(sys.argv[1]), sys.argv[2]
problem = Problem("matmul", (4096, 4096, 4096), "float32", {})
t, c = time.perf_counter(), time.process_time()
if what == "lookup":
    lookup.choose(problem, [path.parent], device=sys.argv[3])
else:
    db.load_file(path).like(problem)
print(json.dumps([time.perf_counter() - t, time.process_time() - c]))
"""


def write_database(path: Path, count: int, seed: int = 0) -> int:
    """A file of ``count`` distinct valid entries made from the committed H100 file's; its size in bytes."""
    from autotune.runtime import db

    source = db.load_file(ROOT / "tuned_db" / "nvidia-h100-80gb-hbm3.yaml", strict=True)
    rng, seen, records = random.Random(seed), set(), []
    while len(records) < count:
        entry = rng.choice(source.entries)
        shape = [max(1, int(d * rng.uniform(0.5, 2))) for d in entry.problem.shape]
        key = (entry.problem.key.rsplit("/", 1)[0], tuple(shape))
        if key not in seen and _valid_shape(entry.problem, shape):
            seen.add(key)
            records.append({**entry.record, "shape": shape})
    doc = {"schema": db.SCHEMA, "device": source.device, "entries": records}
    text = yaml.dump(doc, Dumper=_PlainCDumper, sort_keys=False, default_flow_style=None, width=120)
    path.write_text(db.file_text({}).splitlines()[0] + "\n" + text)  # the writer's format, written faster
    return path.stat().st_size


class _PlainCDumper(yaml.CSafeDumper):
    """libyaml's dumper writing shared values out in full, as the database writer does (no anchors)."""

    def ignore_aliases(self, data) -> bool:
        return True


def _valid_shape(problem, shape) -> bool:
    from autotune.core.problem import Problem

    try:
        Problem(problem.family, tuple(shape), problem.dtype, problem.args)
    except ValueError:
        return False
    return True


def timed(path: Path, what: str, cache: str) -> tuple[float, float]:
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", TIMED, str(path), what, DEVICE], env=env, capture_output=True,
                         text=True, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db" / "nvidia-h100-80gb-hbm3.yaml"
        path.parent.mkdir()
        size = write_database(path, a.entries)
        samples: dict[str, list[tuple[float, float]]] = {"cold": [], "cached": [], "lookup": []}
        for run in range(a.runs):
            cache = os.path.join(tmp, f"cache{run}")
            samples["cold"].append(timed(path, "load", cache))
            samples["cached"].append(timed(path, "load", cache))
            samples["lookup"].append(timed(path, "lookup", cache))
    print(f"{a.entries} entries, {size / 1e6:.1f} MB; median of {a.runs} processes\n")
    print("| read | wall s | CPU s |")
    print("| --- | --- | --- |")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):.3f} | "
              f"{statistics.median(v[1] for v in values):.3f} |")


if __name__ == "__main__":
    main()
