"""Variants of one problem checked and timed beside its peers in one process, for the lab's A/B scripts
(stack_schedules_gpu.py, pair_check_gpu.py, gemv_groups_gpu.py): each variant through the family's oracle first,
then as `autotune bench` times (CUDA events, L2 flushed, median); a table of each row's times against PyTorch's."""
from __future__ import annotations

from typing import Any

import numpy as np


def oracle_errors(kernel, problem, rng) -> list[str | None]:
    """The family's verdict on each of its verification cases of ``problem`` (None: right), each run into an
    output poisoned with NaN first, so that an element the kernel never writes cannot pass."""
    from autotune.tuning.instance import Instance

    return list(Instance(problem, rng).verdicts(kernel))


def database_entries() -> dict:
    """The database's entries for the GPU here, by problem key (the folders lookups read, in their order)."""
    from autotune.core.device import current_device
    from autotune.runtime.db import database_folders, db_path, load_file

    name = current_device().name
    return {e.problem.key: e for p in (db_path(f, name) for f in database_folders(None)) if p.exists()
            for e in load_file(p).entries}


def timed_row(problem, variants: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """{"problem": its key, label: {"ms": ...} or {"error": why}, peer: {"ms": ...}} for each variant (None: not
    valid for the problem) and each of the family's peers, on one instance of the problem."""
    from autotune.core import backend
    from autotune.runtime.build import build_kernel
    from autotune.tuning.instance import Instance
    from autotune.tuning.measure import bench, l2_flusher

    flusher = None if backend.simulator() else l2_flusher()  # the simulator's run: the script's own check
    inst = Instance(problem, np.random.default_rng())
    row: dict[str, Any] = {"problem": problem.key}
    for label, params in variants.items():
        if params is None:
            row[label] = {"error": "not valid here"}
            continue
        kernel = build_kernel(problem.family, params, problem.dtype, **problem.args)
        error = inst.check(kernel)
        row[label] = {"error": error} if error else \
            {"ms": bench(lambda: inst.run(kernel, timing=True), flush=flusher, simulator=flusher is None).median_ms}
    for peer, call in problem.impl.peers(problem, inst.time_args).items():
        row[peer] = {"ms": bench(call, flush=flusher, simulator=flusher is None).median_ms}
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """Each row's times and PyTorch's time over each (its first peer named torch)."""
    print("| problem | variant | ms | torch / this |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        peers = [v["ms"] for k, v in row.items() if k != "problem" and "torch" in k and "ms" in v]
        for label, value in row.items():
            if label == "problem":
                continue
            ms = value.get("ms")
            ratio = f"{peers[0] / ms:.2f}x" if ms and peers else "-"
            print(f"| {row['problem']} | {label} | {ms if ms else value} | {ratio} |")
