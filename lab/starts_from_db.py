"""The committed winners of a family as a start list: one line per distinct configuration, most wins first.

    python lab/starts_from_db.py [--kernel matmul] [DB.yaml ...]      # default: every file in tuned_db/

A search space's `starts` are measured first by the tuner. Chosen from data, they are the configurations that
won the committed entries, with the parameters the tuner fits to each problem left out (for matmul: SPLIT_K,
SPLIT_ADD and EDGE, which ``problem_starts`` tries in the forms that fill the GPU) and so are parameters at the
space's default (tile sizes are always given). Printed as the YAML flow mappings the space file takes, each
followed by the entries it won (comments), ordered by how many entries it won (ties: first seen).
Configurations that win nothing are not proposed: a start that never wins costs a measurement in every run from
an empty database.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FITTED = {"matmul": ("SPLIT_K", "SPLIT_ADD", "EDGE")}


def start_of(space, entry, fitted: tuple[str, ...]) -> dict:
    """The entry's configuration without the fitted parameters and those at the space's default."""
    problem = entry.problem
    config = space.validate({k: v for k, v in entry.params.items() if k not in fitted},
                            dtype=problem.dtype, args=problem.args)
    tiles = {k: config[k] for k in ("BM", "BN", "BK") if k in config}
    return {**tiles, **{k: v for k, v in config.items() if k not in fitted and k not in tiles
                        and v != space.params[k].default}}


def flow(config: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in config.items()) + "}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--kernel", default="matmul")
    a = ap.parse_args()
    from autotune.core.space import load_space
    from autotune.runtime.db import load_file

    space = load_space(a.kernel)
    won: dict[str, list[str]] = {}
    for path in a.files or sorted((ROOT / "tuned_db").glob("*.yaml")):
        for entry in load_file(path, strict=True).entries:
            if entry.problem.family != a.kernel or entry.params.get("strategy", "tiled") != "tiled":
                continue
            start = start_of(space, entry, FITTED.get(a.kernel, ()))
            won.setdefault(flow(start), []).append(f"{path.stem}:{entry.problem.key}")
    for text, entries in sorted(won.items(), key=lambda item: -len(item[1])):
        print(f"  - {text}")
        for entry in entries:
            print(f"      # won {entry}")


if __name__ == "__main__":
    main()
