"""Settings of the LLM client: where the server is, which model, how to call it.

Resolution order (later wins): built-in defaults, then environment variables, then the ``llm:``
section of a pipeline config (or a dict / keyword arguments given in code).

=================================  ==========================================================
environment variable               setting
=================================  ==========================================================
``OPENAI_BASE_URL``                ``base_url`` (also read by the ``openai`` package itself)
``PYTERRIER_SCI_LLM_BASE_URL``     ``base_url`` (wins over ``OPENAI_BASE_URL``)
``PYTERRIER_SCI_LLM_MODEL``        ``model``
``PYTERRIER_SCI_LLM_MODE``         ``mode`` (``chat``, ``completion`` or ``auto``)
``PYTERRIER_SCI_LLM_CONCURRENCY``  ``concurrency``
``PYTERRIER_SCI_LLM_CACHE``        ``cache_dir``; ``0``/``off`` disables the cache
``OPENAI_API_KEY``                 the API key - read from the environment *only*, at request time
=================================  ==========================================================

The API key is never a setting: it is not stored on :class:`LLMSettings`, so it cannot end up in
a pickled component, a cache entry, a log line or an experiment artifact.  A config that names
``api_key`` is refused.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

DEFAULT_PORT = 8080
DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}/v1"
DEFAULT_MODEL = "gemma3-270m-q4-k-m"
API_KEY_ENV = "OPENAI_API_KEY"
MODES = ("auto", "chat", "completion")


@dataclass(frozen=True)
class LLMSettings:
    """How to reach and call an OpenAI-compatible server.  Picklable and hashable; holds no secret.

    Attributes:
        base_url: the server's ``/v1`` URL (default: the local ``pyterrier-sci llm serve``).
        model: the model name sent with each request.
        temperature: sampling temperature (0 = greedy, what re-ranking wants).
        max_tokens: default cap on generated tokens of free-text calls (analyses, rankings).
        concurrency: how many requests may be in flight at once.
        timeout: seconds before one request is abandoned (and retried).
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

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"llm mode must be one of {MODES}, not {self.mode!r}")
        if int(self.concurrency) < 1:
            raise ValueError("llm concurrency must be >= 1")

    def replace(self, **changes) -> "LLMSettings":
        return settings_from(dataclasses.asdict(self), **changes, _env=False)

    def resolved_cache_dir(self) -> Optional[Path]:
        if self.cache_dir == "" or (isinstance(self.cache_dir, str) and self.cache_dir.lower() in ("0", "off", "false", "none")):
            return None
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        from pyterrier_sci.data import work_dir
        return work_dir() / "llm-cache"

    def public_dict(self) -> Dict[str, Any]:
        """The settings as a plain dict (safe to log: holds no key)."""
        return dataclasses.asdict(self)


_FIELDS = {f.name: f for f in dataclasses.fields(LLMSettings)}
_ENV = [  # (variable, setting), later entries win
    ("OPENAI_BASE_URL", "base_url"),
    ("PYTERRIER_SCI_LLM_BASE_URL", "base_url"),
    ("PYTERRIER_SCI_LLM_MODEL", "model"),
    ("PYTERRIER_SCI_LLM_MODE", "mode"),
    ("PYTERRIER_SCI_LLM_CONCURRENCY", "concurrency"),
    ("PYTERRIER_SCI_LLM_CACHE", "cache_dir"),
]


_INTS = ("max_tokens", "concurrency", "max_retries", "top_logprobs")
_FLOATS = ("temperature", "timeout", "backoff", "backoff_max")


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INTS:
        return int(value)
    if name in _FLOATS:
        return float(value)
    if name == "progress" and isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    if name == "prices":
        return {str(m): {str(k): float(v) for k, v in p.items()} for m, p in dict(value).items()}
    if name in ("cache_dir", "base_url", "model", "mode"):
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
    if isinstance(config, LLMSettings):
        config = dataclasses.asdict(config)
    for source in (config or {}), overrides:
        for key, value in source.items():
            if key in ("api_key", "key", "openai_api_key"):
                raise ValueError(f"the LLM API key is read only from the environment variable {API_KEY_ENV}; "
                                 "remove it from the configuration")
            if key not in _FIELDS:
                raise ValueError(f"unknown llm setting {key!r} (known: {', '.join(_FIELDS)})")
            values[key] = value
    return LLMSettings(**{k: _coerce(k, v) for k, v in values.items()})


def api_key() -> str:
    """The API key from ``OPENAI_API_KEY``; local servers need none, so a placeholder otherwise."""
    return os.environ.get(API_KEY_ENV) or "no-key"
