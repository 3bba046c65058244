"""``Experiment``: ``pt.Experiment`` with the papers' own averaging (each measure's, e.g. CSFCube's
mean of fold means, NaN queries left out) and paired significance tests over the queries that count
for both systems.  See ``docs/evaluation.md``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures.measures import Measure

from pyterrier_sci import measures as _measures

__all__ = ["Experiment", "summarise"]


def _measure_names(eval_metrics, dataset: Optional[str]):
    if isinstance(eval_metrics, (str, Measure)):
        eval_metrics = [eval_metrics]
    objs, shown = [], []
    for m in eval_metrics:
        obj = m if isinstance(m, Measure) else _measures.get(m, dataset=dataset)
        objs.append(obj)
        shown.append(m if isinstance(m, str) else str(m))
    if len(set(shown)) != len(shown):
        raise ValueError(f"a measure is asked for twice: {shown}")
    return objs, shown


def Experiment(retr_systems: List[Any], topics: pd.DataFrame, qrels: pd.DataFrame,  # noqa: N802
               eval_metrics: Union[str, Measure, Sequence[Union[str, Measure]]], names: Optional[Sequence[str]] = None,
               perquery: Union[bool, str] = False, baseline: Optional[int] = None,
               test: Union[str, Callable] = "t", correction: Optional[str] = None, correction_alpha: float = 0.05,
               round: Optional[int] = None, dataset: Optional[str] = None, **kwargs):
    """``pt.Experiment`` with each measure's own averaging and tests over the queries that count.

    Arguments are ``pt.Experiment``'s (``batch_size``, ``save_dir``, ``save_mode``, ``verbose``,
    ``validate``, ``filter_by_qrels``, ``precompute_prefix`` pass through), plus ``dataset`` to resolve
    a dataset's measure aliases (``MAP`` means ``csfcube.MAP`` on CSFCube).  Measures may be names.

    ``perquery=True`` returns PyTerrier's per-query frame (``name``, ``qid``, ``measure``, ``value``)
    of true values, NaN where a query does not count; ``"both"`` returns ``(averages, perquery)``.
    """
    if not isinstance(retr_systems, list):
        raise TypeError(f"expected a list of systems, got {type(retr_systems).__name__}")
    objs, shown = _measure_names(eval_metrics, dataset)
    names = [str(s) for s in retr_systems] if names is None else list(names)
    if len(names) != len(retr_systems):
        raise ValueError("names should be the same length as retr_systems")
    if len(set(names)) != len(names):
        raise ValueError(f"system names must be unique: {names}")
    if baseline is not None and not 0 <= int(baseline) < len(retr_systems):
        raise ValueError(f"baseline {baseline} is not the index of a system (0..{len(retr_systems) - 1})")
    if correction is not None and baseline is None:
        raise ValueError("a multiple-testing correction needs a baseline")
    per_q = pt.Experiment(retr_systems, topics, qrels, objs, names=names, perquery=True, **kwargs)
    per_q["measure"] = per_q["measure"].map(dict(zip(map(str, objs), shown))).fillna(per_q["measure"])
    if perquery is True:
        return per_q
    table = summarise(per_q, dict(zip(shown, objs)), names, baseline=baseline, test=test, correction=correction,
                      correction_alpha=correction_alpha, round=round)
    if perquery == "both":
        return table, per_q
    return table


def _test_fn(test: Union[str, Callable]) -> Callable:
    from scipy import stats
    if test == "t":
        return stats.ttest_rel
    if test == "wilcoxon":
        return stats.wilcoxon
    if callable(test):
        return test
    raise ValueError(f"unknown test {test!r}: use 't', 'wilcoxon' or a function like scipy.stats.ttest_rel")


def summarise(per_query: pd.DataFrame, measures: Dict[str, Measure], names: Sequence[str],
              baseline: Optional[int] = None, test: Union[str, Callable] = "t", correction: Optional[str] = None,
              correction_alpha: float = 0.05, round: Optional[int] = None) -> pd.DataFrame:
    """The averages table from a per-query frame (``name``, ``qid``, ``measure``, ``value``; NaN = the
    query does not count): one row per system in ``names`` order, one column per measure in
    ``measures`` order (``{shown name: measure}``), then ``pt.Experiment``'s significance columns."""
    test_fn = _test_fn(test)
    # (system, measure) -> its per-query values indexed by qid, in one pass over the frame
    values: Dict[tuple, pd.Series] = {key: s.droplevel([0, 1]) for key, s in
                                      per_query.set_index(["name", "measure", "qid"])["value"].groupby(level=[0, 1])}
    rows = []
    for n in names:
        row: Dict[str, Any] = {"name": n}
        for m, obj in measures.items():
            row[m] = _measures.aggregate(obj, values[n, m].to_dict())
        rows.append(row)
    table = pd.DataFrame(rows, columns=["name"] + list(measures))
    if baseline is not None:
        base = names[baseline]
        for m in measures:
            plus, minus, pvals = [], [], []
            for n in names:
                if n == base:
                    plus.append(None), minus.append(None), pvals.append(None)
                    continue
                pair = pd.concat([values[n, m].rename("sys"), values[base, m].rename("base")], axis=1, join="inner")
                pair = pair.dropna()          # only queries that count for both systems
                plus.append(int((pair["sys"] > pair["base"]).sum()))
                minus.append(int((pair["sys"] < pair["base"]).sum()))
                pvals.append(_p_value(test_fn, pair["sys"].to_numpy(), pair["base"].to_numpy()))
            table[f"{m} +"], table[f"{m} -"], table[f"{m} p-value"] = plus, minus, pvals
            table[f"{m} p-value"] = table[f"{m} p-value"].astype(float)
        if correction is not None:
            import statsmodels.stats.multitest
            for m in measures:
                pcol = f"{m} p-value"
                reject, corrected, _, _ = statsmodels.stats.multitest.multipletests(
                    table[pcol].drop(table.index[baseline]).fillna(1.0), alpha=correction_alpha, method=correction)
                at = table.columns.get_loc(pcol)
                table.insert(at + 1, f"{m} reject", np.insert(reject, baseline, False))
                table.insert(at + 2, f"{m} p-value corrected", np.insert(corrected, baseline, np.nan))
    if round is not None:
        table[list(measures)] = table[list(measures)].round(round)
    return table


def _p_value(test_fn: Callable, a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or np.array_equal(a, b):
        return float("nan")          # no test on fewer than two pairs, nor on identical values
    p = float(test_fn(a, b)[1])
    return p if not math.isnan(p) else float("nan")
