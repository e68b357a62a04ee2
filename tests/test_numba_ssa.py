"""The indexed SSA passes (autotune/numba_ssa.py) give numba-cuda's own IR, names and PTX."""
from test_compile import replacement_sample


def test_the_indexed_passes_make_the_same_ir_and_the_same_ptx():
    """For kernels of both families (unrolled matmul blocks with hundreds of reassigned variables, tensor-core fp64,
    reductions) and a function that reads a variable one path never assigned, both versions of SSA reconstruction
    give the same statements, fresh names and phi nodes, both versions of phi stripping the same blocks, and the PTX
    made with either is identical. On a numba-cuda whose passes are not the ones the replacement was written for,
    nothing is replaced."""
    result = replacement_sample("ssa_sample.py")
    if result is None:  # another numba-cuda: its own pass stays
        return
    for name, seen in result["variants"].items():
        assert seen["functions"] >= 1 and seen["violators"] > 0, name
        assert seen["equal"] and seen["stripped_equal"] and seen["same_ptx"], (name, seen)
    assert max(seen["violators"] for seen in result["variants"].values()) > 300  # an unrolled K loop was in
    assert max(seen["phis"] for seen in result["variants"].values()) > 50
    assert result["uninitialised"]


def test_install_refuses_changed_sources(monkeypatch):
    """The guard hashes the sources of the functions the replacement mirrors; a different hash leaves both passes
    in place (checked on stand-in modules, so this process's numba-cuda is not touched)."""
    from autotune import numba_ssa

    class Module:
        pass

    ssa, typed_passes = Module(), Module()
    for name in numba_ssa.REPLACED:
        exec(f"def {name}():\n    return 'numba-cuda ' + {name!r}\n", ssa.__dict__)

    class PreLowerStripPhis:
        def _strip_phi_nodes(self=None):
            return "numba-cuda strip"

    typed_passes.PreLowerStripPhis = PreLowerStripPhis
    original, original_strip = ssa._run_ssa, PreLowerStripPhis._strip_phi_nodes
    monkeypatch.setattr(numba_ssa, "_ssa", lambda: ssa)
    monkeypatch.setattr(numba_ssa, "_typed_passes", lambda: typed_passes)
    monkeypatch.setattr(numba_ssa, "_state", {"installed": False})
    monkeypatch.setattr(numba_ssa.inspect, "getsource", lambda obj: obj())
    for replacement in (numba_ssa.run_ssa, numba_ssa.strip_phi_nodes):  # install sets these
        monkeypatch.setattr(replacement, "__wrapped__", None, raising=False)
    assert not numba_ssa.original_source_matches()
    assert not numba_ssa.install()
    assert ssa._run_ssa is original and PreLowerStripPhis._strip_phi_nodes is original_strip

    monkeypatch.setattr(numba_ssa, "KNOWN_SOURCE_SHA256", numba_ssa._source_digest(ssa, typed_passes))
    assert numba_ssa.install()
    assert ssa._run_ssa is numba_ssa.run_ssa and PreLowerStripPhis._strip_phi_nodes is numba_ssa.strip_phi_nodes
    assert numba_ssa.run_ssa.__wrapped__ is original and numba_ssa.strip_phi_nodes.__wrapped__ is original_strip
