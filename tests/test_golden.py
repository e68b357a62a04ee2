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


def test_committed_entries_record_the_hash_of_their_golden_gpu_source():
    """Every committed entry records ``source_hash``, the hash of the GPU source it was measured with, and it is the
    golden render's: a lookup or ``autotune db check`` announces an entry whose render no longer matches."""
    from autotune.runtime.db import load_file

    index = golden.load_index()
    for path in sorted((golden.ROOT / "tuned_db").glob("*.yaml")):
        for entry in load_file(path, strict=True).entries:
            assert entry.record.get("source_hash") == index[f"{path.name}: {entry.problem.key} gpu"], \
                (path.name, entry.problem.key)
