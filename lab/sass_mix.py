"""Instruction mix of one generated kernel's SASS for sm_90, compiled on the CPU (no GPU needed).

    python lab/sass_mix.py matmul '{"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}' [--dtype float32] [--dump FILE]

Needs `nvdisasm` on PATH (pip download nvidia-cuda-nvdisasm; the binary is in nvidia/cu13/bin). Prints the
ptxas report and counts of the opcodes inside the longest loop body (the hot loop of a tiled matmul), or inside
the innermost loop that multiplies on the tensor cores where there is one (a wgmma kernel's K step).
"""
import argparse
import collections
import json
import re
import subprocess
import tempfile

from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import link, ptx_of, resource_report


def cubin_of(kernel, cc=(9, 0)) -> bytes:
    return link(ptx_of(kernel.kernel, kernel.signature, cc), cc)[0]


def hottest_loop(sass: str) -> list[str]:
    """Instructions between a label and the backward branch to it that spans the most instructions; where loops
    hold tensor-core instructions (HMMA, HGMMA, DMMA), the innermost of those (a wgmma kernel's main loop: its
    epilogue's loops are longer, and a loop over tiles holds the main loop)."""
    lines = [l for l in sass.splitlines() if l.strip()]
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"\s*\.?(L_x_\d+):", l))}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+`?\(?\.?(L_x_\d+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append(lines[labels[m.group(1)]:i + 1])
    multiplying = [loop for loop in loops if any(re.search(r"\b[HD]G?MMA\b", l) for l in loop)]
    return min(multiplying, key=len) if multiplying else max(loops, key=len, default=[])


def opcode(line: str) -> str | None:
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
    return m.group(1) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("params")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--family", default="{}")
    ap.add_argument("--dump")
    a = ap.parse_args()
    kernel = build_kernel(a.kind, json.loads(a.params), a.dtype, **json.loads(a.family))
    print(resource_report(kernel.kernel, kernel.signature).as_dict())
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin_of(kernel))
        f.flush()
        sass = subprocess.run(["nvdisasm", "-c", f.name], check=True, capture_output=True, text=True).stdout
    if a.dump:
        open(a.dump, "w").write(sass)
    loop = hottest_loop(sass)
    mix = collections.Counter(op.split(".")[0] for l in loop if (op := opcode(l)))
    print(f"hot loop: {sum(mix.values())} instructions")
    for op, n in mix.most_common():
        print(f"  {op:10s} {n}")


if __name__ == "__main__":
    main()
