"""Rank fusion: reciprocal rank fusion (Cormack et al., SIGIR 2009), as PRISM and Pyserini use it."""
from __future__ import annotations

import importlib
from typing import Optional, Sequence

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import take_rows


def rrf_scores(results: Sequence[pd.DataFrame], k: float = 60, weights: Optional[Sequence[float]] = None,
               rank_base: int = 1) -> pd.DataFrame:
    """``(qid, docno, score)`` with ``score = sum_i w_i / (k + rank_i)`` over the result frames that
    rank the document; ``rank_i`` counts from ``rank_base`` (1: Pyserini's and the paper's convention).
    Ranks are recomputed from each frame's scores."""
    weights = [1.0] * len(results) if weights is None else list(weights)
    if len(weights) != len(results):
        raise ValueError(f"{len(results)} rankings but {len(weights)} weights")
    parts = []
    for w, r in zip(weights, results):
        if len(r) == 0:
            continue
        r = r[["qid", "docno", "score"]].copy()
        r["_r"] = r.groupby("qid")["score"].rank(method="first", ascending=False) - 1 + rank_base
        parts.append(pd.DataFrame({"qid": r["qid"], "docno": r["docno"], "score": w / (k + r["_r"])}))
    if not parts:
        return pd.DataFrame(columns=["qid", "docno", "score"])
    return pd.concat(parts).groupby(["qid", "docno"], as_index=False, sort=False)["score"].sum()


class RRFusion(pt.Transformer):
    """Reciprocal rank fusion of the rankings of several transformers.

    ``score(d) = sum_i w_i / (k + rank_i(d))`` with **1-based** ranks (the first document of a ranking
    has rank 1), which is Cormack et al.'s definition and Pyserini's ``reciprocal_rank_fusion``
    convention (PyTerrier's own ranks are 0-based; ``pyterrier_alpha.RRFusion`` uses them as they are,
    which shifts the scores; pass ``rank_base=0`` to reproduce it).  A document missing from a
    ranking contributes nothing for it.  Query columns of the input are kept.

    Args:
        transformers: the rankers to fuse (each gets the same input).
        k: the RRF constant (60, as in the paper and PRISM).
        weights: optional weight per ranker (default 1 each).
        num_results: results kept per query (``None``: all).
        rank_base: 1 (default) or 0.
    """
    schematic = {"inner_pipelines_mode": "combine", "label": "RRF"}

    def __init__(self, *transformers: pt.Transformer, k: float = 60, weights: Optional[Sequence[float]] = None,
                 num_results: Optional[int] = 1000, rank_base: int = 1):
        if not transformers:
            raise ValueError("RRFusion needs at least one transformer")
        if rank_base not in (0, 1):
            raise ValueError("rank_base must be 0 or 1")
        self.transformers = tuple(transformers)
        self.k = k
        self.weights = None if weights is None else tuple(weights)
        self.num_results = num_results
        self.rank_base = rank_base
        if self.weights is not None and len(self.weights) != len(self.transformers):
            raise ValueError(f"{len(self.transformers)} rankers but {len(self.weights)} weights")

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp)
        query_cols = [c for c in inp.columns if c not in ("docno", "score", "rank")]
        out_cols = query_cols + ["docno", "score", "rank"]
        if len(inp) == 0:
            return pd.DataFrame(columns=out_cols)
        results = [t(inp) for t in self.transformers]
        fused = rrf_scores(results, self.k, self.weights, self.rank_base)
        fused = fused.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable")
        fused = fused.reset_index(drop=True)
        fused["rank"] = fused.groupby("qid").cumcount()
        if self.num_results is not None:
            fused = fused[fused["rank"] < self.num_results].reset_index(drop=True)
        queries = inp[query_cols].drop_duplicates("qid")
        at = pd.Index(queries["qid"]).get_indexer(fused["qid"])
        fused = fused[at >= 0].reset_index(drop=True)
        # the query's columns by reference, cut first: full-paper queries are long texts (take_rows)
        out = take_rows(queries.drop(columns="qid"), at[at >= 0])
        for c in ("qid", "docno", "score", "rank"):
            out[c] = fused[c].values
        return out[out_cols]

    def fuse_rank_cutoff(self, k: int) -> Optional["RRFusion"]:
        if self.num_results is None or k < self.num_results:
            return RRFusion(*self.transformers, k=self.k, weights=self.weights, num_results=k, rank_base=self.rank_base)
        return None

    def subtransformers(self):
        return {"transformers": list(self.transformers)}

    def __repr__(self) -> str:
        return f"RRFusion({', '.join(map(repr, self.transformers))}, k={self.k})"


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "rrf_component":
        return importlib.import_module(f"{__package__}.components").rrf_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
