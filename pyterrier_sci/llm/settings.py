"""Settings of the LLM client (server, model, mode, concurrency, cache, retries): built-in defaults,
then environment variables, then a config's ``llm:`` section or arguments given in code.  The API key
is never a setting: it is read from ``OPENAI_API_KEY`` at request time only.  See ``docs/llm.md``.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

from pyterrier_sci.data import work_dir

from .budget import check_budget, new_ledger_id

DEFAULT_PORT = 8080
DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}/v1"
DEFAULT_MODEL = "gemma3-270m-q4-k-m"
API_KEY_ENV = "OPENAI_API_KEY"
MODES = ("auto", "chat", "completion")
DEFAULT_MAX_RESPONSE_BYTES = 16 * 2 ** 20
# (setting, smallest, largest) of the numeric settings
_RANGES = {"temperature": (0.0, 2.0), "max_tokens": (1, 10 ** 6), "concurrency": (1, 1024),
           "timeout": (0.001, 86400.0), "max_retries": (0, 100), "backoff": (0.0, 3600.0),
           "backoff_max": (0.0, 86400.0), "top_logprobs": (0, 100), "max_response_bytes": (1024, 2 ** 31)}


@dataclass(frozen=True)
class LLMSettings:
    """How to reach and call an OpenAI-compatible server.  Picklable and hashable; holds no secret.

    Attributes:
        base_url: the server's ``/v1`` URL (default: the local ``pyterrier-sci llm serve``).
        model: the model name sent with each request.
        temperature: sampling temperature (0 = greedy, what re-ranking wants).
        max_tokens: default cap on generated tokens of free-text calls (analyses, rankings).
        concurrency: how many requests may be in flight at once.
        timeout: deadline of one request in seconds, from sending it to the last byte of the answer
            (a server that trickles its answer is cut off there); then it is retried.
        max_retries: retries after the first try on 429, 5xx, timeouts and connection errors.
        backoff: base delay in seconds; try ``i`` waits ``backoff * 2**i`` times a jitter in
            [0.5, 1.5), capped at ``backoff_max`` (a server's ``Retry-After`` is honoured up to it).
        backoff_max: largest single wait, seconds.
        mode: how yes/no and A/B decisions are asked: ``chat`` (chat completion, parse JSON or
            the first word), ``completion`` (plain completion ending in an answer cue, decided on
            the top log-probabilities of the answer words: works with base models such as the
            shipped gemma-3 270M), ``auto`` (chat; the first time a chat answer is empty, or a
            decision cannot be read from it while the completion form of the same question can,
            switching to completion for the rest of the run).  Use ``completion`` for base models:
            ``auto`` spends one chat call finding out.
        top_logprobs: how many alternatives to ask for at each position in completion mode.
        cache_dir: folder of the persistent response cache; ``None`` = ``<work dir>/llm-cache``;
            ``""`` disables caching.
        prices: optional price table, USD per million tokens, by model:
            ``{"gpt-4o": {"prompt": 2.5, "completion": 10.0}}``.
        progress: show a progress bar over batches of calls.
        max_response_bytes: largest response body accepted (default 16 MiB); a bigger one is
            cut off and treated as a malformed response (retried, then an error).
        budget: what one run may spend, any of ``{"calls": N, "tokens": N, "dollars": X}``
            (``dollars`` needs a price for ``model`` in ``prices``); ``{}`` = no limit.  A call that
            would pass it is refused with :class:`~pyterrier_sci.llm.budget.LLMBudgetExceeded`
            (:mod:`pyterrier_sci.llm.budget`).
        sandbox: not a setting: ``None`` for settings the user gave (code, environment, a trusted
            pipeline); for settings that come from a pipeline expression or file the user did not
            mark trusted, the directories that pipeline's components may read and write
            (:func:`pyterrier_sci.llm.trust.pipeline_settings`).  Such settings get the API key
            only for base URLs the user configured (:func:`pyterrier_sci.llm.trust.key_allowed`).
        ledger: not a setting: the id of the ledger the budget is counted on.  Settings made with a
            budget get a fresh one; every component built from one pipeline config gets the
            config's (:func:`pyterrier_sci.llm.budget.share_budget`), so they share the budget.
    """
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    temperature: float = 0.0
    max_tokens: int = 512
    concurrency: int = 4
    timeout: float = 120.0
    max_retries: int = 4
    backoff: float = 1.0
    backoff_max: float = 30.0
    mode: str = "auto"
    top_logprobs: int = 10
    cache_dir: Optional[str] = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict, hash=False, compare=True)
    progress: bool = True
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    budget: Mapping[str, float] = field(default_factory=dict, hash=False, compare=True)
    sandbox: Optional[Tuple[str, ...]] = None
    ledger: Optional[str] = field(default=None, hash=False, compare=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"llm setting mode must be one of {MODES}, not {self.mode!r}")
        for name, (lo, hi) in _RANGES.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
                raise ValueError(f"llm setting {name} must be a number from {lo} to {hi}, not {v!r}")
        _check_url(self.base_url)
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"llm setting model must be a non-empty string, not {self.model!r}")
        if not isinstance(self.progress, bool):
            raise ValueError(f"llm setting progress must be true or false, not {self.progress!r}")
        if self.sandbox is not None and not (isinstance(self.sandbox, tuple)
                                             and all(isinstance(d, str) for d in self.sandbox)):
            raise ValueError("LLMSettings.sandbox must be None or a tuple of directory names")
        budget = check_budget(self.budget)
        object.__setattr__(self, "budget", budget)
        if "dollars" in budget and self.model not in self.prices:
            raise ValueError(f"llm budget dollars needs a price for model {self.model!r}: add "
                             f"prices: {{{self.model}: {{prompt: USD per 1M tokens, completion: USD per 1M tokens}}}}")
        if budget and self.ledger is None:
            object.__setattr__(self, "ledger", new_ledger_id())
        elif not budget:
            object.__setattr__(self, "ledger", None)

    def replace(self, **changes) -> "LLMSettings":
        values = dataclasses.asdict(self)
        sandbox = values.pop("sandbox")
        ledger = values.pop("ledger")
        new = settings_from(values, **changes, _env=False)
        return dataclasses.replace(new, sandbox=sandbox, ledger=ledger if new.budget else None)

    def resolved_cache_dir(self) -> Optional[Path]:
        off = ("0", "off", "false", "none")
        if self.cache_dir == "" or (isinstance(self.cache_dir, str) and self.cache_dir.lower() in off):
            return None
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        return work_dir() / "llm-cache"

    def public_dict(self) -> Dict[str, Any]:
        """The settings as a plain dict (safe to log: holds no key)."""
        values = dataclasses.asdict(self)
        values.pop("ledger")
        return values


def _check_url(url: Any) -> None:
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        ok = (parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
              and not any(c.isspace() for c in url) and parts.username is None and parts.password is None)
        if ok:
            parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"llm setting base_url must be an http:// or https:// URL with a host (and no user name "
                         f"or password), such as {DEFAULT_BASE_URL!r}; got {url!r}")


_FIELDS = {f.name: f for f in dataclasses.fields(LLMSettings) if f.name not in ("sandbox", "ledger")}
_ENV = [  # (variable, setting), later entries win
    ("OPENAI_BASE_URL", "base_url"),
    ("PYTERRIER_SCI_LLM_BASE_URL", "base_url"),
    ("PYTERRIER_SCI_LLM_MODEL", "model"),
    ("PYTERRIER_SCI_LLM_MODE", "mode"),
    ("PYTERRIER_SCI_LLM_CONCURRENCY", "concurrency"),
    ("PYTERRIER_SCI_LLM_CACHE", "cache_dir"),
]


_INTS = ("max_tokens", "concurrency", "max_retries", "top_logprobs", "max_response_bytes")
_FLOATS = ("temperature", "timeout", "backoff", "backoff_max")


def _number(name: str, value: Any, integer: bool) -> Union[int, float]:
    what = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"llm setting {name} must be {what}, not {value!r}")
    try:
        f = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"llm setting {name} must be {what}, not {value!r}") from None
    if not math.isfinite(f) or (integer and f != int(f)):
        raise ValueError(f"llm setting {name} must be a finite {what[2:]}, not {value!r}")
    return int(f) if integer else f


def _price(model: Any, kind: Any, v: Any) -> float:
    f = _number(f"prices.{model}.{kind}", v, False)
    if f < 0:
        raise ValueError(f"llm setting prices.{model}.{kind} must be >= 0 (USD per million tokens), not {v!r}")
    return f


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INTS:
        return _number(name, value, True)
    if name in _FLOATS:
        return _number(name, value, False)
    if name == "progress" and isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    if name == "prices":
        if not isinstance(value, Mapping) or not all(isinstance(p, Mapping) for p in value.values()):
            raise ValueError("llm setting prices must be {model: {prompt: USD per 1M tokens, completion: ...}}, "
                             f"not {value!r}")
        return {str(m): {str(k): _price(m, k, v) for k, v in p.items()} for m, p in value.items()}
    if name == "budget":
        return check_budget(value)
    if name in ("cache_dir", "base_url", "model", "mode"):
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"llm setting {name} must be a string, not {value!r}")
        return str(value)
    return value


def settings_from(config: Union[None, Mapping[str, Any], LLMSettings] = None, _env: bool = True,
                  **overrides) -> LLMSettings:
    """Builds :class:`LLMSettings` from defaults, the environment, ``config`` (e.g. the ``llm:``
    section of a pipeline YAML) and ``overrides``, in that order.

    Raises ``ValueError`` on unknown keys and on ``api_key`` (keys come from ``OPENAI_API_KEY``).
    """
    values: Dict[str, Any] = {}
    if _env:
        for var, name in _ENV:
            if os.environ.get(var):
                values[name] = os.environ[var]
    sandbox = ledger = None
    if isinstance(config, LLMSettings):
        sandbox, ledger = config.sandbox, config.ledger
        config = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("sandbox", "ledger")}
    if config is not None and not isinstance(config, Mapping):
        raise ValueError(f"llm settings must be a mapping of setting names to values, not {config!r}")
    for source in (config or {}), overrides:
        for key, value in source.items():
            if key in ("api_key", "key", "openai_api_key"):
                raise ValueError(f"the LLM API key is read only from the environment variable {API_KEY_ENV}; "
                                 "remove it from the configuration")
            if key not in _FIELDS:
                raise ValueError(f"unknown llm setting {key!r} (known: {', '.join(_FIELDS)})")
            values[key] = value
    return LLMSettings(**{k: _coerce(k, v) for k, v in values.items()}, sandbox=sandbox, ledger=ledger)


#: the settings that decide an LLM's answers (the server, the model and how it is asked): what keys a saved run
#: of an LLM pipeline beyond its expression, so that another model's or server's run is never read back
ANSWER_SETTINGS = ("base_url", "model", "mode", "temperature", "max_tokens", "top_logprobs")


def answer_settings(settings: LLMSettings) -> Dict[str, Any]:
    """``{setting: value}`` of :data:`ANSWER_SETTINGS`."""
    return {k: getattr(settings, k) for k in ANSWER_SETTINGS}


def api_key() -> str:
    """The API key from ``OPENAI_API_KEY``; local servers need none, so a placeholder otherwise."""
    return os.environ.get(API_KEY_ENV) or "no-key"
