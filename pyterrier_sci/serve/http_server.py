"""The HTTP server of ``pyterrier-sci serve``: uvicorn (httptools) with the limits that must hold before any
route, the guard or the token check sees a request, and a stop that drains.

Limits, each a :class:`~.api.ServeSettings` field (docs/serve.md, "Limits"): the request head's size
(``max_header_bytes``, 431 ``headers_too_large``, counted while it arrives: a 50 MB header is cut after
the first chunk beyond the limit), its header fields (``max_headers``, 431 ``too_many_headers``), its time
(``header_timeout_s``, 408 ``header_timeout``, from its first byte or the connection's opening; a connection
that sends nothing is closed), the body's time as a backstop of the guard's (``body_timeout_s`` + 1 s:
408 ``body_timeout``, or the connection closed when an answer was sent without reading it), and the open
connections (``max_connections``: one more is answered 503 ``too_many_connections`` and closed at once).

Stopping (:func:`serve_http`): SIGTERM and SIGINT stop accepting connections, let the requests in flight
finish (each within its deadline), let the batcher finish what it holds, all within ``ServeSettings.grace``
seconds of the signal; a pipeline call still running then is abandoned and the process exits 0 at once
(nothing is half-written: every artifact and run is written beside its target and renamed).  uvicorn's own
handling re-raised the signal after its shutdown (the process ended by SIGTERM, status -15) and waited for
the pipeline threads however long they ran.
"""
from __future__ import annotations

import contextlib
import http
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Optional

from .api import SearchAPI, ServeSettings
from .app import LOGGER, create_app, error_body
from .service import ServeError

__all__ = ["guarded_protocol", "uvicorn_config", "stopping_server", "serve_http", "STOP_SIGNALS", "error_response"]

#: the signals that stop the server, draining (a second SIGINT: at once)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def error_response(status: int, code: str, message: str, headers=()) -> bytes:
    """A whole HTTP/1.1 answer with the JSON error body, closing the connection."""
    body = error_body(code, message)
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Refused(Exception):  # noqa: N818 - raised in a parser callback to stop parsing a refused request
    pass


def guarded_protocol(settings: ServeSettings):
    """uvicorn's httptools protocol class with the limits of ``settings`` (module docstring)."""
    try:
        from uvicorn.protocols.http import httptools_impl
    except ImportError:
        raise ServeError("pyterrier-sci serve needs uvicorn with httptools: pip install 'pyterrier-sci[serve]'") \
            from None
    parser_errors = httptools_impl.httptools.HttpParserError
    parser_upgrade = httptools_impl.httptools.HttpParserUpgrade
    max_head, max_fields = settings.max_header_bytes, settings.max_headers
    head_s, body_s = settings.header_timeout_s, settings.body_timeout_s + 1.0

    class GuardedHttpToolsProtocol(httptools_impl.HttpToolsProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._refused = False         # over the connection limit: answered and closed at once
            self._head_done = False       # the current request's head is complete
            self._head_bytes = 0          # bytes received while the head was incomplete
            self._head_size = 0           # the head as parsed: request target and header fields
            self._fields = 0
            self._problem: Optional[tuple] = None
            self._head_timer: Any = None
            self._body_timer: Any = None

        # -- connections ------------------------------------------------------------------------
        def connection_made(self, transport) -> None:
            if len(self.connections) >= settings.max_connections:
                self._refused = True
                transport.write(error_response(503, "too_many_connections",
                                               f"the server has {settings.max_connections} connections open, "
                                               "its most; retry shortly", ["retry-after: 1"]))
                transport.close()
                return
            super().connection_made(transport)
            self._head_timer = self.loop.call_later(head_s, self._head_timeout)

        def connection_lost(self, exc) -> None:
            self._cancel_timers()
            if self._refused:
                return
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused or self.transport.is_closing():
                return
            self._unset_keepalive_if_required()
            if not self._head_done:
                self._head_bytes += len(data)
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(head_s, self._head_timeout)
            try:
                self.parser.feed_data(data)
            except parser_errors:
                if self._problem is not None:
                    self._fail(*self._problem)
                else:
                    self._fail(400, "malformed_request", "the request is not valid HTTP/1.1")
                return
            except parser_upgrade:   # as uvicorn does
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            if not self._head_done and self._head_bytes > max_head:
                self._fail(431, "headers_too_large", f"the request's head has more than {max_head:,} bytes")

        # -- parser callbacks ----------------------------------------------------------------------
        def on_message_begin(self) -> None:
            self._head_done, self._head_size, self._fields, self._problem = False, 0, 0, None
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._head_size += len(url)
            if self._head_size > max_head:
                self._problem = (414, "uri_too_long", f"the request's target has more than {max_head:,} bytes")
                raise _Refused()
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._fields += 1
            self._head_size += len(name) + len(value) + 4
            if self._fields > max_fields:
                self._problem = (431, "too_many_headers", f"the request has more than {max_fields} header fields")
                raise _Refused()
            if self._head_size > max_head:
                self._problem = (431, "headers_too_large", f"the request's head has more than {max_head:,} bytes")
                raise _Refused()
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._head_done = True
            self._head_bytes = 0
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().on_headers_complete()
            self._body_timer = self.loop.call_later(body_s, self._body_timeout)

        def on_message_complete(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None
            self._head_done = False   # the next bytes on this connection start a new request
            super().on_message_complete()

        # -- timers and refusals ---------------------------------------------------------------
        def _cancel_timers(self) -> None:
            for t in (self._head_timer, self._body_timer):
                if t is not None:
                    t.cancel()
            self._head_timer = self._body_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self._head_done or self.transport.is_closing():
                return
            if self._head_bytes or self._head_size:
                self._fail(408, "header_timeout", f"the request's head took more than {head_s:g} s")
            else:   # a connection that sent nothing
                self.transport.close()

        def _body_timeout(self) -> None:
            self._body_timer = None
            cycle = self.cycle
            if self.transport.is_closing():
                return
            if cycle is None or not cycle.response_started:
                self._fail(408, "body_timeout", f"the request body took more than {settings.body_timeout_s:g} s")
            elif cycle.response_complete:   # answered without its body being read (401, 413, a GET with a body)
                self.transport.close()
            else:
                cycle.keep_alive = False

        def _fail(self, status: int, code: str, message: str) -> None:
            self._cancel_timers()
            if self.transport.is_closing():
                return
            LOGGER.info("%s: refused %s (%s)", "%s:%d" % tuple(self.client[:2]) if self.client else "?", code, message)
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(error_response(status, code, message))
            self.transport.close()

    return GuardedHttpToolsProtocol


def uvicorn_config(app, settings: ServeSettings, log_level: str = "info", **kwargs):
    """The uvicorn configuration of the server: the guarded protocol, the grace period, no proxy headers
    (the guard reads ``X-Forwarded-For`` from trusted proxies only), no WebSocket upgrades (no route takes one), no
    ``server`` header; ``kwargs`` override."""
    import uvicorn
    options = dict(http=guarded_protocol(settings), ws="none", log_level=log_level,
                   timeout_graceful_shutdown=settings.grace, timeout_keep_alive=5, backlog=2048, server_header=False,
                   proxy_headers=False)
    options.update(kwargs)
    return uvicorn.Config(app, **options)


def stopping_server(config, api: SearchAPI):
    """A ``uvicorn.Server`` whose SIGTERM/SIGINT start the grace period (``api.stop_by``) and drain; it does not
    re-raise the signal afterwards (the command exits 0)."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            if api.stop_by is None:
                api.stop_by = time.monotonic() + api.settings.grace
                LOGGER.info("stopping (signal %d): the requests in flight finish, within %g s", sig,
                            api.settings.grace)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return StoppingServer(config)


def serve_http(api: SearchAPI, host: str, port: int, log_level: str = "info") -> int:
    """Serves ``api`` on ``host:port`` until SIGTERM or SIGINT; returns 0 once stopped (or exits 0 at once when
    a pipeline call still runs at the end of the grace period)."""
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
    server = stopping_server(uvicorn_config(app, api.settings, log_level), api)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving on http://{shown}:{bound}/ (search page /, API /v1, OpenAPI /openapi.json, MCP /mcp)",
          file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    left = api.batcher.calls_running
    if left:
        # the grace period is over: the call is abandoned (its request was answered 504 at its deadline);
        # the pipeline threads would otherwise keep the process alive however long the call runs
        print(f"stopped: {left} pipeline call(s) still running after the {api.settings.grace:g} s grace period "
              "abandoned", file=sys.stderr, flush=True)
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(0)
    print("stopped", file=sys.stderr, flush=True)
    return 0
