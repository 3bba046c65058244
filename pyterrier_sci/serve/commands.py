"""``pyterrier-sci serve CONFIG``: loads the named pipelines of a config once and serves them over HTTP
(search API, MCP at ``/mcp``, the search page at ``/``), over MCP stdio (``--mcp-stdio``), or on Ray Serve
(``--ray-replicas N``).  Registered through the ``pyterrier_sci.cli`` entry-point group."""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from .api import LOOPBACK_HOSTS, SearchAPI, ServeSettings
from .app import env_token, install_log_redaction
from .http_server import STOP_SIGNALS, serve_http
from .mcp_server import create_mcp
from .ray_serve import local_ray_on_loopback, ray_deployment, run_on_ray, stop_on_ray
from .service import SearchService, ServeError, ServeLimits

__all__ = ["add_serve_commands", "serve_main", "read_token", "TOKEN_ENV"]

TOKEN_ENV = "PYTERRIER_SCI_SERVE_TOKEN"


def read_token(path: Optional[str]) -> Optional[str]:
    """The bearer token: the first line of ``path`` (a regular file, at most 4 KiB), else
    ``$PYTERRIER_SCI_SERVE_TOKEN``."""
    if path:
        p = Path(path).expanduser()
        try:
            st = p.stat()
        except OSError as e:
            raise ServeError(f"--token-file {path}: {e.strerror or e}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ServeError(f"--token-file {path} is not a regular file")
        if st.st_size > 4096:
            raise ServeError(f"--token-file {path} has {st.st_size} bytes; a token file holds one line")
        token = p.read_text(encoding="utf-8", errors="strict").strip().splitlines()
        token = token[0].strip() if token else ""
        if len(token) < 16:
            raise ServeError(f"--token-file {path}: the token must have at least 16 characters")
        return token
    token = env_token(TOKEN_ENV)
    if token is not None and len(token) < 16:
        raise ServeError(f"${TOKEN_ENV}: the token must have at least 16 characters")
    return token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_serve_commands(subparsers) -> argparse.ArgumentParser:
    """Adds ``serve`` to an argparse sub-parsers object; sets ``func=serve_main``."""
    p = subparsers.add_parser(
        "serve", help="serve pipelines over HTTP (search API, MCP, search page) or MCP stdio",
        description="Loads the named pipelines of a config once and serves them: an HTTP search API (OpenAPI at "
                    "/openapi.json), MCP over streamable HTTP at /mcp, a search page at /. docs/serve.md.")
    p.add_argument("config", help="pipeline YAML file (e.g. pipelines/csfcube.yaml)")
    p.add_argument("--pipelines", nargs="+", metavar="NAME",
                   help="what to serve: pipeline or component names of the config, or NAME=EXPRESSION over its "
                        "components (default: every pipeline of the config)")
    p.add_argument("--dataset", help="the dataset whose papers are served (default: the config's)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port; the URL is printed)")
    p.add_argument("--token-file", help=f"bearer token file (else ${TOKEN_ENV}); required off loopback")
    p.add_argument("--insecure-no-token", action="store_true",
                   help="allow a non-loopback --host without a bearer token")
    p.add_argument("--rate-limit", type=float, default=0.0, help="requests per second per client (0: none)")
    p.add_argument("--rate-burst", type=int, default=20, help="requests a client may send at once")
    p.add_argument("--max-batch", type=int, default=32, help="queries in one pipeline call")
    p.add_argument("--max-wait-ms", type=float, default=2.0, help="a batch waits this long for more queries")
    p.add_argument("--max-queue", type=int, default=256, help="queries waiting before 503 + Retry-After")
    p.add_argument("--workers", type=int, default=1, help="threads running pipeline calls")
    p.add_argument("--deadline", type=float, default=30.0, help="seconds a request may take (504 after)")
    p.add_argument("--max-k", type=int, default=100, help="the most results a request may ask")
    p.add_argument("--max-body", type=int, default=65_536, help="the largest request body (bytes; 413)")
    p.add_argument("--body-timeout", type=float, default=10.0, help="seconds to receive a request body (408)")
    p.add_argument("--max-header-bytes", type=int, default=16_384,
                   help="the largest request head: request line and header fields (bytes; 431)")
    p.add_argument("--max-headers", type=int, default=100, help="the most header fields in a request (431)")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds to receive a request's head, from its first byte or the connection's opening (408)")
    p.add_argument("--max-connections", type=int, default=1024,
                   help="connections open at once (one more: 503, closed)")
    p.add_argument("--grace", type=float,
                   help="on SIGTERM/SIGINT: the most seconds before the process exits, requests in flight answered "
                        "(default: --deadline + 5)")
    p.add_argument("--trusted-proxy", nargs="+", default=[], metavar="ADDR",
                   help="proxies (addresses or networks) whose X-Forwarded-For names the client a rate limit counts "
                        "(default: none; the header is ignored)")
    p.add_argument("--allowed-host", nargs="+", default=[], metavar="NAME",
                   help="more Host names the server answers to (a server on loopback answers to its loopback names "
                        "only: 421 otherwise)")
    p.add_argument("--allow-expressions", action="store_true",
                   help="requests may send their own pipeline expression over the config's components")
    p.add_argument("--trust-config", action="store_true",
                   help="trust the config: its LLM base_url receives the API key (docs/llm.md, Trust)")
    p.add_argument("--mcp-stdio", action="store_true", help="serve MCP over stdin/stdout instead of HTTP")
    p.add_argument("--no-mcp", action="store_true", help="no MCP endpoint at /mcp")
    p.add_argument("--no-page", action="store_true", help="no search page at /")
    p.add_argument("--ray-replicas", type=int, help="serve on Ray Serve with this many replicas")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: $RAY_ADDRESS, else a local instance)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=serve_main)
    return p


def _check_args(args) -> None:
    for name, low in (("max_batch", 1), ("max_queue", 1), ("workers", 1), ("max_k", 1), ("max_body", 1024),
                      ("rate_burst", 1), ("max_header_bytes", 1024), ("max_headers", 8), ("max_connections", 1)):
        if getattr(args, name) < low:
            raise ServeError(f"--{name.replace('_', '-')} must be at least {low}")
    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port {args.port} is not a port number")
    if args.deadline <= 0 or args.max_wait_ms < 0 or args.rate_limit < 0:
        raise ServeError("--deadline must be positive; --max-wait-ms and --rate-limit at least 0")
    for name in ("body_timeout", "header_timeout", "grace"):
        value = getattr(args, name)
        if value is not None and not 0 < value <= 3600:
            raise ServeError(f"--{name.replace('_', '-')} must be a number of seconds above 0 and at most 3600")
    for proxy in args.trusted_proxy:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ServeError(f"--trusted-proxy {proxy!r} is not an IP address or network") from None
    if args.ray_replicas is not None and args.ray_replicas < 1:
        raise ServeError("--ray-replicas must be at least 1")


def _allowed_hosts(host: str, extra) -> Optional[tuple]:
    """The Host names the server answers to: its loopback names (and ``extra``) when bound to loopback; off
    loopback ``extra`` when given, else any (the bearer token guards it)."""
    extra = tuple(h.strip() for h in extra if h.strip())
    if _loopback(host):
        return LOOPBACK_HOSTS + extra
    return extra or None


def serve_main(args) -> int:
    _check_args(args)
    token = read_token(args.token_file)
    if not args.mcp_stdio and not _loopback(args.host) and token is None and not args.insecure_no_token:
        raise ServeError(f"--host {args.host} is not a loopback address: give a bearer token (--token-file or "
                         f"${TOKEN_ENV}), or pass --insecure-no-token")
    install_log_redaction(token)
    settings = ServeSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                             workers=args.workers, deadline_s=args.deadline, max_body_bytes=args.max_body,
                             body_timeout_s=args.body_timeout, max_header_bytes=args.max_header_bytes,
                             max_headers=args.max_headers, header_timeout_s=args.header_timeout,
                             max_connections=args.max_connections, grace_s=args.grace,
                             token=token, rate_limit=args.rate_limit, rate_burst=args.rate_burst,
                             trusted_proxies=tuple(args.trusted_proxy),
                             allowed_hosts=_allowed_hosts(args.host, args.allowed_host),
                             mcp=not args.no_mcp, page=not args.no_page)
    limits = ServeLimits(max_k=args.max_k)
    if args.ray_replicas:
        return _serve_on_ray(args, settings, limits)
    start = time.perf_counter()
    service = SearchService(args.config, args.pipelines, args.dataset, limits, trusted=args.trust_config,
                            allow_expressions=args.allow_expressions)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is MCP's channel under --mcp-stdio
        service.load()
    print(f"loaded {', '.join(service.transformers)} in {time.perf_counter() - start:.1f} s", file=sys.stderr,
          flush=True)
    api = SearchAPI(service, settings)
    if args.mcp_stdio:
        create_mcp(api).run("stdio")
        return 0
    return serve_http(api, args.host, args.port, args.log_level)


def _serve_on_ray(args, settings: ServeSettings, limits: ServeLimits) -> int:
    config = str(Path(args.config).resolve()) if os.path.exists(args.config) else args.config
    local_ray_on_loopback(args.ray_address)   # before ray is imported
    app = ray_deployment(config, args.pipelines, args.dataset, settings, limits, num_replicas=args.ray_replicas,
                         trusted=args.trust_config, allow_expressions=args.allow_expressions,
                         graceful_shutdown_timeout_s=settings.grace)
    print(f"starting {args.ray_replicas} Ray Serve replica(s) on http://{args.host}:{args.port}/", file=sys.stderr,
          flush=True)
    stop = threading.Event()

    def on_signal(sig, frame):
        stop.set()

    def take_signals():
        # ray.init installs its own SIGTERM handler (sys.exit(15): the command ended by it and cut the requests in
        # flight); ours goes in after it, and again once the application runs
        for sig in STOP_SIGNALS:
            signal.signal(sig, on_signal)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        run_on_ray(app, host=args.host, port=args.port, address=args.ray_address, on_ray_started=take_signals)
        take_signals()
        print(f"serving on http://{args.host}:{args.port}/ (Ray Serve, {args.ray_replicas} replica(s))",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        # Ray Serve stops routing new requests to the application; each replica finishes the requests it holds
        # (up to the grace period), then the Ray Serve and the Ray started here stop
        print("stopping: the replicas finish the requests they hold", file=sys.stderr, flush=True)
        stop_on_ray(args.ray_address)
        print("stopped", file=sys.stderr, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
