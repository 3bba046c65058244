"""``Experiment``: ``pt.Experiment`` with the papers' own averaging (each measure's, e.g. CSFCube's
mean of fold means, NaN queries left out) and paired significance tests over the queries that count
for both systems.  See ``docs/evaluation.md``.
"""
from __future__ import annotations

import gzip
import io
import math
import os
import warnings
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures.measures import Measure

from pyterrier_sci import cost
from pyterrier_sci import measures as _measures
from pyterrier_sci.errors import RunFileError  # noqa: F401 - defined there, re-exported

__all__ = ["Experiment", "summarise", "read_run", "RunFileError"]


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
    a dataset's measure aliases (``MAP`` means ``sciface.MAP`` on CSFCube).  Measures may be names.

    Cost measures (``cost.calls``, ``cost.dollars``, ...: :mod:`pyterrier_sci.cost`) run each system that is
    a transformer one query at a time under a :class:`~pyterrier_sci.cost.CostMeter`; a system given as a
    result frame is evaluated on the cost columns it carries.

    ``perquery=True`` returns PyTerrier's per-query frame (``name``, ``qid``, ``measure``, ``value``)
    of true values, NaN where a query does not count; ``"both"`` returns ``(averages, perquery)``.

    Example:
        CSFCube's own NDCG%20 and MAP (per-fold means) and nDCG@10, with paired t-tests against BM25::

            import pyterrier as pt
            import pyterrier_sci as ps
            ds = pt.get_dataset("irds:sci/csfcube/method")
            bm25 = ps.pipeline("pool >> bm25", dataset="irds:sci/csfcube")
            dense = ps.pipeline("pool >> dense", dataset="irds:sci/csfcube")
            ps.Experiment([bm25, dense], ds.get_topics(), ds.get_qrels(), ["NDCG%20", "MAP", "nDCG@10"],
                          dataset="sci/csfcube/method", names=["BM25", "MiniLM"], baseline=0)
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
    if cost.wanted(objs):   # cost measures: each system runs one query at a time under a meter (pyterrier_sci.cost)
        retr_systems = [cost.metered(s) for s in retr_systems]
    per_q = pt.Experiment(retr_systems, topics, qrels, objs, names=names, perquery=True, **kwargs)
    per_q["measure"] = per_q["measure"].map(dict(zip(map(str, objs), shown))).fillna(per_q["measure"])
    if perquery is True:
        return per_q
    # a topic without any judgement does not count (pt.Experiment warns, backfills NaN and leaves it out of its
    # means): the averages here leave it out too, whatever the measure's own averaging
    judged = set(qrels["qid"].astype(str)) if "qid" in qrels.columns else None
    counted = per_q if judged is None else per_q[per_q["qid"].astype(str).isin(judged)]
    table = summarise(counted, dict(zip(shown, objs)), names, baseline=baseline, test=test, correction=correction,
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
    with warnings.catch_warnings():  # differences all alike (a cost that is the same on every query): no noise
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(test_fn(a, b)[1])
    return p if not math.isnan(p) else float("nan")


# -- reading a TREC run file -------------------------------------------------------------------


RUN_FORMAT = "a TREC run has one result per line: qid Q0 docno rank score run_name"


def read_run(path) -> pd.DataFrame:
    """``pt.io.read_results(path)`` for a TREC run (``.gz`` allowed), with one
    :class:`RunFileError` naming the file and its first bad line when the file is empty,
    truncated, not UTF-8 text (UTF-16, binary) or has a line that is no result (too few
    columns, a rank or score that is not a number).  The per-query LLM costs kept beside the run
    (``<run>.costs.tsv``, :func:`pyterrier_sci.cost.write_costs`) come as its cost columns."""
    path = os.fspath(path)
    with open(path, "rb") as f:   # a missing or unreadable file is the OSError, with its name
        head = f.read(4)
    gz = head[:2] == b"\x1f\x8b"
    if not head:
        raise RunFileError(f"the run file {path} is empty: {RUN_FORMAT}")
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise RunFileError(f"the run file {path} is UTF-16 text (its first bytes are a UTF-16 byte order mark): "
                           "save it as UTF-8 or ASCII")
    try:
        if gz and not path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf8") as f:   # read_results decides by the name
                res = pt.io.read_results(io.StringIO(f.read()))
        else:
            res = pt.io.read_results(path)
    except (ValueError, TypeError, IndexError, KeyError, EOFError, OSError, zlib.error) as e:
        if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.filename is not None:
            raise
        raise RunFileError(f"cannot read the run file {path}: {_first_bad_line(path, gz) or _why(e)}; "
                           f"{RUN_FORMAT}") from None
    if len(res) == 0:
        raise RunFileError(f"the run file {path} holds no results: {RUN_FORMAT}")
    bad = res["score"].isna() if "score" in res.columns else None
    if bad is not None and bad.any():
        first = res[bad].iloc[0]
        raise RunFileError(f"the run file {path} has a result without a score (qid {first['qid']}, docno "
                           f"{first['docno']}): {RUN_FORMAT}")
    return cost.attach_costs(res, cost.read_costs(path))   # the per-query costs kept beside it, if any


def _why(e: BaseException) -> str:
    if isinstance(e, (EOFError, gzip.BadGzipFile, zlib.error)):
        return f"it is a damaged or truncated gzip file ({' '.join(str(e).split()) or type(e).__name__})"
    return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


def _first_bad_line(path: str, gz: bool) -> str:
    """What is wrong with the first line of ``path`` that is not a TREC result (``""``: none found)."""
    opener = gzip.open if gz else open
    n = 0
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if b"\x00" in raw:
                    return f"line {n} holds NUL bytes: it is binary or UTF-16, not a text file"
                try:
                    line = raw.decode("utf8")
                except UnicodeDecodeError as e:
                    return f"line {n} is not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 4]!r})"
                fields = line.split()
                if not fields:
                    continue
                shown = " ".join(fields)[:80]
                if len(fields) < 6:
                    last = "" if raw.endswith(b"\n") else " (the file ends there: it is truncated)"
                    return f"line {n} has {len(fields)} columns, not 6{last}: {shown!r}"
                try:
                    int(fields[3])
                except ValueError:
                    return f"line {n}: its rank {fields[3][:20]!r} is not a whole number: {shown!r}"
                try:
                    if not math.isfinite(float(fields[4])):
                        return f"line {n}: its score {fields[4][:20]!r} is not a finite number: {shown!r}"
                except ValueError:
                    return f"line {n}: its score {fields[4][:20]!r} is not a number: {shown!r}"
    except (EOFError, OSError, zlib.error) as e:
        return f"after line {n}: {_why(e)}"
    return ""

