"""The linear singly-assigned-variable pass (autotune/numba_lowering.py) gives numba-cuda's own answer and PTX."""
from test_compile import replacement_sample


def test_the_linear_pass_finds_the_same_variables_and_makes_the_same_ptx():
    """For kernels of both families (unrolled matmul blocks of ~2000 variables, tensor-core fp64, reductions), the
    replacement and numba-cuda's pass return the same set for every function lowered, and the PTX made with either
    is identical; on a small function's IR edited so that each of the rule's exclusions decides, both agree too. On a
    numba-cuda whose pass is not the one the replacement was written for, nothing is replaced."""
    result = replacement_sample("lowering_sample.py")
    if result is None:  # another numba-cuda: its own pass stays
        return
    for name, seen in result["variants"].items():
        assert seen["functions"] >= 1 and seen["variables"] > 0, name
        assert seen["equal"] and seen["same_ptx"], (name, seen)
    assert max(seen["variables"] for seen in result["variants"].values()) > 1500  # a long unrolled block was in
    assert result["synthetic"] == {"plain": True, "assigned twice": True, "alloca": True}  # each exclusion decides


def test_install_refuses_a_changed_pass(monkeypatch):
    """The guard compares the source of numba-cuda's method; a different hash leaves the method in place (checked
    on a stand-in class, so this process's numba-cuda is not touched)."""
    from autotune import numba_lowering

    class Lower:
        def _find_singly_assigned_variable(self):
            return "numba-cuda's own"

    class Module:
        pass

    module = Module()
    module.Lower = Lower
    monkeypatch.setattr(numba_lowering, "_lowering", lambda: module)
    monkeypatch.setattr(numba_lowering, "_state", {"installed": False})
    original = Lower._find_singly_assigned_variable
    assert not numba_lowering.original_source_matches()
    assert not numba_lowering.install() and Lower._find_singly_assigned_variable is original

    import hashlib
    import inspect

    digest = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()
    monkeypatch.setattr(numba_lowering, "KNOWN_SOURCE_SHA256", digest)
    assert numba_lowering.install() and Lower._find_singly_assigned_variable is not original
    assert Lower._find_singly_assigned_variable.__wrapped__ is original


def test_the_environment_chooses_which_replacements_are_installed(monkeypatch):
    """AUTOTUNE_NUMBA_PATCH: unset or 1 installs every replacement, 0 none, a list only those named; a name that is
    not a replacement is an error naming the choices, not a silent no-op. The compile path installs what it says
    (stand-in modules record the calls; the simulator check is bypassed)."""
    import pytest

    from autotune import backend, compiler, numba_liveness, numba_lowering, numba_ssa, numba_typing

    installed = []
    monkeypatch.setattr(numba_lowering, "install", lambda: installed.append("lowering"))
    monkeypatch.setattr(numba_ssa, "install", lambda: installed.append("ssa"))
    monkeypatch.setattr(numba_liveness, "install", lambda: installed.append("liveness"))
    monkeypatch.setattr(numba_typing, "install", lambda: installed.append("typing"))
    monkeypatch.setattr(backend, "simulator", lambda: False)
    every = ["lowering", "ssa", "liveness", "typing"]
    for value, expected in ((None, every), ("1", every), ("0", []), ("ssa", ["ssa"]), (" lowering , ", ["lowering"]),
                            ("ssa,lowering", ["lowering", "ssa"]), ("liveness", ["liveness"])):
        if value is None:
            monkeypatch.delenv("AUTOTUNE_NUMBA_PATCH", raising=False)
        else:
            monkeypatch.setenv("AUTOTUNE_NUMBA_PATCH", value)
        installed.clear()
        compiler._speed_up_numba()
        assert installed == expected, value
    monkeypatch.setenv("AUTOTUNE_NUMBA_PATCH", "ssa,inlining")
    with pytest.raises(ValueError, match="unknown inlining.*lowering, ssa, liveness, typing"):
        compiler.numba_passes_wanted()
