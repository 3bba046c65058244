"""From chunk hits to papers: chunk->paper aggregation, aspect score fusion (PRISM Table 6), and the
rule that a query paper is never its own candidate."""
from __future__ import annotations

from typing import List, Optional

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import sorted_results
from pyterrier_sci.text import SEPARATOR

AGGREGATIONS = ("max", "kmaxavg", "mean", "sum", "count")
FUSIONS = ("maxsim", "sum")


def _papers(docnos: pd.Series) -> pd.Series:
    """Paper docnos of chunk docnos (``<paper>%p<i>``); other docnos unchanged."""
    docnos = docnos.astype(str)
    return docnos.str.split(SEPARATOR, n=1, regex=False).str[0]


def _query_columns(inp: pd.DataFrame) -> List[str]:
    return [c for c in pt.model.query_columns(inp, qid=True) if c in inp.columns]


def _rank(df: pd.DataFrame) -> pd.DataFrame:
    df = df.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable").reset_index(drop=True)
    df["rank"] = df.groupby("qid", sort=False).cumcount()
    return df


class ChunkToPaper(pt.Transformer):
    """Maps a ranking of chunks (docnos ``<paper>%p<i>``, see :mod:`pyterrier_sci.text`) to a ranking
    of papers.

    ``agg``:

    * ``max`` (default, PRISM's): a paper scores its best chunk's score - the same ranking as
      ``pt.text.max_passage()``, without carrying the best chunk's other columns;
    * ``kmaxavg``: the mean of its ``k`` best chunk scores (fewer when fewer were retrieved;
      Chen et al. TREC 2020, ``pt.text.kmaxavg_passage``);
    * ``mean``: the mean score of its retrieved chunks (``pt.text.mean_passage``);
    * ``sum``: the sum of its retrieved chunk scores;
    * ``count``: how many of its chunks were retrieved (ties broken by the best chunk score).

    Only retrieved chunks count: a paper none of whose chunks was retrieved is not ranked.  Query
    columns are kept; chunk-level columns (``text``, ...) are dropped.  Output: one row per
    (query, paper) with ``docno`` = the paper's docno, ``score`` and 0-based ``rank``.
    """
    schematic = {"label": "chunks->papers"}

    def __init__(self, agg: str = "max", k: int = 2, num_results: Optional[int] = None):
        if agg not in AGGREGATIONS:
            raise ValueError(f"unknown chunk aggregation {agg!r}: use one of {', '.join(AGGREGATIONS)}")
        if k < 1:
            raise ValueError("k must be >= 1")
        self.agg = agg
        self.k = k
        self.num_results = num_results

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["score"])
        qcols = _query_columns(inp)
        if len(inp) == 0:
            return pd.DataFrame(columns=qcols + ["docno", "score", "rank"])
        df = pd.DataFrame({"qid": inp["qid"].to_numpy(), "docno": _papers(inp["docno"]).to_numpy(),
                           "score": inp["score"].astype(float).to_numpy()})
        g = df.groupby(["qid", "docno"], sort=False)["score"]
        if self.agg == "max":
            scores = g.max()
        elif self.agg == "mean":
            scores = g.mean()
        elif self.agg == "sum":
            scores = g.sum()
        elif self.agg == "kmaxavg":
            df = df.sort_values("score", ascending=False, kind="stable")
            top = df.groupby(["qid", "docno"], sort=False).head(self.k)
            scores = top.groupby(["qid", "docno"], sort=False)["score"].mean()
        else:  # count, ties broken by the best chunk (scaled below one count)
            best = g.max()
            span = float(best.max() - best.min()) or 1.0
            scores = g.size().astype(float) + 0.5 * (best - best.min()) / span
        out = scores.rename("score").reset_index()
        out = _rank(out)
        if self.num_results is not None:
            out = out[out["rank"] < self.num_results]
        queries = inp[qcols].drop_duplicates("qid")
        out = queries.merge(out, on="qid", how="inner")
        return _rank(out)[qcols + ["docno", "score", "rank"]]

    def __repr__(self) -> str:
        return f"ChunkToPaper(agg={self.agg!r}" + (f", k={self.k}" if self.agg == "kmaxavg" else "") + ")"


class ExcludeQueryPaper(pt.Transformer):
    """Removes the query paper from its own ranking: rows whose (paper) docno equals the query's
    paper id - the ``qid`` (default), or the value of ``column`` where query ids are not the
    corpus's docnos.  Chunk docnos ``<paper>%p<i>`` count as their paper.  Ranks are recomputed."""
    schematic = {"label": "exclude query"}

    def __init__(self, column: Optional[str] = None):
        self.column = column

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=[self.column] if self.column else [])
        if len(inp) == 0:
            return inp if "rank" in inp.columns else inp.assign(rank=pd.Series(dtype=int))
        own = (inp[self.column] if self.column else inp["qid"]).astype(str).to_numpy()
        keep = _papers(inp["docno"]).to_numpy() != own
        out = inp[keep].copy()
        if "score" in out.columns:
            return sorted_results(pt.model.add_ranks(out.reset_index(drop=True))).reset_index(drop=True)
        return out.reset_index(drop=True)

    def fuse_rank_cutoff(self, k: int):
        return None  # removing a row moves the ones below it up: the cutoff must come after

    def __repr__(self) -> str:
        return "ExcludeQueryPaper()" if self.column is None else f"ExcludeQueryPaper(column={self.column!r})"


class AspectScoreFusion(pt.Transformer):
    """Embedding-level merging of several aspect queries' chunk rankings into one paper ranking -
    the alternatives to rank fusion in PRISM's Table 6:

    * ``maxsim`` (late interaction): ``score(P) = sum over aspect queries q of max over P's chunks
      c of sim(q, c)``;
    * ``sum`` ("naive aggregation"): ``score(P) = sum over q and over P's chunks c of sim(q, c)``.

    Each input pipeline is one aspect query's retrieval over a chunk index (it gets this
    transformer's input and returns chunks with similarity scores).  Similarities are those of the
    retrieved chunks: a chunk a branch did not retrieve contributes nothing, so the sums run over
    each query's top-``num_results`` chunks, not over every chunk of the corpus as in the paper
    (use a deep chunk retrieval, e.g. 5,000 chunks, to approach it).  Query columns of the input
    are kept.
    """
    schematic = {"inner_pipelines_mode": "combine", "label": "aspect fusion"}

    def __init__(self, *transformers: pt.Transformer, method: str = "maxsim", num_results: Optional[int] = 1000):
        if not transformers:
            raise ValueError("AspectScoreFusion needs at least one aspect retrieval pipeline")
        if method not in FUSIONS:
            raise ValueError(f"unknown fusion {method!r}: use one of {', '.join(FUSIONS)} "
                             "(or rrf(...) for rank fusion)")
        self.transformers = tuple(transformers)
        self.method = method
        self.num_results = num_results

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp)
        qcols = [c for c in inp.columns if c not in ("docno", "score", "rank")]
        if len(inp) == 0:
            return pd.DataFrame(columns=qcols + ["docno", "score", "rank"])
        parts = []
        for t in self.transformers:
            res = t(inp)
            if len(res) == 0:
                continue
            df = pd.DataFrame({"qid": res["qid"].to_numpy(), "docno": _papers(res["docno"]).to_numpy(),
                               "score": res["score"].astype(float).to_numpy()})
            g = df.groupby(["qid", "docno"], sort=False)["score"]
            parts.append((g.max() if self.method == "maxsim" else g.sum()).reset_index())
        if not parts:
            return pd.DataFrame(columns=qcols + ["docno", "score", "rank"])
        fused = pd.concat(parts).groupby(["qid", "docno"], as_index=False, sort=False)["score"].sum()
        out = _rank(inp[qcols].drop_duplicates("qid").merge(fused, on="qid", how="inner"))
        if self.num_results is not None:
            out = out[out["rank"] < self.num_results].reset_index(drop=True)
        return out[qcols + ["docno", "score", "rank"]]

    def subtransformers(self):
        return {"transformers": list(self.transformers)}

    def __repr__(self) -> str:
        return f"AspectScoreFusion({', '.join(map(repr, self.transformers))}, method={self.method!r})"
