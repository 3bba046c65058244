"""DORIS-MAE's measures, as its evaluation code (``benchmarking/rank_performance_util.py``) computes
them: ``doris.R@5`` ... ``doris.MAP`` (short names on ``sci/doris-mae`` ids), the paper's table
(:func:`evaluate`, x100 with bootstrap standard errors) and its random row (:func:`random_baseline`)."""
import math
import warnings
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from pyterrier_sci import measures as _measures
from pyterrier_sci.corpus import sorted_results
from pyterrier_sci.datasets.doris_mae import NAME, REMOVED_ABSTRACTS, aspect_count, scores_frame

# ----------------------------------------------------------------------------------------------
# the measures of the paper's code
# ----------------------------------------------------------------------------------------------

#: |relevant in the top k| / |relevant| (``recall_at_k`` of the paper's code)
recall_at_k = _measures.recall_of


def r_precision(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    """|relevant in the top R| / R with R = |relevant| (the classic R-precision, as the paper's code)."""
    relevant = set(relevant)
    r = len(relevant)
    return len(set(ranked[:r]) & relevant) / r


#: sum of the precision at each relevant rank / |relevant|
average_precision = _measures.average_precision_of


def ndcg_at_fraction(grades: Sequence[float], pool_grades: Sequence[float], fraction: float = 0.1,
                     exponential: bool = True) -> float:
    """nDCG at ``int(fraction * pool size)`` ranks (``ndcg_exp`` / ``ndcg_normal`` of the paper's code):
    gain ``2**grade`` (not ``2**grade - 1``) or ``grade``, discount ``1/log2(rank + 1)``, the ideal the
    pool's grades sorted.  0 when the cutoff is 0 or the ideal DCG is 0."""
    n = int(fraction * len(pool_grades))
    if n <= 0:
        return 0.0
    gain = (lambda g: 2.0 ** g) if exponential else (lambda g: float(g))
    ideal = sorted(pool_grades, reverse=True)[:n]
    idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg <= 0:
        return 0.0
    dcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(list(grades)[:n]))
    return dcg / idcg


def reciprocal_rank_at_max(grades: Sequence[float], pool_grades: Sequence[float], k: int = 10) -> float:
    """1/rank of the first abstract in the top ``k`` whose grade ties the pool's maximum (the paper's
    MRR counts exactly the abstracts tied at the highest S(p|Q) as relevant), else 0."""
    if not len(pool_grades):
        return 0.0
    best = max(pool_grades)
    for i, g in enumerate(list(grades)[:k]):
        if g == best:
            return 1.0 / (i + 1)
    return 0.0


# kind -> (needs a relevant abstract, description)
_KINDS = {
    "recall": (True, "recall at {k}: relevant = S(p|Q)/|Q| >= 1; queries without a relevant abstract left out"),
    "rp": (True, "R-precision (precision at R = number of relevant); queries without a relevant abstract left out"),
    "map": (True, "average precision over the ranked pool; queries without a relevant abstract left out"),
    "ndcg": (False, "nDCG at 10% of the pool, gain S(p|Q), discount 1/log2(rank+1); all queries"),
    "ndcg_exp": (False, "nDCG at 10% of the pool, gain 2^S(p|Q), discount 1/log2(rank+1); all queries"),
    "mrr": (False, "reciprocal rank in the top {k}, relevant = tied at the pool's maximum S(p|Q); all queries"),
}


class DorisMeasure(_measures.RankingMeasure):
    """One measure of the paper's evaluation code.

    Per query it reads the run's ranking of the pool (run documents outside the pool are dropped),
    the qrels' S(p|Q) and |Q| (an ``n_aspects`` column of the qrels, else :func:`aspect_count`).
    Queries without a relevant abstract are left out of R@k, RP and MAP, as the paper's code does
    (``continue``): their per-query value is NaN in :meth:`per_query`, and in ``pt.Experiment`` the
    per-query values are weighted (n / number of queries kept, 0 for a left-out query) so that its
    plain mean equals the paper's mean.  nDCG and MRR average over all queries.
    """

    def __init__(self, name: str, kind: str, k: Optional[Union[int, float]] = None, description: str = ""):
        if kind not in _KINDS:
            raise ValueError(f"unknown DORIS-MAE measure kind {kind!r}")
        super().__init__(name, description or _KINDS[kind][1].format(k=k))
        self.kind = kind
        self.k = k

    # -- one query ----------------------------------------------------------------------------
    def query_value(self, ranked: Sequence[str], grades_of: Mapping[str, float], n_aspects: float) -> float:
        """The value for one query: ``ranked`` the run's docnos in rank order, ``grades_of`` the pool's
        S(p|Q) by docno, ``n_aspects`` |Q|.  NaN when the query is left out."""
        ranked = [d for d in ranked if d in grades_of]
        if _KINDS[self.kind][0]:
            relevant = {d for d, g in grades_of.items() if g >= n_aspects and d not in REMOVED_ABSTRACTS}
            if not relevant:
                return float("nan")
            if self.kind == "recall":
                return recall_at_k(ranked, relevant, int(self.k))
            if self.kind == "rp":
                return r_precision(ranked, relevant)
            return average_precision(ranked, relevant)
        grades = [grades_of[d] for d in ranked]
        pool = list(grades_of.values())
        if self.kind == "mrr":
            return reciprocal_rank_at_max(grades, pool, int(self.k))
        return ndcg_at_fraction(grades, pool, float(self.k), exponential=self.kind == "ndcg_exp")

    def compute(self, judged: Mapping[str, Mapping[str, float]], ranked: Mapping[str, Sequence[str]],
                n_aspects: Mapping[str, float]) -> Dict[str, float]:
        """Unweighted per-query values (NaN = left out) from plain dicts."""
        return {qid: self.query_value(ranked.get(qid, []), grades_of, n_aspects[qid])
                for qid, grades_of in judged.items()}

    # -- ir_measures --------------------------------------------------------------------------
    def values(self, qrels, run) -> Dict[str, float]:
        judged, n = _judged_dicts(qrels)
        ranked = {str(qid): [str(d) for d in df["doc_id"]] for qid, df in run.groupby("query_id", sort=False)}
        return self.compute(judged, ranked, n)


def _judged_dicts(qrels) -> Tuple[Dict[str, Dict[str, float]], Dict[str, float]]:
    judged: Dict[str, Dict[str, float]] = {}
    n: Dict[str, float] = {}
    has_n = "n_aspects" in qrels.columns
    for qid, df in qrels.groupby("query_id", sort=False):
        qid = str(qid)
        judged[qid] = dict(zip(df["doc_id"].astype(str), df["relevance"].astype(float)))
        n[qid] = float(df["n_aspects"].iloc[0]) if has_n else float(aspect_count(qid))
    return judged, n


#: the paper's measures, in its table order (names usable on ``sci/doris-mae`` ids)
PAPER_MEASURES = ["R@5", "R@20", "RP", "NDCG@10%", "NDCGexp@10%", "MRR@10", "MAP"]
#: Table 2's columns (NDCG@10% is only in the appendix tables)
TABLE2_MEASURES = ["R@5", "R@20", "RP", "NDCGexp@10%", "MRR@10", "MAP"]
_DEFS = {"R@5": ("recall", 5), "R@20": ("recall", 20), "RP": ("rp", None), "NDCG@10%": ("ndcg", 0.1),
         "NDCGexp@10%": ("ndcg_exp", 0.1), "MRR@10": ("mrr", 10), "MAP": ("map", None)}


def measure(name: str) -> DorisMeasure:
    """``"R@5"`` or ``"doris.R@5"`` -> the registered measure."""
    short = name[len("doris."):] if name.startswith("doris.") else name
    return _measures.get("doris." + short)


def register_measures() -> None:
    """Registers ``doris.<name>`` for each of the paper's measures and the short names on ``sci/doris-mae`` ids."""
    aliases = {}
    for short, (kind, k) in _DEFS.items():
        full = "doris." + short
        _measures.register(full, DorisMeasure(full, kind, k), replace=True)
        aliases[short] = full
    _measures.register_aliases(NAME, aliases)


# ----------------------------------------------------------------------------------------------
# the paper's table: means x100, bootstrap standard errors, the random baseline
# ----------------------------------------------------------------------------------------------

def _qrels_dicts(dataset_or_qrels) -> Tuple[Dict[str, Dict[str, float]], Dict[str, float]]:
    if isinstance(dataset_or_qrels, str):
        df = scores_frame(dataset_or_qrels).rename(columns={"qid": "query_id", "docno": "doc_id", "score": "relevance"})
    else:
        df = pd.DataFrame(dataset_or_qrels).rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    return _judged_dicts(df)


def _ranked(res) -> Dict[str, List[str]]:
    res = sorted_results(res)
    return {str(q): [str(d) for d in df["docno"]] for q, df in res.groupby("qid", sort=False)}


def bootstrap_se(values: Sequence[float], n: int = 1000, seed: int = 0) -> float:
    """Standard deviation of the mean over ``n`` resamples of the queries (with replacement), NaN
    values (left-out queries) dropped inside each resample - the paper's bootstrap."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n, v.size))
    sample = v[idx]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(sample, axis=1)
    return float(np.nanstd(means))


def evaluate(runs: Mapping[str, "object"], qrels, measures: Sequence[str] = tuple(PAPER_MEASURES),
             bootstrap: int = 0, seed: int = 0, scale: float = 100.0, qids: Optional[Iterable[str]] = None):
    """The paper's table: one row per run (``{name: result frame}``), the mean of each measure x``scale``
    over the queries it keeps, and with ``bootstrap=N`` a ``<measure> SE`` column (bootstrap standard
    error over queries, the paper's ``±``).  ``qrels`` is a ``sci/doris-mae`` id or a qrels frame
    (``qid``, ``docno``, ``label``, optional ``n_aspects``); ``qids`` restricts the queries."""
    judged, n = _qrels_dicts(qrels)
    if qids is not None:
        keep = {str(q) for q in qids}
        judged = {q: v for q, v in judged.items() if q in keep}
    rows = []
    for name, res in runs.items():
        ranked = _ranked(res)
        row = {"name": name}
        for m in measures:
            vals = measure(m).compute(judged, ranked, n)
            arr = np.array(list(vals.values()), dtype=float)
            row[m] = float(np.nanmean(arr)) * scale if np.any(~np.isnan(arr)) else float("nan")
            if bootstrap:
                row[m + " SE"] = bootstrap_se(arr, bootstrap, seed) * scale
        rows.append(row)
    return pd.DataFrame(rows)


def random_baseline(qrels, trials: int = 100, seed: int = 0, measures: Sequence[str] = tuple(PAPER_MEASURES),
                    scale: float = 100.0, qids: Optional[Iterable[str]] = None, name: str = "Random"):
    """The paper's random row: the mean, over ``trials`` random shufflings of every pool, of each measure."""
    judged, n = _qrels_dicts(qrels)
    if qids is not None:
        keep = {str(q) for q in qids}
        judged = {q: v for q, v in judged.items() if q in keep}
    rng = np.random.default_rng(seed)
    ms = {m: measure(m) for m in measures}
    sums = {m: 0.0 for m in measures}
    for _ in range(trials):
        ranked = {q: [d for d in rng.permutation(list(g))] for q, g in judged.items()}
        for m, mm in ms.items():
            arr = np.array(list(mm.compute(judged, ranked, n).values()), dtype=float)
            sums[m] += float(np.nanmean(arr)) if np.any(~np.isnan(arr)) else 0.0
    return pd.DataFrame([{"name": name, **{m: sums[m] / trials * scale for m in measures}}])
