"""LLM stages on Ray (``pyterrier_sci.scale.on_ray``) against the loopback server: two workers give
the one-process results in the same row order, usage counts come back to the driver's component,
the cache service holds one entry per distinct request, a rerun sends no request, and a run that
fails midway keeps every finished response."""

import json
import os

import pandas as pd
import pytest
from llm_server import Reply, ScriptedServer, prompt_of, yes_no

from pyterrier_sci import scale
from pyterrier_sci.llm import ResponseCache, usage_report
from pyterrier_sci.plugins.mir import MIRPointwise
from pyterrier_sci.scale import RayTransformer, ScaleError, init_ray, on_ray

ray = pytest.importorskip("ray")

GRADES = {"d0": 0, "d1": 3, "d2": 0, "d3": 1, "d4": 2}
QIDS = [f"q{i}" for i in (3, 1, 7, 2, 5, 4, 6, 0)]   # not sorted: the output order is the transformer's


def frame(qids=QIDS):
    return pd.DataFrame([{"qid": q, "query": f"proposal {q} about graph neural networks", "docno": d,
                          "text": f"paper {d} of {q} grade={g}" + (" [rel]" if g >= 2 else ""),
                          "score": 10.0 - i, "rank": i}
                         for q in qids for i, (d, g) in enumerate(GRADES.items())])


def oracle(kind, body):
    return yes_no("[rel]" in prompt_of(kind, body).rsplit("Candidate paper", 1)[-1], 0.8)


def settings(srv, cache, **kw):
    s = {"base_url": srv.base_url, "model": "test-model", "cache_dir": str(cache), "mode": "completion",
         "backoff": 0.01, "backoff_max": 0.02, "max_retries": 0, "progress": False, "timeout": 10,
         "concurrency": 2}
    s.update(kw)
    return s


def distinct(requests):
    return {json.dumps(body, sort_keys=True) for _, body in requests}


@pytest.fixture(scope="module")
def local_ray():
    init_ray(num_cpus=2)     # as the toolkit starts it (a JVM's signal handlers survive it)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def server():
    with ScriptedServer(oracle) as srv:
        yield srv


def test_two_workers_equal_one_process_and_rerun_makes_no_calls(local_ray, server, tmp_path, monkeypatch):
    one = MIRPointwise(settings(server, tmp_path / "one"))
    expected = one.transform(frame())
    assert server.calls == len(QIDS) * len(GRADES)
    server.reset()

    judge = MIRPointwise(settings(server, tmp_path / "ray"))
    t = on_ray(judge, workers=2, batch_queries=3)
    got = t.transform(frame())
    pd.testing.assert_frame_equal(got, expected)                  # same rows, same order
    n = len(QIDS) * len(GRADES)
    assert server.calls == n == len(distinct(server.requests))
    assert len(ResponseCache(tmp_path / "ray")) == len(distinct(server.requests))
    # the workers' counts are added back into the driver's component
    assert (judge.usage.calls, judge.usage.cache_hits, judge.usage.requests) == (n, 0, n)
    assert judge.usage.prompt_tokens == one.usage.prompt_tokens > 0
    report = usage_report(t)                                      # found through the wrapper
    assert list(report["calls"]) == [n] and list(report["prompt_tokens"]) == [one.usage.prompt_tokens]

    server.reset()
    again = t.transform(frame())
    assert server.calls == 0                                      # the rerun sends nothing
    pd.testing.assert_frame_equal(again, expected)
    assert (judge.usage.calls, judge.usage.cache_hits) == (n, n)

    # t's two workers hold both CPUs: a third worker cannot start, which is an error, not a hang
    monkeypatch.setattr(scale, "START_TIMEOUT", 2.0)
    with pytest.raises(ScaleError, match="1 of 1 on_ray workers did not start within 2 s"):
        on_ray(judge, workers=1).transform(frame())
    t.close()


def test_interrupted_run_keeps_finished_responses(local_ray, server, tmp_path):
    broken = {"on": True}

    def failing(kind, body):
        if broken["on"] and "paper d3 of q6" in prompt_of(kind, body):
            return Reply(status=400)                              # not retried: the run stops
        return oracle(kind, body)

    server.responder = failing
    judge = MIRPointwise(settings(server, tmp_path / "c"))
    t = on_ray(judge, workers=2, batch_queries=2)
    with pytest.raises(Exception, match="HTTP 400"):
        t.transform(frame())
    answered = distinct(server.requests) - {json.dumps(b, sort_keys=True) for k, b in server.requests
                                            if "paper d3 of q6" in prompt_of(k, b)}
    assert len(ResponseCache(tmp_path / "c")) == len(answered) > 0   # every finished response is kept

    broken["on"] = False
    server.reset()
    out = t.transform(frame())
    again = distinct(server.requests)
    assert not (again & answered)                                 # nothing answered before is asked again
    assert len(again) + len(answered) == len(QIDS) * len(GRADES)
    assert len(out) == len(frame())


#: runs in a row of the interrupted stage: the old code lost an answer within 10 (at run 7 here); 50 in a row
#: passed with PYTERRIER_SCI_INTERRUPTED_RUNS=50 (115 s), the suite runs 15 (about 35 s)
INTERRUPTED_RUNS = int(os.environ.get("PYTERRIER_SCI_INTERRUPTED_RUNS", "15"))


def test_interrupted_run_keeps_finished_responses_run_after_run(local_ray, server, tmp_path):
    """Issue 55, item 1: the test above failed about one run in three (31 prompts answered, 29 cached): the
    driver ended the other worker while an answer it had received was on its way to the cache.  Now the other
    workers send no new call and finish the calls in flight before they are ended."""
    def failing(kind, body):
        if "paper d3 of q6" in prompt_of(kind, body):
            return Reply(status=400)
        return oracle(kind, body)

    server.responder = failing
    for run in range(INTERRUPTED_RUNS):
        server.reset()
        cache = tmp_path / f"c{run}"
        t = on_ray(MIRPointwise(settings(server, cache)), workers=2, batch_queries=1)
        with pytest.raises(Exception, match="HTTP 400"):
            t.transform(frame())
        t.close()
        answered = distinct(server.requests) - {json.dumps(b, sort_keys=True) for k, b in server.requests
                                                if "paper d3 of q6" in prompt_of(k, b)}
        assert len(ResponseCache(cache)) == len(answered) > 0, f"run {run}"


def test_a_worker_killed_mid_run_loses_only_its_own_call_in_flight(local_ray, server, tmp_path):
    """A worker is SIGKILLed while its request waits for the answer: the stage fails naming the dead worker, and
    every answer the server gave the other worker is in the cache; a rerun asks only what was never answered."""
    import signal

    psutil = pytest.importorskip("psutil")
    killed = []

    def killing(kind, body):
        if "paper d3 of q6" in prompt_of(kind, body) and not killed:
            port = server.client.address[1]
            pids = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.pid}
            pids.discard(os.getpid())
            assert len(pids) == 1, pids
            killed.append(pids.pop())
            os.kill(killed[0], signal.SIGKILL)
        return oracle(kind, body)

    server.responder = killing
    cache = tmp_path / "c"
    t = on_ray(MIRPointwise(settings(server, cache, concurrency=1)), workers=2, batch_queries=1)
    with pytest.raises(ScaleError, match="worker died"):
        t.transform(frame())
    t.close()
    target = {json.dumps(b, sort_keys=True) for k, b in server.requests if "paper d3 of q6" in prompt_of(k, b)}
    answered = distinct(server.requests) - target
    assert killed and len(ResponseCache(cache)) == len(answered) > 0
    server.reset()
    t = on_ray(MIRPointwise(settings(server, cache, concurrency=1)), workers=2, batch_queries=1)
    assert len(t.transform(frame())) == len(frame())
    assert not (distinct(server.requests) & answered) and target <= distinct(server.requests)
    t.close()


def test_on_ray_checks(local_ray, server, tmp_path):
    judge = MIRPointwise(settings(server, tmp_path / "c"))
    with pytest.raises(ScaleError, match="workers must be"):
        on_ray(judge, workers=0)
    with pytest.raises(ScaleError, match="on_ray runs a pt.Transformer"):
        on_ray(lambda df: df)
    with pytest.raises(ScaleError, match="lacks"):
        on_ray(judge).transform(pd.DataFrame({"docno": ["d1"]}))
    with pytest.raises(ScaleError, match="3 workers x 1 CPUs, but the Ray cluster has 2"):
        RayTransformer(judge, workers=3).transform(frame())
    assert server.calls == 0


def test_a_running_ray_passes_the_reachability_check(local_ray):
    from pyterrier_sci.scale import check_reachable
    check_reachable(ray.get_runtime_context().gcs_address)   # Ray's gRPC answers the probe


def test_one_budget_for_all_workers(local_ray, server, tmp_path):
    """A budget of 10 calls on 2 workers sends exactly 10 requests (the ledger lives in the cache
    service, not per worker), stops the run with the budget error, keeps the 10 responses, and the
    driver's ledger knows what the workers spent; a rerun with a larger budget sends only the rest."""
    from pyterrier_sci.llm import LLMBudgetExceeded
    from pyterrier_sci.llm.budget import ledger_for
    judge = MIRPointwise(settings(server, tmp_path / "c", budget={"calls": 10}))
    with pytest.raises(LLMBudgetExceeded, match="budget of 10 calls"):
        on_ray(judge, workers=2, batch_queries=1)(frame())
    assert server.calls == 10
    assert len(ResponseCache(tmp_path / "c")) == 10
    assert ledger_for(judge.settings).spent()["calls"] == 10
    server.reset()
    total = len(frame())
    bigger = MIRPointwise(settings(server, tmp_path / "c", budget={"calls": total}))
    out = on_ray(bigger, workers=2, batch_queries=1)(frame())
    assert server.calls == total - 10 and len(out) == total
    assert ledger_for(bigger.settings).spent()["calls"] == total - 10   # cache hits are free


def test_any_transformer_keeps_its_row_order(local_ray):
    import pyterrier as pt

    def tag(df):   # keeps the input order (not sorted by qid) and says which process ran it
        import os
        return df.assign(score=df["score"] * 2, pid=os.getpid())

    inp = frame()
    t = on_ray(pt.apply.generic(tag), workers=2, batch_queries=1, num_cpus=0.5)
    try:
        out = t.transform(inp)
    finally:
        t.close()
    pd.testing.assert_frame_equal(out.drop(columns="pid"), tag(inp).drop(columns="pid"))
    assert out["pid"].nunique() == 2                             # both workers took batches
