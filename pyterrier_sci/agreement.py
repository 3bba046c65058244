"""Agreement between two annotators' labels of the same (query, document) pairs, and the named judgement sets
a dataset offers for it (its annotators before adjudication, its adjudicated labels).

The statistics are the libraries' own (``scipy.stats``, ``sklearn.metrics``); reproductions name them as
measures (``Spearman``, ``Pearson``, ``Kendall``, ``Kappa``, ``Accuracy``, ``F1``: see :data:`MEASURES`), e.g.
SciFACE's Table 3 (Spearman's rho between CSFCube's two annotators before adjudication) and DORIS-MAE's
Table 1 (macro-F1, exact agreement and Spearman's rho between annotators).

A dataset module offers its judgement sets with :func:`register_judgements`; :func:`judgements` returns
them as frames with ``qid``, ``docno`` and ``label``."""
from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

import numpy as np
import pandas as pd

from pyterrier_sci.registry import irds_id

__all__ = ["MEASURES", "is_agreement_measure", "measure", "label_codes", "accuracy", "macro_f1", "spearman",
           "pearson", "kendall", "cohen_kappa", "register_judgements", "judgements"]


def label_codes(a: Sequence, b: Sequence) -> Tuple[np.ndarray, np.ndarray]:
    """Both annotators' labels as codes of one label set, so that scikit-learn sees class labels even where
    adjudicated labels hold a half (the median of an even number of annotators)."""
    a, b = np.asarray(a), np.asarray(b)
    _, codes = np.unique(np.concatenate([a, b]), return_inverse=True)
    return codes[:a.size], codes[a.size:]


def _correlation(statistic, a: Sequence, b: Sequence) -> float:
    """``statistic(a, b).statistic`` (a scipy.stats correlation) on the labels as floats; NaN when one annotator
    gives a single label throughout (or there are fewer than two pairs)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(statistic(a, b).statistic)


def accuracy(a: Sequence, b: Sequence) -> float:
    """Exact agreement: the fraction of pairs given the same label (``sklearn.metrics.accuracy_score``)."""
    from sklearn.metrics import accuracy_score
    a, b = label_codes(a, b)
    return float(accuracy_score(a, b)) if a.size else float("nan")


def macro_f1(a: Sequence, b: Sequence) -> float:
    """Macro-F1 over the labels either annotator uses (``sklearn.metrics.f1_score(average="macro")``;
    symmetric in ``a`` and ``b``)."""
    from sklearn.metrics import f1_score
    a, b = label_codes(a, b)
    return float(f1_score(a, b, average="macro", zero_division=0)) if a.size else float("nan")


def spearman(a: Sequence, b: Sequence) -> float:
    """Spearman's rho (``scipy.stats.spearmanr``); NaN when one annotator gives a single label throughout."""
    from scipy.stats import spearmanr
    return _correlation(spearmanr, a, b)


def pearson(a: Sequence, b: Sequence) -> float:
    """Pearson's r (``scipy.stats.pearsonr``); NaN when one annotator gives a single label throughout."""
    from scipy.stats import pearsonr
    return _correlation(pearsonr, a, b)


def kendall(a: Sequence, b: Sequence) -> float:
    """Kendall's tau-b (``scipy.stats.kendalltau``); NaN when one annotator gives a single label throughout."""
    from scipy.stats import kendalltau
    return _correlation(kendalltau, a, b)


def cohen_kappa(a: Sequence, b: Sequence, weights: str = None) -> float:
    """Cohen's kappa (``sklearn.metrics.cohen_kappa_score``; ``weights`` None, ``"linear"`` or ``"quadratic"``)."""
    from sklearn.metrics import cohen_kappa_score
    a, b = label_codes(a, b)
    return float(cohen_kappa_score(a, b, weights=weights)) if a.size else float("nan")


MEASURES: Dict[str, Callable[[Sequence, Sequence], float]] = {
    "Spearman": spearman, "Pearson": pearson, "Kendall": kendall, "Kappa": cohen_kappa,
    "LinearKappa": lambda a, b: cohen_kappa(a, b, "linear"), "Accuracy": accuracy, "F1": macro_f1}


def is_agreement_measure(name: str) -> bool:
    return str(name) in MEASURES


def measure(name: str, a: Sequence, b: Sequence) -> float:
    """The agreement measure ``name`` (a key of :data:`MEASURES`) between ``a`` and ``b``."""
    if name not in MEASURES:
        raise KeyError(f"unknown agreement measure {name!r} (known: {', '.join(MEASURES)})")
    return MEASURES[name](a, b)


# ------------------------------------------------------------------------------------------ judgement sets
_JUDGEMENTS: Dict[str, Callable[[], Dict[str, pd.DataFrame]]] = {}


def register_judgements(dataset: str, sets: Callable[[], Dict[str, pd.DataFrame]]) -> None:
    """Offers ``sets()`` (``{name: frame with qid, docno, label}``, read on first use) as the named judgement
    sets of ``dataset`` (an ir_datasets id, with or without ``irds:``)."""
    _JUDGEMENTS[irds_id(str(dataset))] = sets


def judgements(dataset: str, name: str) -> pd.DataFrame:
    """The judgement set ``name`` of ``dataset``: ``qid``, ``docno``, ``label`` (float), one row per judged pair.
    A dataset that offers none, or not that one, is a :class:`KeyError` naming what it offers."""
    fn = _JUDGEMENTS.get(irds_id(str(dataset)))
    if fn is None:
        raise KeyError(f"dataset {dataset!r} offers no judgement sets (datasets that do: "
                       f"{', '.join(sorted(_JUDGEMENTS)) or 'none'})")
    sets = fn()
    if name not in sets:
        raise KeyError(f"dataset {dataset!r} has no judgement set {name!r} (it has: {', '.join(sets)})")
    frame = sets[name]
    return pd.DataFrame({"qid": frame["qid"].astype(str), "docno": frame["docno"].astype(str),
                         "label": frame["label"].astype(float)})
