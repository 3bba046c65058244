"""Helpers for benchmark scripts (``benchmarks/bench_*.py``, and plugins' own): the fastest wall
time of repeated calls, a markdown table of a result frame, and the CSFCube re-ranking sample the
LLM benchmarks judge."""
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


def csfcube_rerank_sample(n_queries: int, depth: int) -> pd.DataFrame:
    """The first ``n_queries`` queries of CSFCube's method facet with the top ``depth`` documents of
    their candidate pool, as a result frame with ``title`` and ``abstract`` (what the LLM re-rankers
    read)."""
    import ir_datasets
    import pyterrier as pt

    import pyterrier_sci.datasets  # noqa: F401  (registers sci/ ids)
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
