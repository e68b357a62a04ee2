"""A database folder whose file for one GPU model holds fitted rules borrowed from another model, or from another
layout of the same model, to time on a GPU what those rules choose for shapes that have no entry.

    python lab/borrowed_rules.py FROM_FILE MODEL_FILE OUT_FOLDER [--as-layout nt]

FROM_FILE: the file whose rules are taken (tuned_db/nvidia-h200.yaml); MODEL_FILE: the file of the model they are
to serve (tuned_db/nvidia-h100-80gb-hbm3.yaml, or FROM_FILE itself with --as-layout), whose device record (name,
compute capability, multiprocessor count: what a rule's choice is fitted with) heads the new file
OUT_FOLDER/<its name>. --as-layout L: only matmul's layout-nn rules (every precision), each relabelled to serve layout L (its
portfolio and its model of the shapes unchanged: the nn shapes' measurements stand for L's). Then
`autotune bench --family matmul [--layout L] --held-out --db OUT_FOLDER --out DIR` on that model: exact entries
still come first, then these rules, where without --db the nearest entry is used. Refused where the two models
differ in compute capability or multiprocessor count (a rule's splits are fitted to the count). Where such a bench
shows a rule wins, `autotune rule adopt FROM_FILE MODEL_FILE KEY` puts it in the model's own file.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

from autotune.core.rule import parse_rule
from autotune.runtime.db import load_file, write_rules
from autotune.core.device import sibling_differences
from autotune.runtime.rules import adopted


def borrowed(source, layout: str | None) -> list:
    """The source file's rules, marked with its model as `autotune rule adopt` marks them, or with ``layout`` its
    matmul nn rules relabelled to serve that layout."""
    if layout is None:
        return [adopted(rule, source) for rule in source.rules]
    found = []
    for rule in source.rules:
        if rule.family == "matmul" and rule.record.get("layout") == "nn":
            record = copy.deepcopy(rule.record)
            record["layout"] = layout
            found.append(parse_rule(record))
    return found


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--as-layout", choices=("tn", "nt", "tt"))
    args = ap.parse_args(argv)
    source, model, out = load_file(Path(args.source), strict=True), load_file(Path(args.model), strict=True), \
        Path(args.out)
    differences = sibling_differences(source.device, model.device)
    if differences:
        print(f"{args.source} and {args.model} differ in {'; '.join(differences)}", file=sys.stderr)
        return 1
    rules = borrowed(source, args.as_layout)
    out.mkdir(parents=True, exist_ok=True)
    target = out / Path(args.model).name
    for note in write_rules(target, model.device, rules):
        print(note)
    print(f"wrote {len(rules)} rules of {source.device.get('name')} into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
