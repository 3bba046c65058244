"""Stopping pyterrier-sci serve, end to end (the command in a subprocess): SIGTERM and SIGINT let the requests in
flight finish, refuse new connections, abandon a pipeline call still running when the grace period ends and
exit 0 within it; under Ray Serve the same, with the command's handler in place after Ray's, and the local Ray
instance's ports on loopback only.  The long pipeline calls are real: an LLM re-ranker waiting for a slow
OpenAI-compatible server on loopback (``pyterrier_sci.llm.loopback``)."""
import concurrent.futures as cf
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_data
from serve_helpers import free_port, llm_config, request, slow_llm, start_cli

from pyterrier_sci.llm.loopback import ScriptedServer

pytestmark = needs_data("csfcube")


def wait_for_calls(llm, n, timeout=60):
    deadline = time.monotonic() + timeout
    while llm.calls < n:
        assert time.monotonic() < deadline, f"the LLM server got {llm.calls} calls, not {n}"
        time.sleep(0.02)


def cache_is_whole(directory):
    files = [p for p in Path(directory).rglob("*") if p.is_file() and p.suffix in (".sqlite", ".sqlite3", ".db")]
    for f in files:
        with sqlite3.connect(f) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f
    return files


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_drains_abandons_a_long_call_and_exits_0_within_the_grace_period(sig, tmp_path):
    """Two requests in flight when the signal comes: one whose pipeline call ends 0.5 s later (answered 200),
    one whose call would take 120 s (answered 504 at its 2 s deadline); new connections are refused; the long
    call is abandoned when the 3.5 s grace period ends and the process exits 0 (it kept running >120 s, or ended
    by the signal: -15)."""
    with ScriptedServer(slow_llm({"zebra": 0.5, "quokka": 120.0})) as llm:
        config = llm_config(tmp_path, llm.base_url)
        proc, url = start_cli(config, "--pipelines", "LLM", "LLM2", "--workers", "2", "--deadline", "2",
                              "--grace", "3.5", "--log-level", "warning")
        try:
            warm = llm.calls                       # the warm-up query of each pipeline
            with cf.ThreadPoolExecutor(2) as ex:
                quick = ex.submit(request, url + "/v1/search", "POST",
                                  {"query": "zebra dependency parsing", "k": 3, "pipeline": "LLM"})
                slow = ex.submit(request, url + "/v1/search", "POST",
                                 {"query": "quokka topic models", "k": 3, "pipeline": "LLM2"})
                wait_for_calls(llm, warm + 2)      # both pipeline calls wait for the LLM server
                signalled = time.monotonic()
                proc.send_signal(sig)
                time.sleep(0.3)
                with pytest.raises(OSError):       # no new connection once stopping
                    request(url + "/health", timeout=5)
                quick, slow = quick.result(), slow.result()
            code = proc.wait(30)
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    log = "".join(proc.log)
    assert quick[0] == 200 and len(quick[2]["results"]) == 3, quick
    assert slow[0] == 504 and slow[2]["error"]["code"] == "deadline_exceeded", slow
    assert code == 0, log[-3000:]
    assert took < 3.5 + 3, took
    assert "1 pipeline call(s) still running after the 3.5 s grace period abandoned" in log and "Traceback" not in log
    assert cache_is_whole(tmp_path / "llm-cache")      # the drained call's answer was cached whole


@pytest.mark.skipif(os.environ.get("PYTERRIER_SCI_SKIP_RAY") == "1", reason="Ray tests disabled")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_under_ray_serve_drains_exits_0_and_ray_listens_on_loopback_only(sig, tmp_path):
    """``serve --ray-replicas 1`` on SIGTERM or Ctrl-C with a request in flight: the request is answered (200),
    the command deletes its application, stops the Ray Serve and Ray it started, and exits 0 (Ray's own SIGTERM
    handler, installed by ray.init after the command's, exited 15 and cut the request).  Meanwhile every port the
    local Ray instance opened is a loopback one (Ray Serve's replica adds one on every address: see below)."""
    pytest.importorskip("ray.serve")
    psutil = pytest.importorskip("psutil")
    port = free_port()
    log_path = tmp_path / "serve.log"
    env = dict(os.environ, PYTHONSAFEPATH="1", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    url = f"http://127.0.0.1:{port}"
    with ScriptedServer(slow_llm({"zebra": 3.0})) as llm:
        config = llm_config(tmp_path, llm.base_url, {"LLM": "bm25 % 4 >> text >> judge"})
        with open(log_path, "w") as log:    # a file, not a pipe: Ray's processes cannot hold the test's reads open
            proc = subprocess.Popen([sys.executable, "-m", "pyterrier_sci.cli", "serve", config, "--pipelines", "LLM",
                                     "--ray-replicas", "1", "--port", str(port), "--no-mcp"], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if request(url + "/ready", timeout=5)[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(1)
            assert proc.poll() is None, log_path.read_text()[-3000:]
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            listening = []
            for p in tree:
                try:
                    listening += [(p.name(), c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet")
                                  if c.status == psutil.CONN_LISTEN]
                except psutil.NoSuchProcess:
                    pass
            names = {n for n, _, _ in listening}
            assert {"gcs_server", "raylet"} <= names, listening
            public = [x for x in listening if x[1] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
            # one exception, Ray Serve's and not Ray's: a replica's inter-deployment gRPC server is bound to
            # "[::]:0" in its code (ray/serve/_private/replica.py), with no setting (docs/serve.md says so)
            assert [name for name, _, _ in public] in ([], ["ray::ServeReplica:pyterrier-sci:pyterrier-sci"]), public
            warm = llm.calls
            with cf.ThreadPoolExecutor(1) as ex:
                inflight = ex.submit(request, url + "/v1/search", "POST", {"query": "zebra parsing", "k": 3},
                                     timeout=120)
                wait_for_calls(llm, warm + 1)
                proc.send_signal(sig)
                status, _, got = inflight.result()
            assert status == 200 and len(got["results"]) == 3, got
            assert proc.wait(120) == 0, log_path.read_text()[-3000:]
            text = log_path.read_text()
            assert "stopping: the replicas finish the requests they hold" in text and "\nstopped\n" in text
            assert "Traceback" not in text, text[-3000:]
            with pytest.raises(OSError):
                request(url + "/health", timeout=5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
