"""Serving pipelines: ``pyterrier-sci serve`` (an HTTP search API on FastAPI/uvicorn, an MCP server on the
official SDK, a search page), micro-batching of concurrent requests, and Ray Serve replicas.  See
docs/serve.md."""
from .api import SearchAPI, ServeSettings
from .batching import DeadlineExceededError, MicroBatcher, OverloadedError
from .service import SearchService, ServeError, ServeLimits, parse_pipeline_specs, snippet

__all__ = ["SearchAPI", "ServeSettings", "MicroBatcher", "OverloadedError", "DeadlineExceededError", "SearchService",
           "ServeError", "ServeLimits", "parse_pipeline_specs", "snippet"]
