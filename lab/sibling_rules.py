"""A database folder whose file for one GPU model holds another model's fitted rules (and no entries), to time on
the first model what those rules choose for shapes it has no entry for.

    python lab/sibling_rules.py FROM_FILE MODEL_FILE OUT_FOLDER

FROM_FILE: the file whose rules are taken (tuned_db/nvidia-h200.yaml); MODEL_FILE: the file of the model they are
to serve (tuned_db/nvidia-h100-80gb-hbm3.yaml), whose device record (name, compute capability, multiprocessor
count: what a rule's choice is fitted with) heads the new file OUT_FOLDER/<its name>. Then
`autotune bench --family matmul --held-out --db OUT_FOLDER --out DIR` on that model: the exact entries of the
shipped file still come first, then these rules, where without --db the nearest entry is used. Refused where the
two models differ in compute capability or multiprocessor count (a rule's splits are fitted to the count).
"""
from __future__ import annotations

import sys
from pathlib import Path

from autotune.runtime.db import load_file, write_rules


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, model, out = load_file(Path(argv[0]), strict=True), load_file(Path(argv[1]), strict=True), Path(argv[2])
    for key in ("cc", "sm_count"):
        if str(source.device.get(key)) != str(model.device.get(key)):
            print(f"{argv[0]} and {argv[1]} differ in {key}: {source.device.get(key)} and {model.device.get(key)}",
                  file=sys.stderr)
            return 1
    out.mkdir(parents=True, exist_ok=True)
    target = out / Path(argv[1]).name
    for note in write_rules(target, model.device, list(source.rules)):
        print(note)
    print(f"wrote {len(source.rules)} rules of {source.device.get('name')} into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
