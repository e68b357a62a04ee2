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
        self._expected = self._reference() if problem.kind == "reduce" else None
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
        """Run ``kernel`` on the check inputs into a NaN-poisoned output; None if right, else what is wrong."""
        self.poison()
        self.run(kernel)
        got = self.out.copy_to_host()
        unwritten = int(np.isnan(got).sum())
        if unwritten:
            return f"{unwritten} of {got.size} output elements were not written (still NaN)"
        if self.problem.kind == "matmul":
            return self._check_matmul(got)
        return _compare(got, self._expected)

    def _reference(self) -> np.ndarray:
        from .reduce import reference

        p = self.problem
        x = self.check_host[0]
        y = self.check_host[1] if len(self.check_host) > 1 else None
        ref = reference(p.family["op"], x, y, p.family["axis"])
        return np.atleast_1d(ref)

    def _check_matmul(self, C: np.ndarray) -> str | None:
        """Exact on integer data: small problems elementwise, large ones by Freivalds' test.

        Freivalds: C v == A (B v) for random integer vectors v; every product and sum here is an integer far
        below 2**53, so float64 is exact and any wrong element makes the test fail with probability >= 1/2
        per vector (much higher for integer v drawn from a wide range). Plus 512 sampled elements exactly.
        """
        if self._check64 is None:
            self._check64 = [a.astype(np.float64) for a in self.check_host]
        A, B = self._check64
        M, N, K = self.problem.shape
        C64 = C.astype(np.float64)
        if M * N * K <= 1 << 27:
            return _compare(C64, A @ B)
        for _ in range(3):
            v = self.rng.integers(-1000, 1001, size=(N, 1)).astype(np.float64)
            problem = _compare(C64 @ v, A @ (B @ v), what="C @ v (Freivalds' test)")
            if problem:
                return problem
        rows = self.rng.integers(0, M, size=512)
        cols = self.rng.integers(0, N, size=512)
        expected = np.einsum("ik,ki->i", A[rows], B[:, cols])
        return _compare(C64[rows, cols], expected, what="sampled elements")


def _check_data(rng: np.random.Generator, shape, problem: Problem) -> np.ndarray:
    """Data on which the right answer is exact, so a check can demand it to the last bit.

    Sums (matmul, sum, dot) get small integers, never all zero: matmul sums K terms of |a*b| <= 4 (exact while
    4K < 2**24); reductions draw from [-8, 8], whose partial sums are random walks far below 2**24 even for
    2**28 elements. max and min get standard-normal data: distinct values, and max/min round nothing.
    """
    if problem.kind == "reduce" and problem.family["op"] in ("max", "min"):
        return rng.standard_normal(shape, dtype=np.float32).astype(problem.dtype)
    bound = 2 if problem.kind == "matmul" else 8
    x = rng.integers(-bound, bound + 1, size=shape, dtype=np.int8).astype(problem.dtype)
    x.flat[0] = 1
    return x


def _compare(got: np.ndarray, expected: np.ndarray, what: str = "elements") -> str | None:
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(expected))
    bad = got != expected
    if not bad.any():
        return None
    where = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return (f"{int(bad.sum())} of {bad.size} {what} differ from the float64 reference; first at {where}: "
            f"{got[where]!r} instead of {expected[where]!r}")
