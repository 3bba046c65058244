"""A small deterministic OpenAI-compatible server on loopback: a testing utility for code that calls
an LLM (the toolkit's own tests and ``benchmarks/bench_llm.py`` use it; third-party plugins may too).

Serves ``POST /v1/chat/completions`` and ``POST /v1/completions`` with scripted answers: a queue
of :class:`Reply` objects is used first, then ``responder(kind, body) -> Reply | str``.  Replies
can be HTTP errors (429, 500), delayed, malformed (a body that is not JSON, or any JSON ``body``
of a wrong shape), empty, and can carry log-probabilities.  Hostile servers for the hardening
tests: bodies trickled a byte at a time (``trickle``, also the headers), huge or gzip-bombed
bodies (``pad``, ``gzip``), answers that echo the request headers (``echo_headers``).  Every
request is recorded (``server.requests``; its headers in ``server.headers``).  Standard library only.

    from pyterrier_sci.llm import LLMClient
    from pyterrier_sci.llm.loopback import ScriptedServer

    with ScriptedServer(responder=lambda kind, body: "Yes") as srv:
        client = LLMClient({"base_url": srv.base_url, "cache_dir": ""})

``python -m pyterrier_sci.llm.loopback --latency 0.05`` runs one that answers " Yes" until killed.
"""
from __future__ import annotations

import gzip
import json
import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Union


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    top_logprobs: Optional[List[Dict[str, float]]] = None   # per position: token -> logprob
    raw: Optional[str] = None                                # a raw body (e.g. malformed JSON)
    headers: Dict[str, str] = field(default_factory=dict)
    body: Any = None            # a whole JSON body of any shape (e.g. {"choices": [None]})
    echo_headers: bool = False  # the answer's content is the request's headers
    trickle: float = 0.0        # seconds between single bytes of the body
    trickle_headers: bool = False  # trickle the status line and headers too
    pad: int = 0                # bytes of padding added to the JSON body (a huge answer)
    gzip: bool = False          # send the body gzip-compressed (content-encoding: gzip)


def yes_no(yes: bool, p: float = 0.9, space: bool = True) -> Reply:
    """A completion answer " Yes"/" No" whose first position has both alternatives."""
    y, n = (" Yes", " No") if space else ("Yes", "No")
    top = {y: math.log(p if yes else 1 - p), n: math.log(1 - p if yes else p), "\n": math.log(0.001)}
    return Reply(content=y if yes else n, top_logprobs=[top])


def choice_reply(answer: str, p: float = 0.9) -> Reply:
    other = "B" if answer == "A" else "A"
    return Reply(content=" " + answer, top_logprobs=[{" " + answer: math.log(p), " " + other: math.log(1 - p)}])


def prompt_of(kind: str, body: dict) -> str:
    if kind == "chat":
        return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    p = body.get("prompt", "")
    return p if isinstance(p, str) else "\n".join(map(str, p))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        srv: "ScriptedServer" = self.server.owner
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if srv.tokenizer is not None and self.path in ("/tokenize", "/extras/tokenize"):
            with srv._lock:
                srv.requests.append(("tokenize", body))
            reply = srv.tokenizer(self.path, body)
            reply = reply if isinstance(reply, Reply) else Reply(body=reply)
            return self._send(reply.status, json.dumps(reply.body), reply.headers, reply)
        if self.path.endswith("/chat/completions"):
            kind = "chat"
        elif self.path.endswith("/completions"):
            kind = "completion"
        else:
            return self._send(404, json.dumps({"error": {"message": "not found"}}))
        with srv._lock:
            srv.headers.append(dict(self.headers.items()))
        srv.client.address = self.client_address   # whom the responder is answering (this handler's thread)
        reply = srv._next(kind, body)
        if reply.echo_headers:
            reply.content = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        wait = srv.latency + reply.delay
        if wait:
            time.sleep(wait)
        if reply.raw is not None:
            return self._send(reply.status, reply.raw, reply.headers, reply)
        if reply.status != 200:
            err = {"error": {"message": f"scripted error {reply.status}", "type": "scripted", "code": reply.status}}
            if reply.echo_headers:
                err["error"]["message"] = reply.content
            return self._send(reply.status, json.dumps(err), reply.headers, reply)
        out = reply.body if reply.body is not None else _body(kind, body, reply)
        text = json.dumps(out)
        if reply.pad:
            text = text[:-1] + ', "padding": "' + "x" * reply.pad + '"}' if text.endswith("}") else text
        return self._send(200, text, reply.headers, reply)

    def _send(self, status, text, headers=None, reply: Optional[Reply] = None):
        data = text.encode("utf8")
        headers = dict(headers or {})
        if reply is not None and reply.gzip:
            data = gzip.compress(data)
            headers["content-encoding"] = "gzip"
        try:
            if reply is not None and reply.trickle_headers:
                head = (f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\n"
                        f"content-length: {len(data)}\r\n\r\n").encode()
                for i in range(len(head)):
                    self.wfile.write(head[i:i + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle)
            else:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
            if reply is not None and reply.trickle:
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def _body(kind: str, req: dict, reply: Reply) -> dict:
    prompt = prompt_of(kind, req)
    usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": max(1, len(reply.content.split())),
             "total_tokens": 0}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    base = {"id": "cmpl-test", "created": int(time.time()), "model": req.get("model", "test"), "usage": usage}
    tops = reply.top_logprobs or []
    if kind == "chat":
        lp = None
        if req.get("logprobs") and tops:
            lp = {"content": [{"token": max(t, key=t.get), "logprob": max(t.values()), "bytes": None,
                               "top_logprobs": [{"token": k, "logprob": v, "bytes": None} for k, v in t.items()]}
                              for t in tops]}
        return {**base, "object": "chat.completion", "choices": [{
            "index": 0, "finish_reason": "stop", "logprobs": lp,
            "message": {"role": "assistant", "content": reply.content}}]}
    lp = None
    if req.get("logprobs") and tops:
        toks = [max(t, key=t.get) for t in tops]
        lp = {"tokens": toks, "token_logprobs": [max(t.values()) for t in tops], "top_logprobs": tops,
              "text_offset": list(range(len(toks)))}
    return {**base, "object": "text_completion", "choices": [{
        "index": 0, "finish_reason": "stop", "logprobs": lp, "text": reply.content}]}


class ScriptedServer:
    """Args:
        responder: ``(kind, body) -> Reply | str`` for requests not answered by the queue;
            ``kind`` is ``"chat"`` or ``"completion"``.  Default: empty answers.
        latency: seconds added to every reply (a server with fixed latency).
        tokenizer: ``(path, body) -> Reply | dict`` answering llama.cpp's ``POST /tokenize`` and
            llama-cpp-python's ``POST /extras/tokenize`` (e.g. ``{"tokens": [...]}``, or a trickled
            :class:`Reply`); default: those paths are 404, as on OpenAI's servers.  Its requests are
            recorded with kind ``"tokenize"``.
    """

    def __init__(self, responder: Optional[Callable[[str, dict], Union[Reply, str]]] = None, latency: float = 0.0,
                 tokenizer: Optional[Callable[[str, dict], Union[Reply, dict]]] = None):
        self.responder = responder or (lambda kind, body: Reply(""))
        self.latency = latency
        self.tokenizer = tokenizer
        self.queue: deque = deque()
        self.requests: List[tuple] = []
        self.headers: List[Dict[str, str]] = []
        #: ``client.address``: the (host, port) of the request being answered, read by a responder in its thread
        self.client = threading.local()
        self._lock = threading.Lock()
        self._active = 0
        self.max_active = 0
        self._httpd = None
        self._thread = None

    def script(self, *replies: Union[Reply, str]) -> "ScriptedServer":
        """Queues replies answered first, in order."""
        for r in replies:
            self.queue.append(r if isinstance(r, Reply) else Reply(r))
        return self

    def _next(self, kind: str, body: dict) -> Reply:
        with self._lock:
            self.requests.append((kind, body))
            r = self.queue.popleft() if self.queue else None
        if r is None:
            r = self.responder(kind, body)
        return r if isinstance(r, Reply) else Reply(str(r))

    @property
    def calls(self) -> int:
        return len(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers.clear()
            self.queue.clear()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self, port: int = 0) -> "ScriptedServer":
        """Serves on ``127.0.0.1:port`` (0: a free port) in a daemon thread."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":  # a fixed-latency server for manual experiments
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    s = ScriptedServer(lambda k, b: yes_no(True), latency=a.latency).start(a.port)
    print(s.base_url, flush=True)
    threading.Event().wait()
