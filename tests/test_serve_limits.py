"""The limits of pyterrier-sci serve, each met by a client on raw sockets against the real server (the command in
a subprocess, with a bearer token): the request head's size and header count (431), its time (408), the body's
size (413) and time (408), the open connections (503) - every one enforced before the token is checked (the
clients send none).  Then the Host and Origin checks of every route (421/403), and the rate limit, which counts
X-Forwarded-For only from a trusted proxy (an in-process server)."""
import json
import select
import socket
import time
from urllib.parse import urlsplit

import pytest
from conftest import needs_data
from serve_helpers import CONFIG, LiveServer, csfcube_service, request, start_cli, stop_cli

from pyterrier_sci.serve import SearchAPI, ServeSettings

pytestmark = needs_data("csfcube")

TOKEN = "limits-token-" + "k3" * 8
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_CONNECTIONS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    token = tmp_path_factory.mktemp("limits") / "token"
    token.write_text(TOKEN + "\n")
    proc, url = start_cli(CONFIG, "--pipelines", "bm25", "--token-file", str(token), "--log-level", "warning",
                          "--max-header-bytes", "4096", "--max-headers", "20", "--header-timeout", "1.5",
                          "--body-timeout", "1.5", "--max-body", "2048", "--max-connections", str(MAX_CONNECTIONS))
    yield url
    stop_cli(proc)
    assert proc.returncode == 0 and "Traceback" not in "".join(proc.log), "".join(proc.log)[-3000:]


def connect(url, timeout=30):
    u = urlsplit(url)
    return socket.create_connection((u.hostname, u.port), timeout=timeout)


def read_all(s) -> bytes:
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def answer(resp: bytes):
    head, _, body = resp.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]["code"]


def exchange(url, data: bytes):
    with connect(url) as s:
        s.sendall(data)
        return answer(read_all(s))


def head(path="/v1/search?q=parsing", extra=b"", host=b"127.0.0.1"):
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + extra


def test_a_head_too_large_is_431_as_it_arrives(server):
    assert exchange(server, head(extra=b"X-Big: " + b"a" * 10_000 + b"\r\n\r\n")) == (431, "headers_too_large")
    assert exchange(server, head(extra=b"X-Big: " + b"a" * 10_000 + b"\r\n" + f"Authorization: Bearer {TOKEN}\r\n\r\n"
                                 .encode())) == (431, "headers_too_large")
    assert exchange(server, head("/v1/search?q=" + "a" * 5000, b"\r\n")) == (414, "uri_too_long")
    # a 50 MB header: answered and cut once the first chunks beyond the limit arrive, not read to its end
    sent, resp = 0, b""
    with connect(server) as s:
        s.sendall(head(extra=b"X-Huge: "))
        chunk = b"a" * 65536
        while sent < 50 * 2 ** 20:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
            if select.select([s], [], [], 0)[0]:
                break
        resp = read_all(s)
    assert answer(resp) == (431, "headers_too_large") and sent < 16 * 2 ** 20, sent
    status, _, body = request(server + "/v1/search?q=parsing&k=2", headers=AUTH)
    assert status == 200 and len(body["results"]) == 2


def test_too_many_header_fields_is_431(server):
    fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(30))
    assert exchange(server, head(extra=fields + b"\r\n")) == (431, "too_many_headers")
    status, _, _ = request(server + "/v1/search?q=parsing", headers={**AUTH, **{f"X-F{i}": "1" for i in range(15)}})
    assert status == 200


def test_a_slow_head_is_408_and_a_silent_connection_is_closed(server):
    with connect(server) as s:
        start = time.monotonic()
        data = head(extra=b"X-Slow: abcdefghijklmnopqrstuvwxyz\r\n\r\n")
        for i, b in enumerate(data):
            try:
                s.send(bytes([b]))
            except OSError:
                break
            if select.select([s], [], [], 0.2)[0]:
                break
        resp, took = read_all(s), time.monotonic() - start
    assert answer(resp) == (408, "header_timeout") and 1.2 < took < 8, took
    with connect(server) as s:
        start = time.monotonic()
        assert read_all(s) == b"" and 1.2 < time.monotonic() - start < 8


def test_a_slow_body_is_408_and_an_unread_one_does_not_hold_the_connection(server):
    post = b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    with connect(server) as s:
        s.sendall(post + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode() + b'{"query": ')
        start = time.monotonic()
        resp = read_all(s)
    assert answer(resp) == (408, "body_timeout") and 1.2 < time.monotonic() - start < 8
    # without the token: 401 at once, the body never read, and the connection closed with the answer (not kept
    # for a body still arriving: the body's time, 2.5 s here, would close it otherwise)
    with connect(server) as s:
        s.sendall(post + b"\r\n" + b'{"query": ')
        start = time.monotonic()
        resp = read_all(s)
        took = time.monotonic() - start
    assert answer(resp) == (401, "unauthorised") and took < 1.2, took
    # a GET answered without its body being read: the connection closes once the body's time (and 1 s) is over
    with connect(server) as s:
        s.sendall(head(extra=f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n".encode() + b"abc"))
        start = time.monotonic()
        resp = read_all(s)
        took = time.monotonic() - start
    assert resp.startswith(b"HTTP/1.1 200 ") and 2 < took < 8, (resp[:40], took)


def test_a_body_too_large_is_413_before_the_token_is_checked(server):
    assert exchange(server, b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 10000\r\n\r\n{") == (413, "body_too_large")
    chunk = b'{"query": "' + b"a" * 1000
    data = (b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode() + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n")
    assert exchange(server, data) == (413, "body_too_large")


def test_connections_beyond_the_limit_are_answered_503_and_closed(server):
    time.sleep(0.5)      # the connections of the tests before are gone
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(server) as s:
            start = time.monotonic()
            resp = read_all(s)
        assert answer(resp) == (503, "too_many_connections") and time.monotonic() - start < 1.5
        assert b"retry-after: 1" in resp.lower()
    finally:
        for s in held:
            s.close()
    time.sleep(0.5)
    assert request(server + "/v1/search?q=parsing", headers=AUTH)[0] == 200


def test_every_route_but_the_probes_checks_host_and_origin(server):
    port = urlsplit(server).port
    for path in ("/v1/search?q=parsing", "/v1/pipelines", "/openapi.json", "/", "/docs"):
        status, _, body = request(server + path, headers={**AUTH, "Host": "evil.example"})
        assert (status, body["error"]["code"]) == (421, "misdirected_request"), path
    status, _, body = request(server + "/mcp", "POST", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                              headers={"Host": f"rebind.example:{port}", "Accept": "application/json"})
    assert (status, body["error"]["code"]) == (421, "misdirected_request")    # before the token
    status, _, body = request(server + "/v1/search?q=parsing", headers={**AUTH, "Origin": "http://evil.example"})
    assert (status, body["error"]["code"]) == (403, "bad_origin")
    assert request(server + "/health", headers={"Host": "evil.example"})[0] == 200      # probes hold no data
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        status, _, body = request(server + "/v1/search?q=parsing&k=1", headers={**AUTH, "Host": host,
                                                                               "Origin": f"http://{host}"})
        assert status == 200 and len(body["results"]) == 1


@pytest.fixture(scope="module")
def bm25_service():
    return csfcube_service(["bm25"]).load()


def test_forwarding_headers_count_only_from_a_trusted_proxy(bm25_service):
    def statuses(srv, forwarded):
        return [request(srv.url + "/v1/search?q=parsing&k=1", headers={"X-Forwarded-For": f})[0] for f in forwarded]
    # no trusted proxy: X-Forwarded-For is the client's own say, and a loopback client escaped the limit with it
    with LiveServer(SearchAPI(bm25_service, ServeSettings(rate_limit=0.05, rate_burst=2))) as srv:
        assert statuses(srv, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [200, 200, 429]
    # behind a trusted proxy (here: loopback), the last untrusted address of the chain is the client
    settings = ServeSettings(rate_limit=0.05, rate_burst=2, trusted_proxies=("127.0.0.0/8",))
    with LiveServer(SearchAPI(bm25_service, settings)) as srv:
        assert statuses(srv, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [200, 200, 200]
        assert statuses(srv, ["203.0.113.9", "203.0.113.9, 127.0.0.1", "10.9.9.9, 203.0.113.9"]) == [200, 200, 429]


def test_the_limits_table_of_the_docs_gives_the_commands_defaults():
    """docs/serve.md's table of limits states each flag's default: the same as the command's argparse default."""
    import argparse
    import re
    from pathlib import Path

    from pyterrier_sci.serve.commands import add_serve_commands
    parser = add_serve_commands(argparse.ArgumentParser().add_subparsers())
    defaults = {f"--{k.replace('_', '-')}": v for k, v in vars(parser.parse_args(["config.yaml"])).items()}
    text = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| `(--[a-z-]+)` \| (\d+)[^|]* \|", text, re.M)
    assert len(rows) == 10, rows
    for flag, default in rows:
        assert defaults[flag] == int(default), (flag, default, defaults[flag])
