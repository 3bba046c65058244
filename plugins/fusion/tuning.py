"""Tuning a fusion's weights (and RRF's k) on training queries, never on the queries it scores:
``fuse(a, b, method="wsum", tune_on="other-fold")`` or ``tune_on="<dataset id of training queries>"``.

The grid is ranx's (``ranx.optimize_fusion``): every weight vector of multiples of ``step`` summing to 1 (so a
ranker may get 0), and for rrf every k of ``ks`` (ranx's default 10, 20, ..., 100).  The point that maximises the
measure on the tuning queries wins; ties go to the weights nearest equal weights, then to the k nearest 60, then
to the first in grid order.  ``tune_on="other-fold"`` needs a dataset with official test folds, registered as
ir_datasets ids ``<id>/fold<N>-test`` (CSFCube): each query is fused with the weights tuned on the other folds'
queries (:class:`FoldTunedFusion`, routed as :class:`~pyterrier_sci.training.FoldRouting` routes SciFACE's fold
models).  Tuned weights are recorded in run manifests through the component protocol (``sci_models``).
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci import measures
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.experiment import topics_and_qrels
from pyterrier_sci.registry import check_dataset, irds_id, pt_dataset_id
from pyterrier_sci.training import FoldRouting

from .fuse import WEIGHTED_METHODS, Fusion, FusionInputs, Tuning, default_norm

__all__ = ["OTHER_FOLD", "DEFAULT_KS", "weight_grid", "headline_measure", "official_folds", "tune", "FoldTunedFusion",
           "tuned_fusion"]

#: ``tune_on`` value: tune each test fold's weights on the other folds' queries
OTHER_FOLD = "other-fold"
#: RRF's k values tried when tuning (ranx's ``optimize_fusion`` default: 10 to 100 by 10)
DEFAULT_KS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
#: the largest grid tuning walks (weight vectors x k values)
MAX_CONFIGS = 200_000
_FOLD = re.compile(r"fold(\d+)-test")


def weight_grid(n: int, step: float) -> List[Tuple[float, ...]]:
    """Every vector of ``n`` weights that are multiples of ``step`` (1/step a whole number) summing to 1,
    in ranx's order (``itertools.product`` of 0, step, ..., 1)."""
    parts = round(1 / step)
    if parts < 1 or abs(parts * step - 1) > 1e-9:
        raise ValueError(f"tune_step must divide 1 (0.1, 0.05, 0.25, ...), not {step!r}")

    def rec(left: int, slots: int):
        if slots == 1:
            yield (left,)
            return
        for i in range(left + 1):
            for rest in rec(left - i, slots - 1):
                yield (i,) + rest
    return [tuple(round(i / parts, 10) for i in combo) for combo in rec(parts, n)]


def headline_measure(dataset: Optional[str]) -> str:
    """The measure tuning maximises by default: the first measure the dataset's paper registers for it (its headline
    figure: ``NDCG%20`` on CSFCube, ``R@5`` on DORIS-MAE), else ``nDCG@10``."""
    if dataset:
        ds = irds_id(dataset)
        for prefix, aliases in measures.dataset_aliases().items():
            if (ds == prefix or ds.startswith(prefix + "/")) and aliases:
                return next(iter(aliases))
    return "nDCG@10"


def official_folds(dataset: str) -> Dict[str, str]:
    """``{fold: ir_datasets id}`` of the official test folds of ``dataset`` (or of the dataset a fold id belongs
    to): the ids ``<id>/fold<N>-test`` that ir_datasets knows; empty when it has none."""
    import ir_datasets

    ds = irds_id(dataset)
    parent, _, last = ds.rpartition("/")
    if _FOLD.fullmatch(last) or re.fullmatch(r"fold\d+-dev", last):
        ds = parent
    out: Dict[str, str] = {}
    n = 1
    while True:
        fid = f"{ds}/fold{n}-test"
        try:
            ir_datasets.registry[fid]
        except KeyError:
            break
        out[f"fold{n}"] = fid
        n += 1
    return out


def _irds_qrels(qrels: pd.DataFrame) -> pd.DataFrame:
    """PyTerrier qrels (``qid, docno, label``) as ir_measures reads them."""
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    return q.assign(query_id=q["query_id"].astype(str), doc_id=q["doc_id"].astype(str))[
        ["query_id", "doc_id", "relevance"]]


def _evaluate(measure, qrels: pd.DataFrame, inputs: FusionInputs, scores: np.ndarray,
              num_results: Optional[int]) -> float:
    run = pd.DataFrame({"query_id": inputs.qid, "doc_id": inputs.docno, "score": scores})
    if num_results is not None and len(run) and run.groupby("query_id").size().max() > num_results:
        run = run.sort_values(["query_id", "score", "doc_id"], ascending=[True, False, True], kind="stable")
        run = run[run.groupby("query_id").cumcount() < num_results]
    return float(measures.calc_aggregate([measure], qrels, run)[measure])


def tune(results: Sequence[pd.DataFrame], qrels: pd.DataFrame, method: str, norm: Optional[str], measure: str,
         tuned_on: str, dataset: Optional[str] = None, step: float = 0.1, ks: Optional[Iterable[float]] = None,
         k: Optional[float] = None, num_results: Optional[int] = 1000) -> Tuning:
    """The weights (and for rrf the k, unless ``k`` is given) maximising ``measure`` (a name, resolved on
    ``dataset``) on the rankings ``results`` of the tuning queries, judged by ``qrels``: the grid walk of
    :func:`weight_grid` x ``ks`` (default :data:`DEFAULT_KS`).  Only queries with judgements are tuned on."""
    if method not in WEIGHTED_METHODS:
        raise ValueError(f"{method} takes no weights to tune (tunable: {', '.join(WEIGHTED_METHODS)})")
    m = measures.get(measure, dataset=dataset)
    norm = default_norm(method) if norm is None else norm
    judged = set(qrels["qid"].astype(str))
    results = [r.assign(qid=r["qid"].astype(str)) for r in results]
    results = [r[r["qid"].isin(judged)] for r in results]
    qids = tuple(sorted(set().union(*[set(r["qid"]) for r in results])))
    if not qids:
        raise ValueError(f"fuse: no tuning query of {tuned_on} has both results and judgements")
    qrels = qrels[qrels["qid"].astype(str).isin(qids)]
    irds_qrels = _irds_qrels(qrels)
    inputs = FusionInputs.of(results, norm)
    grid = weight_grid(len(results), step)
    if method != "rrf":
        k_values = [60.0]  # unused
    else:
        k_values = [float(k)] if k is not None else [float(x) for x in (ks or DEFAULT_KS)]
    if len(grid) * len(k_values) > MAX_CONFIGS:
        raise ValueError(f"fuse: tuning would try {len(grid) * len(k_values):,} settings (more than {MAX_CONFIGS:,}): "
                         "use a larger tune_step or fewer tune_k values")
    equal = np.full(len(results), 1 / len(results))
    best, best_key, walked = None, None, []
    for kv in k_values:
        for w in grid:
            value = _evaluate(m, irds_qrels, inputs, inputs.fused(method, w, kv), num_results)
            walked.append((tuple(w), kv if method == "rrf" else None, value))
            if math.isnan(value):
                continue
            key = (round(value, 12), -round(float(np.abs(np.asarray(w) - equal).sum()), 10), -abs(kv - 60))
            if best_key is None or key > best_key:
                best, best_key = (w, kv, value), key
    if best is None:
        raise ValueError(f"fuse: {measure} is undefined on every tuning query of {tuned_on}")
    w, kv, value = best
    return Tuning(weights=tuple(w), k=kv if method == "rrf" else None, measure=measure, value=value,
                  tuned_on=tuned_on, qids=qids, configs=len(grid) * len(k_values), step=step,
                  grid=tuple(walked))


class FoldTunedFusion(FoldRouting, pt.Transformer):
    """Fuses each query with the weights tuned on the other official test folds' queries: ``by_fold`` maps a
    fold to its :class:`~.fuse.Fusion` (whose :class:`~.fuse.Tuning` names the queries it was tuned on);
    ``fold_qids`` names each fold's queries.  A query in no fold is one :class:`ValueError`."""
    schematic = {"inner_pipelines_mode": "combine", "label": "Fuse (folds)"}

    def __init__(self, by_fold: Dict[str, Fusion], fold_qids: Dict[str, Sequence[str]], dataset: str):
        self.by_fold = dict(by_fold)
        self.fold_qids = {f: tuple(q) for f, q in fold_qids.items()}
        self.dataset = dataset
        self._fold = {q: f for f, qs in self.fold_qids.items() for q in qs}

    @property
    def tuning(self) -> Dict[str, Tuning]:
        """``{fold: what was tuned for its queries}``."""
        return {f: t.tuning for f, t in self.by_fold.items()}

    def chosen(self) -> Dict[str, Dict[str, Any]]:
        """``{fold: {"weights", "k", "measure", "value", "tuned_on", "qids", ...}}``."""
        return {f: t.as_dict() for f, t in self.tuning.items()}

    def fold_of(self, qid: str) -> Optional[str]:
        return self._fold.get(str(qid))

    def unknown_message(self, unknown: List[str]) -> str:
        return (f"fuse(tune_on='{OTHER_FOLD}'): {len(unknown)} query id(s) are in no test fold of {self.dataset} "
                f"(e.g. {unknown[:3]}): each query is fused with the weights tuned on the other folds, so only "
                "those folds' queries can be")

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp)
        if len(inp) == 0:
            return next(iter(self.by_fold.values())).transform(inp)
        inp = inp.assign(qid=inp["qid"].astype(str))
        return FoldRouting.transform(self, inp)

    def fuse_rank_cutoff(self, k: int) -> Optional["FoldTunedFusion"]:
        cut = {f: t.fuse_rank_cutoff(k) for f, t in self.by_fold.items()}
        if any(c is None for c in cut.values()):
            return None
        return FoldTunedFusion(cut, self.fold_qids, self.dataset)

    def subtransformers(self):
        return {"by_fold": list(self.by_fold.values())}

    def __repr__(self) -> str:
        return "FoldTunedFusion(" + ", ".join(f"{f}={t!r}" for f, t in self.by_fold.items()) + ")"


def _fail(message: str, param: str) -> ParameterError:
    return ParameterError(f"component 'fuse': {message}", component="fuse", param=param)


def _measure(name: str, dataset: Optional[str]) -> str:
    """``name`` if it names a measure on ``dataset`` (checked before any query runs), else a :class:`ParameterError`."""
    try:
        measures.get(name, dataset=dataset)
    except ValueError as e:
        raise _fail(f"tune_measure: {e}", "tune_measure") from None
    return name


def _run_all(transformers: Sequence[pt.Transformer], topics: pd.DataFrame) -> List[pd.DataFrame]:
    return [t(topics) for t in transformers]


def tuned_fusion(*transformers: pt.Transformer, method: str = "wsum", norm: Optional[str] = None,
                 k: Optional[float] = None, tune_on: Union[str, Tuple[pd.DataFrame, pd.DataFrame]] = OTHER_FOLD,
                 tune_measure: Optional[str] = None, tune_step: float = 0.1,
                 tune_k: Optional[Sequence[float]] = None, num_results: Optional[int] = 1000,
                 dataset: Optional[str] = None) -> pt.Transformer:
    """A fusion whose weights (and RRF's k, unless ``k`` is given) are tuned now, on training queries:

    * ``tune_on="other-fold"``: ``dataset`` must have official test folds (``<id>/fold<N>-test``): a
      :class:`FoldTunedFusion` fusing each fold's queries with the weights tuned on the other folds' queries;
    * ``tune_on="<dataset id>"``: the training queries and judgements of that dataset (it must not be ``dataset``
      itself); the queries it holds are refused when the fusion runs;
    * ``tune_on=(topics, qrels)`` (Python): the training queries given as frames.

    ``tune_measure`` defaults to :func:`headline_measure` of the dataset tuned on."""
    if method not in WEIGHTED_METHODS:
        raise _fail(f"method {method!r} takes no weights, so tune_on does not apply (tunable: "
                    f"{', '.join(WEIGHTED_METHODS)})", "tune_on")
    kw = dict(method=method, norm=norm, step=tune_step, ks=tune_k, k=k, num_results=num_results)
    fusion_kw = dict(method=method, norm=norm, num_results=num_results)

    def build(tuning: Tuning, label: Optional[str] = None) -> Fusion:
        return Fusion(*transformers, weights=tuning.weights, k=tuning.k if tuning.k is not None else (k or 60),
                      tuning=tuning, label=label, **fusion_kw)

    if isinstance(tune_on, tuple):
        if len(tune_on) != 2 or not all(isinstance(x, pd.DataFrame) for x in tune_on):
            raise _fail("tune_on as a pair is (topics, qrels), two DataFrames", "tune_on")
        topics, qrels = tune_on
        measure = _measure(tune_measure or headline_measure(dataset), dataset)
        tuning = tune(_run_all(transformers, topics), qrels, measure=measure, tuned_on="the given topics",
                      dataset=dataset, **kw)
        return build(tuning)
    if not isinstance(tune_on, str) or not tune_on:
        raise _fail(f"tune_on takes '{OTHER_FOLD}', a dataset id or (topics, qrels), not {tune_on!r}", "tune_on")
    if tune_on == OTHER_FOLD:
        if not dataset:
            raise _fail(f"tune_on='{OTHER_FOLD}' needs the dataset the pipeline runs on (ps.pipeline(..., "
                        "dataset=...))", "tune_on")
        folds = official_folds(dataset)
        if len(folds) < 2:
            raise _fail(f"tune_on='{OTHER_FOLD}' needs a dataset with official test folds (ir_datasets ids "
                        f"<id>/fold<N>-test, as CSFCube's); {irds_id(dataset)} has none: give tune_on=<the dataset "
                        "id of training queries>", "tune_on")
        measure = _measure(tune_measure or headline_measure(dataset), dataset)
        frames = {f: topics_and_qrels(fid) for f, fid in folds.items()}
        fold_qids = {f: tuple(tp["qid"].astype(str)) for f, (tp, _) in frames.items()}
        seen: Dict[str, str] = {}
        for f, qs in fold_qids.items():
            for q in qs:
                if q in seen:
                    raise ValueError(f"fuse: query {q} is in both {seen[q]} and {f} of {irds_id(dataset)}: "
                                     "the folds must be disjoint")
                seen[q] = f
        topics = pd.concat([tp for tp, _ in frames.values()], ignore_index=True)
        runs = [r.assign(qid=r["qid"].astype(str)) for r in _run_all(transformers, topics)]
        by_fold = {}
        for f in folds:
            others = [g for g in folds if g != f]
            train = set().union(*[fold_qids[g] for g in others])
            qrels = pd.concat([frames[g][1] for g in others], ignore_index=True)
            tuning = tune([r[r["qid"].isin(train)] for r in runs], qrels, measure=measure,
                          tuned_on=", ".join(folds[g] for g in others), dataset=folds[f], **kw)
            leaked = sorted(set(tuning.qids) & set(fold_qids[f]))
            if leaked:  # the folds are disjoint (checked above): this guards the code
                raise AssertionError(f"fuse: {f}'s weights were tuned on its own queries {leaked[:3]}")
            by_fold[f] = build(tuning, label=folds[f])
        return FoldTunedFusion(by_fold, fold_qids, irds_id(dataset))
    check_dataset(tune_on, where="component 'fuse': parameter 'tune_on'")
    if dataset and irds_id(tune_on) == irds_id(dataset):
        raise _fail(f"tune_on={tune_on!r} is the dataset the pipeline is evaluated on: weights are tuned on training "
                    f"queries, never on the test queries (tune_on='{OTHER_FOLD}' for a dataset with folds, or "
                    "another split's id)", "tune_on")
    measure = _measure(tune_measure or headline_measure(tune_on), tune_on)
    topics, qrels = topics_and_qrels(pt_dataset_id(tune_on))
    if dataset:
        try:
            test_topics, _ = topics_and_qrels(pt_dataset_id(dataset))
        except Exception:  # noqa: BLE001 - a dataset without topics: nothing to compare
            test_topics = None
        if test_topics is not None:
            test_q = set(test_topics["qid"].astype(str))
            if test_q and test_q <= set(topics["qid"].astype(str)):
                raise _fail(f"tune_on={tune_on!r} holds every query of {irds_id(dataset)}, the dataset the pipeline "
                            f"is evaluated on (e.g. {sorted(test_q)[:3]}): weights are tuned on training queries, "
                            "never on the test queries", "tune_on")
    tuning = tune(_run_all(transformers, topics), qrels, measure=measure, tuned_on=irds_id(tune_on),
                  dataset=tune_on, **kw)
    return build(tuning)
