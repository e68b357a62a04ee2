"""The records of a database file in memory: its entries (``Entry``) and the file (``DbFile``), what groups
entries that may stand for one another (``kind_of``), and a value as YAML reads it back (``read_back``). Shared by
the database (db.py) and its parse cache (db_cache.py), below both."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..core.problem import Problem
from ..core.rule import Rule
from ..core.timing import Timing


@dataclass(frozen=True)
class Entry:
    problem: Problem
    params: dict[str, Any]
    record: dict[str, Any]

    @property
    def median_ms(self) -> float:
        return float(self.record["time"]["median_ms"])

    @property
    def timing(self) -> Timing:
        time = self.record["time"]
        return Timing(median_ms=float(time["median_ms"]), p20_ms=float(time["p20_ms"]),
                      p80_ms=float(time["p80_ms"]), reps=int(time["reps"]))


@dataclass
class DbFile:
    path: Path
    device: dict[str, Any]
    entries: list[Entry]
    problems: list[str]
    #: entries of families not registered in this process: kept verbatim, not used
    foreign: list[dict[str, Any]] = field(default_factory=list)
    #: fitted rules for untuned shapes (``rules:``), and those of families not registered here (kept verbatim)
    rules: list[Rule] = field(default_factory=list)
    foreign_rules: list[dict[str, Any]] = field(default_factory=list)
    _kinds: dict[str, list[Entry]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def foreign_families(self) -> list[str]:
        return sorted({str(family_of(raw)) for raw in self.foreign})

    def family_names(self) -> list[str]:
        """The families its entries and rules name, registered in this process or not."""
        return sorted({e.problem.family for e in self.entries} | {str(family_of(raw)) for raw in self.foreign}
                      | {r.family for r in self.rules} | {str(raw.get("family")) for raw in self.foreign_rules})

    def like(self, problem: Problem) -> list[Entry]:
        """The entries of ``problem``'s family, dtype and arguments, of any shape, in file order: the ones a
        lookup of ``problem`` chooses from."""
        if self._kinds is None:
            kinds: dict[str, list[Entry]] = {}
            for entry in self.entries:
                kinds.setdefault(kind_of(entry.problem), []).append(entry)
            self._kinds = kinds
        return self._kinds.get(kind_of(problem), [])


def kind_of(problem: Problem) -> str:
    """What the entries that may stand for one another share: family, dtype and arguments (a problem's key less
    its shape, 'matmul/float32/nn')."""
    return f"{problem.family}/{problem.dtype}/{problem.impl.key_tag(problem.args)}"


def family_of(raw: Mapping[str, Any]) -> Any:
    """The family an entry names (under ``family``, or its old name ``kernel``)."""
    return raw.get("family", raw.get("kernel"))


def read_back(value: Any) -> Any:
    """``value`` as the safe YAML writer writes it and a reader reads it back: tuples become lists, everything
    else it writes comes back equal. ValueError for a mapping key that might not come back the same."""
    if isinstance(value, dict):
        if not all(k is None or isinstance(k, (str, int, float)) for k in value):
            raise ValueError("a mapping key YAML may not read back as it was")
        return {k: read_back(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [read_back(v) for v in value]
    return value
