"""Digests of the LLVM IR (as Numba lowers it, before NVVM) and the PTX (sm_90) of autotune's sample kernels and of
the reproducer's kernels, as JSON: run once with numba-cuda as it is and once with the patches of
docs/upstream/patches/ applied (``verify.sh`` does both, with ``AUTOTUNE_NUMBA_PATCH=0`` so that autotune's own
replacements stay out) and compare. The lowered IR names every variable, so the same IR means the same SSA names,
phi placement and singly-assigned choices, not only the same machine code.

    python docs/upstream/ir_digests.py OUT.json
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent / "tests")]

from numba import cuda, float32  # noqa: E402
from numba.cuda.compiler import compile_cuda  # noqa: E402
from numba.cuda.core import sigutils  # noqa: E402

import compile_passes  # noqa: E402
from replacements_sample import VARIANTS  # noqa: E402

from autotune.runtime.build import build_kernel  # noqa: E402

REPRODUCER = ((8, 8, "none"), (4, 8, "step"), (4, 8, "each"))
# names Numba numbers per process: the unique part of mangled function names, shared arrays
PER_PROCESS = (r"B\d+v\d+B", r"_cudapy_smem_\d+")


def digest(text: str) -> str:
    """SHA-256 (16 hex digits) of ``text`` with per-process numbering renumbered in order of appearance."""
    for pattern in PER_PROCESS:
        names: dict[str, str] = {}
        text = re.sub(pattern, lambda m, names=names: names.setdefault(m.group(0), f"<{len(names)}>"), text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compiled(py_func, signature: str, launch_bounds=None) -> dict:
    """Digests of the function's lowered LLVM IR and of its PTX."""
    args, _ = sigutils.normalize_signature(signature)
    llvm = compile_cuda(py_func, None, args, cc=(9, 0)).library.get_llvm_str()
    ptx, _ = cuda.compile_ptx(py_func, signature, cc=(9, 0), launch_bounds=launch_bounds)
    return {"llvm": digest(llvm), "llvm_lines": llvm.count("\n"), "ptx": digest(ptx)}


def main() -> None:
    out = {}
    for name, (family, dtype, args, params) in VARIANTS.items():
        kernel = build_kernel(family, params, dtype, **args)
        bounds = getattr(kernel.entry, "targetoptions", {}).get("launch_bounds")
        out[name] = compiled(kernel.entry.py_func, kernel.signature, bounds)
        print(name, out[name], flush=True)
    for tile, steps, guard in REPRODUCER:
        namespace = {"cuda": cuda, "float32": float32}
        exec(compile(compile_passes.kernel_source(tile, steps, guard), "<tile_kernel>", "exec"), namespace)
        name = f"reproducer {tile}x{tile}, {steps} steps, guard {guard}"
        out[name] = compiled(namespace["tile_kernel"], "void(float32[:, :], float32[:, :], float32[:, :], int64)")
        print(name, out[name], flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
