"""Facts about the current GPU, with stand-ins under the CUDA simulator."""
from __future__ import annotations

import re
from dataclasses import dataclass

from numba import config

SIMULATOR_SM_COUNT = 2


def simulator_active() -> bool:
    return bool(config.ENABLE_CUDASIM)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    cc: tuple[int, int]
    sm_count: int
    l2_bytes: int

    @property
    def slug(self) -> str:
        return device_slug(self.name)

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': stable file name of a GPU model."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def gpu_available() -> bool:
    from numba import cuda

    if simulator_active():
        return False
    try:
        return cuda.is_available() and len(cuda.gpus) > 0
    except Exception:
        return False


def current_device() -> DeviceInfo:
    from numba import cuda

    if simulator_active():
        return DeviceInfo(name="CUDA simulator", cc=(9, 0), sm_count=SIMULATOR_SM_COUNT, l2_bytes=1 << 20)
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceInfo(name=name, cc=tuple(dev.compute_capability), sm_count=dev.MULTIPROCESSOR_COUNT,
                      l2_bytes=dev.L2_CACHE_SIZE)
