"""Hostile requests against pyterrier-sci serve (the CLI server on pipelines/csfcube.yaml): huge bodies, slow
clients, malformed JSON, unknown fields, path traversal in docnos, 1,000 open connections.  Each gets a
JSON 4xx naming the cause (or nothing, for a client that never finishes), the server keeps answering the
others, and no request is lost."""
import asyncio
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from conftest import needs_data
from serve_helpers import CONFIG, request, start_cli, stop_cli

pytestmark = needs_data("csfcube")


@pytest.fixture(scope="module")
def server():
    # 1,000 connections at once (the default limit is 1,024), opened before any sends its request (the head
    # timeout counts from a connection's opening)
    proc, url = start_cli(CONFIG, "--pipelines", "bm25", "--max-body", "4096", "--log-level", "warning",
                          "--max-queue", "2000", "--max-connections", "2000", "--header-timeout", "60")
    yield url
    stop_cli(proc)
    # drained, then exit 0 (uvicorn alone re-raised the signal: -15)
    assert proc.returncode == 0 and "Traceback" not in "".join(proc.log), "".join(proc.log)[-3000:]


def addr(url):
    u = urlsplit(url)
    return u.hostname, u.port


def healthy(url):
    status, _, body = request(url + "/v1/search?q=dependency+parsing&k=3", timeout=30)
    assert status == 200 and len(body["results"]) == 3
    return body


def raw(url, data: bytes, timeout=30) -> bytes:
    """Sends ``data`` on a fresh connection; returns everything the server answers."""
    with socket.create_connection(addr(url), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def status_and_json(resp: bytes):
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def test_huge_bodies_are_refused_and_others_served(server):
    reference = healthy(server)
    # declared too large: refused before the body is read
    status, body = status_and_json(raw(server, b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
                                               b"{\"query\": \""))
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    # chunked, no Content-Length: counted while read
    chunk = b'{"query": "' + b"a" * 3000
    data = (b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))
            + b"0\r\n\r\n")
    status, body = status_and_json(raw(server, data))
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    # a query as long as the body allows but longer than a query may be
    status, _, body = request(server + "/v1/search", "POST", {"query": "word " * 800})
    assert (status, body["error"]["code"]) == (422, "query_too_long")
    assert healthy(server)["results"] == reference["results"]


def test_malformed_json_and_unknown_fields(server):
    cases = [b'{"query": "x"', b"[1, 2, 3]", b'"just a string"', b"\xff\xfe\x00garbage", b"null",
             b'{"query": "x", "k": 1e309}', b'{"query": "x", "k": NaN}', b'{"query": null}',
             b"[" * 50_00 + b"]" * 50_00, b'{"query": {"$ne": 1}}', b'{"queries": "not a list"}']
    for body in cases:
        status, headers, got = request(server + "/v1/search", "POST", raw=body)
        assert 400 <= status < 500, (body[:40], status, got)
        assert isinstance(got, dict) and got["error"]["message"] and "Traceback" not in json.dumps(got)
    for path, body, field in (("/v1/search", {"query": "x", "config": "/etc/passwd"}, "config"),
                              ("/v1/batch_search", {"queries": ["x"], "index_path": "/tmp"}, "index_path"),
                              ("/v1/similar", {"docno": "388", "dataset": "irds:other"}, "dataset")):
        status, _, got = request(server + path, "POST", body)
        assert (status, got["error"]["code"]) == (422, "unknown_field") and field in got["error"]["message"]
    healthy(server)


def test_path_traversal_in_docnos_reads_no_file(server):
    probes = ["../../../../etc/passwd", "..%2F..%2F..%2Fetc%2Fpasswd", "%2e%2e/%2e%2e/etc/passwd", "/etc/passwd",
              "..\\..\\windows\\win.ini", "388%00.json", "388/../388", "~root/.ssh/id_rsa", "x" * 3000,
              "%252e%252e%252fetc%252fpasswd"]
    for p in probes:
        status, _, body = request(server + "/v1/papers/" + p)
        assert status in (404, 400) and "root:" not in json.dumps(body), (p, body)
        assert body["error"]["code"] in ("unknown_docno", "not_found")
        status, _, body = request(server + "/v1/similar", "POST", {"docno": p.replace("%2F", "/")})
        assert status == 404 and body["error"]["code"] == "unknown_docno"
    status, body = status_and_json(raw(server, b"GET /v1/papers/../../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                b"Connection: close\r\n\r\n"))
    assert status == 404 and "root:" not in json.dumps(body)
    assert request(server + "/v1/papers/388")[0] == 200


def test_slow_clients_do_not_hold_up_the_others(server):
    """Twenty clients that send a request head a byte at a time and never finish, and one whose body
    stalls: the others are answered meanwhile; the stalled body gets 408 after the body timeout."""
    stop = threading.Event()
    socks = []

    def slowloris():
        s = socket.create_connection(addr(server), timeout=30)
        socks.append(s)
        for b in b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n":
            if stop.is_set():
                return
            try:
                s.send(bytes([b]))
            except OSError:
                return
            time.sleep(0.05)
    threads = [threading.Thread(target=slowloris, daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        start = time.monotonic()
        for _ in range(5):
            healthy(server)
        assert time.monotonic() - start < 20  # answered while the slow clients dribble
        # a body that stops halfway: 408 once the body timeout (10 s) passes, others served meanwhile
        with socket.create_connection(addr(server), timeout=60) as s:
            s.sendall(b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 50\r\n\r\n{\"query\": ")
            healthy(server)
            resp = b""
            while b"\r\n\r\n" not in resp or not resp.endswith(b"}"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                resp += chunk
        status, body = status_and_json(resp)
        assert (status, body["error"]["code"]) == (408, "body_timeout")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for s in socks:
            s.close()
    healthy(server)


def test_a_thousand_open_connections_lose_nothing(server):
    """1,000 connections open at once, each sending a search: every one is answered (200), with the
    results a lone request gets; the server answers others throughout."""
    host, port = addr(server)
    alone = {}
    for i in range(5):
        _, _, body = request(f"{server}/v1/search?q=parsing+{i}&k=3")
        alone[i] = [h["docno"] for h in body["results"]]

    async def one(i, opened, go):
        reader, writer = await asyncio.open_connection(host, port)
        opened.append(1)
        await go.wait()
        writer.write(f"GET /v1/search?q=parsing+{i % 5}&k=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=240)
        writer.close()
        return i, data

    async def main():
        opened, go = [], asyncio.Event()
        tasks = [asyncio.create_task(one(i, opened, go)) for i in range(1000)]
        while len(opened) < 1000:
            await asyncio.sleep(0.05)
        # all 1,000 open and idle: another client is still served
        status, _, body = await asyncio.to_thread(request, f"{server}/v1/search?q=parsing+0&k=3")
        assert status == 200 and [h["docno"] for h in body["results"]] == alone[0]
        go.set()
        return await asyncio.gather(*tasks)
    results = asyncio.run(main())
    assert len(results) == 1000
    for i, data in results:
        status, body = status_and_json(data)
        assert status == 200, body
        assert [h["docno"] for h in body["results"]] == alone[i % 5]
    healthy(server)
