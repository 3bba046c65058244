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
