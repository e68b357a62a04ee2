"""The committed database winners render exactly the committed golden sources (tests/golden.py regenerates them)."""
import difflib

import golden


def test_committed_winners_render_the_golden_sources():
    expected, current = golden.stored(), golden.current_renders()
    assert sorted(current) == sorted(expected), "the database's entries changed: run python tests/golden.py"
    changed = [name for name in current if current[name] != expected[name]]
    if changed:
        first = changed[0]
        diff = "\n".join(list(difflib.unified_diff(expected[first].splitlines(), current[first].splitlines(),
                                                   "golden", "now", lineterm="", n=1))[:40])
        raise AssertionError(f"{len(changed)} of {len(current)} renders changed (first: {first}); if meant, run "
                             f"`python tests/golden.py` and review tests/golden/:\n{diff}")
