"""The fusion family: CombSUM, CombMNZ, CombMAX, CombMIN, CombMED, CombANZ, weighted sums and weighted RRF over
per-query normalised scores (min-max, z-score, rank, sum, max), as ranx defines them (the ``fuse`` component).

Every definition is ranx's (``ranx.fuse(runs, norm=..., method=...)``, 0.3.21; ``tests/test_fusion_family.py``
compares the fused scores with ranx's on real runs):

* each ranking is normalised **per query, over the documents it holds** (:func:`normalise`), before fusing;
* a document a ranking does not hold counts as **0** in the sums (``combsum``, ``wsum``, ``rrf``) and is
  **left out** of ``combmnz``'s count, ``combmax``/``combmin``/``combmed``/``combanz``;
* ranks (the ``rank`` norm, ``rrf``) are the positions in the ranking sorted by score, 1-based; ties are
  broken by ``docno`` (ascending), where ranx keeps the order its sort happens to give;
* denominators below ``1e-9`` are ``1e-9`` (a query whose documents all score the same gets min-max 0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci.corpus import take_rows
from pyterrier_sci.protocol import ModelRef

__all__ = ["METHODS", "NORMS", "WEIGHTED_METHODS", "RANX_NAMES", "normalise", "positions", "FusionInputs",
           "fuse_scores", "default_norm", "Tuning", "Fusion"]

#: the fusion methods (ranx's name in :data:`RANX_NAMES`)
METHODS = ("combsum", "wsum", "combmnz", "combmax", "combmin", "combmed", "combanz", "rrf")
#: the methods that take ``weights`` (and so can be tuned): a weighted sum, ranx's weighted MNZ, weighted RRF
WEIGHTED_METHODS = ("combsum", "wsum", "combmnz", "rrf")
#: the per-query normalisations (``none``: the scores as they are)
NORMS = ("minmax", "zscore", "rank", "sum", "max", "none")
#: our names -> ranx's: ``method`` -> (unweighted, weighted) ranx method, ``norm`` -> ranx norm
RANX_NAMES = {"combsum": ("sum", "wsum"), "wsum": ("sum", "wsum"), "combmnz": ("mnz", "wmnz"),
              "combmax": ("max", None), "combmin": ("min", None), "combmed": ("med", None),
              "combanz": ("anz", None), "rrf": ("rrf", None),
              "minmax": "min-max", "zscore": "zmuv", "rank": "rank", "sum": "sum", "max": "max", "none": None}
#: ranx's floor of a normaliser's denominator
EPS = 1e-9
RESULT_COLUMNS = ["qid", "docno", "score"]


def default_norm(method: str) -> str:
    """The normalisation a method uses when none is given: ``none`` for ``rrf`` (it fuses ranks), else
    ``minmax`` (ranx's default)."""
    return "none" if method == "rrf" else "minmax"


def _ranking(res: pd.DataFrame) -> pd.DataFrame:
    """``(qid, docno, score)`` of one ranking, sorted by query, score (descending) and docno, one row per
    document (a document listed twice keeps its best score); scores as float64."""
    r = res[RESULT_COLUMNS].copy()
    r["qid"] = r["qid"].astype(str)
    r["docno"] = r["docno"].astype(str)
    r["score"] = r["score"].astype("float64")
    r = r.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable")
    return r.drop_duplicates(["qid", "docno"], keep="first").reset_index(drop=True)


def positions(ranking: pd.DataFrame) -> np.ndarray:
    """The 1-based position of each row in its query's ranking (``ranking`` as :func:`_ranking` sorts it)."""
    return ranking.groupby("qid", sort=False).cumcount().to_numpy() + 1


def normalise(res: pd.DataFrame, norm: str) -> pd.DataFrame:
    """``res``'s ``(qid, docno, score)`` with the score normalised per query over the query's documents, as
    ranx's normalisers (``min-max``, ``zmuv``, ``rank``, ``sum``, ``max``) do: ``minmax`` (s - min) / (max - min),
    ``zscore`` (s - mean) / std (the population's), ``rank`` 1 - (position - 1) / n, ``sum`` (s - min) / (sum -
    n min), ``max`` s / max; each denominator at least 1e-9.  Rows sorted by query, score and docno."""
    if norm not in NORMS:
        raise ValueError(f"unknown normalisation {norm!r}; one of {', '.join(NORMS)}")
    r = _ranking(res)
    if norm == "none" or len(r) == 0:
        return r
    s = r["score"]
    g = s.groupby(r["qid"], sort=False)
    if norm == "minmax":
        lo = g.transform("min")
        r["score"] = (s - lo) / np.maximum(g.transform("max") - lo, EPS)
    elif norm == "zscore":
        mean = g.transform("mean")
        std = g.transform(lambda x: float(np.std(x.to_numpy())))
        r["score"] = (s - mean) / np.maximum(std, EPS)
    elif norm == "rank":
        n = g.transform("size").astype("float64")
        r["score"] = 1.0 - (positions(r) - 1) / n
    elif norm == "sum":
        lo = g.transform("min")
        r["score"] = (s - lo) / np.maximum(g.transform("sum") - lo * g.transform("size"), EPS)
    elif norm == "max":
        r["score"] = s / np.maximum(g.transform("max"), EPS)
    return r


@dataclass
class FusionInputs:
    """Several rankings aligned on their documents: ``qid``/``docno`` of every (query, document) pair some ranking
    holds, ``scores[i, j]`` ranking j's normalised score of pair i and ``ranks[i, j]`` its 1-based position (NaN
    where ranking j does not hold the pair).  Built once, fused under many weights (tuning)."""
    qid: np.ndarray
    docno: np.ndarray
    scores: np.ndarray
    ranks: np.ndarray

    @classmethod
    def of(cls, results: Sequence[pd.DataFrame], norm: str) -> "FusionInputs":
        parts = [normalise(r, norm) for r in results]
        keys = pd.concat([p[["qid", "docno"]] for p in parts], ignore_index=True)
        codes, uniques = pd.MultiIndex.from_frame(keys).factorize()
        n = len(uniques)
        scores = np.full((n, len(parts)), np.nan)
        ranks = np.full((n, len(parts)), np.nan)
        start = 0
        for j, p in enumerate(parts):
            at = codes[start:start + len(p)]
            scores[at, j] = p["score"].to_numpy()
            ranks[at, j] = positions(p)
            start += len(p)
        qid = uniques.get_level_values(0).to_numpy(dtype=object) if n else np.array([], dtype=object)
        docno = uniques.get_level_values(1).to_numpy(dtype=object) if n else np.array([], dtype=object)
        return cls(qid, docno, scores, ranks)

    def fused(self, method: str, weights: Optional[Sequence[float]] = None, k: float = 60) -> np.ndarray:
        """The fused score of every pair (ranx's definitions; see the module's docstring)."""
        m = self.scores.shape[1]
        w = np.ones(m) if weights is None else np.asarray(weights, dtype="float64")
        present = ~np.isnan(self.scores)
        if method in ("combsum", "wsum"):
            return np.where(present, self.scores, 0.0) @ w
        if method == "combmnz":   # ranx's mnz: sum x count; wmnz: sum of the scores x sum of the weights present
            return np.where(present, self.scores, 0.0).sum(axis=1) * (present @ w)
        if method == "rrf":
            return np.where(present, 1.0 / (k + np.nan_to_num(self.ranks, nan=1.0)), 0.0) @ w
        if weights is not None:
            raise ValueError(f"{method} takes no weights")
        if method == "combmax":
            return np.nanmax(self.scores, axis=1)
        if method == "combmin":
            return np.nanmin(self.scores, axis=1)
        if method == "combmed":
            return np.nanmedian(self.scores, axis=1)
        if method == "combanz":
            return np.nanmean(self.scores, axis=1)
        raise ValueError(f"unknown fusion method {method!r}; one of {', '.join(METHODS)}")

    def frame(self, scores: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"qid": self.qid, "docno": self.docno, "score": scores})


def fuse_scores(results: Sequence[pd.DataFrame], method: str = "combsum", norm: Optional[str] = None,
                weights: Optional[Sequence[float]] = None, k: float = 60) -> pd.DataFrame:
    """``(qid, docno, score)``: the rankings ``results`` fused by ``method`` after ``norm`` (default:
    :func:`default_norm`), unsorted.  A query missing from a ranking is fused from the others."""
    norm = default_norm(method) if norm is None else norm
    if weights is not None and len(weights) != len(results):
        raise ValueError(f"{len(results)} rankings but {len(weights)} weights")
    results = [r for r in results if len(r)]
    if not results:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    inputs = FusionInputs.of(results, norm)
    return inputs.frame(inputs.fused(method, weights, k))


@dataclass(frozen=True)
class Tuning:
    """What tuning chose and on what: the ``weights`` (and ``k`` for rrf) that maximised ``measure`` (its
    ``value``) on the queries ``qids`` of ``tuned_on``, over ``configs`` grid points (``grid``: each point's
    ``(weights, k, value)``, in grid order)."""
    weights: Tuple[float, ...]
    k: Optional[float]
    measure: str
    value: float
    tuned_on: str
    qids: Tuple[str, ...]
    configs: int
    step: float
    grid: Tuple[Tuple[Tuple[float, ...], Optional[float], float], ...] = field(default=(), repr=False, compare=False)

    def as_dict(self) -> Dict[str, object]:
        return {"weights": list(self.weights), "k": self.k, "measure": self.measure, "value": self.value,
                "tuned_on": self.tuned_on, "queries": len(self.qids), "qids": list(self.qids),
                "configs": self.configs, "step": self.step}


class Fusion(pt.Transformer):
    """Fuses the rankings of several transformers (each gets the same input) with one of :data:`METHODS` after
    one of :data:`NORMS` (ranx's definitions: the module's docstring).

    Args:
        transformers: the rankers to fuse.
        method: ``combsum`` (sum of the normalised scores; ``wsum`` is the same with ``weights``), ``combmnz``
            (sum x number of rankings holding the document; with weights, ranx's ``wmnz``: sum x the weights of
            those rankings), ``combmax``, ``combmin``, ``combmed``, ``combanz`` (max, min, median, mean over the
            rankings holding it), ``rrf`` (``sum_i w_i / (k + rank_i)``, 1-based ranks).
        norm: ``minmax``, ``zscore``, ``rank``, ``sum``, ``max`` or ``none`` (default ``minmax``; ``none`` for rrf).
        weights: one per ranker (``combsum``/``wsum``, ``combmnz``, ``rrf``); default 1 each.
        k: RRF's constant (60).
        num_results: results kept per query (``None``: all).
        tuning: what tuning chose (:class:`Tuning`), recorded in manifests; its queries are refused.
        label: the name of the tuned settings in manifests (the fold they serve).
    """
    schematic = {"inner_pipelines_mode": "combine", "label": "Fuse"}

    def __init__(self, *transformers: pt.Transformer, method: str = "combsum", norm: Optional[str] = None,
                 weights: Optional[Sequence[float]] = None, k: float = 60, num_results: Optional[int] = 1000,
                 tuning: Optional[Tuning] = None, label: Optional[str] = None):
        if not transformers:
            raise ValueError("Fusion needs at least one transformer")
        if method not in METHODS:
            raise ValueError(f"unknown fusion method {method!r}; one of {', '.join(METHODS)}")
        norm = default_norm(method) if norm is None else norm
        if norm not in NORMS:
            raise ValueError(f"unknown normalisation {norm!r}; one of {', '.join(NORMS)}")
        if method == "rrf" and norm != "none":
            raise ValueError(f"rrf fuses ranks: norm={norm!r} does not apply (leave norm out)")
        if weights is not None:
            if method not in WEIGHTED_METHODS:
                raise ValueError(f"{method} takes no weights (weighted: {', '.join(WEIGHTED_METHODS)})")
            if len(weights) != len(transformers):
                raise ValueError(f"{len(transformers)} rankers but {len(weights)} weights")
        self.transformers = tuple(transformers)
        self.method, self.norm, self.k, self.num_results = method, norm, k, num_results
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        self.tuning, self.label = tuning, label

    def fuse(self, results: Sequence[pd.DataFrame]) -> pd.DataFrame:
        """The rankings (one frame per transformer) fused: ``(qid, docno, score)``, unsorted."""
        return fuse_scores(results, self.method, self.norm, self.weights, self.k)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp)
        query_cols = [c for c in inp.columns if c not in ("docno", "score", "rank")]
        out_cols = query_cols + ["docno", "score", "rank"]
        if len(inp) == 0:
            return pd.DataFrame(columns=out_cols)
        if self.tuning is not None:
            seen = sorted(set(inp["qid"].astype(str)) & set(self.tuning.qids))
            if seen:
                raise ValueError(f"fuse: {len(seen)} of these queries tuned its weights on {self.tuning.tuned_on} "
                                 f"({', '.join(seen[:5])}{', ...' if len(seen) > 5 else ''}): a tuned fusion never "
                                 "scores the queries it was tuned on")
        fused = self.fuse([t(inp) for t in self.transformers])
        return self._rank(inp, query_cols, out_cols, fused)

    def _rank(self, inp, query_cols, out_cols, fused):
        fused = fused.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable")
        fused = pt.model.add_ranks(fused.reset_index(drop=True))
        if self.num_results is not None:
            fused = fused[fused["rank"] < self.num_results].reset_index(drop=True)
        queries = inp[query_cols].drop_duplicates("qid").assign(qid=lambda d: d["qid"].astype(str))
        at = pd.Index(queries["qid"]).get_indexer(fused["qid"])
        fused = fused[at >= 0].reset_index(drop=True)
        out = take_rows(queries.drop(columns="qid"), at[at >= 0])  # the query's columns by reference
        for c in ("qid", "docno", "score", "rank"):
            out[c] = fused[c].values
        return out[out_cols]

    def settings(self) -> Dict[str, object]:
        return {"method": self.method, "norm": self.norm, "weights": None if self.weights is None else
                list(self.weights), "k": self.k if self.method == "rrf" else None}

    def sci_models(self) -> List[ModelRef]:
        """The component protocol: tuned weights are a model fitted on queries; the manifest records them (their
        values, the measure and the queries they were tuned on) in the ``note``."""
        if self.tuning is None:
            return []
        t = self.tuning
        k = f", k {t.k:g}" if t.k is not None else ""
        name = f"fuse({self.method}, {self.norm})" + (f" for {self.label}" if self.label else "") + \
            f", tuned on {t.tuned_on}"
        note = (f"weights {list(t.weights)}{k}: {t.measure} {t.value:.4f} on the {len(t.qids)} tuning queries "
                f"({', '.join(t.qids)}), the best of {t.configs} grid points (step {t.step:g})")
        return [ModelRef(name=name, kind="tuned fusion weights", path=None, note=note)]

    def fuse_rank_cutoff(self, k: int) -> Optional["Fusion"]:
        if self.num_results is None or k < self.num_results:
            return Fusion(*self.transformers, method=self.method, norm=self.norm, weights=self.weights, k=self.k,
                          num_results=k, tuning=self.tuning, label=self.label)
        return None

    def subtransformers(self):
        return {"transformers": list(self.transformers)}

    def __repr__(self) -> str:
        extra = f", weights={list(self.weights)}" if self.weights is not None else ""
        extra += f", k={self.k:g}" if self.method == "rrf" else ""
        return f"Fusion({', '.join(map(repr, self.transformers))}, method={self.method!r}, norm={self.norm!r}{extra})"
