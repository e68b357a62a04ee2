"""Which backend this process runs kernels on: a CUDA GPU, or Numba's CUDA simulator on the CPU.

It is decided once, when Numba is first imported (``NUMBA_ENABLE_CUDASIM=1`` selects the simulator; the command
line sets it for ``--simulator`` before importing Numba), and read here once; kernels, launches and timing take
the answer as an argument from there on.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def simulator() -> bool:
    """True when kernels run in Numba's CUDA simulator in this process."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)
