"""Reaching Ray: an unreachable address, or one where something other than Ray answers, is one
:class:`ScaleError` naming it within seconds; the ``on_ray`` pipeline component takes its
defaults from the config's ``ray:`` section and a Ray address only from a trusted pipeline."""

import socket
import time

import pytest
from llm_server import ScriptedServer

from pyterrier_sci.pipeline import PipelineError, pipeline
from pyterrier_sci.scale import RayTransformer, ScaleError, check_reachable, init_ray

ray = pytest.importorskip("ray")


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("form", ["127.0.0.1:{p}", "ray://127.0.0.1:{p}"])
def test_unreachable_address_fails_fast(form):
    address = form.format(p=closed_port())
    t0 = time.monotonic()
    with pytest.raises(ScaleError, match="cannot reach the Ray cluster at '" + address.replace(".", r"\.")):
        init_ray(address)
    assert time.monotonic() - t0 < 10
    assert not ray.is_initialized()


def test_unreachable_address_from_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(ScaleError, match="'127.0.0.1:1'"):
        init_ray()
    assert not ray.is_initialized()


def test_http_server_is_not_ray():
    with ScriptedServer() as srv:
        port = srv._httpd.server_address[1]
        with pytest.raises(ScaleError, match="answers, but not as Ray does"):
            check_reachable(f"127.0.0.1:{port}")
    with pytest.raises(ScaleError, match="not a TCP port"):
        check_reachable("127.0.0.1:70000")
    check_reachable("auto")      # left to Ray


CONFIG = {"ray": {"workers": 3, "batch_queries": 5},
          "components": {"judge": {"component": "listwise", "llm": {"model": "m", "cache_dir": ""}}}}


def test_on_ray_component_defaults_and_trust():
    t = pipeline("on_ray(judge)", config=CONFIG)
    assert isinstance(t, RayTransformer)
    assert (t.workers, t.batch_queries, t.address, t.num_cpus) == (3, 5, None, 1.0)
    t = pipeline("on_ray(judge, workers=2, num_cpus=0.5)", config=CONFIG)
    assert (t.workers, t.batch_queries, t.num_cpus) == (2, 5, 0.5)
    with pytest.raises(PipelineError, match="used only when the pipeline is trusted"):
        pipeline("on_ray(judge, address='10.0.0.1:6379')", config=CONFIG)
    t = pipeline("on_ray(judge, address='10.0.0.1:6379')", config=CONFIG, trusted=True)
    assert t.address == "10.0.0.1:6379"
    with pytest.raises(PipelineError, match="unknown keys"):
        pipeline("on_ray(judge)", config={**CONFIG, "ray": {"wokers": 2}})
    with pytest.raises(PipelineError, match="exactly one input"):
        pipeline("on_ray(workers=2)", config=CONFIG)
    with pytest.raises(PipelineError, match="workers"):
        pipeline("on_ray(judge, workers=0)", config=CONFIG)


def test_merge_orders_queries_as_one_process_would():
    import pandas as pd

    from pyterrier_sci.scale import _merge, _split

    inp = pd.DataFrame({"qid": ["q3", "q1", "q1", "q7", "q2", "q2"], "docno": list("abcdef")})
    batches = _split(inp, 2)
    assert [list(b["qid"]) for b in batches] == [["q3", "q1", "q1"], ["q7", "q2", "q2"]]
    sort = [b.sort_values("qid", kind="stable") for b in batches]           # a transformer that sorts
    assert list(_merge(sort, batches)["qid"]) == ["q1", "q1", "q2", "q2", "q3", "q7"]
    assert list(_merge(batches, batches)["docno"]) == list("abcdef")       # one that keeps the order
    assert list(_merge(sort, batches, "input")["docno"]) == list("abcdef")
    single = _split(inp, 1)                                                 # one query a batch: no evidence
    assert list(_merge(single, single)["docno"]) == list("abcdef")
    assert list(_merge(single, single, "qid")["qid"]) == ["q1", "q1", "q2", "q2", "q3", "q7"]
    with pytest.raises(PipelineError, match="must be a mapping"):
        pipeline("on_ray(judge)", config={**CONFIG, "ray": 4})


# -- issue 31 item 11: ray:// addresses (Ray Client) ------------------------------------------------
def test_ray_client_packages_are_installed():
    """The ``scale`` extra installs ``ray[client]`` (grpcio), which ``ray://`` addresses need: Ray's
    own check (the one behind "Ray Client requires pip package `ray[client]`") passes."""
    import grpc  # noqa: F401
    import ray.util.client  # noqa: F401
    from ray.core.generated import ray_client_pb2_grpc  # noqa: F401
    try:
        from ray._private.utils import get_ray_client_dependency_error  # Ray's own check (2.x)
    except ImportError:
        return
    assert get_ray_client_dependency_error() is None


class _Http2Silent:
    """Accepts connections, answers the HTTP/2 preface with a SETTINGS frame (as gRPC servers do),
    then never answers a request: Ray alone waits for it without end."""

    def __enter__(self):
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []

        def serve():
            while True:
                try:
                    c, _ = self.sock.accept()
                except OSError:
                    return
                self.conns.append(c)
                try:
                    c.recv(1024)
                    c.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                except OSError:
                    pass

        threading.Thread(target=serve, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.sock.close()
        for c in self.conns:
            c.close()


def test_a_ray_client_address_where_no_ray_client_server_answers_fails_fast(monkeypatch):
    import pyterrier_sci.scale as scale
    monkeypatch.setattr(scale, "CONNECT_TIMEOUT", 1.0)
    with _Http2Silent() as srv:
        address = f"ray://127.0.0.1:{srv.port}"
        t0 = time.monotonic()
        with pytest.raises(ScaleError) as err:
            init_ray(address)
        took = time.monotonic() - t0
    msg = str(err.value).splitlines()[0]
    assert f"cannot reach the Ray cluster at '{address}'" in msg and "Ray Client" in msg, msg
    assert "requires pip package" not in msg and took < 5
    assert not ray.is_initialized()


def test_a_ray_client_address_without_the_client_packages_is_one_line_naming_it(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "grpc", None)   # as without ray[client]
    with pytest.raises(ScaleError) as err:
        init_ray("ray://head.example:10001")
    msg = str(err.value)
    assert "\n" not in msg.strip() and "'ray://head.example:10001'" in msg and "pyterrier-sci[scale]" in msg, msg
    assert not ray.is_initialized()


# -- issue 31 item 15: a local Ray starts without notices ---------------------------------------------
def test_starting_a_local_ray_prints_nothing():
    import subprocess
    import sys
    code = ("import ray\nfrom pyterrier_sci.scale import init_ray\n"
            "assert init_ray(num_cpus=1)\nray.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Token authentication" not in out.stderr and out.stdout == "", out.stderr[-2000:]


@pytest.mark.parametrize("address, says", [("ray://nonsense", "names no port"), ("ray://", "names no host"),
                                           ("ray://[::1]", "names no port"), ("ray://:10001", "names no host"),
                                           ("ray://nonsense.invalid:10001", "has no address")])
def test_a_ray_client_address_that_cannot_answer_is_refused_within_5_s(address, says):
    """Issue 55, item 6: ``ray://nonsense`` and ``ray://`` took Ray Client's 31 s connection timeout."""
    start = time.perf_counter()
    with pytest.raises(ScaleError) as e:
        init_ray(address)
    assert time.perf_counter() - start < 5
    msg = str(e.value)
    assert f"'{address}'" in msg and says in msg and "\n" not in msg, msg
