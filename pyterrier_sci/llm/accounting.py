"""Token and call accounting per component, without global state: each LLM component owns a
:class:`Usage`; :func:`usage_report` collects those of a pipeline and :func:`add_usage_columns` puts
the totals beside an experiment's measures.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from pyterrier_sci.protocol import usage_holders

COUNTERS = ("calls", "requests", "cache_hits", "retries", "errors", "prompt_tokens",
            "completion_tokens", "unusable", "repaired")
#: what :meth:`Usage.answered` records (the cost of the answers used, cache hits included)
ANSWER_COUNTERS = ("answers", "answer_prompt_tokens", "answer_completion_tokens", "answer_seconds", "answers_untimed")


@dataclass
class Usage:
    """Counters of one component.

    * ``calls``: logical LLM calls answered by the server (a retried call counts once);
    * ``requests``: HTTP requests sent, retries included;
    * ``cache_hits``: calls answered from the response cache (no request sent);
    * ``retries``: requests repeated after a 429 / 5xx / timeout / connection error;
    * ``errors``: calls that failed after the last retry;
    * ``prompt_tokens`` / ``completion_tokens``: as reported by the server (cache hits add none);
    * ``unusable``: outputs the component could not use (the rows keep their first-stage order);
    * ``repaired``: malformed rankings that were repaired (listwise, HLM-Cite decider).

    Beside them, :meth:`answered` records what the answers the component used cost, cache hits included
    (``answers``, ``answer_prompt_tokens``, ``answer_completion_tokens``, ``answer_seconds``): the cost
    measures of :mod:`pyterrier_sci.cost` read them per query.
    """
    calls: int = 0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unusable: int = 0
    repaired: int = 0
    model: str = ""
    _lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)
    #: what the answers the component used cost, cache hits included (the method's cost, whatever the cache
    #: held; not among ``COUNTERS``): read per query by :mod:`pyterrier_sci.cost` (:meth:`answered`)
    answers: int = field(default=0, repr=False)
    answer_prompt_tokens: int = field(default=0, repr=False)
    answer_completion_tokens: int = field(default=0, repr=False)
    answer_seconds: float = field(default=0.0, repr=False)
    answers_untimed: int = field(default=0, repr=False)

    def add(self, **counts: int) -> None:
        """Adds counts; each must be a whole number >= 0 (a negative one would make costs negative)."""
        for k, v in counts.items():
            if k not in COUNTERS:
                raise ValueError(f"unknown usage counter {k!r} (known: {', '.join(COUNTERS)})")
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
                raise ValueError(f"usage counter {k} must be a whole number >= 0, not {v!r}")
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + int(v or 0))

    def reset(self) -> None:
        with self._lock:
            for k in COUNTERS + ANSWER_COUNTERS:
                setattr(self, k, 0)

    def answered(self, prompt_tokens: int, completion_tokens: int, seconds: Optional[float]) -> None:
        """Records one answer the component used, from the server or the cache: its token counts as
        the server reported them and the seconds the server took to give it (``None`` when not known: a
        cache entry written before answers were timed)."""
        with self._lock:
            self.answers += 1
            self.answer_prompt_tokens += int(prompt_tokens or 0)
            self.answer_completion_tokens += int(completion_tokens or 0)
            if seconds is None:
                self.answers_untimed += 1
            else:
                self.answer_seconds += float(seconds)

    def answer_totals(self) -> Dict[str, float]:
        """The answers recorded by :meth:`answered` so far: ``answers``, ``answer_prompt_tokens``,
        ``answer_completion_tokens``, ``answer_seconds``, ``answers_untimed``."""
        with self._lock:
            return {k: getattr(self, k) for k in ANSWER_COUNTERS}

    def as_dict(self) -> Dict[str, int]:
        return {k: getattr(self, k) for k in COUNTERS}

    def cost(self, prices: Optional[Mapping[str, Mapping[str, float]]] = None) -> Optional[float]:
        """USD, from a price table ``{model: {"prompt": $/1M tokens, "completion": $/1M}}``."""
        if not prices or self.model not in prices:
            return None
        p = prices[self.model]
        prompt, completion = float(p.get("prompt", 0.0)), float(p.get("completion", 0.0))
        if not (prompt >= 0 and completion >= 0) or not (prompt < float("inf") and completion < float("inf")):
            raise ValueError(f"prices of {self.model!r} must be finite and >= 0 (USD per million tokens), "
                             f"not {dict(p)!r}")
        return (self.prompt_tokens * prompt + self.completion_tokens * completion) / 1e6

    def __iadd__(self, other: "Usage") -> "Usage":
        self.add(**other.as_dict())
        theirs = other.answer_totals()
        with self._lock:
            for k, v in theirs.items():
                setattr(self, k, getattr(self, k) + v)
        return self

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


def llm_components(pipeline: Any) -> List[Any]:
    """Every component inside ``pipeline`` (a transformer, or a list of them) that calls an LLM: those
    answering the component protocol's ``sci_usage()`` (:mod:`pyterrier_sci.protocol`), in pipeline
    order, each once."""
    return usage_holders(pipeline)


def usage_report(systems: Any, names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """One row per (system, LLM component): the counters, ``cost`` (when the component's settings
    hold a price table) and the component's ``model``.

    Args:
        systems: a pipeline or a list of pipelines (as given to ``pt.Experiment``).
        names: the systems' names (default ``system_0``, ...; as ``pt.Experiment`` names them
            when given ``names``).
    """
    if not isinstance(systems, (list, tuple)):
        systems = [systems]
    names = list(names) if names is not None else [f"system_{i}" for i in range(len(systems))]
    rows = []
    for name, system in zip(names, systems):
        for comp in llm_components(system):
            u = comp.sci_usage()
            prices = getattr(comp.sci_llm_settings(), "prices", None)
            rows.append({"name": name, "component": getattr(comp, "component_name", type(comp).__name__),
                         "model": u.model, **u.as_dict(), "cost": u.cost(prices)})
    cols = ["name", "component", "model", *COUNTERS, "cost"]
    return pd.DataFrame(rows, columns=cols)


def usage_totals(systems: Any, names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Per system: ``llm_calls``, ``llm_cache_hits``, ``llm_prompt_tokens``,
    ``llm_completion_tokens``, ``llm_cost`` (summed over its LLM components; NaN cost when no
    price table applies).  Systems without LLM components get zeros."""
    if not isinstance(systems, (list, tuple)):
        systems = [systems]
    names = list(names) if names is not None else [f"system_{i}" for i in range(len(systems))]
    rep = usage_report(systems, names)
    rows = []
    for name in names:
        part = rep[rep["name"] == name]
        costs = [c for c in part["cost"] if c is not None and c == c]
        rows.append({"name": name,
                     "llm_calls": int(part["calls"].sum()),
                     "llm_cache_hits": int(part["cache_hits"].sum()),
                     "llm_prompt_tokens": int(part["prompt_tokens"].sum()),
                     "llm_completion_tokens": int(part["completion_tokens"].sum()),
                     "llm_cost": float(sum(costs)) if costs else float("nan")})
    return pd.DataFrame(rows)


def add_usage_columns(results: pd.DataFrame, systems: Any, names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Merges :func:`usage_totals` into a ``pt.Experiment`` result frame (column ``name``)."""
    if not isinstance(systems, (list, tuple)):
        systems = [systems]
    if names is None:
        names = list(results["name"].drop_duplicates())[:len(systems)]
    totals = usage_totals(systems, names)
    return results.merge(totals, on="name", how="left")


def reset_usage(systems: Any) -> None:
    """Sets the counters of every LLM component inside ``systems`` back to zero."""
    for comp in llm_components(systems):
        comp.sci_usage().reset()
