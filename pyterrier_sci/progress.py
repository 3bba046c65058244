"""Long steps that say what they are doing: :func:`phase` names a step (exporting, calibrating,
compiling, encoding, clustering, indexing) with a progress bar of its own (``pt.tqdm``), and
:func:`announce` says once, before a long first use, what is about to be computed."""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Optional

import pyterrier as pt

__all__ = ["phase", "announce", "Estimate"]


@contextlib.contextmanager
def phase(what: str, verbose: bool = True, total: Optional[int] = None, unit: str = "step") -> Iterator:
    """A bar named ``what`` for one step of a long build.  It yields the bar: a step with units
    (``total`` of them, e.g. calibration texts) calls ``bar.update(n)``; a step without (an export,
    a compilation) gets a bar of one unit, completed when the block ends, so that its time shows."""
    bar = pt.tqdm(desc=what, total=total if total is not None else 1, unit=unit if total is not None else "step",
                  disable=not verbose, leave=True, file=sys.stderr)
    try:
        yield bar
        if total is None:
            bar.update(1 - bar.n)
    finally:
        bar.close()


def announce(message: str, verbose: bool = True) -> None:
    """One line on stderr (when ``verbose``), above any progress bar."""
    if verbose:
        pt.tqdm.write(message, file=sys.stderr)


class Estimate:
    """Says once, after the first ``after_s`` seconds of an encoding of ``total`` items, about how
    long the rest will take at the rate seen so far (``update(n)`` per finished batch)."""

    def __init__(self, total: Optional[int], what: str, verbose: bool = True, after_s: float = 5.0):
        self.total, self.what, self.verbose, self.after_s = total, what, verbose, after_s
        self.done, self.said, self.t0 = 0, False, time.perf_counter()

    def update(self, n: int) -> None:
        self.done += n
        elapsed = time.perf_counter() - self.t0
        if self.said or not self.total or elapsed < self.after_s or self.done >= self.total:
            return
        self.said = True
        rate = self.done / elapsed
        left = (self.total - self.done) / rate
        span = f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"
        announce(f"{self.what}: {rate:,.0f} documents/s here, about {span} more for the "
                 f"{self.total - self.done:,} left", self.verbose)
