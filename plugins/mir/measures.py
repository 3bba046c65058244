"""MIR's measures (§6.2): ``mir.R@3``, ``mir.R@5``, ``mir.R@10``, ``mir.R@20``, ``mir.mAP`` (short names,
and ``MAP`` / ``AP``, on ``sci/mir-multicite`` ids), averaged over the proposals with ground truth, and
the paper's table (:func:`evaluate`)."""
from typing import Dict, Mapping, Optional, Sequence, Set

import numpy as np
import pandas as pd

from pyterrier_sci import measures as _measures
from pyterrier_sci.corpus import sorted_results
from pyterrier_sci.datasets import mir_multicite


class MIRMeasure(_measures.RankingMeasure):
    """Recall@k or AP of §6.2 over the proposals that have ground truth.

    Per proposal: relevant = qrels relevance >= 1; the run's ranking is taken as given (unjudged
    documents are not relevant).  Proposals without a relevant paper are left out of the mean: in
    ``pt.Experiment`` the per-query values are weighted (n / kept, 0 for a left-out proposal) so that
    the plain mean it takes is the mean over the kept proposals; :meth:`per_query` gives unweighted
    values (NaN = left out).  A proposal of the qrels missing from the run scores 0."""
    def __init__(self, name: str, kind: str, k: Optional[int] = None):
        if kind not in ("recall", "ap"):
            raise ValueError(f"unknown MIR measure kind {kind!r}")
        super().__init__(name, (f"recall at {k}: ground truth = methodologically cited papers; "
                                "proposals without any left out") if kind == "recall" else
                         "average precision over the ground truth (mAP of §6.2); proposals without any left out")
        self.kind = kind
        self.k = k

    def query_value(self, ranked: Sequence[str], relevant: Set[str]) -> float:
        if not relevant:
            return float("nan")
        if self.kind == "recall":
            return _measures.recall_of(ranked, relevant, int(self.k))
        return _measures.average_precision_of(ranked, relevant)

    def compute(self, relevant: Mapping[str, Set[str]], ranked: Mapping[str, Sequence[str]]) -> Dict[str, float]:
        return {q: self.query_value(ranked.get(q, []), rel) for q, rel in relevant.items()}

    def values(self, qrels, run) -> Dict[str, float]:
        relevant: Dict[str, Set[str]] = {}
        for q, d, r in zip(qrels["query_id"].astype(str), qrels["doc_id"].astype(str), qrels["relevance"]):
            s = relevant.setdefault(q, set())
            if float(r) >= 1:
                s.add(d)
        ranked = {str(q): [str(d) for d in df["doc_id"]] for q, df in run.groupby("query_id", sort=False)}
        return self.compute(relevant, ranked)


#: the measures of the paper's tables
PAPER_MEASURES = ["R@3", "R@5", "mAP"]
_DEFS = {"R@3": ("recall", 3), "R@5": ("recall", 5), "R@10": ("recall", 10), "R@20": ("recall", 20),
         "mAP": ("ap", None)}


def measure(name: str) -> MIRMeasure:
    short = name[len("mir."):] if name.startswith("mir.") else name
    return _measures.get("mir." + short)


def register_measures() -> None:
    """Registers ``mir.<name>`` for each measure and the short names on ``sci/mir-multicite`` ids."""
    aliases = {}
    for short, (kind, k) in _DEFS.items():
        full = "mir." + short
        _measures.register(full, MIRMeasure(full, kind, k), replace=True)
        aliases[short] = full
    aliases.update({"MAP": "mir.mAP", "AP": "mir.mAP", "map": "mir.mAP"})
    _measures.register_aliases(mir_multicite.NAME, aliases)


def evaluate(runs: Mapping[str, object], dataset: str, measures: Sequence[str] = tuple(PAPER_MEASURES),
             scale: float = 100.0):
    """The paper's table: one row per run (``{name: result frame}``), each measure's mean x``scale``
    over the proposals of ``dataset`` that have ground truth, and ``n`` (how many)."""
    v = mir_multicite.view_of(dataset)
    relevant = {q: {d for d, r in docs.items() if r} for q, docs in v.judged().items()}
    for q in v.qids():
        relevant.setdefault(q, set())
    rows = []
    for name, res in runs.items():
        res = sorted_results(res)
        ranked = {str(q): [str(d) for d in df["docno"]] for q, df in res.groupby("qid", sort=False)}
        row = {"name": name}
        for m in measures:
            vals = np.array(list(measure(m).compute(relevant, ranked).values()), dtype=float)
            row[m] = float(np.nanmean(vals)) * scale if np.any(~np.isnan(vals)) else float("nan")
        row["n"] = int(sum(1 for r in relevant.values() if r))
        rows.append(row)
    return pd.DataFrame(rows)
