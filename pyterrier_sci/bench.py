"""Helpers for benchmark scripts (``benchmarks/bench_*.py``, and plugins' own).

Comparisons that hold on a noisy (shared) machine: ``interleaved`` runs the sides of a comparison
in turn (A B A B ...), so that both see the same load, ``ratio_summary`` gives the median of the
per-round ratios with their min and max, and ``load_note`` says how loaded the machine was (load
average before and after).  Also: the fastest wall time of repeated calls (``best``), a markdown
table of a result frame, a recorded results file that docs quote (``write_results``), and the CSFCube
re-ranking sample the LLM benchmarks judge.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import pandas as pd
import pyterrier as pt

from pyterrier_sci.artifacts import atomic_write_text
from pyterrier_sci.environment import environment


def best(fn: Callable[[], Any], repeats: int) -> Tuple[float, Any]:
    """(fastest wall time of ``repeats`` calls, the last result)."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


@dataclass
class Timings:
    """Wall times of interleaved runs: ``times[side][round]`` in seconds, ``order`` the (side, round)
    pairs in the order they ran, ``results[side]`` the last result of each side."""
    times: Dict[str, List[float]] = field(default_factory=dict)
    order: List[Tuple[str, int]] = field(default_factory=list)
    results: Dict[str, Any] = field(default_factory=dict)

    def median(self, side: str) -> float:
        return statistics.median(self.times[side])

    def ratio(self, num: str, den: str) -> "RatioSummary":
        """Per-round ratios ``num / den`` (e.g. ``ratio("toolkit", "raw")``)."""
        return ratio_summary(self.times[num], self.times[den])


def interleaved(sides: Mapping[str, Callable[[], Any]], rounds: int, *, warmup: int = 0, alternate: bool = False,
                clock: Callable[[], float] = time.perf_counter) -> Timings:
    """Run each side once per round, in the order given, for ``rounds`` rounds (A B A B ... for two
    sides), and time every call with ``clock``.  ``warmup`` untimed rounds run first, in the same
    order (JIT, page cache, lazy model loads).  ``alternate``: odd rounds run the sides in reverse
    order (A B, B A, A B, ...), which cancels an advantage of going first or second in a round.
    Returns :class:`Timings`; a side's calls of one round are the pair its ratios compare."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if not sides:
        raise ValueError("no sides to time")
    out = Timings(times={name: [] for name in sides})
    for _ in range(warmup):
        for name, fn in sides.items():
            out.results[name] = fn()
    for r in range(rounds):
        for name, fn in (reversed(list(sides.items())) if alternate and r % 2 else sides.items()):
            t = clock()
            out.results[name] = fn()
            out.times[name].append(clock() - t)
            out.order.append((name, r))
    return out


@dataclass(frozen=True)
class RatioSummary:
    """Median, min and max of per-round ratios (``ratios``, in round order)."""
    ratios: Tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def min(self) -> float:
        return min(self.ratios)

    @property
    def max(self) -> float:
        return max(self.ratios)

    @property
    def n(self) -> int:
        return len(self.ratios)

    def __str__(self) -> str:
        """``1.02 (0.97-1.10, n=5)``: the median, then the range of the per-round ratios."""
        return f"{self.median:.2f} ({self.min:.2f}-{self.max:.2f}, n={self.n})"

    def as_dict(self) -> dict:
        return {"median": self.median, "min": self.min, "max": self.max, "n": self.n, "ratios": list(self.ratios)}


def ratio_summary(num: Sequence[float], den: Sequence[float]) -> RatioSummary:
    """The per-round ratios ``num[i] / den[i]`` (same round, so the same machine load) summarised by
    their median, min and max."""
    if len(num) != len(den):
        raise ValueError(f"ratio of {len(num)} timings to {len(den)}: each round needs both sides")
    if not num:
        raise ValueError("no timings to compare")
    if any(d <= 0 for d in den):
        raise ValueError("a denominator timing is zero or negative")
    return RatioSummary(tuple(a / b for a, b in zip(num, den)))


def load_note(before: Optional[Sequence[float]] = None) -> str:
    """How loaded the machine is: the 1/5/15-minute load averages and the core count; with
    ``before`` (an earlier ``os.getloadavg()``), the averages before and now."""
    now = os.getloadavg()
    fmt = lambda la: "/".join(f"{x:.2f}" for x in la)  # noqa: E731
    cores = os.cpu_count()
    if before is None:
        return f"load average {fmt(now)} (1/5/15 min) on {cores} cores"
    return f"load average {fmt(before)} before, {fmt(now)} after (1/5/15 min) on {cores} cores"


def markdown(df: pd.DataFrame) -> str:
    """A markdown table (floats with two decimals), without pandas' optional ``tabulate``."""
    def fmt(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _isa_cap() -> str:
    """``ONEDNN_MAX_CPU_ISA=... `` when set: a run with part of the CPU hidden from oneDNN (OpenVINO's kernels)
    says so in its command line."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"ONEDNN_MAX_CPU_ISA={cap} " if cap else ""


def write_results(path: Any, title: str, script: str, argv: Optional[Sequence[str]], details: Sequence[str],
                  sections: Sequence[Tuple[str, str]], note: str) -> str:
    """Writes a benchmark's recorded results file (atomically): ``# title``, the CPU, Python and date, the
    command (``script`` with ``argv``, default ``sys.argv[1:]``, after ``ONEDNN_MAX_CPU_ISA=...`` when that is
    set), ``details`` lines, then one ``## heading``
    with its table per section, then ``note`` (the load).  Docs quote a section's table under
    ``<!-- recorded: FILE, heading -->``, which ``tests/test_recorded_tables.py`` checks line for line.
    Returns the text written."""
    args = list(argv) if argv is not None else sys.argv[1:]
    lines = [f"# {title}", "",
             f"CPU: {environment()['cpu'].get('model') or platform.processor()}, {os.cpu_count()} CPUs; "
             f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"command: {_isa_cap()}python {script} {' '.join(args)}", *details, ""]
    for heading, table in sections:
        lines += [f"## {heading}", "", table, ""]
    text = "\n".join(lines + [note, ""])
    atomic_write_text(path, text, "the benchmark's results file")
    return text


def word_pieces(st, texts: Sequence[str], batch: int = 64) -> List[int]:
    """Word pieces per text as the sentence-transformers model ``st`` reads them (its tokenizer, cut at its maximum
    length), ``batch`` texts at a time."""
    counts: List[int] = []
    for start in range(0, len(texts), batch):
        counts += st[0].preprocess(list(texts[start:start + batch]))["attention_mask"].sum(1).tolist()
    return counts


def csfcube_rerank_sample(n_queries: int, depth: int) -> pd.DataFrame:
    """The first ``n_queries`` queries of CSFCube's method facet with the top ``depth`` documents of
    their candidate pool, as a result frame with ``title`` and ``abstract`` (what the LLM re-rankers
    read)."""
    import ir_datasets

    ds = pt.get_dataset("irds:sci/csfcube/method")
    topics = ds.get_topics().head(n_queries)
    pool = ds.get_results()
    pool = pool[pool["qid"].isin(topics["qid"])]
    pool = pool.sort_values(["qid", "rank"] if "rank" in pool.columns else ["qid"], kind="stable")
    pool = pool.groupby("qid", sort=False).head(depth).reset_index(drop=True)
    pool["rank"] = pool.groupby("qid").cumcount()
    pool["score"] = -pool["rank"].astype(float)
    docs = ir_datasets.load("sci/csfcube").docs_store().get_many(list(pool["docno"].unique()))
    df = pool[["qid", "docno", "score", "rank"]].merge(topics[["qid", "query"]], on="qid")
    df["title"] = [docs[d].title for d in df["docno"]]
    df["abstract"] = [docs[d].abstract for d in df["docno"]]
    return df
