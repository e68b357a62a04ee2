"""`autotune warm`'s report: an entry that spills with this toolchain but was tuned without spilling is named."""
from autotune.commands.warm import WarmResult, entry_line, spills_unlike_its_record
from autotune.core.problem import Problem
from autotune.runtime.db import Entry

PROBLEM = Problem("matmul", (2048, 2048, 2048), "float64", {"layout": "nn"})


def entry_recording(resources):
    return Entry(PROBLEM, {"BM": 64}, {} if resources is None else {"resources": resources})


def result(spill_bytes, ok=True):
    return WarmResult(PROBLEM.key, ok, 3.2, 255 if ok else None, spill_bytes if ok else None,
                      "" if ok else "RuntimeError: no")


def test_a_new_spill_is_flagged_and_an_old_or_unknown_one_is_not():
    clean, spilled = {"spill_stores": 0, "spill_loads": 0}, {"spill_stores": 8, "spill_loads": 8}
    assert spills_unlike_its_record(entry_recording(clean), result(220))
    assert "spills here, tuned without spilling" in entry_line(entry_recording(clean), result(220))
    for resources, spill in [(clean, 0), (spilled, 220), (None, 220)]:
        assert not spills_unlike_its_record(entry_recording(resources), result(spill))
        assert "tuned without" not in entry_line(entry_recording(resources), result(spill))


def test_a_failed_compile_shows_its_reason_not_a_spill_note():
    line = entry_line(entry_recording({"spill_stores": 0}), result(None, ok=False))
    assert line.startswith("FAIL") and "RuntimeError: no" in line and "tuned without" not in line
    assert "spill bytes    -" in line


def test_kernels_are_compiled_ahead_under_the_key_a_launch_looks_up():
    """numba-cuda files a compiled kernel in its disk cache under the signature exactly as ``compile`` got it, and
    a launch looks it up by the tuple of its arguments' types: ``compile_as_launched`` passes that tuple (the text
    would file it where no later process's call finds it; on the H100 every kernel missed the cache after
    ``autotune warm`` until this, NOTES item 50)."""
    import numba
    import numpy as np

    from autotune.runtime.compiler import compile_as_launched

    class Recorder:
        def compile(self, sig):
            self.sig = sig
            return "compiled"

    d = Recorder()
    assert compile_as_launched(d, "void(float32[::1], int64, boolean, uint16[::1])") == "compiled"
    launch_types = tuple(numba.typeof(v) for v in (np.empty(3, np.float32), 7, True, np.empty(2, np.uint16)))
    assert isinstance(d.sig, tuple) and d.sig == launch_types
