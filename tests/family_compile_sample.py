"""Compile configurations of a family loaded from a path for sm_90 with the real compiler (no GPU needed).

    python tests/family_compile_sample.py FAMILY_PATH '[["float32", {...params...}], ...]'

Run by tests/test_compile.py in its own process (the simulator and the real compiler cannot share one). Prints
one JSON line per configuration: dtype, parameters and the ptxas report, or the error.
"""
import json
import sys

import autotune
from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import resource_report

family = autotune.register_family(sys.argv[1])
for dtype, params in json.loads(sys.argv[2]):
    try:
        kernel = build_kernel(family.name, params, dtype)
        report = resource_report(kernel.entry, kernel.signature, cc=(9, 0)).as_dict()
        print(json.dumps({"dtype": dtype, "params": params, "report": report}), flush=True)
    except Exception as exc:  # reported, and the others still compiled
        print(json.dumps({"dtype": dtype, "params": params, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
