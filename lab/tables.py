"""The lab scripts' Markdown output: a table printed whole at the end, and written to a file where asked."""
from __future__ import annotations

from pathlib import Path


def emit(rows: list[str], path: str | None) -> None:
    """Print the table's rows as one block after a blank line; also write them to ``path`` if given."""
    text = "\n".join(rows)
    print("\n" + text)
    if path:
        Path(path).write_text(text + "\n")
