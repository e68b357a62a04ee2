"""What is being tuned: a kernel kind, a shape, a dtype and the family arguments (layout, op, axis).

A ``Problem`` is the key of a study and of a database entry. ``Instance`` holds one problem's data on the
device: integer-valued inputs for verification (every sum of them is exact in float32, so a result is either
right to the last bit or wrong) and standard-normal inputs for timing (never zeros, which can run faster).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .build import family_args as normalise_family

_DIMS = re.compile(r"^\d+(x\d+)*$")
_POWER = re.compile(r"^(\d+)(\*\*|<<)(\d+)$")


def parse_shape(text: str) -> tuple[int, ...]:
    """'4096x4096x4096' -> (4096, 4096, 4096); a 1-D size may also be written '2**24' or '1<<24'."""
    text = str(text).strip().lower().replace(" ", "")
    power = _POWER.match(text)
    if power:
        base, op, exp = power.groups()
        return (int(base) ** int(exp) if op == "**" else int(base) << int(exp),)
    if not _DIMS.match(text):
        raise ValueError(f"shape {text!r} is not of the form 4096x4096x4096 (matmul M x N x K), 268435456 or "
                         f"16384x16384 (reduce)")
    dims = tuple(int(d) for d in text.split("x"))
    if any(d < 1 for d in dims):
        raise ValueError(f"shape {text!r}: every dimension must be at least 1")
    return dims


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


@dataclass(frozen=True)
class Problem:
    kind: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    family: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "family", normalise_family(self.kind, self.family))
        shape = (self.shape,) if isinstance(self.shape, int) else self.shape
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        if self.kind == "matmul" and len(self.shape) != 3:
            raise ValueError(f"a matmul shape is M x N x K, got {shape_text(self.shape)}")
        if self.kind == "reduce":
            axis = self.family["axis"]
            if axis is not None and len(self.shape) != 2:
                raise ValueError(f"reduce along axis {axis} needs a 2-D shape, got {shape_text(self.shape)}")

    @property
    def key(self) -> str:
        """A stable name: 'matmul/float32/nn/4096x4096x4096', 'reduce/float32/sum/axis1/16384x16384'."""
        if self.kind == "matmul":
            tag = self.family["layout"]
        else:
            axis = self.family["axis"]
            tag = f"{self.family['op']}/{'all' if axis is None else f'axis{axis}'}"
        return f"{self.kind}/{self.dtype}/{tag}/{shape_text(self.shape)}"

    @property
    def work(self) -> float:
        """Floating-point operations (matmul) or the fewest bytes moved (reductions)."""
        if self.kind == "matmul":
            M, N, K = self.shape
            return 2.0 * M * N * K
        inputs = 2 if self.family["op"] == "dot" else 1
        return float(inputs * math.prod(self.shape) * np.dtype(self.dtype).itemsize)

    @property
    def unit(self) -> str:
        return "TFLOP/s" if self.kind == "matmul" else "GB/s"

    def rate(self, seconds: float) -> float:
        """Throughput in ``unit``."""
        return self.work / seconds / (1e12 if self.kind == "matmul" else 1e9)

    @property
    def out_shape(self) -> tuple[int, ...]:
        if self.kind == "matmul":
            return self.shape[0], self.shape[1]
        axis = self.family["axis"]
        return (1,) if axis is None else (self.shape[1 - axis],)


# -- data on the device ---------------------------------------------------------------------------
class Instance:
    """A problem's inputs and output on the device, and the check of an output against float64 NumPy."""

    def __init__(self, problem: Problem, rng: np.random.Generator):
        from numba import cuda

        self.problem = problem
        self.rng = rng
        self.check_host = self._inputs(lambda shape: _check_data(rng, shape, problem))
        self.check_args = [cuda.to_device(a) for a in self.check_host]
        self.time_args = [cuda.to_device(a) for a in self._inputs(
            lambda shape: rng.standard_normal(shape, dtype=np.float32).astype(problem.dtype))]
        self.out = cuda.device_array(problem.out_shape, dtype=problem.dtype)
        self._expected = self._reference(self.check_host) if problem.kind == "reduce" else None
        self._special_sets = self._planted_sets() if _ordered(problem) else []
        self._check64: list[np.ndarray] | None = None

    def _inputs(self, make) -> list[np.ndarray]:
        p = self.problem
        if p.kind == "matmul":
            M, N, K = p.shape
            A, B = make((M, K)), make((K, N))
            layout = p.family["layout"]
            return [np.ascontiguousarray(A.T).T if layout[0] == "t" else A,
                    np.ascontiguousarray(B.T).T if layout[1] == "t" else B]
        count = 2 if p.family["op"] == "dot" else 1
        return [make(p.shape) for _ in range(count)]

    def run(self, kernel, timing: bool = False) -> None:
        kernel(*(self.time_args if timing else self.check_args), out=self.out)

    def poison(self) -> None:
        from numba import cuda

        self.out.copy_to_device(cuda.to_device(np.full(self.problem.out_shape, np.nan, self.problem.dtype)))

    def check(self, kernel) -> str | None:
        """Run ``kernel`` on the check inputs into a NaN-poisoned output; None if right, else what is wrong.

        max and min are also run on the same data with infinities and, apart, NaNs planted (``_planted_sets``):
        NumPy's result is NaN wherever a NaN was reduced, and a variant that drops one fails."""
        got = self._run_poisoned(kernel, self.check_args)
        unwritten = int(np.isnan(got).sum())
        if unwritten:
            return f"{unwritten} of {got.size} output elements were not written (still NaN)"
        if self.problem.kind == "matmul":
            return self._check_matmul(got)
        problem = _compare(got, self._expected)
        for what, args, expected in self._special_sets:
            problem = problem or _compare(self._run_poisoned(kernel, args), expected, what=f"elements (data with {what})")
        return problem

    def _run_poisoned(self, kernel, args) -> np.ndarray:
        self.poison()
        kernel(*args, out=self.out)
        return self.out.copy_to_host()

    def _reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        from .reduce import reference

        p = self.problem
        y = inputs[1] if len(inputs) > 1 else None
        return np.atleast_1d(reference(p.family["op"], inputs[0], y, p.family["axis"]))

    def _planted_sets(self) -> list[tuple[str, list, np.ndarray]]:
        """The check data with special values planted, each set with its float64 NumPy result: +inf and -inf,
        then NaN. Over the whole array at random elements (NaN also, apart, at the last); along an axis in about
        half of the results' lines, so that the other lines still check the values."""
        from numba import cuda

        x = self.check_host[0]
        axis = self.problem.family["axis"]
        sets = []
        for what, values in (("infinities", (np.inf, -np.inf)), ("NaN", (np.nan,))):
            if axis is None:
                arrays = [x.copy()]
                arrays[0].flat[self.rng.choice(x.size, min(x.size, len(values)), replace=False)] = values[:x.size]
                if what == "NaN":
                    arrays.append(x.copy())
                    arrays[1].flat[-1] = np.nan
            elif x.size:
                moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))  # the lines reduced are its rows
                lines = moved.reshape(-1, moved.shape[-1])
                for value in values:
                    rows = self.rng.random(lines.shape[0]) < 0.5
                    lines[rows, self.rng.integers(lines.shape[1], size=int(rows.sum()))] = value
                arrays = [np.moveaxis(moved, -1, axis)]
            else:
                arrays = []
            sets += [(what, [cuda.to_device(np.ascontiguousarray(a))], self._reference([a])) for a in arrays]
        return sets


def _check_data(rng: np.random.Generator, shape, problem: Problem) -> np.ndarray:
    """Data on which the right answer is exact, so a check can demand it to the last bit.

    Sums (matmul, sum, dot) get small integers, never all zero: matmul sums K terms of |a*b| <= 4 (exact while
    4K < 2**24); reductions draw from [-8, 8], whose partial sums are random walks far below 2**24 even for
    2**28 elements. max and min get standard-normal data: distinct values, and max/min round nothing
    (``Instance`` plants infinities and NaNs in copies of it).
    """
    if _ordered(problem):
        return rng.standard_normal(shape, dtype=np.float32).astype(problem.dtype)
    bound = 2 if problem.kind == "matmul" else 8
    x = rng.integers(-bound, bound + 1, size=shape, dtype=np.int8).astype(problem.dtype)
    x.flat[0] = 1
    return x


def _ordered(problem: Problem) -> bool:
    return problem.kind == "reduce" and problem.family["op"] in ("max", "min")


def _compare(got: np.ndarray, expected: np.ndarray, what: str = "elements") -> str | None:
    """What differs from ``expected``, exactly; NaN matches NaN."""
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(expected))
    bad = (got != expected) & ~(np.isnan(got) & np.isnan(expected))
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
    return (f"{int(bad.sum())} of {bad.size} {what} differ from the float64 reference; first at {where}: "
            f"{got[where]!r} instead of {expected[where]!r}")
