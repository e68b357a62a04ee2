"""Golden renders: the generated source of every committed database winner, GPU and simulator rendering.

A template change that alters what a committed winner renders fails tests/test_golden.py; when the change is
meant, regenerate and review the diff of tests/golden/ like any other change:

    python tests/golden.py            # rewrite tests/golden/ from the templates as they are now

Renders are stored once per distinct source text (``renders/<sha>.py``); ``index.yaml`` maps each database
entry and rendering to its file.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
ROOT = HERE.parent


def current_renders() -> dict[str, str]:
    """{"<db file>: <problem key> <gpu|simulator>": source} for every entry of the committed database."""
    from autotune.runtime.build import render_source
    from autotune.runtime.db import load_file

    renders, made = {}, {}
    for path in sorted((ROOT / "tuned_db").glob("*.yaml")):
        for entry in load_file(path, strict=True).entries:
            for simulator in (False, True):
                # many entries (other shapes, other GPUs) hold the same configuration: everything rendering reads
                # is in the key, so each distinct one is rendered once
                key = json.dumps([entry.problem.family, entry.params, entry.problem.dtype, entry.problem.args,
                                  simulator], sort_keys=True, default=repr)
                if key not in made:
                    made[key] = render_source(entry.problem.family, entry.params, entry.problem.dtype,
                                              simulator=simulator, **entry.problem.args)[2]
                renders[f"{path.name}: {entry.problem.key} {'simulator' if simulator else 'gpu'}"] = made[key]
    return renders


def digest(source: str) -> str:
    """The name of a render's file: its ``source_hash`` (autotune/runtime/render.py), which database entries record."""
    from autotune.runtime.render import source_hash

    return source_hash(source)


def write(renders: dict[str, str]) -> None:
    import yaml

    folder = GOLDEN / "renders"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.py"):
        old.unlink()
    index = {}
    for name, source in sorted(renders.items()):
        index[name] = digest(source)
        (folder / f"{index[name]}.py").write_text(source)
    (GOLDEN / "index.yaml").write_text("# Written by `python tests/golden.py`: entry and rendering -> renders/<sha>.py\n"
                                       + yaml.safe_dump(index, sort_keys=True, width=200))


def load_index() -> dict[str, str]:
    """{"<db file>: <problem key> <gpu|simulator>": the digest naming its render in renders/}."""
    import yaml

    return yaml.safe_load((GOLDEN / "index.yaml").read_text())


def stored() -> dict[str, str]:
    return {name: (GOLDEN / "renders" / f"{sha}.py").read_text() for name, sha in load_index().items()}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    renders = current_renders()
    write(renders)
    print(f"wrote {len(renders)} renders ({len(set(renders.values()))} distinct) to {GOLDEN}")
