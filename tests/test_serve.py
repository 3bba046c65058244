"""pyterrier-sci serve: the CLI server on pipelines/csfcube.yaml answers as the same pipelines called
in-process; concurrent requests are batched; the bounded queue, deadlines, graceful shutdown, the bearer
token, rate limits and request expressions; Ray Serve with one replica (stopping it: test_serve_stop.py)."""
import concurrent.futures as cf
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyterrier as pt
import pytest
from conftest import needs_data
from serve_helpers import CONFIG, PIPELINES, LiveServer, csfcube_service, request, start_cli, stop_cli

from pyterrier_sci.pipeline import build_all
from pyterrier_sci.serve import SearchAPI, ServeSettings

pytestmark = needs_data("csfcube")

QUERIES = ["sentiment analysis of movie reviews", "dependency parsing with neural networks",
           "topic models for scientific literature"]


@pytest.fixture(scope="module")
def service():
    return csfcube_service().load()


@pytest.fixture(scope="module")
def cli_server():
    proc, url = start_cli(CONFIG, "--pipelines", *PIPELINES, "--max-wait-ms", "100", "--log-level", "warning")
    yield url
    stop_cli(proc)


def expected(service, name, query, k, exclude=()):
    return service.hits(service.run(name, [query]), query, k, exclude)


def same_hits(got, want):
    assert [h["docno"] for h in got] == [h["docno"] for h in want]
    np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in want], rtol=1e-5, atol=1e-6)
    assert [h["rank"] for h in got] == list(range(len(want)))
    assert [h["title"] for h in got] == [h["title"] for h in want]


def test_search_answers_as_in_process(cli_server, service):
    status, _, ready = request(cli_server + "/ready")
    assert status == 200 and ready["pipelines"] == ["bm25", "Rerank"] and ready["load_seconds"] > 0
    _, _, desc = request(cli_server + "/v1/pipelines")
    by_name = {p["name"]: p for p in desc["pipelines"]}
    assert by_name["bm25"]["components"]["bm25"] == {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4}
    assert "dense(model='default')" in by_name["Rerank"]["expression"] and desc["dataset"] == "irds:sci/csfcube"
    for name in ("bm25", "Rerank"):
        for q in QUERIES:
            status, _, got = request(cli_server + "/v1/search", "POST", {"query": q, "k": 10, "pipeline": name})
            assert status == 200, got
            assert got["pipeline"] == name and got["query"] == q and len(got["results"]) == 10
            same_hits(got["results"], expected(service, name, q, 10))
            assert all(h["snippet"] and len(h["snippet"]) <= 302 for h in got["results"])
    # GET gives the same as POST
    _, _, g = request(cli_server + "/v1/search?q=" + QUERIES[0].replace(" ", "+") + "&k=5&pipeline=bm25")
    same_hits(g["results"], expected(service, "bm25", QUERIES[0], 5))


def test_paper_record_similar_papers_and_citations(cli_server, service):
    import ir_datasets
    doc = ir_datasets.load("sci/csfcube").docs_store().get("388")
    status, _, rec = request(cli_server + "/v1/papers/388")
    assert status == 200 and rec["title"] == doc.title and rec["abstract"] == doc.abstract and rec["docno"] == "388"
    # similar papers: the paper's own title and abstract as the query, itself left out
    status, _, sim = request(cli_server + "/v1/similar?docno=388&k=5&pipeline=bm25")
    assert status == 200 and sim["paper"] == "388"
    text = " ".join(f"{doc.title} {doc.abstract}".split())
    want = expected(service, "bm25", text, 5, exclude=["388"])
    same_hits(sim["results"], want)
    full = service.run("bm25", [text])
    assert full.sort_values("rank")["docno"].iloc[0] == "388"        # it would have been first
    assert "388" not in [h["docno"] for h in sim["results"]]
    status, _, same = request(cli_server + "/v1/search", "POST", {"paper": "388", "k": 5, "pipeline": "bm25"})
    assert same["results"] == sim["results"]
    passage = "Classifying movie reviews as thumbs up or thumbs down by the polarity of their subjective sentences"
    status, _, cite = request(cli_server + "/v1/suggest_citations", "POST", {"passage": passage, "k": 3})
    assert status == 200
    same_hits(cite["results"], expected(service, "bm25", passage, 3))


def test_batch_search_equals_single_searches(cli_server, service):
    status, _, got = request(cli_server + "/v1/batch_search", "POST", {"queries": QUERIES, "k": 4,
                                                                         "pipeline": "Rerank"})
    assert status == 200 and [r["query"] for r in got["results"]] == QUERIES
    for q, r in zip(QUERIES, got["results"]):
        same_hits(r["results"], expected(service, "Rerank", q, 4))


def test_concurrent_requests_share_one_batch(cli_server, service):
    """16 clients at once: the dense stage sees their queries together (fewer pipeline calls than
    queries), and each client gets what it would have got alone."""
    queries = [f"{QUERIES[i % 3]} {w}" for i, w in enumerate("graph kernel corpus lexicon bayes speech vision "
                                                             "memory tagging treebank induction alignment "
                                                             "embedding attention summary dialogue".split())]
    _, _, before = request(cli_server + "/v1/stats")

    def one(q):
        return request(cli_server + "/v1/search", "POST", {"query": q, "k": 5, "pipeline": "Rerank"})
    with cf.ThreadPoolExecutor(16) as ex:
        answers = list(ex.map(one, queries))
    _, _, after = request(cli_server + "/v1/stats")
    batches = after["batching"]["batches"] - before["batching"]["batches"]
    ran = after["batching"]["queries"] - before["batching"]["queries"]
    assert ran == 16 and batches < 16 and after["batching"]["largest_batch"] > 1
    for q, (status, _, got) in zip(queries, answers):
        assert status == 200
        same_hits(got["results"], expected(service, "Rerank", q, 5))


def test_bad_requests_get_json_errors_naming_the_cause(cli_server):
    cases = [
        ("/v1/search", {"query": "x", "pipeline": "nope"}, 404, "unknown_pipeline"),
        ("/v1/search", {"query": "x", "k": 0}, 422, "k_out_of_range"),
        ("/v1/search", {"query": "x", "k": 101}, 422, "k_out_of_range"),
        ("/v1/search", {"query": "x" * 2001}, 422, "query_too_long"),
        ("/v1/search", {"query": "   "}, 422, "empty_query"),
        ("/v1/search", {"query": "x", "paper": "388"}, 422, "query_or_paper"),
        ("/v1/search", {"paper": "no-such-paper"}, 404, "unknown_docno"),
        ("/v1/search", {"query": "x", "expression": "bm25 % 3"}, 403, "expressions_not_allowed"),
        ("/v1/search", {"query": "x", "k": "ten"}, 422, "invalid_request"),
        ("/v1/search", {"query": "x", "index": "/etc"}, 422, "unknown_field"),
        ("/v1/batch_search", {"queries": []}, 422, "bad_queries"),
        ("/v1/batch_search", {"queries": ["q"] * 65}, 422, "batch_too_large"),
    ]
    for path, body, status, code in cases:
        got_status, headers, got = request(cli_server + path, "POST", body)
        assert (got_status, got["error"]["code"]) == (status, code), (body, got)
        assert headers["content-type"] == "application/json" and "Traceback" not in str(got)
    assert "index" in request(cli_server + "/v1/search", "POST", {"query": "x", "index": "/etc"})[2]["error"]["message"]
    status, _, got = request(cli_server + "/v1/search", "POST", raw=b'{"query": "x",')
    assert (status, got["error"]["code"]) == (400, "malformed_json")
    status, _, got = request(cli_server + "/v1/papers/../../etc/passwd")
    assert status == 404 and got["error"]["code"] in ("unknown_docno", "not_found")
    status, _, got = request(cli_server + "/v1/papers/999999999")
    assert (status, got["error"]["code"]) == (404, "unknown_docno")
    status, _, spec = request(cli_server + "/openapi.json")
    assert status == 200 and {"/v1/search", "/v1/batch_search", "/v1/papers/{docno}", "/v1/similar",
                              "/v1/suggest_citations", "/v1/pipelines", "/health", "/ready"} <= set(spec["paths"])


@pytest.fixture(scope="module")
def bm25():
    return build_all(CONFIG, ["bm25"])["bm25"]


def slow(bm25, seconds):
    def wait(df):
        time.sleep(seconds)
        return df
    return bm25 >> pt.apply.generic(wait)


def _served(pipelines, **settings):
    svc = csfcube_service(pipelines).load()
    return SearchAPI(svc, ServeSettings(**settings))


def test_full_queue_answers_503_with_retry_after(bm25):
    api = _served({"slow": slow(bm25, 0.4)}, max_batch=1, max_queue=2, max_wait_ms=0)
    with LiveServer(api) as srv, cf.ThreadPoolExecutor(10) as ex:
        answers = list(ex.map(lambda i: request(srv.url + "/v1/search", "POST", {"query": f"parsing {i}"}),
                              range(10)))
    codes = sorted(a[0] for a in answers)
    assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
    for status, headers, body in answers:
        if status == 503:
            assert int(headers["retry-after"]) >= 1 and body["error"]["code"] == "overloaded"
        else:
            assert len(body["results"]) == 10
    assert api.batcher.stats.refused == codes.count(503)


def test_every_request_has_a_deadline(bm25):
    api = _served({"slow": slow(bm25, 1.5)}, deadline_s=5)
    with LiveServer(api) as srv:
        status, _, body = request(srv.url + "/v1/search", "POST", {"query": "parsing", "timeout": 0.2})
        assert (status, body["error"]["code"]) == (504, "deadline_exceeded")
        status, _, body = request(srv.url + "/v1/search", "POST", {"query": "parsing", "timeout": 60})
        assert (status, body["error"]["code"]) == (422, "timeout_out_of_range")
        status, _, body = request(srv.url + "/v1/search", "POST", {"query": "parsing"})
        assert status == 200 and len(body["results"]) == 10


def test_shutdown_finishes_the_requests_in_flight(bm25):
    api = _served({"slow": slow(bm25, 0.8)}, max_batch=2, max_wait_ms=0)
    srv = LiveServer(api, timeout_graceful_shutdown=30).__enter__()
    with cf.ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(request, srv.url + "/v1/search", "POST", {"query": f"parsing {i}"}) for i in range(4)]
        time.sleep(0.3)  # the requests are in flight
        srv.server.should_exit = True
        answers = [f.result() for f in futures]
    srv.thread.join(60)
    assert [a[0] for a in answers] == [200] * 4 and all(len(a[2]["results"]) == 10 for a in answers)
    assert not srv.thread.is_alive()


def test_bearer_token_rate_limit_and_no_secret_in_answers(bm25, tmp_path):
    token = "s3cret-token-0123456789"
    api = _served({"bm25": bm25}, token=token, rate_limit=0.5, rate_burst=3)
    with LiveServer(api) as srv:
        assert request(srv.url + "/health")[0] == 200
        status, headers, body = request(srv.url + "/v1/search?q=parsing")
        assert status == 401 and body["error"]["code"] == "unauthorised" and headers["www-authenticate"] == "Bearer"
        status, _, body = request(srv.url + "/v1/search?q=parsing", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _, body = request(srv.url + "/v1/search?q=parsing", headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and token not in str(body)
        # the burst of 3 is spent (3 requests above); the next is refused until a token drips back
        status, headers, body = request(srv.url + "/v1/search?q=parsing", headers={"Authorization": f"Bearer {token}"})
        assert status == 429 and int(headers["retry-after"]) >= 1 and body["error"]["code"] == "rate_limited"
        assert request(srv.url + "/ready")[0] == 200      # probes are not limited


def test_cli_refuses_a_public_address_without_a_token_and_redacts_it(tmp_path):
    env = dict(os.environ, PYTHONSAFEPATH="1")
    env.pop("PYTERRIER_SCI_SERVE_TOKEN", None)
    out = subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", "serve", CONFIG, "--pipelines", "bm25",
                          "--host", "0.0.0.0"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "not a loopback address" in out.stderr and "Traceback" not in out.stderr
    short = tmp_path / "token"
    short.write_text("short\n")
    out = subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", "serve", CONFIG, "--token-file", str(short)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "at least 16 characters" in out.stderr
    out = subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", "serve", CONFIG, "--pipelines", "bm25", "nope"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "'nope' is neither a pipeline nor a component" in out.stderr
    assert "minilm" in out.stderr and "Traceback" not in out.stderr    # the names it knows


def test_token_and_api_key_never_reach_the_log(tmp_path):
    token = "tok-" + "a1b2c3d4" * 4
    key = "sk-test-" + "9" * 24
    (tmp_path / "token").write_text(token + "\n")
    proc, url = start_cli(CONFIG, "--pipelines", "bm25", "--token-file", str(tmp_path / "token"),
                          env={"OPENAI_API_KEY": key})
    try:
        auth = {"Authorization": f"Bearer {token}"}
        # a client that puts the secrets in the URL: the access log line is redacted
        status, _, body = request(f"{url}/v1/search?q={token}+{key}", headers=auth)
        assert status == 200 and token not in str(body) and key not in str(body)
        assert request(f"{url}/v1/papers/{token}", headers=auth)[0] == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    log = "".join(proc.log) + proc.stdout.read()
    assert "/v1/search" in log and "[redacted]" in log
    assert token not in log and key not in log


def test_expressions_from_requests_only_when_allowed(bm25):
    svc = csfcube_service(["bm25"], allow_expressions=True).load()
    with LiveServer(SearchAPI(svc)) as srv:
        status, _, got = request(srv.url + "/v1/search", "POST", {"query": "parsing", "expression": "bm25 % 3", "k": 5})
        assert status == 200 and len(got["results"]) == 3 and got["pipeline"] == "bm25 % 3"
        status, _, got = request(srv.url + "/v1/search", "POST",
                                 {"query": "parsing", "expression": "bm25(index='/etc')"})
        assert status == 422 and got["error"]["code"] == "path_not_allowed" and "'/etc'" in got["error"]["message"]
        status, _, got = request(srv.url + "/v1/search", "POST", {"query": "parsing", "expression": "bm25(k1=-1)"})
        assert status == 422 and got["error"]["code"] == "bad_expression" and "k1" in got["error"]["message"]


@pytest.mark.skipif(os.environ.get("PYTERRIER_SCI_SKIP_RAY") == "1", reason="Ray tests disabled")
def test_ray_serve_one_replica_answers_as_in_process(service, tmp_path):
    pytest.importorskip("ray.serve")
    import socket

    import ray

    from pyterrier_sci.serve.ray_serve import ray_deployment, run_on_ray, stop_on_ray
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    app = ray_deployment(CONFIG, ["bm25"], num_replicas=1, settings=ServeSettings(mcp=False))
    try:
        run_on_ray(app, host="127.0.0.1", port=port, num_cpus=2)
        url = f"http://127.0.0.1:{port}"
        for q in QUERIES[:2]:
            status, _, got = request(url + "/v1/search", "POST", {"query": q, "k": 10})
            assert status == 200, got
            same_hits(got["results"], expected(service, "bm25", q, 10))
        status, _, got = request(url + "/v1/search", "POST", {"query": "x", "pipeline": "nope"})
        assert status == 404 and got["error"]["code"] == "unknown_pipeline"
    finally:
        stop_on_ray()
    assert not ray.is_initialized()
    with pytest.raises(OSError):
        request(url + "/health", timeout=5)


def test_llm_stage_spends_the_configured_budget_and_uses_the_cache(tmp_path):
    """A served LLM re-ranker (listwise, against the scripted loopback server) spends the config's
    budget: the warm-up is one call, a repeated query is a cache hit, and once the budget is spent
    the answer is a 503 naming it (no traceback, no key)."""
    from llm_server import Reply, ScriptedServer, prompt_of

    def oracle(kind, body):
        return Reply("[2] > [1]") if "anking" in prompt_of(kind, body) else Reply("Yes")

    with ScriptedServer(oracle) as llm:
        config = {"dataset": "irds:sci/csfcube",
                  "components": {"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                                 "judge": {"component": "listwise", "text_field": "abstract"}},
                  "pipelines": {"LLM": "bm25 % 4 >> text >> judge"},
                  "llm": {"base_url": llm.base_url, "model": "test-model", "cache_dir": str(tmp_path / "cache"),
                          "mode": "completion", "max_retries": 1, "backoff": 0.01, "backoff_max": 0.02,
                          "progress": False, "timeout": 5, "budget": {"calls": 3}}}
        from pyterrier_sci.serve import SearchService
        svc = SearchService(config, ["LLM"], trusted=True).load()
        assert llm.calls == 1                                   # the warm-up query
        with LiveServer(SearchAPI(svc)) as srv:
            status, _, first = request(srv.url + "/v1/search", "POST", {"query": "dependency parsing", "k": 4})
            assert status == 200 and len(first["results"]) == 4 and llm.calls == 2
            status, _, again = request(srv.url + "/v1/search", "POST", {"query": "dependency parsing", "k": 4})
            assert status == 200 and again["results"] == first["results"] and llm.calls == 2   # cached
            status, _, _ = request(srv.url + "/v1/search", "POST", {"query": "topic models", "k": 4})
            assert status == 200 and llm.calls == 3
            status, _, body = request(srv.url + "/v1/search", "POST", {"query": "speech recognition", "k": 4})
            assert status == 503 and body["error"]["code"] == "llm_budget_spent" and llm.calls == 3
            assert "budget" in body["error"]["message"] and "Traceback" not in body["error"]["message"]
