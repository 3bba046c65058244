"""The exceptions of the LLM layer."""
from __future__ import annotations

from pyterrier_sci.errors import (  # noqa: F401 - defined there, re-exported
    LLMCacheError,
    LLMError,
    LLMRunStopped,
    UntrustedConfigError,
)


