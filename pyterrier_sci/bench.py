"""Helpers for benchmark scripts (``benchmarks/bench_*.py``, and plugins' own): the fastest wall
time of repeated calls and a markdown table of a result frame."""
from __future__ import annotations

import time
from typing import Any, Callable, Tuple

import pandas as pd


def best(fn: Callable[[], Any], repeats: int) -> Tuple[float, Any]:
    """(fastest wall time of ``repeats`` calls, the last result)."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def markdown(df: pd.DataFrame) -> str:
    """A markdown table (floats with two decimals), without pandas' optional ``tabulate``."""
    def fmt(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
