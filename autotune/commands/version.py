"""``autotune --version``: what a bug report needs to know about this installation.

autotune's version, Python's, and those of the packages that decide what a kernel compiles to and how fast it
compiles (numba, numba-cuda, NumPy, the CUDA wheels: cuda-bindings, NVVM, nvJitLink), the CUDA driver's where one
can be loaded, the YAML parser in use, and which of autotune's compile-time replacements of numba-cuda internals are active
(``autotune._patches.report()``).
"""
from __future__ import annotations

import platform
from importlib import metadata

PACKAGES = ("numba", "numba-cuda", "numpy", "cuda-bindings", "cuda-core", "nvidia-nvvm", "nvidia-nvjitlink",
            "nvidia-cuda-nvrtc", "optuna", "jinja2", "ml_dtypes")


def installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def driver_version() -> str:
    """The CUDA driver's version as 'major.minor' (cuda-bindings' public cuDriverGetVersion), or why none."""
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
        if int(err) != 0:
            return f"unavailable ({err!r})"
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception as exc:  # no driver library on this machine, or no cuda-bindings
        text = " ".join(str(exc).split()).split(". ")[0]
        return f"none loaded ({type(exc).__name__}: {text[:160]})"


def yaml_parser() -> str:
    """Which YAML parser reads databases and search spaces: libyaml (PyYAML's C extension, in PyPI's wheels) or,
    where PyYAML was built without it, its pure-Python parser, several times slower on a first call."""
    from ..core.yamlfast import parser_name

    if parser_name() == "libyaml":
        return "libyaml"
    return "PyYAML's pure-Python parser (no libyaml: first calls parse the databases seconds slower; " \
           "pip install --force-reinstall --only-binary=:all: pyyaml)"


def replacements() -> list[tuple[str, str]]:
    """(name, 'active' or 'inactive: why') for each compile-time replacement of numba-cuda internals."""
    from .. import _patches

    return list(_patches.report())


def version_report() -> str:
    """The lines ``autotune --version`` prints."""
    from ..core.version import __version__

    lines = [f"autotune {__version__}", f"python {platform.python_version()} ({platform.platform()})"]
    lines += [f"{name} {installed(name)}" for name in PACKAGES]
    lines.append(f"pyyaml {installed('pyyaml')}, parser: {yaml_parser()}")
    lines.append(f"CUDA driver: {driver_version()}")
    lines.append("compile-time replacements of numba-cuda (AUTOTUNE_NUMBA_PATCH chooses them):")
    lines += [f"  {name}: {state}" for name, state in replacements()]
    return "\n".join(lines)
