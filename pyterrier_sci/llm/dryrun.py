"""Dry runs (``pyterrier-sci run|experiment --dry-run``): the pipelines run as usual, but no LLM
request is sent.  Each call an LLM component makes is counted, its prompt tokens estimated (with the
model's own tokenizer where one is at hand, else 4 characters per token), its completion tokens
bounded by its ``max_tokens``, its cost priced with ``prices``, and it is looked up in the response
cache; a call the cache holds gets its cached answer, any other a neutral stand-in (empty text:
the component treats it as unusable and keeps the first-stage order).  See ``docs/llm.md``.
"""
from __future__ import annotations

import contextlib
import json
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pandas as pd

from .accounting import llm_components
from .budget import ledger_for
from .text import estimate_tokens
from .transport import deadline_of, guarded_transport, http_libs

__all__ = ["DryRun", "DryRunReport", "dry_run", "active", "estimate_prompt_tokens", "estimate_tokens",
           "ASSUMPTIONS", "concat_reports"]

FOUR_CHARS = "4 characters per token"
ASSUMPTIONS = (
    "no LLM request was sent; a call the response cache holds got its cached answer, every other call a neutral "
    "stand-in (empty text), which the components treat as unusable: the rows keep their first-stage order",
    "prompt_tokens: the text of the calls not cached (chat: the messages' contents, without the chat template's "
    "few extra tokens), counted with the tokenizer named in 'tokenizer'",
    "completion_tokens: the max_tokens of each call not cached, an upper bound",
    "cost: prices (USD per 1M tokens) x the two estimates, for the calls not cached; empty without a price",
    "calls: the number does not depend on the answers for the toolkit's components (mir_pointwise, mir_agent, "
    "listwise, pairwise_tournament, hlm_agents, PRISM, SciFACE, DORIS-MAE); a repeat of an earlier call counts as "
    "cached (pairwise_tournament's later pairs depend on the answers, so its cached/to_send split may differ); "
    "agents that loop until an answer satisfies them are counted for one round; mode 'auto' is counted as chat "
    "(a base model behind a chat endpoint costs one more probe call)",
    "setwise: its heapsort asks more or fewer sets as the answers go; a call not cached gets the stand-in answer B "
    "(the set's second candidate), which makes it ask the most any answers can, so its count is that maximum, and "
    "the real run's count once its calls are cached",
)

_ACTIVE: Optional["DryRun"] = None
_ACTIVE_LOCK = threading.Lock()


def active() -> Optional["DryRun"]:
    """The dry run in progress in this process, or ``None``."""
    return _ACTIVE


@contextlib.contextmanager
def dry_run() -> Iterator["DryRun"]:
    """Within the block no LLM client of this process sends a request; yields the :class:`DryRun`
    that counts the calls."""
    global _ACTIVE
    with _ACTIVE_LOCK:
        if _ACTIVE is not None:
            raise RuntimeError("a dry run is already in progress in this process")
        _ACTIVE = DryRun()
        run = _ACTIVE
    try:
        yield run
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE = None


def prompt_text(kind: str, payload: dict) -> str:
    if kind == "chat":
        return "\n".join(str(m.get("content") or "") for m in payload.get("messages") or [] if isinstance(m, dict))
    p = payload.get("prompt", "")
    return p if isinstance(p, str) else "\n".join(map(str, p))


def estimate_prompt_tokens(kind: str, payload: dict) -> int:
    """Prompt tokens of a request by the 4-characters rule (what budgets reserve before a call)."""
    return estimate_tokens(prompt_text(kind, payload))


# -- tokenizers -----------------------------------------------------------------------------
#: seconds a tokenize request to the server may take in all (the headers and the whole body)
TOKENIZE_DEADLINE = 2.0


def _server_tokenizer(base_url: str, model: str, timeout: float = TOKENIZE_DEADLINE
                      ) -> Optional[Tuple[str, Callable[[str], int]]]:
    """The serving model's own tokenizer through its server: llama.cpp and vLLM (``POST /tokenize``)
    or llama-cpp-python (``POST /extras/tokenize``); ``None`` when neither answers.  Each request
    must be complete within ``timeout`` seconds (the LLM client's deadline transport: a server that
    trickles its answer cannot hold the dry run up); a server too slow for the probe is not asked
    again, and one that turns slow later is dropped for the 4-characters rule.  The API key is not
    sent and no proxy is used."""
    httpx, _ = http_libs()
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    http = httpx.Client(transport=guarded_transport(1 << 24), trust_env=False, timeout=timeout)
    slow = threading.Event()

    def ask(path: str, body: dict) -> Optional[int]:
        if slow.is_set():
            raise TimeoutError(f"the server's {path} was slower than {timeout:g} s before")
        try:
            with deadline_of(timeout):
                resp = http.post(root + path, json=body, headers={"accept-encoding": "identity"})
                got = resp.json() if resp.status_code == 200 else None
        except httpx.TimeoutException:
            slow.set()
            raise
        if isinstance(got, dict):
            if isinstance(got.get("count"), int):
                return got["count"]
            if isinstance(got.get("tokens"), list):
                return len(got["tokens"])
        return None

    for path, make in (("/tokenize", lambda t: {"content": t, "prompt": t, "model": model, "add_special": False}),
                       ("/extras/tokenize", lambda t: {"input": t, "model": model})):
        try:
            if ask(path, make("Hello world")) is not None:
                return f"the server's {path}", (lambda t, path=path, make=make: ask(path, make(t)) or 0)
        except httpx.TimeoutException:   # reachable but too slow: no other path is tried either
            return None
        except Exception:  # noqa: BLE001 - not there, not reachable, another kind of server
            continue
    return None


def _local_tokenizer(model: str) -> Optional[Tuple[str, Callable[[str], int]]]:
    """A transformers tokenizer of that name already on this machine (a local folder, or the
    Hugging Face cache); nothing is downloaded."""
    try:

        from transformers import AutoTokenizer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception:  # noqa: BLE001 - no such tokenizer here
        return None
    return f"transformers {model}", (lambda t: len(tok(t, add_special_tokens=False)["input_ids"]))


def find_tokenizer(base_url: str, model: str) -> Tuple[str, Callable[[str], int]]:
    """(name, count function) of the best tokenizer at hand for ``model``: its server's, a local
    transformers one of that name, else :func:`~pyterrier_sci.llm.text.estimate_tokens`."""
    return (_server_tokenizer(base_url, model) or _local_tokenizer(model)
            or (FOUR_CHARS, estimate_tokens))


# -- counting -------------------------------------------------------------------------------
@dataclass
class Tally:
    model: str
    tokenizer: str = ""
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Optional[float] = 0.0


class DryRun:
    """The calls counted during one dry run, per component (per :class:`~pyterrier_sci.llm.Usage`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.tallies: Dict[int, Tally] = {}
        self._usages: Dict[int, Any] = {}   # keeps the Usage objects alive (their ids stay unique)
        self._reported: set = set()
        self._seen: set = set()   # cache keys of the calls counted as sent: a repeat would be a cache hit
        self._tokenizers: Dict[Tuple[str, str], Tuple[str, Callable[[str], int]]] = {}
        self._tok_lock = threading.Lock()

    def tokenizer(self, base_url: str, model: str) -> Tuple[str, Callable[[str], int]]:
        key = (base_url, model)
        with self._tok_lock:   # found once per (server, model); other threads wait for it
            if key not in self._tokenizers:
                self._tokenizers[key] = find_tokenizer(base_url, model)
            return self._tokenizers[key]

    def record(self, client: Any, kind: str, payload: dict, cached: bool, key: Optional[str] = None) -> None:
        """Counts one call of ``client`` (an :class:`~pyterrier_sci.llm.LLMClient`); ``key``: its
        cache key when the client caches (a repeat of a call counted before is counted as cached:
        a real run finds it in the cache by then)."""
        s = client.settings
        if key is not None and not cached:
            with self._lock:
                cached = key in self._seen
                self._seen.add(key)
        name, count = (None, None) if cached else self.tokenizer(s.base_url, s.model)
        prompt = 0
        if not cached:
            text = prompt_text(kind, payload)
            try:
                prompt = int(count(text))
            except Exception:  # noqa: BLE001 - a tokenizer that fails on this text: the rule of thumb
                prompt, name = estimate_tokens(text), FOUR_CHARS
        completion = 0 if cached else int(payload.get("max_tokens") or s.max_tokens)
        price = (s.prices or {}).get(s.model)
        with self._lock:
            t = self.tallies.get(id(client.usage))
            if t is None:
                t = self.tallies[id(client.usage)] = Tally(model=s.model)
                self._usages[id(client.usage)] = client.usage
            t.calls += 1
            t.cached += int(cached)
            t.prompt_tokens += prompt
            t.completion_tokens += completion
            if name and name not in t.tokenizer.split("; "):
                t.tokenizer = f"{t.tokenizer}; {name}" if t.tokenizer else name
            if price is None:
                t.cost = None
            elif t.cost is not None:
                t.cost += (prompt * float(price.get("prompt", 0.0))
                           + completion * float(price.get("completion", 0.0))) / 1e6

    def report(self, systems: Any, names: Optional[Sequence[str]] = None, dataset: Optional[str] = None,
               notes: bool = True) -> "DryRunReport":
        """One row per LLM component inside ``systems`` (a component shared by several systems is
        listed under the first), and with ``notes`` a line per budget saying whether the calls fit."""
        if not isinstance(systems, (list, tuple)):
            systems = [systems]
        names = list(names) if names is not None else [f"system_{i}" for i in range(len(systems))]
        rows, seen = [], set()
        for name, system in zip(names, systems):
            for comp in llm_components(system):
                if id(comp.sci_usage()) in seen:
                    continue
                seen.add(id(comp.sci_usage()))
                rows.append(self._row(name, comp, dataset))
        with self._lock:
            self._reported |= seen
            others = [(k, t) for k, t in self.tallies.items() if k not in self._reported]
            self._reported |= {k for k, _ in others}
        for _, t in others:   # clients outside the pipelines' components (none in the toolkit's own)
            rows.append(_tally_row("(other)", "(other)", t, dataset))
        return DryRunReport(pd.DataFrame(rows, columns=COLUMNS), budget_notes(self, systems) if notes else [])

    def _row(self, name: str, comp: Any, dataset: Optional[str]) -> dict:
        with self._lock:
            t = self.tallies.get(id(comp.sci_usage()))
        settings = comp.sci_llm_settings()
        if t is None:
            t = Tally(model=getattr(settings, "model", comp.sci_usage().model),
                      cost=0.0 if settings is not None and settings.model in (settings.prices or {}) else None)
        return _tally_row(name, getattr(comp, "component_name", type(comp).__name__), t, dataset)


COLUMNS = ["dataset", "name", "component", "model", "calls", "cached", "to_send", "prompt_tokens",
           "completion_tokens", "cost", "tokenizer"]


def _tally_row(name: str, component: str, t: Tally, dataset: Optional[str]) -> dict:
    return {"dataset": dataset or "", "name": name, "component": component, "model": t.model, "calls": t.calls,
            "cached": t.cached, "to_send": t.calls - t.cached, "prompt_tokens": t.prompt_tokens,
            "completion_tokens": t.completion_tokens,
            "cost": None if t.cost is None else round(t.cost, 6), "tokenizer": t.tokenizer or "-"}


def budget_notes(run: DryRun, systems: Any) -> List[str]:
    """A line per budget of the components in ``systems``: whether the counted calls fit."""
    by_ledger: Dict[int, Tuple[Any, List[Any]]] = {}
    for comp in llm_components(list(systems)):
        ledger = ledger_for(comp.sci_llm_settings())
        if ledger is not None:
            by_ledger.setdefault(id(ledger), (ledger, []))[1].append(comp)
    notes = []
    for ledger, comps in by_ledger.values():
        with run._lock:
            ts = [run.tallies[id(c.sci_usage())] for c in comps if id(c.sci_usage()) in run.tallies]
        need = {"calls": sum(t.calls - t.cached for t in ts),
                "tokens": sum(t.prompt_tokens + t.completion_tokens for t in ts),
                "dollars": sum(t.cost or 0.0 for t in ts)}
        spent = ledger.spent()
        parts = []
        for k, limit in ledger.limits.items():
            left = limit - (spent[k] or 0)
            fits = need[k] <= left
            shown = f"${need[k]:.4f} of ${left:.4f}" if k == "dollars" else f"{need[k]:,} of {left:,} {k}"
            parts.append(f"{shown} ({'fits' if fits else 'would stop the run'})")
        notes.append("budget: needs at most " + "; ".join(parts))
    return notes


@dataclass
class DryRunReport:
    """What a dry run counted: ``table`` (one row per LLM component and dataset) and notes."""
    table: pd.DataFrame
    notes: List[str]

    def totals(self) -> Dict[str, Any]:
        t = self.table
        costs = [c for c in t["cost"] if c is not None and c == c]
        return {"calls": int(t["calls"].sum()), "cached": int(t["cached"].sum()), "to_send": int(t["to_send"].sum()),
                "prompt_tokens": int(t["prompt_tokens"].sum()), "completion_tokens": int(t["completion_tokens"].sum()),
                "cost": round(float(sum(costs)), 6) if costs else None}

    def to_json(self) -> str:
        rows = json.loads(self.table.to_json(orient="records"))
        return json.dumps({"dry_run": True, "components": rows, "totals": self.totals(), "notes": self.notes,
                           "assumptions": list(ASSUMPTIONS)}, indent=2)

    def print(self, as_json: bool = False, file: Any = None) -> int:
        out = file or sys.stdout
        if as_json:
            print(self.to_json(), file=out)
            return 0
        if len(self.table) == 0:
            print("dry run: the pipelines have no LLM components: no LLM calls", file=out)
        else:
            shown = self.table.copy()
            if not shown["dataset"].astype(bool).any():
                shown = shown.drop(columns="dataset")
            shown["cost"] = [("" if c is None or c != c else f"${c:.4f}") for c in shown["cost"]]
            with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 60):
                print(shown.to_string(index=False), file=out)
            tot = self.totals()
            cost = "" if tot["cost"] is None else f", ${tot['cost']:.4f}"
            print(f"total: {tot['calls']:,} calls, {tot['cached']:,} cached, {tot['to_send']:,} to send, "
                  f"~{tot['prompt_tokens']:,} prompt tokens, <= {tot['completion_tokens']:,} completion tokens{cost}",
                  file=out)
        for line in self.notes:
            print(line, file=out)
        for line in ASSUMPTIONS:
            print(f"note: {line}", file=out)
        return 0


def concat_reports(reports: List[DryRunReport]) -> DryRunReport:
    """One report of several (tables one after another, notes each once)."""
    tables = [r.table for r in reports if len(r.table)]
    notes = [n for r in reports for n in r.notes if n]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    return DryRunReport(table, list(dict.fromkeys(notes)))
