"""Cost as a measure: what a system spends per query on LLM calls, beside its effectiveness.

Five measures, usable wherever a measure name is (``ps.Experiment``, an experiment's ``measures:``,
``pyterrier-sci evaluate --measures``)::

    ps.Experiment([bm25, pointwise, setwise], topics, qrels, ["nDCG@10", "cost.calls", "cost.dollars"])

``cost.calls``
    the LLM calls the system made for the query;
``cost.prompt_tokens``, ``cost.completion_tokens``
    their tokens, as the server reported them;
``cost.seconds``
    the seconds the server took to answer them, summed (what the calls take one after another);
``cost.dollars``
    the tokens priced with the ``prices`` table of each LLM's settings (USD per million tokens); NaN
    for a query whose calls went to a model without a price.

A call counts whether the server or the response cache answered it: a cache hit counts the tokens and
seconds recorded when the server first answered (docs/llm.md, "Cache"), so the measures are what the
*method* costs, and a rerun on a warm cache gives the same figures.  They are true per-query values,
averaged over the queries like any measure; a system without LLM components costs 0.

How a run gets them: :class:`CostMeter` runs a system one query at a time and, after each query, reads
what its LLM components recorded (the component protocol's ``sci_usage()``, :mod:`pyterrier_sci.protocol`)
into the columns :data:`COLUMNS` of the result frame (one value per query, on each of its rows); the
measures read those columns.  ``ps.Experiment`` meters every system when a cost measure is asked for; an
experiment keeps the costs of a saved run beside it (:func:`costs_path`) and ``pyterrier-sci run
--costs`` writes them beside ``--output``, where ``pyterrier-sci evaluate`` finds them.  See
``docs/evaluation.md``, "Cost measures".
"""
from __future__ import annotations

import hashlib
import io
import math
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures import Metric
from ir_measures.measures import Measure

from pyterrier_sci import artifacts
from pyterrier_sci import measures as _measures
from pyterrier_sci.errors import CostWarning  # noqa: F401 - defined there, re-exported
from pyterrier_sci.protocol import usage_holders

__all__ = ["COLUMNS", "NAMES", "CostMeasure", "MEASURES", "CostMeter", "metered", "is_cost_measure", "wanted",
           "cost_columns", "register_measures", "costs_path", "write_costs", "read_costs", "attach_costs",
           "CostWarning"]

#: measure name -> the result-frame column it reads
COLUMNS: Dict[str, str] = {
    "cost.calls": "cost_calls",
    "cost.prompt_tokens": "cost_prompt_tokens",
    "cost.completion_tokens": "cost_completion_tokens",
    "cost.seconds": "cost_seconds",
    "cost.dollars": "cost_dollars",
}
NAMES = tuple(COLUMNS)

_DESCRIPTIONS = {
    "cost.calls": "LLM calls per query (answered by the server or the response cache)",
    "cost.prompt_tokens": "LLM prompt tokens per query, as the server reported them (cache hits included)",
    "cost.completion_tokens": "LLM completion tokens per query, as the server reported them (cache hits included)",
    "cost.seconds": "seconds the LLM server took to answer the query's calls, summed (cache hits: as first answered)",
    "cost.dollars": "USD per query: the tokens priced with the llm 'prices' table (NaN without a price)",
}


class CostMeasure(Measure):
    """A cost measure: the per-query value of one of :data:`COLUMNS` in the run (NaN for every query
    when the run carries no costs, with a :class:`CostWarning`).  Lower is better; the table's figure
    is the mean over the queries with a value."""
    SUPPORTED_PARAMS: Dict = {}
    lower_is_better = True

    def __init__(self, name: str, column: str, description: str = ""):
        super().__init__()
        self.NAME = name
        self.__name__ = name
        self.column = column
        self.SHORT_DESC = description
        self.description = description

    def __repr__(self) -> str:
        return self.NAME

    def __call__(self, **kwargs):
        raise TypeError(f"measure {self.NAME} takes no parameters")

    def runtime_impl(self, qrels, run):
        if self.column not in run.columns:
            if len(run):
                warnings.warn(f"{self.NAME}: the run carries no costs (no {self.column} column), so the measure is "
                              "NaN: run the system through ps.Experiment, an experiment or pyterrier-sci run --costs "
                              "(docs/evaluation.md, 'Cost measures')", CostWarning, stacklevel=2)
            for qid in run["query_id"].drop_duplicates():
                yield Metric(str(qid), self, float("nan"))
            return
        values = run.groupby("query_id", sort=False)[self.column].first()
        for qid, v in values.items():
            yield Metric(str(qid), self, float(v) if v is not None and v == v else float("nan"))

    def aggregate(self, values: Mapping[str, float]) -> float:
        """The mean over the queries with a value (NaN: a query whose cost is not known)."""
        kept = [v for v in values.values() if not math.isnan(v)]
        return float(np.mean(kept)) if kept else float("nan")

    def aggregator(self):
        return _MeanOfKnown()

    def per_query(self, run: pd.DataFrame) -> Dict[str, float]:
        """The per-query values of a PyTerrier result frame."""
        r = run.rename(columns={"qid": "query_id", "docno": "doc_id"})
        return {m.query_id: m.value for m in self.runtime_impl(None, r)}


class _MeanOfKnown:
    def __init__(self):
        self.total, self.n = 0.0, 0

    def add(self, value: float) -> None:
        if not math.isnan(value):
            self.total += value
            self.n += 1

    def result(self) -> float:
        return self.total / self.n if self.n else float("nan")


#: the measures, as factories for :func:`pyterrier_sci.measures.register`
MEASURES = {name: (lambda name=name: CostMeasure(name, COLUMNS[name], _DESCRIPTIONS[name])) for name in NAMES}


def register_measures() -> None:
    """Registers the cost measures by name (the ``pyterrier_sci.measures`` entry point ``cost``)."""
    for name, factory in MEASURES.items():
        _measures.register(name, factory)


def is_cost_measure(measure: Any) -> bool:
    return isinstance(measure, CostMeasure)


def cost_columns(frame: pd.DataFrame) -> List[str]:
    """The cost columns ``frame`` carries."""
    return [c for c in COLUMNS.values() if c in frame.columns]


# ------------------------------------------------------------------------------------------ metering

def _snapshot(components: Sequence[Any]) -> Dict[int, tuple]:
    """``id(usage) -> (usage, prices, answer totals)`` of each distinct usage of ``components``."""
    out: Dict[int, tuple] = {}
    for comp in components:
        usage = comp.sci_usage()
        if id(usage) in out or not callable(getattr(usage, "answer_totals", None)):
            continue
        settings = comp.sci_llm_settings()
        totals = dict(usage.answer_totals())
        counted = usage.as_dict()
        totals["counted"] = counted["calls"] + counted["cache_hits"]   # every call, where it was made
        out[id(usage)] = (usage, getattr(settings, "prices", None) or {}, totals)
    return out


def _spent(before: Dict[int, tuple], after: Dict[int, tuple]) -> Dict[str, float]:
    calls = prompt = completion = 0
    seconds, dollars, untimed, unpriced, unseen = 0.0, 0.0, 0, False, False
    for key, (usage, prices, now) in after.items():
        was = before[key][2] if key in before else dict.fromkeys(now, 0)
        d = {k: now[k] - was[k] for k in now}
        # calls counted but not seen answered here were made in another process (a Ray worker): unknown cost
        unseen = unseen or d["counted"] > d["answers"]
        if not d["answers"]:
            continue
        calls += d["answers"]
        prompt += d["answer_prompt_tokens"]
        completion += d["answer_completion_tokens"]
        seconds += d["answer_seconds"]
        untimed += d["answers_untimed"]
        price = prices.get(usage.model)
        if price is None:
            unpriced = unpriced or bool(d["answer_prompt_tokens"] or d["answer_completion_tokens"])
        else:
            dollars += (d["answer_prompt_tokens"] * float(price.get("prompt", 0.0))
                        + d["answer_completion_tokens"] * float(price.get("completion", 0.0))) / 1e6
    if unseen:
        return dict.fromkeys(COLUMNS.values(), float("nan"))
    return {"cost_calls": float(calls), "cost_prompt_tokens": float(prompt),
            "cost_completion_tokens": float(completion),
            "cost_seconds": float("nan") if untimed else seconds,
            "cost_dollars": float("nan") if unpriced else dollars}


class CostMeter(pt.Transformer):
    """Runs ``transformer`` one query at a time and adds each query's LLM cost to its rows: the columns
    :data:`COLUMNS` (``cost_calls``, ``cost_prompt_tokens``, ``cost_completion_tokens``, ``cost_seconds``,
    ``cost_dollars``), read from what the LLM components inside it recorded while it ran on that query
    (their :meth:`~pyterrier_sci.llm.Usage.answered`, found through the component protocol).

    One query at a time is what makes the values the query's own: a component that runs the queries of a
    batch concurrently (``listwise``, ``setwise``) runs them one after another under the meter.  Calls made
    in other processes (Ray workers, ``on_ray``) are not seen: a query with such calls gets NaN costs.

    Example:
        >>> import pandas as pd, pyterrier as pt
        >>> from pyterrier_sci.cost import CostMeter
        >>> first = pt.Transformer.from_df(pd.DataFrame({"qid": ["1"], "docno": ["d1"], "score": [1.0]}))
        >>> out = CostMeter(first)(pd.DataFrame({"qid": ["1"], "query": ["q"]}))
        >>> out[["qid", "docno", "cost_calls", "cost_dollars"]].to_dict("records")
        [{'qid': '1', 'docno': 'd1', 'cost_calls': 0.0, 'cost_dollars': 0.0}]
    """

    def __init__(self, transformer: pt.Transformer):
        self.transformer = transformer

    def subtransformers(self) -> Dict[str, Any]:
        return {"transformer": self.transformer}

    def __repr__(self) -> str:
        return f"CostMeter({self.transformer!r})"

    def __str__(self) -> str:
        return str(self.transformer)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.columns(inp, includes=["qid"])
        components = usage_holders(self.transformer)
        if len(inp) == 0:
            out = self.transformer.transform(inp)
            return out.assign(**{c: pd.Series(dtype=float) for c in COLUMNS.values()})
        frames = []
        for _, one in inp.groupby("qid", sort=False):
            before = _snapshot(components)
            out = self.transformer.transform(one)
            spent = _spent(before, _snapshot(components))
            frames.append(out.assign(**spent))
        return pd.concat(frames, ignore_index=True)


def metered(system: Any) -> Any:
    """``system`` under a :class:`CostMeter` when it is a transformer (and not metered yet); a result frame
    is returned as it is (its costs are the columns it carries)."""
    if isinstance(system, pt.Transformer) and not isinstance(system, CostMeter):
        return CostMeter(system)
    return system


def wanted(measures: Iterable[Any]) -> bool:
    """Whether any of ``measures`` (measure objects) is a cost measure."""
    return any(is_cost_measure(m) for m in measures)


# ------------------------------------------------------------------------- costs kept beside a run file

_SIDE_HEADER = "# pyterrier-sci per-query LLM costs of the run file {name} (sha256 {digest})"
_SIDE_COLUMNS = ["qid", *COLUMNS.values()]


def costs_path(run_file: Union[str, Path]) -> Path:
    """Where the per-query costs of a run file are kept: ``<run file>.costs.tsv`` beside it."""
    run_file = Path(run_file)
    return run_file.with_name(run_file.name + ".costs.tsv")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_costs(res: pd.DataFrame, run_file: Union[str, Path], what: str = "the run's costs") -> Optional[Path]:
    """Writes the per-query costs ``res`` carries beside ``run_file`` (written before, by
    :func:`pyterrier_sci.experiment.write_run`), atomically, bound to the run file's SHA-256 so that a run
    written again later never takes them for its own; a frame without costs removes any costs kept
    there (they belonged to an earlier run).  Returns the path written, or None."""
    side = costs_path(run_file)
    if not cost_columns(res) or len(res) == 0:
        if side.is_file():
            side.unlink()
        return None
    per_q = res.groupby("qid", sort=False)[list(COLUMNS.values())].first().reset_index()
    per_q["qid"] = per_q["qid"].astype(str)
    header = _SIDE_HEADER.format(name=Path(run_file).name, digest=_sha256(Path(run_file)))
    text = header + "\n" + per_q[_SIDE_COLUMNS].to_csv(sep="\t", index=False, na_rep="nan")
    return artifacts.atomic_write_text(side, text, what=what)


def read_costs(run_file: Union[str, Path]) -> Optional[pd.DataFrame]:
    """The per-query costs kept beside ``run_file`` (``qid`` and :data:`COLUMNS`' columns), or None when
    there are none, they cannot be read, or they belong to another version of the run file."""
    side = costs_path(run_file)
    if not side.is_file():
        return None
    try:
        text = side.read_text(encoding="utf-8")
        header, _, body = text.partition("\n")
        if header != _SIDE_HEADER.format(name=Path(run_file).name, digest=_sha256(Path(run_file))):
            return None
        frame = pd.read_csv(io.StringIO(body), sep="\t", dtype={"qid": str})
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError):
        return None
    if list(frame.columns) != _SIDE_COLUMNS:
        return None
    return frame


def attach_costs(res: pd.DataFrame, costs: Optional[pd.DataFrame]) -> pd.DataFrame:
    """``res`` with the per-query ``costs`` (as :func:`read_costs` gives them) on each row of their query
    (NaN for a query they do not cover); ``res`` as it is when ``costs`` is None."""
    if costs is None:
        return res
    out = res.drop(columns=cost_columns(res))
    keyed = costs.assign(qid=costs["qid"].astype(str)).drop_duplicates("qid").set_index("qid")
    qids = out["qid"].astype(str)
    for col in COLUMNS.values():
        out[col] = qids.map(keyed[col]).astype(float).to_numpy()
    return out

