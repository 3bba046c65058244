"""The HTTP search API of ``pyterrier-sci serve``: a FastAPI app (run by uvicorn, or behind Ray Serve) over
a :class:`~.api.SearchAPI`.

Routes (JSON): ``GET /health``, ``GET /ready``, ``GET /v1/pipelines``, ``GET|POST /v1/search``,
``POST /v1/batch_search``, ``GET /v1/papers/{docno}``, ``GET|POST /v1/similar``,
``POST /v1/suggest_citations``, ``GET /v1/stats``, ``GET /openapi.json``; MCP over streamable HTTP at
``/mcp``; the search page at ``/``; Swagger UI at ``/docs``, its files served by the server itself
(docs_page.py).  Every error is ``{"error": {"code", "message"}}`` with a 4xx/5xx status, never a traceback.
In front of the routes, one ASGI guard, in this order: the Host (421) and Origin (403) a server on loopback
answers to, a per-client rate limit (429; forwarding headers count only from a trusted proxy), the number
of header fields (431) and the declared body size (413), then the bearer token (401), then the body read
with a size (413) and a time bound (408).  The HTTP server (http_server.py) bounds what comes before the app: the
request head's size, header count and time, the connections.
"""

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import threading
import time
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional
from urllib.parse import urlsplit

from pyterrier_sci.errors import BuildRefused, LLMBudgetExceeded, TrainingDeferred, one_line
from pyterrier_sci.llm.trust import API_KEY_ENV, REDACTED, redact

from .api import SearchAPI, ServeSettings
from .batching import DeadlineExceededError, OverloadedError, ShuttingDownError
from .docs_page import ASSETS_PREFIX, add_docs_routes
from .mcp_server import create_mcp
from .service import ServeError, refused_message

__all__ = ["create_app", "Guard", "RedactingFilter", "install_log_redaction", "LOGGER", "page_dir", "error_body",
           "host_name"]

LOGGER = logging.getLogger("pyterrier_sci.serve")
#: paths answered without the bearer token (probes, and the static files of the search page and of /docs,
#: which hold no data; /docs itself, like /openapi.json, needs the token)
OPEN_PATHS = ("/health", "/ready", "/", "/favicon.ico")
OPEN_PREFIXES = ("/page/", ASSETS_PREFIX)
#: paths without a rate limit (probes)
UNLIMITED_PATHS = ("/health", "/ready")
#: clients the rate limiter remembers at most (the least recently seen are forgotten first)
MAX_CLIENTS = 10_000


def page_dir() -> Path:
    """The search page's static files (package data ``pyterrier_sci/serve/page``)."""
    return Path(str(resources.files("pyterrier_sci.serve") / "page"))


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": redact(message)}}).encode("utf-8")


def host_name(host: str) -> str:
    """A Host header's name without its port, lower case (``[::1]:8000`` -> ``[::1]``); an IPv6 address
    gets its brackets (``::1`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    if host.count(":") > 1:   # a bare IPv6 address
        return f"[{host}]"
    return host.partition(":")[0]


def _networks(proxies) -> List[Any]:
    out = []
    for p in proxies or ():
        try:
            out.append(ipaddress.ip_network(str(p).strip(), strict=False))
        except ValueError:
            raise ServeError(f"trusted proxy {p!r} is not an IP address or network") from None
    return out


class RedactingFilter(logging.Filter):
    """Replaces the bearer token and the LLM API key in every log record with ``[redacted]``."""

    def __init__(self, secrets: List[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 4]

    def clean(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = redact(value)
        for s in self.secrets:
            value = value.replace(s, REDACTED)
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        # each argument on its own (formatters such as uvicorn's access log unpack them), then the message
        if isinstance(record.args, tuple):
            record.args = tuple(self.clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self.clean(v) for k, v in record.args.items()}
        record.msg = self.clean(record.msg)
        if record.exc_info and record.exc_info[1] is not None:  # a traceback's last line holds the message
            e = record.exc_info[1]
            e.args = tuple(self.clean(a) for a in e.args)
            if isinstance(e, ServeError):
                e.message = self.clean(e.message)
            record.exc_text = None
        return True


def install_log_redaction(token: Optional[str]) -> RedactingFilter:
    """Installs :class:`RedactingFilter` on the server's loggers and their handlers."""
    f = RedactingFilter([token] if token else [])
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access", "pyterrier_sci.serve", "mcp"):
        lg = logging.getLogger(name)
        lg.addFilter(f)
        for h in lg.handlers:
            h.addFilter(f)
    return f


class Guard:
    """ASGI middleware in front of every route: rate limit per client (token bucket; 429 + Retry-After),
    the bearer token (401), the request body read whole with a size bound (413) and a time bound (408)."""

    def __init__(self, app, settings: ServeSettings):
        self.app, self.settings = app, settings
        self.token = settings.token.encode("utf-8") if settings.token else None
        self.buckets: Dict[str, List[float]] = {}   # client -> [tokens, last time]
        self.proxies = _networks(settings.trusted_proxies)
        self.hosts = None if settings.allowed_hosts is None else {host_name(h) for h in settings.allowed_hosts}

    def _trusted_proxy(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def client(self, scope) -> str:
        """The client a rate limit counts: the connection's peer; behind a trusted proxy (and only then), the
        last address of ``X-Forwarded-For`` that is not a trusted proxy itself."""
        peer = (scope.get("client") or ("?", 0))[0]
        if not self.proxies or not self._trusted_proxy(peer):
            return peer
        hops = [h.strip() for k, v in scope.get("headers", ()) if k == b"x-forwarded-for"
                for h in v.decode("latin-1").split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._trusted_proxy(hop):
                return hop
        return hops[0] if hops else peer

    def _host_problem(self, scope) -> Optional[tuple]:
        """(status, code, message) when the Host (or the Origin) is not one this server answers to."""
        if self.hosts is None:
            return None
        headers = dict(scope.get("headers", ()))
        host = headers.get(b"host", b"").decode("latin-1")
        if host_name(host) not in self.hosts:
            return (421, "misdirected_request",
                    f"the Host header {host[:100]!r} is not a name of this server ({', '.join(sorted(self.hosts))}); "
                    "the operator may add one with --allowed-host")
        origin = headers.get(b"origin")
        if origin is not None:
            try:
                parts = urlsplit(origin.decode("latin-1").strip())
                name = host_name(parts.hostname or "") if parts.scheme in ("http", "https") else ""
            except ValueError:
                name = ""
            if name not in self.hosts:
                return (403, "bad_origin", f"requests from pages of {origin.decode('latin-1')[:100]!r} are refused; "
                                           "this server answers pages it serves itself")
        return None

    async def _send_error(self, send, status: int, code: str, message: str, headers=(), close: bool = False) -> None:
        body = error_body(code, message)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers, *([(b"connection", b"close")] if close else [])]})
        await send({"type": "http.response.body", "body": body})

    def _rate_ok(self, client: str) -> float:
        """0 when the client may go on, else the seconds until it may."""
        rate = self.settings.rate_limit
        if rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, last = self.buckets.pop(client, (float(self.settings.rate_burst), now))
        tokens = min(float(self.settings.rate_burst), tokens + (now - last) * rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / rate
        self.buckets[client] = [tokens, now]  # re-inserted: most recent last
        while len(self.buckets) > MAX_CLIENTS:
            self.buckets.pop(next(iter(self.buckets)))
        return wait

    def _authorised(self, scope) -> bool:
        if self.token is None:
            return True
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                scheme, _, given = v.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    def _secrets(self) -> List[bytes]:
        out = [self.token] if self.token else []
        key = os.environ.get(API_KEY_ENV)
        if key and len(key) >= 8:
            out.append(key.encode("utf-8"))
        return out

    def _redacting(self, send):
        """``send`` with the token and the API key replaced in JSON answers (a client's own query echoed back
        included): no answer carries them."""
        secrets = self._secrets()
        if not secrets:
            return send
        held: Dict[str, Any] = {}

        async def wrapped(msg):
            if msg["type"] == "http.response.start":
                ctype = dict(msg.get("headers", ())).get(b"content-type", b"")
                if ctype.startswith(b"application/json"):
                    held["start"], held["body"] = msg, []
                    return
                return await send(msg)
            if msg["type"] == "http.response.body" and "start" in held:
                held["body"].append(msg.get("body", b""))
                if msg.get("more_body", False):
                    return
                body = b"".join(held["body"])
                for s in secrets:
                    body = body.replace(s, REDACTED.encode())
                start = dict(held.pop("start"))
                start["headers"] = [(k, v) for k, v in start.get("headers", ()) if k != b"content-length"] + \
                    [(b"content-length", str(len(body)).encode())]
                await send(start)
                return await send({"type": "http.response.body", "body": body})
            return await send(msg)
        return wrapped

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = self._redacting(send)
        path = scope.get("path", "")
        headers = scope.get("headers", ())
        # refused before its body is read whole: the connection closes after the answer (never kept for a body
        # that is still arriving)
        unread = any(k == b"transfer-encoding" or (k == b"content-length" and v.strip() not in (b"", b"0"))
                     for k, v in headers)

        async def refuse(status: int, code: str, message: str, extra=()):
            return await self._send_error(send, status, code, message, extra, close=unread)

        # every limit before the token: a client without one is bounded as much as one with it
        if path not in UNLIMITED_PATHS:
            problem = self._host_problem(scope)
            if problem:
                return await refuse(*problem)
            wait = self._rate_ok(self.client(scope))
            if wait:
                secs = max(1, int(wait + 0.999))
                return await refuse(429, "rate_limited",
                                    f"too many requests from this client; retry after {secs} s",
                                    [(b"retry-after", str(secs).encode())])
        if len(headers) > self.settings.max_headers:
            return await refuse(431, "too_many_headers",
                                f"the request has {len(headers)} header fields; at most "
                                f"{self.settings.max_headers}")
        limit = self.settings.max_body_bytes
        for k, v in headers:
            if k == b"content-length":
                try:
                    declared = int(v)
                except ValueError:
                    return await refuse(400, "bad_content_length", "Content-Length is not a number")
                if declared > limit:
                    return await refuse(413, "body_too_large",
                                        f"the request body has {declared:,} bytes; at most {limit:,}")
        if not (path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)) and not self._authorised(scope):
            return await refuse(401, "unauthorised",
                                "this server needs a bearer token (Authorization: Bearer TOKEN)",
                                [(b"www-authenticate", b"Bearer")])
        if scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return
                    chunk = msg.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        return await refuse(413, "body_too_large",
                                            f"the request body has more than {limit:,} bytes")
                    chunks.append(chunk)
                    if not msg.get("more_body", False):
                        break
        except TimeoutError:
            return await refuse(408, "body_timeout",
                                f"the request body took more than {self.settings.body_timeout_s:g} s")
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)


def _validation_message(errors) -> tuple:
    """(status, code, message) of a FastAPI validation error, naming the field and the cause."""
    parts, code, status = [], "invalid_request", 422
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
        kind = e.get("type", "")
        if kind == "json_invalid":
            return 400, "malformed_json", "the request body is not valid JSON"
        if kind == "extra_forbidden":
            code = "unknown_field"
            parts.append(f"unknown field {loc!r}")
        elif kind == "missing":
            parts.append(f"missing field {loc!r}")
        else:
            parts.append(f"{loc or 'body'}: {one_line(e.get('msg', 'invalid'), 200)}")
    return status, code, "; ".join(parts) or "invalid request"


def create_app(api: SearchAPI, mcp_host: str = "127.0.0.1"):
    """The FastAPI app; loads ``api.service`` in the background when it is not loaded yet
    (``/ready`` answers 503 until it is).  ``mcp_host`` is kept for callers of before: the Host names ``/mcp``
    answers to are ``api.settings.allowed_hosts``, as for every route."""
    from fastapi import FastAPI, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles
    from pydantic import BaseModel, ConfigDict
    from starlette.exceptions import HTTPException as StarletteHTTPException

    settings = api.settings
    service = api.service
    state: Dict[str, Any] = {"load_error": None}
    mcp = None
    if settings.mcp:
        mcp = create_mcp(api)

    def load_in_background():
        try:
            service.load()
        except Exception as e:  # reported by /ready and the log, never to a search request as a traceback
            state["load_error"] = one_line(redact(str(e)), 400)
            LOGGER.error("loading the pipelines failed: %s", state["load_error"])

    @asynccontextmanager
    async def lifespan(app):
        if not service.ready:
            threading.Thread(target=load_in_background, name="pyterrier-sci-serve-load", daemon=True).start()
        if mcp is not None:
            async with mcp.session_manager.run():
                yield
        else:
            yield
        # stopping: what is queued and running may finish within what is left of the grace period
        await api.batcher.close(timeout=api.time_to_stop())

    app = FastAPI(title="pyterrier-sci search API", version="1", lifespan=lifespan,
                  description="Search the papers of a dataset with the pipelines of a pyterrier-sci config.",
                  docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None)

    def err(status: int, code: str, message: str, headers: Optional[dict] = None):
        return JSONResponse({"error": {"code": code, "message": redact(message)}}, status_code=status,
                            headers=headers)

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, e: ServeError):
        return err(e.status, e.code, e.message)

    @app.exception_handler(OverloadedError)
    async def _overloaded(request: Request, e: OverloadedError):
        return err(503, "overloaded", str(e), {"Retry-After": str(e.retry_after)})

    @app.exception_handler(ShuttingDownError)
    async def _closing(request: Request, e: ShuttingDownError):
        return err(503, "shutting_down", str(e), {"Retry-After": "5"})

    @app.exception_handler(DeadlineExceededError)
    async def _deadline(request: Request, e: DeadlineExceededError):
        return err(504, "deadline_exceeded", str(e))

    @app.exception_handler(BuildRefused)
    async def _build_refused(request: Request, e: BuildRefused):
        return err(422, "build_refused", refused_message(e))

    @app.exception_handler(TrainingDeferred)
    async def _training_refused(request: Request, e: TrainingDeferred):
        return err(422, "build_refused", refused_message(e))

    @app.exception_handler(LLMBudgetExceeded)
    async def _budget(request: Request, e: LLMBudgetExceeded):
        # the config's llm budget is spent: no further LLM call until the operator raises it
        LOGGER.warning("LLM budget spent: %s", one_line(redact(str(e)), 400))
        return err(503, "llm_budget_spent", one_line(str(e), 400))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        status, code, message = _validation_message(e.errors())
        return err(status, code, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return err(e.status_code, code, str(e.detail) if e.detail else code, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, e: Exception):
        LOGGER.error("internal error on %s: %s: %s", request.url.path, type(e).__name__, one_line(redact(str(e)), 400))
        return err(500, "internal_error", "internal error; the server's log names it")

    def not_ready():
        if state["load_error"]:
            raise ServeError(f"the pipelines failed to load: {state['load_error']}", 503, "load_failed")
        if not service.ready:
            raise ServeError("the pipelines are still loading; retry shortly", 503, "not_ready")

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class SearchBody(Strict):
        query: Optional[str] = None
        paper: Optional[str] = None
        k: int = 10
        pipeline: Optional[str] = None
        expression: Optional[str] = None
        timeout: Optional[float] = None

    class BatchBody(Strict):
        queries: List[str]
        k: int = 10
        pipeline: Optional[str] = None
        expression: Optional[str] = None
        timeout: Optional[float] = None

    class SimilarBody(Strict):
        docno: str
        k: int = 10
        pipeline: Optional[str] = None
        timeout: Optional[float] = None

    class CiteBody(Strict):
        passage: str
        k: int = 10
        pipeline: Optional[str] = None
        timeout: Optional[float] = None

    @app.get("/health", summary="the process answers")
    async def health():
        return {"status": "ok"}

    @app.get("/ready", summary="the pipelines are loaded")
    async def ready():
        if not service.ready:
            status = 500 if state["load_error"] else 503
            return err(status, "load_failed" if state["load_error"] else "not_ready",
                       state["load_error"] or "the pipelines are still loading")
        return {"ready": True, "pipelines": list(service.transformers), "load_seconds": round(service.load_seconds, 3)}

    @app.get("/v1/pipelines", summary="the served pipelines and their descriptions")
    async def pipelines():
        not_ready()
        return api.pipelines()

    @app.get("/v1/search", summary="search by a query text (q) or a paper (paper=docno)")
    async def search_get(q: Optional[str] = Query(None, max_length=1_000_000), k: int = 10,
                         pipeline: Optional[str] = None, paper: Optional[str] = None):
        not_ready()
        return await api.search(query=q, k=k, pipeline=pipeline, paper=paper)

    @app.post("/v1/search", summary="search by a query text or a paper")
    async def search_post(body: SearchBody):
        not_ready()
        return await api.search(query=body.query, k=body.k, pipeline=body.pipeline, paper=body.paper,
                                expression=body.expression, timeout=body.timeout)

    @app.post("/v1/batch_search", summary="search several queries at once")
    async def batch(body: BatchBody):
        not_ready()
        return await api.batch_search(body.queries, k=body.k, pipeline=body.pipeline, expression=body.expression,
                                      timeout=body.timeout)

    @app.get("/v1/papers/{docno:path}", summary="a paper's record")
    async def paper(docno: str):
        not_ready()
        return api.paper(docno)

    @app.get("/v1/similar", summary="papers similar to a paper (its title and abstract as the query)")
    async def similar_get(docno: str, k: int = 10, pipeline: Optional[str] = None):
        not_ready()
        return await api.similar(docno, k=k, pipeline=pipeline)

    @app.post("/v1/similar", summary="papers similar to a paper")
    async def similar_post(body: SimilarBody):
        not_ready()
        return await api.similar(body.docno, k=body.k, pipeline=body.pipeline, timeout=body.timeout)

    @app.post("/v1/suggest_citations", summary="papers to cite for a passage")
    async def cite(body: CiteBody):
        not_ready()
        return await api.suggest_citations(body.passage, k=body.k, pipeline=body.pipeline, timeout=body.timeout)

    @app.get("/v1/stats", summary="batching counters")
    async def stats():
        return {"batching": api.batcher.stats.as_dict(), "waiting": api.batcher.waiting}

    add_docs_routes(app)   # /docs without a CDN

    if settings.page:
        pages = page_dir()

        @app.get("/", include_in_schema=False)
        async def index():
            return FileResponse(pages / "index.html", media_type="text/html")

        app.mount("/page", StaticFiles(directory=str(pages)), name="page")

    if mcp is not None:
        from mcp.server.transport_security import TransportSecuritySettings
        hosts = settings.allowed_hosts
        security = TransportSecuritySettings(enable_dns_rebinding_protection=hosts is not None,
                                             allowed_hosts=[h2 for h in hosts or () for h2 in (h, f"{h}:*")],
                                             allowed_origins=[f"{s}://{h}{p}" for h in hosts or ()
                                                              for s in ("http", "https") for p in ("", ":*")])
        mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                          transport_security=security, host=mcp_host)
        app.router.routes.extend(mcp_app.routes)

    app.add_middleware(Guard, settings=settings)
    return app


def env_token(name: str = "PYTERRIER_SCI_SERVE_TOKEN") -> Optional[str]:
    value = os.environ.get(name, "").strip()
    return value or None
