"""LLM budgets: ``llm: {budget: {calls: N, tokens: N, dollars: X}}`` caps what one run of a config may
spend.  Every LLM component built from the config shares one :class:`Ledger`; the client reserves a
call on it before sending (atomically, so ``concurrency`` threads cannot overshoot) and settles it
with the server's token counts.  A call that would pass the budget is refused with
:class:`LLMBudgetExceeded`, which stops the run; finished calls stay in the response cache, so a
rerun with a larger budget resumes at no cost.  Cache hits are free.  See ``docs/llm.md``.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from pyterrier_sci.errors import LLMBudgetExceeded  # noqa: F401 - defined there, re-exported

from .accounting import llm_components

BUDGET_KEYS = ("calls", "tokens", "dollars")
_WHOLE = ("calls", "tokens")

__all__ = ["BUDGET_KEYS", "LLMBudgetExceeded", "Ledger", "RemoteLedger", "LedgerBook", "check_budget", "ledger_for",
           "ledger_key", "use_ledger_service", "new_ledger_id",
           "context_ledger_id", "share_budget", "reset_budget"]


def check_budget(value: Any) -> Dict[str, float]:
    """The budget as ``{key: limit}`` (keys from :data:`BUDGET_KEYS`, any subset; ``None`` or ``{}`` =
    no budget).  One ``ValueError`` naming the key for an unknown key, a negative, non-finite or
    non-numeric limit, or a fractional number of calls or tokens."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"llm setting budget must be a mapping such as {{calls: 100, tokens: 200000, dollars: 5}}, "
                         f"not {value!r}")
    out: Dict[str, float] = {}
    for key, v in value.items():
        if key not in BUDGET_KEYS:
            raise ValueError(f"unknown llm budget key {key!r} (known: {', '.join(BUDGET_KEYS)})")
        whole = key in _WHOLE
        what = "a whole number >= 0" if whole else "a number >= 0 (US dollars)"
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError(f"llm budget {key} must be {what}, not {v!r}")
        try:
            f = float(v)
        except (ValueError, OverflowError):
            raise ValueError(f"llm budget {key} must be {what}, not {v!r}") from None
        if not math.isfinite(f) or f < 0 or (whole and f != int(f)):
            raise ValueError(f"llm budget {key} must be {what} (finite), not {v!r}")
        out[key] = int(f) if whole else f
    return out


def new_ledger_id() -> str:
    """A fresh ledger id: settings that carry it (and the same limits) share one :class:`Ledger`."""
    return uuid.uuid4().hex


@dataclass
class _Reservation:
    tokens: int
    dollars: float


class Ledger:
    """What one run spent and holds reserved against its budget; thread-safe."""

    def __init__(self, limits: Mapping[str, float]):
        self.limits = dict(limits)
        self._lock = threading.Lock()
        self.calls = 0            # finished calls
        self.tokens = 0           # their prompt + completion tokens
        self.dollars = 0.0        # their cost (calls of models without a price add nothing)
        self.unpriced = 0         # finished calls of a model without a price
        self._open_calls = 0      # calls in flight: reserved, not settled
        self._open_tokens = 0
        self._open_dollars = 0.0
        self.refused: Optional[str] = None   # why the first refused call was refused (the run stops)

    # -- what the client calls ------------------------------------------------------------
    def reserve(self, prompt_tokens: int, max_tokens: int, price: Optional[Tuple[float, float]]) -> _Reservation:
        """Reserves one call of about ``prompt_tokens`` prompt tokens and at most ``max_tokens``
        completion tokens; raises :class:`LLMBudgetExceeded` when it could pass a limit (or a
        call was refused before: the run stops at the first refusal)."""
        need_tokens = int(prompt_tokens) + int(max_tokens)
        need_dollars = _cost(price, prompt_tokens, max_tokens)
        with self._lock:
            if self.refused is None:
                lim = self.limits
                if "calls" in lim and self.calls + self._open_calls + 1 > lim["calls"]:
                    self.refused = (f"the next call would be call {self.calls + self._open_calls + 1} of a budget of "
                                    f"{lim['calls']:,} calls")
                elif "tokens" in lim and self.tokens + self._open_tokens + need_tokens > lim["tokens"]:
                    self.refused = (f"the next call needs up to {need_tokens:,} tokens (about {int(prompt_tokens):,} "
                                    f"prompt + {int(max_tokens):,} max_tokens) and would pass the budget of "
                                    f"{lim['tokens']:,} tokens")
                elif "dollars" in lim and self.dollars + self._open_dollars + (need_dollars or 0.0) > lim["dollars"]:
                    self.refused = (f"the next call may cost up to ${need_dollars or 0.0:.4f} and would pass the "
                                    f"budget of ${lim['dollars']:g}")
                else:
                    self._open_calls += 1
                    self._open_tokens += need_tokens
                    self._open_dollars += need_dollars or 0.0
                    return _Reservation(need_tokens, need_dollars or 0.0)
        raise self.error()

    def settle(self, r: _Reservation, prompt_tokens: int, completion_tokens: int,
               price: Optional[Tuple[float, float]]) -> None:
        """Replaces a reservation by what the finished call used."""
        cost = _cost(price, prompt_tokens, completion_tokens)
        with self._lock:
            self._release(r)
            self.calls += 1
            self.tokens += int(prompt_tokens) + int(completion_tokens)
            if cost is None:
                self.unpriced += 1
            else:
                self.dollars += cost

    def release(self, r: _Reservation) -> None:
        """Gives a reservation back (the call failed and was not answered)."""
        with self._lock:
            self._release(r)

    def _release(self, r: _Reservation) -> None:
        self._open_calls -= 1
        self._open_tokens -= r.tokens
        self._open_dollars -= r.dollars

    # -- reports --------------------------------------------------------------------------
    @property
    def tripped(self) -> bool:
        return self.refused is not None

    def spent(self) -> Dict[str, Any]:
        with self._lock:
            return {"calls": self.calls, "tokens": self.tokens,
                    "dollars": None if self.unpriced and not self.dollars else round(self.dollars, 6)}

    def remaining(self) -> Dict[str, Any]:
        spent = self.spent()
        return {k: max(0, v - (spent[k] or 0)) if k in _WHOLE else max(0.0, round(v - (spent[k] or 0.0), 6))
                for k, v in self.limits.items()}

    def error(self) -> LLMBudgetExceeded:
        """The error that stops the run, with what was spent and what remains now."""
        spent, remaining = self.spent(), self.remaining()
        spent_text = f"{spent['calls']:,} calls, {spent['tokens']:,} tokens"
        if spent["dollars"] is not None:
            spent_text += f", ${spent['dollars']:.4f}"
        left = ", ".join(f"${v:.4f}" if k == "dollars" else f"{v:,} {k}" for k, v in remaining.items())
        reason = self.refused or "the budget is spent"
        msg = (f"LLM budget exceeded: {reason}; spent {spent_text}; remaining {left}. The run stopped before "
               "that call; finished calls are in the response cache, so a rerun with a larger budget "
               "(llm: budget:) repeats none of them")
        return LLMBudgetExceeded(msg, self.limits, spent, remaining, reason)

    _STATE = ("calls", "tokens", "dollars", "unpriced", "refused")

    def state(self) -> Dict[str, Any]:
        """What was spent (not what is in flight): to carry the ledger to another process."""
        with self._lock:
            return {k: getattr(self, k) for k in self._STATE}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Takes over what another process's ledger spent (see :meth:`state`)."""
        with self._lock:
            for k in self._STATE:
                setattr(self, k, state[k])

    def reset(self) -> None:
        """Forgets what was spent (a new run with the same settings objects)."""
        with self._lock:
            self.calls = self.tokens = self.unpriced = 0
            self.dollars = 0.0
            self.refused = None


def _cost(price: Optional[Tuple[float, float]], prompt_tokens: float, completion_tokens: float) -> Optional[float]:
    if price is None:
        return None
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1e6


_LEDGERS: Dict[Tuple[str, Tuple[Tuple[str, float], ...]], Ledger] = {}
_LEDGERS_LOCK = threading.Lock()
_SERVICE: Any = None   # in a worker of a distributed run: where the run's ledgers live


def ledger_key(settings: Any) -> Optional[Tuple[str, Tuple[Tuple[str, float], ...]]]:
    """The key of the ledger of ``settings`` (ledger id and budget), ``None`` without a budget."""
    budget = getattr(settings, "budget", None)
    if not budget:
        return None
    return (settings.ledger or "", tuple(sorted(budget.items())))


def use_ledger_service(service: Any) -> None:
    """In a worker process of a distributed run (``pyterrier_sci.scale.on_ray``): the run's ledgers
    live in ``service`` (an object with ``reserve``, ``settle``, ``release`` and ``state`` taking a
    ledger key, e.g. the cache service actor), so that all workers spend one budget; ``None``
    goes back to ledgers of this process."""
    global _SERVICE
    _SERVICE = service


class RemoteLedger:
    """A :class:`Ledger` kept by a service in another process (the driver's node of a distributed
    run): each reservation and settlement is one call to it, so W workers cannot pass the budget."""

    def __init__(self, service: Any, key, limits: Mapping[str, float]):
        self.service, self.key, self.limits = service, key, dict(limits)

    def _local(self) -> Ledger:
        ledger = Ledger(self.limits)
        ledger.load_state(self.service.state(self.key))
        return ledger

    def reserve(self, prompt_tokens: int, max_tokens: int, price: Optional[Tuple[float, float]]) -> _Reservation:
        got = self.service.reserve(self.key, int(prompt_tokens), int(max_tokens), price)
        if got is None:
            raise self.error()
        return got

    def settle(self, r: _Reservation, prompt_tokens: int, completion_tokens: int,
               price: Optional[Tuple[float, float]]) -> None:
        self.service.settle(self.key, r, int(prompt_tokens), int(completion_tokens), price)

    def release(self, r: _Reservation) -> None:
        self.service.release(self.key, r)

    @property
    def tripped(self) -> bool:
        return self.service.state(self.key)["refused"] is not None

    def spent(self) -> Dict[str, Any]:
        return self._local().spent()

    def remaining(self) -> Dict[str, Any]:
        return self._local().remaining()

    def error(self) -> LLMBudgetExceeded:
        return self._local().error()


class LedgerBook:
    """Ledgers by key for a service process (the cache service of a distributed run): the driver
    loads each with what the run spent so far, workers reserve and settle on it, and the driver
    takes the final state back."""

    def __init__(self):
        self._ledgers: Dict[Any, Ledger] = {}
        self._lock = threading.Lock()

    def load(self, key, limits: Mapping[str, float], state: Mapping[str, Any]) -> None:
        ledger = Ledger(limits)
        ledger.load_state(state)
        with self._lock:
            self._ledgers[key] = ledger

    def _get(self, key) -> Ledger:
        with self._lock:
            return self._ledgers[key]

    def reserve(self, key, prompt_tokens: int, max_tokens: int, price) -> Optional[_Reservation]:
        try:
            return self._get(key).reserve(prompt_tokens, max_tokens, price)
        except LLMBudgetExceeded:
            return None

    def settle(self, key, r: _Reservation, prompt_tokens: int, completion_tokens: int, price) -> None:
        self._get(key).settle(r, prompt_tokens, completion_tokens, price)

    def release(self, key, r: _Reservation) -> None:
        self._get(key).release(r)

    def state(self, key) -> Dict[str, Any]:
        return self._get(key).state()


def ledger_for(settings: Any) -> Optional[Ledger]:
    """The ledger of ``settings`` (an :class:`~pyterrier_sci.llm.LLMSettings`): one per ledger id and
    budget in this process (or, in a worker of a distributed run, the run's ledger kept by its
    service: :func:`use_ledger_service`); ``None`` when the settings have no budget."""
    key = ledger_key(settings)
    if key is None:
        return None
    budget = settings.budget
    if _SERVICE is not None:
        return RemoteLedger(_SERVICE, key, budget)
    with _LEDGERS_LOCK:
        if key not in _LEDGERS:
            _LEDGERS[key] = Ledger(budget)
        return _LEDGERS[key]


def price_of(settings: Any) -> Optional[Tuple[float, float]]:
    """(prompt, completion) USD per million tokens of ``settings.model``, or ``None``."""
    p = (getattr(settings, "prices", None) or {}).get(settings.model)
    if p is None:
        return None
    return float(p.get("prompt", 0.0)), float(p.get("completion", 0.0))


# -- one ledger per run of a config --------------------------------------------------------------
_CONTEXT_ATTR = "llm_ledger"


def context_ledger_id(context: Any) -> Optional[str]:
    """The ledger id of a pipeline-building context (``registry.Context``): made on first use and
    kept on the context, so every LLM component built with it shares one budget."""
    if context is None:
        return None
    got = getattr(context, _CONTEXT_ATTR, None)
    if got is None:
        got = new_ledger_id()
        try:
            setattr(context, _CONTEXT_ATTR, got)
        except AttributeError:
            return None
    return got


def with_ledger_id(context: Any, ledger_id: str) -> Any:
    """``context`` set to use ledger ``ledger_id`` (one budget over several contexts, e.g. the
    datasets of one experiment)."""
    setattr(context, _CONTEXT_ATTR, ledger_id)
    return context


def share_budget(settings: Any, context: Any = None, parent: Any = None) -> Any:
    """``settings`` on the run's ledger: the context's (a component built by the pipeline language),
    or ``parent``'s budget and ledger when ``settings`` has no budget of its own (a second model of
    one component, e.g. HLM-Cite's guider)."""
    if parent is not None and parent.budget and not settings.budget:
        return dataclasses.replace(settings, budget=dict(parent.budget), ledger=parent.ledger)
    if context is not None and settings.budget:
        ledger = context_ledger_id(context)
        if ledger is not None and ledger != settings.ledger:
            return dataclasses.replace(settings, ledger=ledger)
    return settings


def reset_budget(systems: Any) -> None:
    """Forgets what the LLM components inside ``systems`` spent against their budgets (to run the
    same pipeline objects again as a new run)."""
    for comp in llm_components(systems):
        ledger = ledger_for(comp.sci_llm_settings())
        if ledger is not None:
            ledger.reset()
