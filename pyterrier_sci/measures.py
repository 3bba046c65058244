"""Measures of the papers that ``ir_measures`` does not have, usable in ``pt.Experiment``.

PyTerrier 1.x only parses trec_eval names when a measure is given as a string, so the toolkit's
measures are ``ir_measures.Measure`` objects, looked up by name with :func:`get` / :func:`parse`::

    import pyterrier_sci as ps
    pt.Experiment(systems, topics, qrels, ps.measures.parse(["sciface.NDCG%20", "sciface.MAP", "nDCG@10"]))

Any name that is not one of the toolkit's is handed to ``ir_measures`` (``nDCG@10``, ``R@3``,
``AP(rel=2)``, or a trec_eval name such as ``map``).  A paper's measures carry its namespace
(``mir.*``, ``doris.*``, ``sciface.*``, ``hlm.*``); a dataset can declare short names for them (CSFCube
maps ``MAP`` to ``sciface.MAP``); pass ``dataset=`` to :func:`parse` to use them.  A measure renamed
into its paper's namespace keeps its former name (``csfcube.MAP``, ``PREC@3``, a bare ``NDCG%20``) as a
deprecated alias (:func:`register_old_name`): it warns once and gives the same values under the name asked.

Measures of this module evaluate the *ranked list the run gives*, the way the papers' scripts do:
run documents without a judgement are dropped (for a pool benchmark, documents outside the pool),
and pool documents missing from the run are not appended.  They are "pool" measures: the ideal
ranking for nDCG is built from the judged documents the run ranked.

Per-query values are true per-query values; a query a paper leaves out of its mean (no relevant
document, in MIR and DORIS-MAE) has the value NaN.  A paper's *averaging* is applied when aggregating
(:func:`aggregate`, :func:`calc_aggregate`, :func:`pyterrier_sci.evaluation.Experiment`): the mean of
the per-fold means for CSFCube, the mean over the queries that count where queries are left out.
``pt.Experiment`` takes a plain mean of the per-query values; see ``docs/evaluation.md``.
"""
from __future__ import annotations

import copy
import math
import warnings
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import ir_measures
import numpy as np
import pandas as pd
from ir_measures import Metric
from ir_measures.measures import Measure

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.errors import (
    ShortRunWarning,  # noqa: F401 - defined there, re-exported
    warn_deprecated_name,
)
from pyterrier_sci.registry import MEASURES_GROUP, load_group

__all__ = [
    "dcg", "ndcg_at_k", "average_precision", "reciprocal_rank", "r_precision_last_relevant",
    "precision_at_k", "recall_at_k", "RankListMeasure", "recall_of", "average_precision_of", "RankingMeasure",
    "register", "register_old_name", "old_names", "get", "parse", "split_names", "home_datasets", "names",
    "dataset_aliases", "register_parser", "bound",
    "aggregate", "calc_aggregate", "counts",
    "ShortRunWarning",
]


# ---------------------------------------------------------------------------------------------
# rank-list primitives: each takes the relevance grades of the run's documents in rank order
# ---------------------------------------------------------------------------------------------

def dcg(grades: Sequence[float], k: int, first_undiscounted: bool = True, gain: str = "linear") -> float:
    """DCG of the first ``k`` grades.

    ``first_undiscounted=True`` is the ``rank_metrics`` variant used by CSFCube's script (weights
    1, 1, 1/log2(3), 1/log2(4), ...); ``False`` is the usual 1/log2(rank+1).  ``gain`` is
    ``"linear"`` (the grade) or ``"exp"`` (2^grade - 1).
    """
    r = np.asarray(grades, dtype=float)[:max(k, 0)]
    if r.size == 0:
        return 0.0
    if gain == "exp":
        r = np.power(2.0, r) - 1.0
    elif gain != "linear":
        raise ValueError(f"unknown gain {gain!r}: use 'linear' or 'exp'")
    if first_undiscounted:
        return float(r[0] + np.sum(r[1:] / np.log2(np.arange(2, r.size + 1))))
    return float(np.sum(r / np.log2(np.arange(2, r.size + 2))))


def ndcg_at_k(grades: Sequence[float], k: int, first_undiscounted: bool = True, gain: str = "linear",
              ideal: Optional[Sequence[float]] = None) -> float:
    """nDCG@k; the ideal ranking sorts ``ideal`` (default: the ranked grades themselves)."""
    ideal = sorted(grades if ideal is None else ideal, reverse=True)
    best = dcg(ideal, k, first_undiscounted, gain)
    if not best:
        return 0.0
    return dcg(grades, k, first_undiscounted, gain) / best


def average_precision(binary: Sequence[int]) -> float:
    """Mean of the precision at each relevant rank of the list (0 without a relevant document)."""
    r = np.asarray(binary) != 0
    hits = np.flatnonzero(r)
    if hits.size == 0:
        return 0.0
    return float(np.mean(np.cumsum(r)[hits] / (hits + 1)))


def reciprocal_rank(binary: Sequence[int]) -> float:
    hits = np.flatnonzero(np.asarray(binary) != 0)
    return 0.0 if hits.size == 0 else 1.0 / (hits[0] + 1)


def r_precision_last_relevant(binary: Sequence[int]) -> float:
    """``rank_metrics.r_precision`` as CSFCube uses it: precision at the rank of the *last* relevant
    document of the list (not the classic precision at R)."""
    r = np.asarray(binary) != 0
    hits = np.flatnonzero(r)
    if hits.size == 0:
        return 0.0
    return float(np.mean(r[:hits[-1] + 1]))


def precision_at_k(binary: Sequence[int], k: int) -> float:
    r = np.asarray(binary)[:k] != 0
    return float(np.mean(r)) if r.size else 0.0


def recall_at_k(binary: Sequence[int], k: int, total_relevant: Optional[int] = None) -> float:
    total = int(np.sum(np.asarray(binary) != 0)) if total_relevant is None else total_relevant
    if total <= 0:
        return 0.0
    return float(np.sum(np.asarray(binary)[:k] != 0)) / total


# ---------------------------------------------------------------------------------------------
# the measure class
# ---------------------------------------------------------------------------------------------


def warn_short_run(short: Sequence, answered: int) -> None:
    """The :class:`ShortRunWarning` for ``short`` = ``[(qid, ranked, judged), ...]`` of a run that
    answered ``answered`` queries (one text for every pool measure of the same run, so that Python
    shows it once)."""
    qid, got, of = min(short, key=lambda t: t[1] / t[2])
    warnings.warn(
        "measures over the ranked pool (such as CSFCube's NDCG%20 and MAP) are taken over the judged documents the "
        f"run ranks (as the paper's script does), and the run "
        f"ranks only part of the judged pool for {len(short)} of its {answered} queries (query {qid}: {got} of "
        f"{of}): a cut run (`% k`) or a retriever that misses pool documents changes the measure's cutoff and "
        f"ideal, so this figure is not comparable with figures over the whole pool; evaluate the uncut run",
        ShortRunWarning, stacklevel=2)


class RankListMeasure(Measure):
    """An ``ir_measures`` measure computed from the grades of the run's judged documents, in rank order.

    Args:
        name: the name shown in result tables.
        fn: ``fn(grades, judged) -> float``: ``grades`` are the run's judged documents' grades in
            rank order, ``judged`` all grades of the query (for measures that need the qrels).
        group_of: optional ``qid -> group``; when given, :meth:`aggregate` is the mean over groups of
            the per-group means (the "average per fold, then across folds" of CSFCube's script).
            Per-query values are always the query's own value.
        description: one line for ``pyterrier-sci`` listings.
        over_pool: the measure is defined over the whole ranked pool (its cutoff or ideal depends on
            how many judged documents the run ranks, as CSFCube's NDCG%20 at 20% of them): a run
            that ranks fewer of a query's judged documents than the qrels hold (a cut run, ``% 100``,
            or a retriever that misses pool documents) gets a :class:`ShortRunWarning`, because its
            figure is not comparable with figures over the whole pool.

    Queries of the qrels that the run does not answer score 0 (the papers' scripts would fail on
    them; a missing query must not raise the mean).

    Example:
        >>> import pandas as pd
        >>> from pyterrier_sci.measures import RankListMeasure, precision_at_k
        >>> p2 = RankListMeasure("my.P@2", lambda grades, judged: precision_at_k([g >= 1 for g in grades], 2),
        ...                      description="precision at 2, grade >= 1")
        >>> qrels = pd.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d1", "d2"], "relevance": [1, 0]})
        >>> run = pd.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d2", "d1"], "score": [2.0, 1.0]})
        >>> p2.per_query(qrels, run)
        {'q1': 0.5}

        ``ps.measures.register("my.P@2", p2)`` makes the name usable in ``ps.Experiment`` and on the command line.
    """
    SUPPORTED_PARAMS: Dict = {}

    def __init__(self, name: str, fn: Callable[[List[float], List[float]], float],
                 group_of: Optional[Callable[[str], Optional[str]]] = None, description: str = "",
                 over_pool: bool = False):
        super().__init__()
        self.over_pool = over_pool
        self.NAME = name
        self.__name__ = name
        self.fn = fn
        self.group_of = group_of
        self.SHORT_DESC = description
        self.description = description

    def __repr__(self) -> str:
        return self.NAME

    def __call__(self, **kwargs):
        raise TypeError(f"measure {self.NAME} takes no parameters")

    def aggregate(self, values: Mapping[str, float]) -> float:
        """The paper's mean of per-query values: over groups of the per-group means when ``group_of``
        is set (groups of unequal size weigh the same), else the plain mean."""
        values = {q: v for q, v in values.items() if not math.isnan(v)}
        if not values:
            return float("nan")
        if self.group_of is None:
            return float(np.mean(list(values.values())))
        groups: Dict[object, List[float]] = {}
        for q, v in values.items():
            g = self.group_of(q)
            groups.setdefault(q if g is None else g, []).append(v)
        return float(np.mean([np.mean(vs) for vs in groups.values()]))

    def aggregator(self):
        return _NanMeanAgg()

    def runtime_impl(self, qrels, run):
        # ir_measures' RuntimeEvaluator has sorted the run by (query_id, score desc)
        judged = {qid: dict(zip(df['doc_id'], df['relevance'])) for qid, df in qrels.groupby('query_id')}
        ranked = {qid: list(df['doc_id']) for qid, df in run.groupby('query_id', sort=False)}
        short = []
        for qid, grades_of in judged.items():
            docs = ranked.get(qid, [])
            grades = [float(grades_of[d]) for d in docs if d in grades_of]
            if self.over_pool and docs and len(grades) < len(grades_of):
                short.append((str(qid), len(grades), len(grades_of)))
            value = self.fn(grades, list(grades_of.values())) if grades else 0.0
            yield Metric(str(qid), self, float(value))
        if short:
            warn_short_run(short, len(ranked))

    def per_query(self, qrels, run) -> Dict[str, float]:
        """Per-query values from ``ir_measures`` frames (convenience for tests and reports)."""
        return {m.query_id: m.value for m in ir_measures.iter_calc([self], qrels, run)}


# ---------------------------------------------------------------------------------------------
# measures over the run's whole ranking, with queries left out of the mean
# ---------------------------------------------------------------------------------------------

def recall_of(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """|relevant documents in the top ``k`` of ``ranked`` (docnos)| / |relevant|."""
    relevant = set(relevant)
    return len(set(ranked[:k]) & relevant) / len(relevant)


def average_precision_of(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    """Sum of the precision at each relevant rank of ``ranked`` (docnos) / |relevant|: relevant
    documents the ranking misses count 0 (unlike :func:`average_precision` over a judged list)."""
    relevant = set(relevant)
    hits, total = 0, 0.0
    for i, d in enumerate(ranked):
        if d in relevant:
            hits += 1
            total += hits / (i + 1.0)
    return total / len(relevant)


class RankingMeasure(Measure):
    """Base of measures computed per query from the run's whole ranking (docnos in rank order,
    unjudged documents included), where a query may be *left out* of the mean (value NaN), as
    DORIS-MAE's and MIR's evaluation code do for queries without a relevant document.

    Subclasses implement :meth:`values` (``ir_measures`` frames in, ``{query_id: value}`` out).
    Per-query values are the queries' own values, NaN for a left-out query; :meth:`aggregate` (and
    the ``ir_measures`` aggregator) is the mean over the queries that count.

    Example:
        >>> import math
        >>> import pandas as pd
        >>> from pyterrier_sci.measures import RankingMeasure
        >>> class Hit5(RankingMeasure):
        ...     def values(self, qrels, run):
        ...         relevant = {q: set(g.doc_id[g.relevance > 0]) for q, g in qrels.groupby("query_id")}
        ...         return {q: float(bool(relevant[q] & set(g.doc_id[:5]))) if relevant.get(q) else math.nan
        ...                 for q, g in run.groupby("query_id", sort=False)}
        >>> hit5 = Hit5("my.Hit@5", "a relevant paper in the top 5; queries without one left out")
        >>> qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["d1", "d3"], "label": [1, 0]})
        >>> run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["d2", "d1", "d3"], "score": [2.0, 1.0, 1.0]})
        >>> values = hit5.per_query(qrels, run)
        >>> values
        {'q1': 1.0, 'q2': nan}
        >>> hit5.aggregate(values)       # q2 has no relevant paper: left out of the mean
        1.0
    """
    SUPPORTED_PARAMS: Dict = {}

    def __init__(self, name: str, description: str = ""):
        super().__init__()
        self.NAME = name
        self.__name__ = name
        self.SHORT_DESC = description
        self.description = description

    def __repr__(self) -> str:
        return self.NAME

    def __call__(self, **kwargs):
        raise TypeError(f"measure {self.NAME} takes no parameters")

    def values(self, qrels, run) -> Dict[str, float]:
        """Unweighted per-query values (NaN = left out) from ``ir_measures`` frames (``query_id``,
        ``doc_id``, ``relevance``; the run sorted by query and rank)."""
        raise NotImplementedError

    def runtime_impl(self, qrels, run):
        for qid, v in self.values(qrels, run).items():
            yield Metric(qid, self, float(v))

    def aggregate(self, values: Mapping[str, float]) -> float:
        """The mean over the queries that count (NaN when none does)."""
        kept = [v for v in values.values() if not math.isnan(v)]
        return float(np.mean(kept)) if kept else float("nan")

    def aggregator(self):
        return _NanMeanAgg()

    def per_query(self, qrels, run) -> Dict[str, float]:
        """Unweighted per-query values (NaN = left out) from PyTerrier (or ir_measures) frames."""
        q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
        r = run.rename(columns={"qid": "query_id", "docno": "doc_id"})
        if "rank" in r.columns:
            r = r.sort_values(["query_id", "rank"], kind="stable")
        else:
            r = r.sort_values(["query_id", "score"], ascending=[True, False], kind="stable")
        return self.values(pd.DataFrame(q), r)


# ---------------------------------------------------------------------------------------------
# aggregation: the papers' averaging over true per-query values
# ---------------------------------------------------------------------------------------------

class _NanMeanAgg:
    """``ir_measures`` aggregator: the mean of the values that are not NaN (queries that count)."""

    def __init__(self):
        self.total, self.n = 0.0, 0

    def add(self, value: float) -> None:
        if not math.isnan(value):
            self.total += value
            self.n += 1

    def result(self) -> float:
        return self.total / self.n if self.n else float("nan")


def aggregate(measure: Measure, values: Mapping[str, float]) -> float:
    """The official aggregate of per-query ``values`` (``{qid: value}``) of ``measure``: the measure's
    own averaging (per-fold means, queries left out) for the toolkit's measures, the plain mean for
    any other ``ir_measures`` measure."""
    own = getattr(measure, "aggregate", None)
    if callable(own):
        return own(values)
    vals = list(values.values())
    return float(np.mean(vals)) if vals else float("nan")


def calc_aggregate(measures: Sequence[Measure], qrels, run) -> Dict[Measure, float]:
    """Like ``ir_measures.calc_aggregate`` (``ir_measures`` frames), with each measure's own averaging."""
    per_query: Dict[Measure, Dict[str, float]] = {m: {} for m in measures}
    for metric in ir_measures.iter_calc(list(measures), qrels, run):
        per_query[metric.measure][metric.query_id] = metric.value
    return {m: aggregate(m, per_query[m]) for m in measures}


def counts(value: float) -> bool:
    """Whether a per-query value counts towards the mean (NaN marks a query a paper leaves out)."""
    return not math.isnan(value)


# ---------------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------------

_REGISTRY: Dict[str, Union[Measure, Callable[[], Measure]]] = {}
_PARSERS: List[Callable[[str], Optional[Measure]]] = []
_DATASET_ALIASES: Dict[str, Dict[str, str]] = {}
_OLD_NAMES: Dict[str, str] = {}
_OLD_MEASURES: Dict[str, Measure] = {}


def register(name: str, measure: Union[Measure, Callable[[], Measure]], *, replace: bool = False) -> None:
    """Registers a measure (or a zero-argument factory building it lazily) under ``name``."""
    if name in _REGISTRY and not replace:
        raise ValueError(f"measure {name!r} is already registered")
    _REGISTRY[name] = measure


def register_parser(parse_fn: Callable[[str], Optional[Measure]]) -> None:
    """Adds ``parse_fn(name)``, which returns the measure a name of its family means (a measure with settings or
    any cutoff: ``ILS(encoder='...')@20``, ``prism.CosineDistance@100``, ``alpha_nDCG@50``) or None for any other
    name.  :func:`get` asks the parsers, in the order they were added, for a name that is not registered, before
    handing it to ``ir_measures``."""
    _PARSERS.append(parse_fn)


def bound(measure: Measure, dataset: Optional[str]) -> Measure:
    """``measure`` for evaluating runs on ``dataset``.  A measure that reads the dataset's documents (the embedding
    measures of :mod:`pyterrier_sci.diversity`, which embed the run's documents) offers ``for_dataset(dataset_id)``,
    returning a copy that reads them; every other measure is returned as it is."""
    bind = getattr(measure, "for_dataset", None)
    return bind(irds_id(dataset)) if dataset is not None and callable(bind) else measure


def register_aliases(dataset_prefix: str, aliases: Mapping[str, str]) -> None:
    """Declares names that mean a dataset's own measure inside experiments on that dataset
    (for ids starting with ``dataset_prefix``, e.g. ``sci/csfcube``)."""
    _DATASET_ALIASES.setdefault(dataset_prefix, {}).update(aliases)


def register_old_name(old: str, new: str) -> None:
    """Keeps ``old``, a measure's former name, working: :func:`get` warns with a
    :class:`~pyterrier_sci.errors.DeprecatedNameWarning` naming ``new`` and returns the measure
    ``new`` under its old name (the same values; result tables keep the column a script reads)."""
    if old in _REGISTRY:
        raise ValueError(f"measure {old!r} is registered; an old name cannot replace it")
    _OLD_NAMES[old] = new


def old_names() -> Dict[str, str]:
    """``{former name: current name}`` of the measures renamed into their paper's namespace."""
    _load_plugin_measures()
    return dict(sorted(_OLD_NAMES.items()))


def names() -> List[str]:
    """The names of the toolkit's own measures (the papers' measures, ``sciface.NDCG%20``, ...), sorted."""
    _load_plugin_measures()
    return sorted(_REGISTRY)


def dataset_aliases() -> Dict[str, Dict[str, str]]:
    """``{dataset prefix: {short name: measure}}``: what each short name means in experiments on that dataset
    (``MAP`` on ``sci/csfcube`` is ``sciface.MAP``), in the order the papers registered them."""
    _load_plugin_measures()
    return {prefix: dict(aliases) for prefix, aliases in _DATASET_ALIASES.items()}


_PLUGINS_LOADED = False


def _load_plugin_measures() -> None:
    """Calls each ``pyterrier_sci.measures`` entry point once: the paper plugins register their measures."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for fn in load_group(MEASURES_GROUP).values():
        fn()


def _on(ds: str, prefix: str) -> bool:
    return ds == prefix or ds.startswith(prefix + "/")


def home_datasets(name: str) -> List[str]:
    """The dataset prefixes whose short names mean a measure of ``name``'s paper (``doris.MAP`` ->
    ``["sci/doris-mae"]``): the datasets that define its averaging; empty for a measure of no paper."""
    _load_plugin_measures()
    namespace = name.split(".", 1)[0] + "." if "." in name else None
    if namespace is None or name not in _REGISTRY:
        return []
    return sorted(prefix for prefix, aliases in _DATASET_ALIASES.items()
                  if any(str(v).startswith(namespace) for v in aliases.values()))


def _short_name_homes(name: str) -> Dict[str, str]:
    """``{dataset prefix: measure}`` of the datasets on which the short name ``name`` means a paper's measure."""
    return {prefix: aliases[name] for prefix, aliases in _DATASET_ALIASES.items()
            if name in aliases and "." in str(aliases[name])}


def get(name: str, dataset: Optional[str] = None) -> Measure:
    """The measure called ``name``: a toolkit measure, a dataset alias, or any ir_measures name.

    A name has one meaning: a paper's short name (``NDCG%20``, ``PREC@3``) that only a dataset gives a meaning
    to is an error without ``dataset`` (naming the measure to write instead); a paper's measure (``doris.MAP``)
    on another paper's dataset is an error naming the datasets that define its averaging.

    Example:
        >>> from pyterrier_sci import measures
        >>> measures.get("NDCG%20", dataset="sci/csfcube/method")
        sciface.NDCG%20
        >>> measures.get("nDCG@10")
        nDCG@10
    """
    _load_plugin_measures()
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a measure name is a non-empty string, not {name!r}")
    resolved = False
    if dataset is not None:
        ds = irds_id(dataset)
        for prefix, aliases in _DATASET_ALIASES.items():
            if _on(ds, prefix) and name in aliases:
                name, resolved = aliases[name], True
                break
        homes = home_datasets(name)
        if homes and not any(_on(ds, h) for h in homes):
            own = sorted({k for prefix, aliases in _DATASET_ALIASES.items() if _on(ds, prefix) for k in aliases})
            raise ValueError(f"measure {name!r} is the measure of another benchmark ({', '.join(homes)}), whose "
                             f"averaging it follows; it cannot evaluate {ds}: use "
                             + (f"{ds}'s own names ({', '.join(own)}) or " if own else "")
                             + "an ir_measures name (nDCG@10, AP, R@100, ...)")
    if not resolved and name not in _REGISTRY and name in _OLD_NAMES and _short_name_homes(name):
        homes = _short_name_homes(name)
        meant = ", ".join(f"{m} on {p}" for p, m in sorted(homes.items()))
        raise ValueError(f"measure {name!r} means a paper's measure only on its dataset ({meant}): write that "
                         f"measure's full name ({', '.join(sorted(set(homes.values())))}), or give the dataset "
                         "(dataset=... in Python, --dataset on the command line) so that every short name of the "
                         "table means that dataset's measure")
    if name in _REGISTRY:
        m = _REGISTRY[name]
        if not isinstance(m, Measure):
            m = _REGISTRY[name] = m()
        return bound(m, dataset)
    if name in _OLD_NAMES:
        return _old_name(name)
    for parse_fn in _PARSERS:
        found = parse_fn(name)
        if found is not None:
            return bound(found, dataset)
    try:
        return ir_measures.parse_measure(name)
    except (ValueError, NameError, SyntaxError) as e:
        try:
            found = ir_measures.parse_trec_measure(name)
        except ValueError:
            found = []
        if len(found) == 1:
            return found[0]
        raise ValueError(f"unknown measure {name!r}: ir_measures cannot parse it ({e}) and it is not one of the "
                         f"toolkit's {len(_REGISTRY)} measures (pyterrier-sci measures lists them)") from None


def _old_name(old: str) -> Measure:
    new = _OLD_NAMES[old]
    if old not in _OLD_MEASURES:
        warn_deprecated_name("measure", old, new)
        current = get(new)
        renamed = copy.copy(current)
        if hasattr(renamed, "NAME"):
            renamed.NAME = old
        if hasattr(renamed, "__name__"):
            renamed.__name__ = old
        _OLD_MEASURES[old] = renamed if str(renamed) == old else current
    return _OLD_MEASURES[old]


def split_names(text: str) -> List[str]:
    """Measure names in one string, separated by commas or spaces as ir_measures' own command line takes them
    (``"NDCG%20 MAP"``, ``"nDCG@10,R@100"``); a comma or space inside brackets belongs to the measure
    (``AP(rel=2, judged_only=True)``)."""
    out, cur, depth = [], [], 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(depth - 1, 0)
        if depth == 0 and (ch == "," or ch.isspace()):
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [m.strip() for m in out if m.strip()]


def parse(measures: Union[str, Measure, Sequence[Union[str, Measure]]], dataset: Optional[str] = None) -> List[Measure]:
    """Turns names (a list, or one string of names separated by commas or spaces: :func:`split_names`) into
    measure objects for ``pt.Experiment``."""
    if isinstance(measures, (str, Measure)):
        measures = split_names(measures) if isinstance(measures, str) else [measures]
    return [m if isinstance(m, Measure) else get(m, dataset=dataset) for m in measures if m != ""]
