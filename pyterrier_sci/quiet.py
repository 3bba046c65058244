"""Quiet native output: what C/C++ libraries (PISA, colbert-ai's extensions, llama.cpp) write
straight to the process's stdout/stderr file descriptors, which Python's own redirection misses."""
from __future__ import annotations

import contextlib
import logging
import os
import sys

__all__ = ["quiet_native", "lowered_logger"]


@contextlib.contextmanager
def quiet_native(enabled: bool = True):
    """Silences what native code (PISA's C++ progress and log lines) writes to the process's
    stdout/stderr file descriptors; Python-level output is flushed first."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


@contextlib.contextmanager
def lowered_logger(logger: logging.Logger, level: int):
    """Within it, ``logger`` lets through only records of ``level`` and above (its own level restored after)."""
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)
