"""autotune's messages go through one logger, ``logging.getLogger("autotune")``.

Progress (a tuning run's line per variant, what a command is doing) is logged at INFO, the details of failures
(tracebacks of failed variants) at DEBUG, problems at WARNING. As a library autotune adds no handler of its own
(Python's default shows WARNING and above), so a program decides what it sees::

    import logging
    logging.getLogger("autotune").setLevel(logging.INFO)

The ``autotune`` command shows INFO on stderr; ``-v`` adds DEBUG, ``-q`` keeps warnings and errors only, ``-qq``
errors only. A kernel lookup that falls back is a ``TunedKernelWarning`` (the ``warnings`` module), not a log
record, so that it can be filtered and turned into an error like any Python warning.
"""
from __future__ import annotations

import logging
import sys

LOGGER_NAME = "autotune"
logger = logging.getLogger(LOGGER_NAME)


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a record comes (a test's capture included)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler sets it; the property always answers sys.stderr
        pass


_handler: logging.Handler | None = None


def level_for(verbose: int = 0, quiet: int = 0) -> int:
    """INFO, one step down per ``-v`` (DEBUG), one step up per ``-q`` (WARNING, ERROR)."""
    return min(logging.CRITICAL, max(logging.DEBUG, logging.INFO - 10 * verbose + 10 * quiet))


def configure(verbose: int = 0, quiet: int = 0) -> None:
    """Show autotune's records on stderr, plain messages, at the level ``-v``/``-q`` ask for (the command line
    calls this once)."""
    global _handler
    if _handler is None:
        _handler = _Stderr()
        _handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(_handler)
        logger.propagate = False
    logger.setLevel(level_for(verbose, quiet))


__all__ = ["LOGGER_NAME", "logger", "configure", "level_for"]
