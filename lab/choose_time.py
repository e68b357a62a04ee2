"""Host time of choosing a configuration for a problem (``lookup.choose``: the database file checked, an exact
entry or the fitted rule's choice, or the nearest entry), with the file already read once, on any machine.

    python lab/choose_time.py [--db tuned_db] [--device "NVIDIA H200"] [--calls 300] [--runs 3]
                              [FAMILY/DTYPE/SHAPE ...]   e.g. matmul/float16/1500x2500x3500 (default: three below)

Prints milliseconds per choice for each run, and what the choice was (exact, or the note of the fallback).
"""
import argparse
import time
import warnings
from pathlib import Path

from autotune.core.problem import Problem
from autotune.runtime.lookup import choose

DEFAULT = ["matmul/float16/1500x2500x3500", "matmul/float32/777x333x555", "matmul/float16/1024x1024x1024"]


def problem_of(text: str) -> Problem:
    kind, dtype, shape = text.split("/")
    return Problem(kind, tuple(int(d) for d in shape.split("x")), dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="*", default=DEFAULT)
    ap.add_argument("--db", default="tuned_db")
    ap.add_argument("--device", default="NVIDIA H200")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    folders = [Path(a.db)]
    warnings.simplefilter("ignore")  # a fallback announces itself at each call
    for problem in map(problem_of, a.problems):
        _, note = choose(problem, folders, a.device)  # the file read (and cached) once
        runs = []
        for _ in range(a.runs):
            start = time.perf_counter()
            for _ in range(a.calls):
                choose(problem, folders, a.device)
            runs.append((time.perf_counter() - start) / a.calls * 1e3)
        print(f"{problem.key}: {' '.join(f'{ms:.3f}' for ms in runs)} ms a choice ({note or 'exact entry'})")


if __name__ == "__main__":
    main()
