"""The LLM layer: one client for every LLM component of the toolkit - settings
(:class:`LLMSettings`), the client (:class:`LLMClient`: chat, completions, decisions, concurrency,
retries, the response cache), usage accounting, budgets and dry runs, trust (where the key may go,
which files a pipeline may use) and ``pyterrier-sci llm serve``.  See ``docs/llm.md``.
"""
from .accounting import Usage, add_usage_columns, llm_components, reset_usage, usage_report, usage_totals  # noqa: F401
from .budget import LLMBudgetExceeded, reset_budget  # noqa: F401
from .cache import ResponseCache, cache_key  # noqa: F401
from .client import Choice, Completion, LLMClient, LLMError, choice_from_logprobs, extract_json, parse_choice  # noqa: F401
from .dryrun import DryRunReport, dry_run  # noqa: F401
from .errors import LLMCacheError, UntrustedConfigError  # noqa: F401
from .settings import DEFAULT_BASE_URL, DEFAULT_MODEL, LLMSettings, settings_from  # noqa: F401
from .text import estimate_tokens, load_template, render, truncate  # noqa: F401
from .trust import derived_settings, is_trusted, pipeline_settings, redact  # noqa: F401
