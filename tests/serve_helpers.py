"""Shared by the serve tests: the CSFCube service of pipelines/csfcube.yaml, a live uvicorn server in a
thread, the CLI server in a subprocess, and a small HTTP client on the standard library."""
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "pipelines" / "csfcube.yaml")
#: the served pipelines of the tests: BM25 over the whole corpus (component bm25 of csfcube.yaml), and
#: BM25's top 20 re-scored by MiniLM (torch fp32: no int8 calibration to wait for)
RERANK = "bm25 % 20 >> dense(model='default')"
PIPELINES = ["bm25", f"Rerank={RERANK}"]


def csfcube_service(pipelines=None, **kw):
    from pyterrier_sci.serve import SearchService
    return SearchService(CONFIG, pipelines or PIPELINES, **kw)


def request(url, method="GET", body=None, headers=None, timeout=60, raw=None):
    """``(status, headers, parsed JSON or text)``; 4xx/5xx are returned, not raised."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, h, text = r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        status, h, text = e.code, dict(e.headers), e.read().decode()
    try:
        return status, h, json.loads(text)
    except ValueError:
        return status, h, text


class LiveServer:
    """``create_app(api)`` served in a thread on a free loopback port by the server's own uvicorn configuration
    (its guarded protocol and limits)."""

    def __init__(self, api, **uvicorn_kw):
        from pyterrier_sci.serve.app import create_app
        from pyterrier_sci.serve.http_server import stopping_server, uvicorn_config
        self.api = api
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(2048)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn_config(create_app(api), api.settings, log_level="warning", **uvicorn_kw)
        self.server = stopping_server(cfg, api)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if request(self.url + "/ready", timeout=5)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("the server did not become ready")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(60)

    def __exit__(self, *exc):
        self.stop()
        self.sock.close()


def start_cli(*args, env=None):
    """``pyterrier-sci serve ARGS --port 0`` in a subprocess; returns ``(process, base URL)`` once it listens."""
    e = dict(os.environ, PYTHONSAFEPATH="1")
    e.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "pyterrier_sci.cli", "serve", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    deadline = time.monotonic() + 300
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise AssertionError(f"serve ended ({proc.returncode}): {''.join(lines)[-3000:]}")
            continue
        lines.append(line)
        m = re.search(r"serving on (http://\S+?)/ ", line)
        if m:
            threading.Thread(target=_drain, args=(proc.stderr, lines), daemon=True).start()
            proc.log = lines
            return proc, m.group(1)
    proc.kill()
    raise AssertionError("serve did not start: " + "".join(lines)[-3000:])


def stop_cli(proc, timeout=60):
    """SIGTERM to a server started by :func:`start_cli`; waits for it to exit (killed after ``timeout`` s);
    returns its exit status."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode


def _drain(stream, lines):
    for line in stream:
        lines.append(line)


@contextlib.contextmanager
def devtools_chromium(chromium, profile, url="about:blank", extra_args=(), page_url=None):
    """Headless Chromium with its DevTools port open on ``url``; yields the DevTools page (its ``webSocketDebuggerUrl``)
    whose URL starts with ``page_url`` (any page when None), and ends Chromium afterwards."""
    proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                             "--disable-component-update", "--disable-sync", "--no-first-run", *extra_args,
                             f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1280,900",
                             url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None, "Chromium did not start"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        while True:
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            pages = [t for t in targets if t["type"] == "page" and t["url"].startswith(page_url or "")]
            if pages:
                break
            assert time.monotonic() < deadline, "Chromium opened no page"
            time.sleep(0.1)
        yield pages[0]
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def slow_llm(delays):
    """A responder for the loopback LLM server (``pyterrier_sci.llm.loopback``) of a listwise re-ranker: it
    answers a ranking, after ``delays[word]`` seconds when the prompt holds ``word`` (a query's marker)."""
    from pyterrier_sci.llm.loopback import Reply, prompt_of

    def oracle(kind, body):
        prompt = prompt_of(kind, body)
        delay = max([secs for word, secs in delays.items() if word in prompt], default=0.0)
        return Reply("[2] > [1]", delay=delay)
    return oracle


def llm_config(directory, base_url, pipelines=None):
    """A pipeline file (written in ``directory``) whose pipelines re-rank CSFCube's BM25 top results with the
    listwise LLM re-ranker against ``base_url``: a pipeline call lasts as long as the LLM server takes."""
    import yaml
    config = {"dataset": "irds:sci/csfcube",
              "components": {"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                             "judge": {"component": "listwise", "text_field": "abstract"}},
              "pipelines": pipelines or {"LLM": "bm25 % 4 >> text >> judge", "LLM2": "bm25 % 3 >> text >> judge"},
              "llm": {"base_url": base_url, "model": "test-model", "cache_dir": str(Path(directory) / "llm-cache"),
                      "mode": "completion", "max_retries": 1, "backoff": 0.01, "backoff_max": 0.02,
                      "progress": False, "timeout": 300}}
    path = Path(directory) / "llm.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)
