"""The bit-set live-variable analysis (autotune/numba_liveness.py) gives numba-cuda's own live maps and PTX."""
from test_compile import replacement_sample


def test_the_bit_set_analysis_finds_the_same_live_variables_and_makes_the_same_ptx():
    """For kernels of both families (unrolled matmul blocks of thousands of variables, tensor-core fp64, reductions),
    every live map the compile asks for is the same from both versions (the same sets, blocks in the same order),
    and the PTX made with either is identical. On a numba-cuda whose analysis is not the one the replacement was
    written for, nothing is replaced."""
    result = replacement_sample("liveness_sample.py")
    if result is None:  # another numba-cuda: its own analysis stays
        return
    for name, seen in result["variants"].items():
        assert seen["calls"] >= 1 and seen["variables"] > 0, name
        assert seen["equal"] and seen["same_ptx"], (name, seen)
    assert max(seen["variables"] for seen in result["variants"].values()) > 1500  # a long unrolled block was in
    assert max(seen["blocks"] for seen in result["variants"].values()) > 20  # and a graph with loops and branches


def test_install_refuses_a_changed_analysis(monkeypatch):
    """The guard compares the source of numba-cuda's function; a different hash leaves it in place in both modules
    that call it (checked on stand-in modules, so this process's numba-cuda is not touched)."""
    import hashlib

    from autotune import numba_liveness

    class Module:
        pass

    analysis, ir_utils = Module(), Module()
    exec("def compute_live_map(cfg, blocks, var_use_map, var_def_map):\n    return 'numba-cuda'\n", analysis.__dict__)
    original = ir_utils.compute_live_map = analysis.compute_live_map
    monkeypatch.setattr(numba_liveness, "_analysis", lambda: analysis)
    monkeypatch.setattr(numba_liveness, "_ir_utils", lambda: ir_utils)
    monkeypatch.setattr(numba_liveness, "_state", {"installed": False})
    monkeypatch.setattr(numba_liveness.inspect, "getsource", lambda obj: "def compute_live_map(): changed\n")
    monkeypatch.setattr(numba_liveness.compute_live_map, "__wrapped__", None, raising=False)
    assert not numba_liveness.original_source_matches()
    assert not numba_liveness.install()
    assert analysis.compute_live_map is original and ir_utils.compute_live_map is original

    monkeypatch.setattr(numba_liveness, "KNOWN_SOURCE_SHA256",
                        hashlib.sha256(b"def compute_live_map(): changed\n").hexdigest())
    assert numba_liveness.install()
    assert analysis.compute_live_map is numba_liveness.compute_live_map is ir_utils.compute_live_map
    assert numba_liveness.compute_live_map.__wrapped__ is original
