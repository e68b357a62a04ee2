"""On the GPU: what a whole-array sum's COMBINE costs in GPU time and in the host time of a replayed call (issue 57).

The tuner ranks variants by GPU time alone (L2 flushed, host time hidden behind a GPU sleep), so the 2^20 float32
sum entry of the H100 is ``COMBINE: atomic``: a driver memset of the output and a launch, two driver calls per
replayed call, against one for ``atomic_last`` or ``last_block``. This times, for the entry of this GPU model with
each COMBINE in turn (its other parameters as recorded):

- the GPU time as the tuner takes it (``tuning.evaluate.checked_timing``: the oracle's check, then the median of
  CUDA-event timings), in alternating rounds;
- the host time of ``autotune.sum(t)`` on a PyTorch tensor, and ``torch.sum(t)``'s, each in a fresh process
  (``host_time_parts.py``) reading a copy of the database with that COMBINE in the entry.

    cd lab && python3 sum_combine_gpu.py [--size 1048576] [--rounds 3] [--out DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from host_time_parts import in_fresh_process  # noqa: E402 - lab/host_time_parts.py
from autotune.runtime.db import load_file  # noqa: E402
from autotune.tuning.evaluate import checked_timing  # noqa: E402

COMBINES = ("atomic", "atomic_last", "last_block")


def gpu_file() -> Path:
    """The committed database file of this process's GPU model."""
    from numba import cuda

    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    for path in sorted((ROOT / "tuned_db").glob("*.yaml")):
        if yaml.safe_load(path.read_text())["device"]["name"] == name:
            return path
    raise SystemExit(f"no file of {name} in tuned_db")


def gpu_times(path: Path, key: str, rounds: int) -> dict[str, float]:
    """Median GPU ms of the entry ``key`` with each COMBINE, over alternating rounds."""
    entry = next(e for e in load_file(path, strict=True).entries if e.problem.key == key)
    samples = {c: [] for c in COMBINES}
    for _ in range(rounds):
        for combine in COMBINES:
            timing, error = checked_timing(entry.problem, {**entry.params, "COMBINE": combine})
            if error:
                raise SystemExit(f"{key} with COMBINE={combine} {error}")
            samples[combine].append(timing["median_ms"])
    return {c: statistics.median(v) for c, v in samples.items()}


def host_times(path: Path, key: str, combine: str, size: int, out: Path) -> dict[str, float]:
    """host_time_parts.py's table, in a fresh process reading a copy of the database whose entry ``key`` has
    ``combine``."""
    data = yaml.safe_load(path.read_text())
    size = int(key.rsplit("/", 1)[1])
    for e in data["entries"]:
        if (e["family"], e["dtype"], e["shape"], e.get("op"), e.get("axis")) == ("reduce", "float32", [size], "sum",
                                                                                  "all"):
            e["params"]["COMBINE"] = combine
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
        text, table = in_fresh_process({"AUTOTUNE_DB": folder, "AUTOTUNE_CACHE_DIR": str(Path(folder) / "cache")},
                                       "--size", str(size))
    (out / f"host-{combine}.txt").write_text(text)
    if table is None:
        raise SystemExit(f"host_time_parts.py with COMBINE={combine} failed:\n{text[-2000:]}")
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="sum-combine")
    a = ap.parse_args()
    warnings.simplefilter("ignore", autotune.TunedKernelWarning)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path, key = gpu_file(), f"reduce/float32/sum/all/{a.size}"
    gpu = gpu_times(path, key, a.rounds)
    host = {c: host_times(path, key, c, a.size, out) for c in COMBINES}
    lines = [f"{key} on this GPU ({path.name}); GPU: checked_timing median of {a.rounds} alternating rounds; host: "
             "host_time_parts.py in a fresh process per COMBINE (batches of 100 calls, median of 5 rounds)",
             "| COMBINE | GPU us | autotune.sum(t) host us | torch.sum(t) host us | moved plan us |",
             "| --- | --- | --- | --- | --- |"]
    for c in COMBINES:
        h = host[c]
        lines.append(f"| {c} | {gpu[c] * 1e3:.2f} | {h.get('autotune.sum(t)', float('nan')):.2f} | "
                     f"{h.get('torch.sum(t)', float('nan')):.2f} | "
                     f"{h.get('written.replay_onto(plan, new, pointer)', float('nan')):.2f} |")
    (out / "sum-combine.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
