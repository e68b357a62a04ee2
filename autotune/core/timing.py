"""A measurement's timing record (median and spread) and the rule that says when one is faster than another."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    meaningful: bool = True

    @property
    def spread(self) -> float:
        """Relative inter-quintile range: (p80 - p20) / median."""
        return (self.p80_ms - self.p20_ms) / self.median_ms if self.median_ms > 0 else 0.0

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        """The inverse of ``as_dict`` (a study's or a file's timing record)."""
        return cls(d["median_ms"], d["p20_ms"], d["p80_ms"], d["reps"])

    def as_dict(self) -> dict:
        return {"median_ms": round(self.median_ms, 6), "p20_ms": round(self.p20_ms, 6),
                "p80_ms": round(self.p80_ms, 6), "reps": self.reps}

    def faster_than(self, other: "Timing") -> bool:
        """Faster by more than the noise: the medians differ by more than half the larger p20-p80 range, or this
        whole p20-p80 range lies below the other's.

        The tuner keeps an earlier winner unless a later variant is faster in this sense, so ties within the
        noise go to the configuration found first and winners are reproducible. The second clause keeps one
        noisy measurement from standing forever: a recorded median with a wide p20-p80 range would otherwise hold
        off a steady, clearly faster one whose whole range lies below its p20."""
        margin = 0.5 * max(self.p80_ms - self.p20_ms, other.p80_ms - other.p20_ms)
        return self.median_ms < other.median_ms - margin or self.p80_ms < other.p20_ms


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    pos = q * (len(values) - 1)
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)
