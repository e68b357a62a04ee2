"""What several commands' options share: number and GPU-index parsing, the dtype option, the exit codes, and the
check that a GPU is there (with the simulator dry run named where there is none)."""
from __future__ import annotations

import argparse
import math

from ..core.log import logger

EXIT_ERROR, EXIT_NO_GPU = 2, 3


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return value


def positive_float(text: str) -> float:
    value = number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", help="element type (default float32; the family says which it has)")


def gpu_indices(text: str) -> tuple[int, ...]:
    """The GPU indices of a --device option ("0", "0,1,2,3")."""
    try:
        devices = tuple(int(d) for d in str(text).split(","))
    except ValueError:
        raise ValueError(f"--device takes GPU indices such as 0 or 0,1; got {text!r}") from None
    if any(d < 0 for d in devices):
        raise ValueError(f"--device takes GPU indices such as 0 or 0,1; got {text!r}")
    return devices


def require_gpu(args, command: str, dry_run: bool = True, what: str = "tiny shape, meaningless timings") -> bool:
    from ..core.device import gpu_available

    if getattr(args, "simulator", False) or gpu_available():
        return True
    hint = (f"  For a dry run of the whole pipeline in Numba's CUDA simulator ({what}):\n"
            f"      autotune {command} --simulator" if dry_run else
            "  It times kernels against vendor libraries, which needs a GPU; `autotune selftest --simulator` checks "
            "kernels without one.")
    logger.error(f"autotune: no CUDA GPU is visible on this machine, so `autotune {command}` cannot measure "
                 f"anything.\n{hint}")
    return False
