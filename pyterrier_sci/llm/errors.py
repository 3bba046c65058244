"""The exceptions of the LLM layer."""
from __future__ import annotations


class LLMError(RuntimeError):
    """A call failed for good (after the retries, or with a non-retryable status), or an LLM
    setting cannot be honoured.  ``endpoint`` and ``cause`` name where and why."""

    def __init__(self, message: str, endpoint: str = "", cause: str = ""):
        super().__init__(message)
        self.endpoint = endpoint
        self.cause = cause


class UntrustedConfigError(LLMError):
    """A pipeline expression or pipeline file that the user did not mark trusted asked for
    something only the user may allow: a file outside the allowed directories (a template, an
    example file, a cache directory).  See ``docs/llm.md``, "Trust"."""


class LLMCacheError(LLMError):
    """The response cache's SQLite file cannot be used (damaged, not a database, a full disk); the
    message names the file and what to do."""
