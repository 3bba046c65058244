"""The operations every front end offers (HTTP routes, MCP tools, the search page), on a
:class:`~.service.SearchService` and a :class:`~.batching.MicroBatcher`: search by text or by paper,
batch search, a paper's record, similar papers, citation suggestions for a passage.  Each returns plain
JSON-ready dicts and raises :class:`~.service.ServeError` (a 4xx) for a bad request."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import pandas as pd

from .batching import DeadlineExceededError, MicroBatcher
from .service import SearchService, ServeError

__all__ = ["SearchAPI", "ServeSettings", "LOOPBACK_HOSTS", "EXPRESSION_KEY"]

#: the names a server bound to loopback answers to (the Host header without its port), unless told others
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: the batcher's key of a request's own expression starts with it (never a served pipeline's name)
EXPRESSION_KEY = "\x00expression:"


@dataclass
class ServeSettings:
    """How the server runs: bounds on concurrency and time, and who may call it."""
    max_batch: int = 32             # queries in one pipeline call
    max_wait_ms: float = 2.0        # a batch waits this long for more queries after its first
    max_queue: int = 256            # queries waiting, over all pipelines (more: 503 + Retry-After)
    workers: int = 1                # threads running pipeline calls
    deadline_s: float = 30.0        # a request's deadline (a request may ask for less)
    max_body_bytes: int = 65_536    # a request body's size (413)
    body_timeout_s: float = 10.0    # reading a request body (slow clients: 408)
    max_header_bytes: int = 16_384  # a request's head: request line and header fields (431)
    max_headers: int = 100          # header fields in a request (431)
    header_timeout_s: float = 10.0  # receiving a request's head, from its first byte or the connection's opening (408)
    max_connections: int = 1024     # connections open at once (more: 503 and closed)
    grace_s: Optional[float] = None  # stopping: the most seconds before the process exits (None: deadline + 5 s)
    token: Optional[str] = None     # bearer token (None: no authentication)
    rate_limit: float = 0.0         # requests per second per client (0: none)
    rate_burst: int = 20            # requests a client may send at once
    trusted_proxies: Tuple[str, ...] = ()   # addresses/networks whose X-Forwarded-For names the client
    #: the Host names the server answers to (421 otherwise; with an Origin header, 403 unless it is one of
    #: them); None: any (a server off loopback, which needs a token)
    allowed_hosts: Optional[Tuple[str, ...]] = LOOPBACK_HOSTS
    mcp: bool = True                # serve MCP (streamable HTTP) at /mcp
    page: bool = True               # serve the search page at /

    @property
    def grace(self) -> float:
        """Seconds from a stop signal to the process's exit: the requests in flight are answered (each within
        its deadline), then the pipeline calls still running are abandoned."""
        return float(self.grace_s) if self.grace_s is not None else self.deadline_s + 5.0


class SearchAPI:
    """What the front ends call; ``batcher`` runs the pipelines (created from ``settings`` if not given)."""

    def __init__(self, service: SearchService, settings: Optional[ServeSettings] = None,
                 batcher: Optional[MicroBatcher] = None):
        self.service = service
        self.settings = settings or ServeSettings()
        self.batcher = batcher or MicroBatcher(self._run, max_batch=self.settings.max_batch,
                                               max_wait=self.settings.max_wait_ms / 1000.0,
                                               max_queue=self.settings.max_queue, workers=self.settings.workers)
        self._pipelines = {}  # batcher key -> transformer (served names and allowed expressions)
        #: ``time.monotonic()`` by which the process stops, once a stop signal came (set by the HTTP server)
        self.stop_by: Optional[float] = None

    def time_to_stop(self) -> float:
        """Seconds left of the grace period (all of it before a stop signal)."""
        if self.stop_by is None:
            return self.settings.grace
        return max(0.0, self.stop_by - time.monotonic())

    # -- running (on the batcher's threads) --------------------------------------------------------
    def _run(self, key: str, queries: List[str]) -> List[pd.DataFrame]:
        res = self.service.run(key, queries, self._pipelines[key])
        groups = {qid: g for qid, g in res.groupby("qid", sort=False)} if len(res) else {}
        empty = res.iloc[0:0]
        return [groups.get(f"q{i}", empty) for i in range(len(queries))]

    def _deadline(self, timeout: Optional[float]) -> float:
        limit = self.settings.deadline_s
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= limit:
                raise ServeError(f"timeout must be a number of seconds above 0 and at most {limit:g}", 422,
                                 "timeout_out_of_range")
            limit = float(timeout)
        return time.monotonic() + limit

    async def _frames(self, pipeline: Optional[str], expression: Optional[str], queries: Sequence[str],
                      timeout: Optional[float]):
        """Validated before the queries join a batch: the pipeline (or the expression, built off the event
        loop within the request's deadline); then the batch's result frames, one per query."""
        deadline = self._deadline(timeout)
        if expression is not None:
            expression = self.service.check_expression(expression)
            try:
                transformer = await asyncio.wait_for(asyncio.to_thread(self.service.build_expression, expression),
                                                     timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise DeadlineExceededError("the request's deadline passed while its expression was built") from None
            name, key = expression, EXPRESSION_KEY + expression
        else:
            name, transformer = self.service.pipeline_for(pipeline)
            key = name
        self._pipelines.setdefault(key, transformer)
        return name, await self.batcher.submit(key, queries, deadline)

    # -- operations ---------------------------------------------------------------------------------
    async def search(self, query: Optional[str] = None, k: int = 10, pipeline: Optional[str] = None,
                     paper: Optional[str] = None, expression: Optional[str] = None,
                     timeout: Optional[float] = None) -> dict:
        """Top ``k`` papers for a query text, or for a paper (``paper``: a docno; its title and abstract
        are the query and the paper itself is left out)."""
        start = time.perf_counter()
        k = self.service.check_k(k)
        if (query is None) == (paper is None):
            raise ServeError("give either a query or a paper (a docno), not both or neither", 422, "query_or_paper")
        exclude: List[str] = []
        if paper is not None:
            text = self.service.paper_text(paper)
            exclude = [paper]
        else:
            text = self.service.check_query(query)
        name, frames = await self._frames(pipeline, expression, [text], timeout)
        hits = self.service.hits(frames[0], text, k, exclude)
        out = {"pipeline": name, "k": k, "results": hits, "took_ms": round((time.perf_counter() - start) * 1000, 3)}
        out.update({"paper": paper} if paper is not None else {"query": text})
        return out

    async def batch_search(self, queries: Any, k: int = 10, pipeline: Optional[str] = None,
                           expression: Optional[str] = None, timeout: Optional[float] = None) -> dict:
        start = time.perf_counter()
        k = self.service.check_k(k)
        limit = self.service.limits.max_batch_queries
        if not isinstance(queries, list) or not queries:
            raise ServeError("queries must be a non-empty list of strings", 422, "bad_queries")
        if len(queries) > limit:
            raise ServeError(f"a batch has at most {limit} queries, not {len(queries)}", 422, "batch_too_large")
        texts = [self.service.check_query(q) for q in queries]
        name, frames = await self._frames(pipeline, expression, texts, timeout)
        return {"pipeline": name, "k": k,
                "results": [{"query": t, "results": self.service.hits(f, t, k)} for t, f in zip(texts, frames)],
                "took_ms": round((time.perf_counter() - start) * 1000, 3)}

    def paper(self, docno: str) -> dict:
        return self.service.paper(docno)

    async def similar(self, docno: str, k: int = 10, pipeline: Optional[str] = None,
                      timeout: Optional[float] = None) -> dict:
        """Papers similar to a paper (paper-to-paper, as PRISM's A2A): its title and abstract as the
        query, itself left out."""
        return await self.search(paper=docno, k=k, pipeline=pipeline, timeout=timeout)

    async def suggest_citations(self, passage: str, k: int = 10, pipeline: Optional[str] = None,
                                timeout: Optional[float] = None) -> dict:
        """Papers to cite for a passage of a draft: the passage as the query."""
        start = time.perf_counter()
        k = self.service.check_k(k)
        text = self.service.check_query(passage, self.service.limits.max_passage_chars, "passage")
        name, frames = await self._frames(pipeline, None, [text], timeout)
        return {"pipeline": name, "k": k, "passage": text, "results": self.service.hits(frames[0], text, k),
                "took_ms": round((time.perf_counter() - start) * 1000, 3)}

    def pipelines(self) -> dict:
        return {"pipelines": self.service.describe(), "dataset": self.service.dataset,
                "expressions_allowed": self.service.allow_expressions,
                "limits": {"max_k": self.service.limits.max_k,
                           "max_query_chars": self.service.limits.max_query_chars,
                           "max_batch_queries": self.service.limits.max_batch_queries}}
