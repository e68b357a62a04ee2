"""The bench's machine-readable results: every ``autotune bench`` writes, beside its Markdown table, a JSON list of
rows ``{"problem", "kernel", "ms", "peer", "vs_peer"}`` (one per contender timed: ours, the seed kernels, each
peer), and ``--held-out`` keeps one file per GPU model that runs of several families and dtypes add to, summarised
per case (geometric mean and worst against each peer).

``problem`` is the problem key of the Markdown heading (``matmul/float16/nn/1024x1024x1024``); ``kernel`` is
"autotune" for ours (``chosen_by`` says how its configuration was chosen, the lookup's ``Choice.how``: "exact",
"rule", "nearest", "other gpu", "default", or a stand-in's tag and step such as "nn: rule"; ``autotune tuned`` is
the entry tuned for the shape that ``--against-db`` brings), a seed's or a peer's name otherwise; ``peer`` is the
first peer timed on that problem, ``vs_peer`` the peer's time over this row's (above 1: faster than the peer).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..tuning.report import table

MAX_BYTES = 64 << 20
MAX_TEXT = 200  # characters of a problem key, a kernel's or a peer's name, a chosen_by
MIN_MS, MAX_MS = 1e-9, 1e9


def problem_rows(key: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JSON rows of one problem from the bench's rows (those with a timing; a peer's is marked ``peer``)."""
    timed = [r for r in rows if "timing" in r]
    peer = next((r for r in timed if r.get("peer")), None)
    out = []
    for r in timed:
        ms = float(r["timing"].median_ms)
        name = "autotune" if r["name"].startswith("autotune") and not r.get("tuned") else \
            "autotune tuned" if r.get("tuned") else r["name"]
        row = {"problem": key, "kernel": name, "ms": round(ms, 6), "peer": peer["name"] if peer else None,
               "vs_peer": round(float(peer["timing"].median_ms) / ms, 4) if peer and ms > 0 else None}
        if "chosen_by" in r:
            row["chosen_by"] = r["chosen_by"]
        out.append(row)
    return out


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    from ..runtime.db import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(rows, indent=1) + "\n")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a bench JSON file, each checked; ValueError naming the file (and the row) where it is not one."""
    from ..core.yamlfile import read_regular

    if not path.exists():
        return []
    data = read_regular(path, MAX_BYTES + 1, ValueError)  # no FIFO waited on, no device read without end
    if len(data) > MAX_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BYTES >> 20} MiB; not a bench file")
    try:
        rows = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        raise ValueError(f"{path}: not a bench JSON file ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: not a list of bench rows {{problem, kernel, ms, peer, vs_peer}}; move it aside")
    for i, row in enumerate(rows):
        why = _row_problem(row)
        if why:
            raise ValueError(f"{path}: row #{i + 1} {why}; not a bench file of this version, move it aside")
    return rows


def _row_problem(row: Any) -> str | None:
    """Why ``row`` is no bench row (None where it is one): text where text belongs, times of 1e-9 to 1e9 ms."""
    if not isinstance(row, dict):
        return "is not a mapping"
    for name in ("problem", "kernel"):
        if not isinstance(row.get(name), str) or not 0 < len(row[name]) <= MAX_TEXT:
            return f"has no {name} (text of 1 to {MAX_TEXT} characters)"
    for name in ("peer", "chosen_by"):
        if row.get(name) is not None and (not isinstance(row[name], str) or len(row[name]) > MAX_TEXT):
            return f"has a {name} that is no text of at most {MAX_TEXT} characters"
    if not _time(row.get("ms")):
        return f"has no time 'ms' from {MIN_MS:g} to {MAX_MS:g}"
    ratio = row.get("vs_peer")
    if ratio is not None and not (type(ratio) in (int, float) and math.isfinite(ratio) and 0 < ratio < MAX_MS):
        return "has a 'vs_peer' that is no positive finite number"
    return None


def _time(ms: Any) -> bool:
    return type(ms) in (int, float) and math.isfinite(ms) and MIN_MS <= ms <= MAX_MS


def merged(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` without the problems ``new`` measures again, then ``new``: a rerun replaces, other cases stay."""
    again = {r["problem"] for r in new}
    return [r for r in old if r["problem"] not in again] + new


def summary(rows: list[dict[str, Any]]) -> str:
    """A Markdown table per case (the problem key without its shape) and contender: the shapes, and the geometric
    mean and worst of our speed over the contender's (its time over ours: above 1, we are faster); against
    ``autotune tuned`` rows, what the lookup's choice reaches of the entry tuned for the shape."""
    by_problem: dict[str, dict[str, float]] = {}
    chosen: dict[str, str] = {}
    for r in rows:
        by_problem.setdefault(r["problem"], {})[r["kernel"]] = r["ms"]
        if r["kernel"] == "autotune" and "chosen_by" in r:
            chosen[r["problem"]] = r["chosen_by"]
    cases: dict[tuple[str, str], list[float]] = {}
    for key, times in by_problem.items():
        ours = times.get("autotune")
        if ours is None:
            continue
        case = key.rsplit("/", 1)[0]
        for kernel, ms in times.items():
            if kernel != "autotune" and not kernel.startswith("seed"):
                cases.setdefault((case, kernel), []).append(ms / ours)
    body = []
    for (case, kernel), ratios in sorted(cases.items()):
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        body.append([case, f"vs {kernel}", len(ratios), f"{geo:.3f}x", f"{min(ratios):.3f}x"])
    counts: dict[str, int] = {}
    for how in chosen.values():
        counts[how] = counts.get(how, 0) + 1
    how_text = ", ".join(f"{n} by {how}" for how, n in sorted(counts.items()))
    return (table(["case", "against", "shapes", "geometric mean", "worst"], body)
            + "\n\n(our speed over the other's: above 1 is faster; 'autotune tuned': the entry tuned for each "
              "shape, so the row says what the lookup's choice reaches of it)"
            + (f"\n\nour configurations were chosen: {how_text}" if how_text else ""))


__all__ = ["problem_rows", "write_rows", "read_rows", "merged", "summary"]
