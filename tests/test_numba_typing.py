"""Remembered call typing (autotune/numba_typing.py) gives Numba's own signatures, implementations and PTX."""
from test_compile import replacement_sample


def test_remembered_answers_are_the_template_search_answers_and_make_the_same_ptx():
    """For kernels of both families, every signature question the compile puts to a function type is answered
    the same (signature and implementation key) by a fresh template search and by the replacement, most of them
    from its record, and the PTX made with either is identical. On a Numba whose method is not the one the
    replacement was written for, nothing is replaced."""
    result = replacement_sample("typing_sample.py", package="numba", written_for="0.68.1")
    if result is None:  # another Numba: its own method stays
        return
    for name, seen in result["variants"].items():
        assert seen["questions"] >= 1, name
        assert seen["equal"] and seen["same_ptx"], (name, seen)
    biggest = max(result["variants"].values(), key=lambda seen: seen["questions"])
    assert biggest["questions"] > 1500 and biggest["remembered"] > 0.8 * biggest["questions"]


def test_install_refuses_a_changed_method(monkeypatch):
    """The guard compares the source of Numba's method; a different hash leaves it in place (checked on a stand-in
    class, so this process's Numba is not touched)."""
    import hashlib

    from autotune import numba_typing

    class BaseFunction:
        def get_call_type(self, context, args, kws):
            return "numba's own"

    class Module:
        pass

    module = Module()
    module.BaseFunction = BaseFunction
    original = BaseFunction.get_call_type
    monkeypatch.setattr(numba_typing, "_functions", lambda: module)
    monkeypatch.setattr(numba_typing, "_state", {"installed": False})
    monkeypatch.setattr(numba_typing.inspect, "getsource", lambda obj: "def get_call_type(): changed\n")
    assert not numba_typing.original_source_matches()
    assert not numba_typing.install() and BaseFunction.get_call_type is original

    monkeypatch.setattr(numba_typing, "KNOWN_SOURCE_SHA256",
                        hashlib.sha256(b"def get_call_type(): changed\n").hexdigest())
    assert numba_typing.install() and BaseFunction.get_call_type.__wrapped__ is original
