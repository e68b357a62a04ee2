"""Facts about the current GPU, with stand-ins under the CUDA simulator."""
from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from typing import Any

from .backend import simulator

SIMULATOR_SM_COUNT = 2
FP64_RATE_DIVISOR = {(6, 0): 2, (7, 0): 2, (8, 0): 2, (9, 0): 2}
FP64_TENSOR_FACTOR = {(8, 0): 2, (9, 0): 2}  # DMMA: A100 19.5 vs 9.7, H100 SXM 67 vs 33.5 TFLOP/s
TF32_TENSOR_FLOP_PER_CLOCK = {(8, 0): 1024, (9, 0): 2048}  # per SM, dense: A100 156, H100 SXM 495 TFLOP/s
FP16_TENSOR_FLOP_PER_CLOCK = {(8, 0): 2048, (9, 0): 4096}  # per SM, dense, fp32 accumulation: A100 312, H100 989


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    cc: tuple[int, int]
    sm_count: int
    l2_bytes: int
    clock_khz: int = 0
    memory_clock_khz: int = 0
    bus_bits: int = 0

    @property
    def slug(self) -> str:
        return device_slug(self.name)

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def peak_tflops(self, dtype: str) -> float | None:
        """The fastest matmul rate the GPU offers without changing precision: fp32 on the CUDA cores (128 lanes
        per SM, two flops per FMA, at the boost clock); fp64 on its tensor cores where it has them (A100,
        H100/H200: twice the CUDA-core rate, which is half fp32's on the data-centre parts and 1/64 elsewhere);
        "tf32" and "float16": the TF32 and fp16 tensor cores' dense rates (A100, H100/H200; None elsewhere)."""
        if not self.clock_khz:
            return None
        tensor = {"tf32": TF32_TENSOR_FLOP_PER_CLOCK, "float16": FP16_TENSOR_FLOP_PER_CLOCK}
        if dtype in tensor:  # the tensor cores (dense), where their rate is known
            flop = tensor[dtype].get(self.cc)
            return self.sm_count * flop * self.clock_khz * 1e3 / 1e12 if flop else None
        lanes = 128
        if dtype == "float64":
            lanes = 128 // FP64_RATE_DIVISOR.get(self.cc, 64) * FP64_TENSOR_FACTOR.get(self.cc, 1)
        return self.sm_count * lanes * 2 * self.clock_khz * 1e3 / 1e12

    def peak_gbps(self) -> float | None:
        """Datasheet memory bandwidth: double data rate over the bus width."""
        if not self.memory_clock_khz:
            return None
        return 2 * self.memory_clock_khz * 1e3 * self.bus_bits / 8 / 1e9

    def as_dict(self) -> dict:
        return {"name": self.name, "cc": f"{self.cc[0]}.{self.cc[1]}", "sm_count": self.sm_count}

    @classmethod
    def from_record(cls, record: dict) -> "DeviceInfo":
        """The GPU model a database file or matrix declares (``as_dict``'s form): name, compute capability and
        multiprocessor count, enough to fit a configuration to a shape without the GPU (132 SMs where the record
        does not say)."""
        major, _, minor = str(record.get("cc", "0.0")).partition(".")
        cc = (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else (0, 0)
        sm_count = record.get("sm_count")
        return cls(name=str(record.get("name", "")), cc=cc,
                   sm_count=sm_count if type(sm_count) is int and sm_count > 0 else 132, l2_bytes=0)


DEVICE_FIELDS = ("name", "cc", "sm_count")
MAX_NAME = 200


def checked_device_record(value: Any, error: type[Exception], field: str = "device") -> dict[str, Any]:
    """A GPU model's record (``DeviceInfo.as_dict``'s form) as a database file or a matrix declares it, checked and
    in one form: ``name`` (text), ``cc`` ('9.0'; a number such as 9.0 is read as its text), ``sm_count`` (a
    non-negative integer), nothing else; ``error`` naming the field otherwise. Files are matched to GPU models by
    these, so two spellings of one compute capability must not make two models."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or \
            not 0 < len(value["name"]) <= MAX_NAME or not value["name"].strip() or not value["name"].isprintable():
        raise error(f"field {field!r} must be a mapping with a 'name' (printable text of 1 to {MAX_NAME} characters)")
    unknown = [k for k in value if k not in DEVICE_FIELDS]
    if unknown:
        raise error(f"field {field!r}: unknown field {str(unknown[0])[:40]!r} (a device has "
                    f"{', '.join(DEVICE_FIELDS)})")
    record = {"name": value["name"]}
    if "cc" in value:
        cc = value["cc"]
        text = f"{cc:.1f}" if type(cc) is float and math.isfinite(cc) and 0 <= cc < 100 else cc
        if not isinstance(text, str) or not re.fullmatch(r"\d{1,2}\.\d{1,2}", text):
            raise error(f"field {field!r}: 'cc' must be a compute capability such as '9.0', got {str(cc)[:40]!r}")
        major, minor = text.split(".")
        record["cc"] = f"{int(major)}.{int(minor)}"  # '9.00' and '09.0' are '9.0'
    if "sm_count" in value:
        if type(value["sm_count"]) is not int or not 0 <= value["sm_count"] <= 100000:
            raise error(f"field {field!r}: 'sm_count' must be a non-negative integer")
        record["sm_count"] = value["sm_count"]
    return record


#: what two GPU models must share for one to serve a case with the other's fitted rule: a rule's portfolio is of
#: the compute capability's kernels and the family fits its splits to the multiprocessor count
SIBLING_FIELDS = ("cc", "sm_count")


def sibling_differences(source: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """'cc 9.0 and 8.0': each sibling field in which two checked device records differ, or that either lacks;
    empty: siblings."""
    return [f"{key} {source.get(key)} and {target.get(key)}" for key in SIBLING_FIELDS
            if source.get(key) is None or target.get(key) is None or str(source[key]) != str(target[key])]


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': stable file name of a GPU model."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def same_model(a: str, b: str) -> bool:
    """Whether two GPU model names are one model's: lookups find a model's file by ``device_slug``, so
    'CUDA-simulator' and 'CUDA simulator' share one file."""
    return device_slug(a) == device_slug(b)


class NoGPUError(RuntimeError):
    """No CUDA GPU (or driver) is visible and the simulator is not on."""


NO_GPU_ADVICE = ("no CUDA GPU is visible on this machine (or its driver cannot be loaded). To run kernels without a "
                 "GPU, use Numba's CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 in the environment before Python starts "
                 "(slow: for tests and dry runs)")


@contextlib.contextmanager
def gpu_required():
    """Turn Numba's driver error into a NoGPUError that says what to do."""
    from numba.cuda.cudadrv.error import CudaSupportError

    try:
        yield
    except CudaSupportError as exc:
        raise NoGPUError(f"{NO_GPU_ADVICE}. Numba said: {' '.join(str(exc).split())[:200]}") from None


def gpu_available() -> bool:
    from numba import cuda

    if simulator():
        return False
    try:
        return cuda.is_available() and len(cuda.gpus) > 0
    except Exception:
        return False


def selected_gpus() -> tuple[int, ...]:
    """The index of the GPU this process works on (``cuda.select_device``, else the first), as the ``devices`` of
    a compile pool (tuning/worker.py); none in the simulator or without a GPU."""
    if simulator() or not gpu_available():
        return ()
    from numba import cuda

    return (int(cuda.get_current_device().id),)


def current_device() -> DeviceInfo:
    from numba import cuda

    if simulator():
        return DeviceInfo(name="CUDA simulator", cc=(9, 0), sm_count=SIMULATOR_SM_COUNT, l2_bytes=1 << 20)
    with gpu_required():
        dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceInfo(name=name, cc=tuple(dev.compute_capability), sm_count=dev.MULTIPROCESSOR_COUNT,
                      l2_bytes=dev.L2_CACHE_SIZE, clock_khz=dev.CLOCK_RATE, memory_clock_khz=dev.MEMORY_CLOCK_RATE,
                      bus_bits=dev.GLOBAL_MEMORY_BUS_WIDTH)


def target(cc: tuple[int, int]) -> tuple:
    """The compute capability compiled for ahead of time: ``cc`` with the architecture-specific suffix "a" from
    9.0 on, as numba-cuda compiles on such a GPU (sm_90a), so instructions only it has (wgmma) compile too."""
    return (*cc[:2], "a") if tuple(cc[:2]) >= (9, 0) else tuple(cc[:2])


def arch(cc: tuple[int, int]) -> str:
    """The linker's name of ``target(cc)``: sm_90a for 9.0."""
    return "sm_" + "".join(map(str, target(cc)))
