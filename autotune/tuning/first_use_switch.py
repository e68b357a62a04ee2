"""The switch of tuning on first use in the environment, ``AUTOTUNE_TUNE_ON_FIRST_USE``, read in this one place.

``import autotune`` reads it (to turn tuning on first use on from the start) and so does
``first_use.enable_from_environment``. This module imports nothing but ``os``, so that ``import autotune`` can
read the switch without loading NumPy or Numba (``--simulator`` must still be able to switch Numba before it loads);
first_use.py, which does the tuning, is imported only where the switch is on.
"""
from __future__ import annotations

import os

ENVIRONMENT = "AUTOTUNE_TUNE_ON_FIRST_USE"
ON = ("1", "true", "yes", "on")
OFF = ("", "0", "false", "no", "off")


def first_use_requested() -> bool:
    """Whether ``AUTOTUNE_TUNE_ON_FIRST_USE`` turns tuning on first use on: 1 or another word of ``ON`` does, unset,
    empty, 0 or another word of ``OFF`` does not (any case, spaces around ignored). ValueError for anything else: a
    misspelt switch is refused loudly, never taken as off."""
    value = os.environ.get(ENVIRONMENT, "").strip().lower()
    if value in OFF:
        return False
    if value in ON:
        return True
    raise ValueError(f"{ENVIRONMENT}={os.environ[ENVIRONMENT]!r}: use 1 to turn tuning on first use on, 0 off")
