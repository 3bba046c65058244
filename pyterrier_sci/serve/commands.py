"""``pyterrier-sci serve CONFIG``: loads the named pipelines of a config once and serves them over HTTP
(search API, MCP at ``/mcp``, the search page at ``/``), over MCP stdio (``--mcp-stdio``), or on Ray Serve
(``--ray-replicas N``).  Registered through the ``pyterrier_sci.cli`` entry-point group."""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Optional

from .api import SearchAPI, ServeSettings
from .app import create_app, env_token, install_log_redaction
from .mcp_server import create_mcp
from .ray_serve import ray_deployment, run_on_ray, stop_on_ray
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
    p.add_argument("--max-body", type=int, default=65_536, help="the largest request body (bytes)")
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
                      ("rate_burst", 1)):
        if getattr(args, name) < low:
            raise ServeError(f"--{name.replace('_', '-')} must be at least {low}")
    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port {args.port} is not a port number")
    if args.deadline <= 0 or args.max_wait_ms < 0 or args.rate_limit < 0:
        raise ServeError("--deadline must be positive; --max-wait-ms and --rate-limit at least 0")
    if args.ray_replicas is not None and args.ray_replicas < 1:
        raise ServeError("--ray-replicas must be at least 1")


def serve_main(args) -> int:
    _check_args(args)
    token = read_token(args.token_file)
    if not args.mcp_stdio and not _loopback(args.host) and token is None and not args.insecure_no_token:
        raise ServeError(f"--host {args.host} is not a loopback address: give a bearer token (--token-file or "
                         f"${TOKEN_ENV}), or pass --insecure-no-token")
    install_log_redaction(token)
    settings = ServeSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                             workers=args.workers, deadline_s=args.deadline, max_body_bytes=args.max_body,
                             token=token, rate_limit=args.rate_limit, rate_burst=args.rate_burst,
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
    return _serve_http(api, args.host, args.port, args.log_level)


def _serve_http(api: SearchAPI, host: str, port: int, log_level: str) -> int:
    import uvicorn
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    bound = sock.getsockname()[1]
    app = create_app(api, mcp_host=host)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=int(api.settings.deadline_s) + 5,
                            timeout_keep_alive=5, backlog=2048, server_header=False)
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving on http://{shown}:{bound}/ (search page /, API /v1, OpenAPI /openapi.json, MCP /mcp)",
          file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    return 0


def _serve_on_ray(args, settings: ServeSettings, limits: ServeLimits) -> int:
    config = str(Path(args.config).resolve()) if os.path.exists(args.config) else args.config
    app = ray_deployment(config, args.pipelines, args.dataset, settings, limits, num_replicas=args.ray_replicas,
                         trusted=args.trust_config, allow_expressions=args.allow_expressions)
    print(f"starting {args.ray_replicas} Ray Serve replica(s) on http://{args.host}:{args.port}/", file=sys.stderr,
          flush=True)
    # Ctrl-C (SIGINT) and SIGTERM both end serve.run's wait with a KeyboardInterrupt; Ray Serve leaves the
    # shutdown to the caller: without it the application kept serving on a cluster after the command ended
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        run_on_ray(app, host=args.host, port=args.port, address=args.ray_address, blocking=True)
    except KeyboardInterrupt:
        print("stopping: the replicas finish the requests they hold", file=sys.stderr, flush=True)
        stop_on_ray(args.ray_address)
        print("stopped", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
