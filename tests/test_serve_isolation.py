"""A request of pyterrier-sci serve fails alone.  Text that cannot be written out again (a lone UTF-16
surrogate, ``"\\ud800"`` in JSON) is refused when the request is validated, before it joins a batch (it made
pyarrow raise inside the pipeline call and failed every request batched with it: 500s); and a query that
passes validation but makes the pipeline itself fail costs only its own request: the failed batch runs again
request by request.  The others get what they get in-process."""
import concurrent.futures as cf

import numpy as np
import pyterrier as pt
import pytest
from conftest import needs_data
from serve_helpers import CONFIG, LiveServer, csfcube_service, request, start_cli, stop_cli

from pyterrier_sci.pipeline import build_all
from pyterrier_sci.serve import SearchAPI, ServeSettings

pytestmark = needs_data("csfcube")

WORDS = ("graph kernel corpus lexicon bayes speech vision memory tagging treebank induction alignment embedding "
         "attention summary dialogue").split()
GOOD = [f"{w} models for scientific text" for w in WORDS]


@pytest.fixture(scope="module")
def service():
    return csfcube_service(["bm25"]).load()


def same(got, want):
    assert [h["docno"] for h in got] == [h["docno"] for h in want]
    np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in want], rtol=1e-6)


def concurrently(url, bodies):
    with cf.ThreadPoolExecutor(len(bodies)) as ex:
        return list(ex.map(lambda b: request(url + "/v1/search", "POST", raw=b), bodies))


def test_a_lone_surrogate_is_refused_before_its_batch_and_the_others_are_answered(service):
    """16 good queries and one holding a lone surrogate sent at once to the command's server (batches wait
    up to 300 ms to fill): 16 answers equal to the in-process ones, in batches; one 422 ``bad_query``."""
    proc, url = start_cli(CONFIG, "--pipelines", "bm25", "--max-wait-ms", "300", "--log-level", "warning")
    try:
        _, _, before = request(url + "/v1/stats")
        bodies = [('{"query": "%s", "k": 5}' % q).encode() for q in GOOD]
        bodies.insert(7, b'{"query": "graph \\ud800 x", "k": 5}')
        answers = concurrently(url, bodies)
        _, _, after = request(url + "/v1/stats")
        status, _, batch = request(url + "/v1/batch_search", "POST",
                                   raw=b'{"queries": ["graph kernels", "tree \\udfff banks"], "k": 5}')
        assert (status, batch["error"]["code"]) == (422, "bad_query")
        assert request(url + "/v1/search", "POST", raw=b'{"query": "x", "pipeline": "\\ud800"}')[0] == 422
    finally:
        stop_cli(proc)
    poisoned = answers.pop(7)
    assert poisoned[0] == 422 and poisoned[2]["error"]["code"] == "bad_query", poisoned
    assert "surrogate" in poisoned[2]["error"]["message"] and "Traceback" not in str(poisoned[2])
    for q, (status, _, got) in zip(GOOD, answers):
        assert status == 200, got
        same(got["results"], service.hits(service.run("bm25", [q]), q, 5))
    ran = after["batching"]["queries"] - before["batching"]["queries"]
    batches = after["batching"]["batches"] - before["batching"]["batches"]
    assert ran == 16 and batches < 16 and after["batching"]["retried"] == 0    # batched; the 17th never joined
    assert proc.returncode == 0


def test_a_query_that_makes_the_pipeline_fail_fails_alone(service):
    """A pipeline whose last stage raises for one query ('poisoned'): batched with 16 others, the batch's call
    fails, each request runs again alone; the 16 get what they get in-process (200), the poisoned one a 500
    ``internal_error`` of its own."""
    def stage(res):
        if res["query"].str.contains("poisoned").any():
            raise ValueError("a stage failed on this query")
        return res
    fragile = build_all(CONFIG, ["bm25"])["bm25"] >> pt.apply.generic(stage)
    api = SearchAPI(csfcube_service({"fragile": fragile}).load(), ServeSettings(max_wait_ms=500))
    with LiveServer(api) as srv:
        bodies = [('{"query": "%s", "k": 5}' % q).encode() for q in GOOD]
        bodies.insert(3, b'{"query": "poisoned parsing", "k": 5}')
        answers = concurrently(srv.url, bodies)
    stats = api.batcher.stats
    status, _, bad = answers.pop(3)
    assert (status, bad["error"]["code"]) == (500, "internal_error") and "Traceback" not in str(bad)
    for q, (status, _, got) in zip(GOOD, answers):
        assert status == 200, got
        same(got["results"], service.hits(service.run("bm25", [q]), q, 5))
    assert stats.retried >= 1 and stats.failed == 1 and stats.largest > 1, stats
