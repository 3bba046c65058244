"""The LLM client's HTTP layer: a deadline for the whole of each request (every socket read and
write, the headers and a trickled body included) and a size limit per response body, with the
environment's proxies honoured.  Used by :class:`~pyterrier_sci.llm.LLMClient` and by the dry
runs' token counting (``POST /tokenize``), so no request of the toolkit to an LLM server can
hang on a slow one.

    with deadline_of(5.0):
        httpx_client.post(...)     # a transport from guarded_transport(max_bytes)
"""
from __future__ import annotations

import contextlib
import importlib
import re
import threading
import time
import zlib
from typing import Any, Iterator, Optional

from pyterrier_sci.errors import LLMError, TooLarge

__all__ = ["TooLarge", "deadline", "deadline_of", "remaining", "http_libs", "proxy_mounts", "guarded_transport",
           "LOOPBACK_HOSTS"]


deadline = threading.local()   # .value: time.monotonic() deadline of the request this thread sends


@contextlib.contextmanager
def deadline_of(seconds: float) -> Iterator[None]:
    """Within the block, every request this thread sends through a guarded transport must be
    complete ``seconds`` from now (a read past it raises a read timeout); the deadline in force
    before is restored after."""
    before = getattr(deadline, "value", None)
    deadline.value = time.monotonic() + seconds
    try:
        yield
    finally:
        deadline.value = before


def remaining(timeout: Optional[float], in_httpx: bool = False) -> Optional[float]:
    """``timeout`` cut to what is left before this thread's deadline; raises a read timeout once
    it has passed (httpcore's below httpx, httpx's above it)."""
    d = getattr(deadline, "value", None)
    if d is None:
        return timeout
    left = d - time.monotonic()
    if left <= 0:
        httpx, httpcore = http_libs()
        raise (httpx if in_httpx else httpcore).ReadTimeout("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


def http_libs():
    """The HTTP packages the installed ``openai`` uses: (``httpx``, ``httpcore``) or their
    successors (``httpx2``, ``httpcore2``)."""

    from openai import _base_client
    httpx = getattr(_base_client, "httpx2", None) or getattr(_base_client, "httpx")
    return httpx, importlib.import_module(httpx.__name__.replace("httpx", "httpcore", 1))


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")   # never sent through a proxy


def proxy_mounts(max_bytes: int) -> dict:
    """The environment's proxies (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), read
    as httpx reads them for a client of its own, each behind a guarded transport.  httpx ignores
    them once a client is given a transport, which the deadline and size limit need, so without
    these mounts the toolkit connected directly where the plain OpenAI client used the proxy.
    Loopback servers (``localhost``, ``127.0.0.1``, ``[::1]``: a local llama.cpp or vLLM) are always
    reached directly, as Go's HTTP client does: a proxy's loopback is not the caller's.  A proxy
    that cannot be used (an unsupported scheme, a SOCKS proxy without ``socksio``) is one
    :class:`LLMError` naming it."""
    httpx, _ = http_libs()
    env = importlib.import_module(httpx.__name__ + "._utils").get_environment_proxies()
    if env:
        env.update({f"all://{host}": None for host in LOOPBACK_HOSTS})
    mounts = {}
    for pattern, url in env.items():
        try:
            mounts[pattern] = None if url is None else guarded_transport(max_bytes, proxy=url)
        except (ImportError, ValueError, httpx.InvalidURL) as e:
            shown = re.sub(r"//[^/@]*@", "//***@", url)   # never the proxy's password
            raise LLMError(f"the proxy {shown!r} for {pattern!r} (from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY) "
                           f"cannot be used: {e}") from None
    return mounts


def guarded_transport(max_bytes: int, proxy: Optional[str] = None):
    """An ``httpx.HTTPTransport`` (through ``proxy`` when given) whose every socket read and write,
    the proxy's included, is bounded by the calling thread's request deadline, and whose response
    bodies are cut off at ``max_bytes`` (after decompression; gzip and deflate are decoded here with
    bounded output, other encodings are refused)."""
    httpx, httpcore = http_libs()

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner):
            self._inner = inner

        def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
            return self._inner.read(max_bytes, remaining(timeout))

        def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
            self._inner.write(buffer, remaining(timeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return Stream(self._inner.start_tls(ssl_context, server_hostname, remaining(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.NetworkBackend):
        def __init__(self, inner):
            self._inner = inner

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return Stream(self._inner.connect_tcp(host, port, remaining(timeout), local_address, socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return Stream(self._inner.connect_unix_socket(path, remaining(timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    class Body(httpx.SyncByteStream):
        def __init__(self, inner, encoding: str):
            self._inner = inner
            self._decoder = (zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding in ("gzip", "x-gzip")
                             else zlib.decompressobj() if encoding == "deflate" else None)

        def __iter__(self):
            n = 0
            for chunk in self._inner:
                remaining(None, in_httpx=True)
                if self._decoder is not None:
                    chunk = self._decoder.decompress(chunk, max_bytes + 1 - n)
                n += len(chunk)
                if n > max_bytes:
                    raise TooLarge(f"the body is larger than max_response_bytes ({max_bytes} bytes)")
                yield chunk

        def close(self) -> None:
            self._inner.close()

    class Transport(httpx.HTTPTransport):
        def __init__(self):
            super().__init__(proxy=proxy)
            pool = getattr(self, "_pool", None)   # bound the headers too, where httpx lets us
            if pool is not None and hasattr(pool, "_network_backend"):
                pool._network_backend = Backend(pool._network_backend)

        def handle_request(self, request):
            resp = super().handle_request(request)
            try:
                length = int(resp.headers.get("content-length", "0") or 0)
            except ValueError:
                length = 0
            encoding = resp.headers.get("content-encoding", "identity").strip().lower()
            if length > max_bytes or encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
                resp.close()
                raise TooLarge(f"the body is larger than max_response_bytes ({max_bytes} bytes)"
                                if length > max_bytes else f"the body has an unsupported encoding {encoding!r}")
            headers = [(k, v) for k, v in resp.headers.raw
                       if k.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")]
            return httpx.Response(resp.status_code, headers=headers, stream=Body(resp.stream, encoding),
                                  extensions=resp.extensions)

    return Transport()
