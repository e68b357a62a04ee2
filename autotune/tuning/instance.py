"""One problem's data on the device: the family's verification cases (check inputs on which the answer is known,
and copies with special values planted) and timing inputs (fresh random data, never zeros, which can run faster),
and the check of a kernel's NaN-poisoned output against each case with the family's oracle."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..core.dtypes import kernel_view
from ..core.oracle import poison
from ..core.problem import Problem


class Instance:
    """A problem's verification cases and timing inputs on the device, and the check of a kernel against them."""

    def __init__(self, problem: Problem, rng: np.random.Generator):
        from numba import cuda

        from ..runtime.arrays import host_to_device

        self.problem = problem
        self.rng = rng
        impl = problem.impl
        self.check_host = impl.inputs(problem, rng, "check")
        self.cases = [(case, [host_to_device(a) for a in case.inputs])
                      for case in impl.verification(problem, self.check_host, rng)]
        self.check_args = self.cases[0][1]
        self.time_host = impl.inputs(problem, rng, "time")
        self.time_args = [host_to_device(a) for a in self.time_host]
        self.out = cuda.device_array(problem.out_shape, dtype=problem.out_dtype)
        self.poisoned = host_to_device(np.full(problem.out_shape, poison(problem.out_dtype), problem.out_dtype))

    def run(self, kernel, timing: bool = False) -> None:
        kernel(*(self.time_args if timing else self.check_args), out=self.out)

    def poison(self) -> None:
        """Fill the output with the poison, from a poisoned copy kept on the device (a check's only copy in); as
        bits where the simulator's copy cannot cast (bfloat16)."""
        kernel_view(self.out).copy_to_device(kernel_view(self.poisoned))

    def check(self, kernel) -> str | None:
        """Run ``kernel`` on each case into a poisoned output (NaN, see oracle.poison); None if every result is right,
        else what is wrong with the first wrong one (the family's oracle says)."""
        return next((verdict for verdict in self.verdicts(kernel) if verdict), None)

    def verdicts(self, kernel) -> Iterator[str | None]:
        """The oracle's verdict on each case in turn (None: right), ``kernel`` run into a poisoned output for each;
        lazily, so that ``check`` stops at the first wrong one."""
        from ..runtime.arrays import device_to_host

        for case, args in self.cases:
            self.poison()
            kernel(*args, out=self.out)
            yield self.problem.impl.verify(self.problem, case, device_to_host(self.out), self.rng)
