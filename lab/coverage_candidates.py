"""What `autotune coverage` would time on a GPU model, per matmul case, without and with the rule portfolios of other
models of the same compute capability: the candidate count and how many portfolio members are among the candidates
by their fitted forms (two configurations that fit the first 40 coverage shapes to the same forms are one).

    python3 lab/coverage_candidates.py tuned_db/nvidia-h100-80gb-hbm3.yaml tuned_db/nvidia-h200.yaml
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.core.device import DeviceInfo  # noqa: E402
from autotune.core.problem import Problem  # noqa: E402
from autotune.core.registry import family  # noqa: E402
from autotune.core.space import config_key, load_space  # noqa: E402
from autotune.runtime.db import load_file  # noqa: E402
from autotune.tuning.coverage import MIN_CANDIDATES, gather_candidates  # noqa: E402

CASES = [("float16", {}), ("bfloat16", {}), ("float32", {}), ("float64", {}), ("float32", {"precision": "3xtf32"}),
         ("float32", {"precision": "tf32"})]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    mine, other = load_file(Path(argv[0])), load_file(Path(argv[1]))
    device, impl, space = DeviceInfo.from_record(mine.device), family("matmul"), load_space("matmul")
    for dtype, extra in CASES:
        problems = [Problem("matmul", s, dtype, extra)
                    for s in impl.shape_set("coverage", dtype, Problem("matmul", (64, 64, 64), dtype, extra).args)]
        first = problems[0]
        portfolio = [p for r in other.rules if r.serves("matmul", dtype, first.args, first.shape) for p in r.portfolio]

        def forms(config):
            return tuple(config_key(impl.fit_config(config, p, device, space)) for p in problems[:40])

        line = [f"{dtype} {extra or ''}".strip()]
        for name, same_cc in (("own files", []), ("with same-cc portfolios", [other])):
            found = gather_candidates(problems, device, [mine], 64, MIN_CANDIDATES, same_cc)
            have = {forms(c) for c in found}
            line.append(f"{name}: {len(found)} candidates, {sum(forms(p) in have for p in portfolio)} of "
                        f"{len(portfolio)} portfolio members")
        print(" | ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
