"""Where the warps of a kernel stall, by SASS opcode, from Nsight Compute's source-page CSV
(scripts/device-ncu-source.sh): samples of each stall reason summed over the instructions of each opcode, and
the warp instructions each opcode executed.

    python3 scripts/stall_mix.py ours.csv cublas.csv
"""
import collections
import csv
import re
import sys

REASONS = ("dispatch", "wait", "math", "no_inst", "short_sb", "long_sb", "barrier", "not_selected", "selected")


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def summary(path: str) -> tuple[collections.Counter, dict[str, collections.Counter]]:
    rows = list(csv.reader(open(path)))
    column = {name: i for i, name in enumerate(rows[1])}
    total: collections.Counter = collections.Counter()
    by_opcode: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows[2:]:
        m = re.match(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", row[column["Source"]].strip())
        opcode = m.group(1) if m else "?"
        by_opcode[opcode]["executed"] += number(row[column["Instructions Executed"]])
        total["samples"] += number(row[column["Warp Stall Sampling (All Samples)"]])
        for reason in REASONS:
            samples = number(row[column[f"stall_{reason}"]])
            by_opcode[opcode][reason] += samples
            total[reason] += samples
    return total, by_opcode


def main() -> None:
    for path in sys.argv[1:]:
        total, by_opcode = summary(path)
        print(f"{path}: {int(total['samples'])} samples; " +
              ", ".join(f"{r} {100 * total[r] / total['samples']:.1f}%" for r in REASONS))
        for reason in REASONS[:5]:
            top = sorted(by_opcode.items(), key=lambda kv: -kv[1][reason])[:5]
            print(f"  {reason:9s} " + ", ".join(f"{op} {int(c[reason])} ({c['executed'] / 1e6:.0f} M executed)"
                                                for op, c in top))


if __name__ == "__main__":
    main()
