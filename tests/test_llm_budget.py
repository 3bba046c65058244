"""LLM budgets (``llm: {budget: ...}``) and dry runs (``--dry-run``) against the scripted loopback
server: a budget stops a run before it is passed, keeps the finished calls cached and resumes at no
cost; a dry run sends no LLM request and counts what a real run then sends."""

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
from llm_server import Reply, ScriptedServer, prompt_of, yes_no

import pyterrier_sci as ps
from pyterrier_sci.llm import LLMBudgetExceeded, LLMError, dry_run, llm_components, settings_from
from pyterrier_sci.llm.budget import ledger_for
from pyterrier_sci.llm.text import estimate_tokens
from pyterrier_sci.plugins.hlm_cite import HLMAgents
from pyterrier_sci.plugins.llm import Listwise, PairwiseTournament
from pyterrier_sci.plugins.mir import MIRAgent, MIRPointwise

DOCS = 6


def frame(qids=("q1", "q2")):
    return pd.DataFrame([{"qid": q, "query": f"proposal {q} on graph networks", "docno": f"d{i}",
                          "title": f"Title {i}", "text": f"paper d{i} " + "word " * (5 * i), "score": 10.0 - i,
                          "rank": i} for q in qids for i in range(DOCS)])


def oracle(kind, body):
    p = prompt_of(kind, body)
    if "Ranking" in p or "ranking" in p:
        return Reply("[2] > [1]")
    if kind == "completion":
        return yes_no("d1" in p.rsplit("Candidate paper", 1)[-1], 0.8)
    return Reply("Yes")


@pytest.fixture
def server():
    with ScriptedServer(oracle) as srv:
        yield srv


def cfg(srv, tmp_path=None, **kw):
    s = {"base_url": srv.base_url, "model": "test-model", "cache_dir": str(tmp_path / "cache") if tmp_path else "",
         "backoff": 0.01, "backoff_max": 0.02, "max_retries": 1, "progress": False, "timeout": 5,
         "mode": "completion", "concurrency": 4}
    s.update(kw)
    return s


def cached_entries(tmp_path):
    with sqlite3.connect(tmp_path / "cache" / "responses.sqlite3") as con:
        return con.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def reported_tokens(requests):
    """What the loopback server reports per request: whitespace words of the prompt + 1 completion token."""
    return [len(prompt_of(k, b).split()) + 1 for k, b in requests]


# -- calls ------------------------------------------------------------------------------------
@pytest.mark.parametrize("on_error", ["raise", "flag"])
def test_calls_budget_stops_after_exactly_n_then_a_bigger_budget_resumes(server, tmp_path, on_error):
    judge = MIRPointwise(cfg(server, tmp_path, budget={"calls": 5}), on_error=on_error)
    with pytest.raises(LLMBudgetExceeded) as info:
        judge(frame())     # 12 judgements, 4 in flight at a time
    assert server.calls == 5 and cached_entries(tmp_path) == 5 and judge.usage.calls == 5
    e = info.value
    assert isinstance(e, LLMError)
    assert e.spent["calls"] == 5 and e.remaining == {"calls": 0} and e.limits == {"calls": 5}
    assert e.spent["tokens"] == sum(reported_tokens(server.requests))
    msg = str(e)
    assert "call 6 of a budget of 5 calls" in msg and "spent 5 calls" in msg and "remaining 0 calls" in msg
    assert "\n" not in msg

    server.reset()
    again = MIRPointwise(cfg(server, tmp_path, budget={"calls": 7}), on_error=on_error)
    out = again(frame())
    assert server.calls == 7 and again.usage.calls == 7 and again.usage.cache_hits == 5
    assert len(out) == 12 and not out["llm_unusable"].any()


def test_budget_reservations_hold_under_concurrency(server, tmp_path):
    server.latency = 0.02
    judge = MIRPointwise(cfg(server, tmp_path, budget={"calls": 9}, concurrency=8))
    with pytest.raises(LLMBudgetExceeded):
        judge(frame(("q1", "q2", "q3")))
    assert server.calls == 9 and cached_entries(tmp_path) == 9 and server.max_active <= 8


def test_cache_hits_are_free(server, tmp_path):
    MIRPointwise(cfg(server, tmp_path))(frame())
    server.reset()
    judge = MIRPointwise(cfg(server, tmp_path, budget={"calls": 0, "tokens": 0}))
    out = judge(frame())
    assert server.calls == 0 and judge.usage.cache_hits == 12 and len(out) == 12


# -- tokens and dollars -------------------------------------------------------------------------
def expected_calls(prompts_and_used, limit, need):
    """How many calls a budget lets through in order: refuse when spent + need(prompt) > limit."""
    spent = 0
    for n, (prompt, used) in enumerate(prompts_and_used):
        if spent + need(prompt) > limit:
            return n, spent
        spent += used
    return len(prompts_and_used), spent


def _sequence(srv, **kw):
    """The prompts of one run (concurrency 1: a fixed order) and the tokens the server reports."""
    MIRPointwise(cfg(srv, concurrency=1, **kw))(frame())
    seq = [(prompt_of(k, b), used) for (k, b), used in zip(srv.requests, reported_tokens(srv.requests))]
    srv.reset()
    return seq


def test_tokens_budget(server, tmp_path):
    seq = _sequence(server)
    limit = sum(u for _, u in seq) // 2
    n, spent = expected_calls(seq, limit, lambda p: estimate_tokens(p) + 3)   # choose(): max_tokens 3
    assert 0 < n < len(seq)
    judge = MIRPointwise(cfg(server, tmp_path, concurrency=1, budget={"tokens": limit}))
    with pytest.raises(LLMBudgetExceeded, match="would pass the budget of") as info:
        judge(frame())
    assert server.calls == n and cached_entries(tmp_path) == n
    assert info.value.spent["tokens"] == spent <= limit and info.value.remaining == {"tokens": limit - spent}


def test_dollars_budget(server, tmp_path):
    prices = {"test-model": {"prompt": 2.0, "completion": 10.0}}   # USD per million tokens
    seq = _sequence(server)
    words = [len(p.split()) for p, _ in seq]
    dollars = [(w * 2.0 + 1 * 10.0) / 1e6 for w in words]
    limit = sum(dollars) / 3
    n, _ = expected_calls(list(zip([p for p, _ in seq], dollars)), limit,
                          lambda p: (estimate_tokens(p) * 2.0 + 3 * 10.0) / 1e6)
    assert 0 < n < len(seq)
    judge = MIRPointwise(cfg(server, tmp_path, concurrency=1, prices=prices, budget={"dollars": limit}))
    with pytest.raises(LLMBudgetExceeded, match=r"may cost up to \$") as info:
        judge(frame())
    assert server.calls == n
    assert info.value.spent["dollars"] == pytest.approx(sum(dollars[:n]), abs=1e-6)
    assert "$" in str(info.value) and info.value.remaining["dollars"] >= 0


@pytest.mark.parametrize("budget, message", [
    ({"cals": 3}, "unknown llm budget key 'cals'"),
    ({"calls": -1}, "llm budget calls must be"),
    ({"tokens": float("inf")}, "llm budget tokens must be"),
    ({"dollars": float("nan")}, "llm budget dollars must be"),
    ({"dollars": -0.5}, "llm budget dollars must be"),
    ({"calls": 2.5}, "llm budget calls must be"),
    ({"calls": True}, "llm budget calls must be"),
    ({"tokens": "lots"}, "llm budget tokens must be"),
    (5, "llm setting budget must be a mapping"),
    ({"dollars": 1.0}, "needs a price for model 'test-model'"),
])
def test_bad_budgets_are_one_clear_error(budget, message):
    with pytest.raises(ValueError, match=message):
        settings_from({"model": "test-model", "budget": budget})


def test_bad_budget_in_a_pipeline_config_names_the_key():
    with pytest.raises(Exception, match="unknown llm budget key 'dolars'"):
        ps.pipeline("mir_pointwise", config={"llm": {"budget": {"dolars": 1}}})


# -- one ledger per run of a config ------------------------------------------------------------------
def test_components_of_one_config_share_one_budget(server, tmp_path):
    config = {"llm": cfg(server, tmp_path, budget={"calls": 13})}
    pipe = ps.pipeline("mir_pointwise >> listwise", config=config)
    comps = llm_components(pipe)
    assert len(comps) == 2 and ledger_for(comps[0].settings) is ledger_for(comps[1].settings)
    other = llm_components(ps.pipeline("mir_pointwise", config=config))[0]
    assert ledger_for(other.settings) is not ledger_for(comps[0].settings)   # another run, another ledger
    with pytest.raises(LLMBudgetExceeded, match="call 14 of a budget of 13"):
        pipe(frame())   # 12 judgements + one listwise window per query
    assert server.calls == 13
    server.reset()
    config["llm"]["budget"] = {"calls": 14}
    ps.pipeline("mir_pointwise >> listwise", config=config)(frame())
    assert server.calls == 1   # only the missing window


# -- dry runs -----------------------------------------------------------------------------------
def components(srv, tmp_path):
    s = cfg(srv, tmp_path)
    return {"mir_pointwise": MIRPointwise(s), "mir_agent": MIRAgent(s), "listwise": Listwise(s, window=4, stride=2),
            "pairwise_tournament": PairwiseTournament(s, rounds=2),
            "hlm_agents": HLMAgents(s, keep_top=1, example_path=tmp_path / "example.txt")}


def test_dry_run_sends_nothing_and_counts_what_a_real_run_sends(server, tmp_path):
    for name, t in components(server, tmp_path).items():
        with dry_run() as run:
            t(frame())
        rep = run.report([t], [name]).table.iloc[0]
        assert server.calls == 0, name
        assert rep["calls"] > 0 and rep["to_send"] > 0 and rep["cached"] == rep["calls"] - rep["to_send"], name
        assert rep["completion_tokens"] > 0 and rep["prompt_tokens"] > 0 and rep["tokenizer"], name
        assert not (tmp_path / "example.txt").exists()   # the guider writes nothing in a dry run
        real = components(server, tmp_path)[name]
        real(frame())
        assert server.calls == real.usage.calls == rep["to_send"], name
        assert real.usage.calls + real.usage.cache_hits == rep["calls"], name   # repeats: cache hits in both
        again = components(server, tmp_path)[name]
        with dry_run() as run:   # now the cache holds every call
            again(frame())
        row = run.report([again], [name]).table.iloc[0]
        assert row["cached"] == row["calls"] > 0 and (row["to_send"], row["prompt_tokens"]) == (0, 0), name
        rerun = components(server, tmp_path)[name]   # (hlm_agents: the guider's example file exists now)
        rerun(frame())
        assert (rerun.usage.calls, rerun.usage.cache_hits) == (0, row["calls"]), name
        assert server.calls == real.usage.calls, name
        server.reset()


def test_dry_run_cache_counts_tokens_and_cost(server, tmp_path):
    prices = {"test-model": {"prompt": 1.0, "completion": 4.0}}
    judge = MIRPointwise(cfg(server, tmp_path, prices=prices))
    judge(frame(("q1",)))    # 6 calls cached
    assert server.calls == 6
    server.reset()
    dry = MIRPointwise(cfg(server, tmp_path, prices=prices))
    with dry_run() as run:
        dry(frame())
    row = run.report(dry).table.iloc[0]
    assert server.calls == 0
    assert (row["calls"], row["cached"], row["to_send"]) == (12, 6, 6)
    assert row["completion_tokens"] == 6 * 3   # choose(): max_tokens 3 per call, an upper bound
    assert row["tokenizer"] == "4 characters per token"
    assert row["cost"] == pytest.approx((row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 4.0) / 1e6)
    real = MIRPointwise(cfg(server, tmp_path, prices=prices))
    real(frame())
    assert server.calls == 6 and real.usage.cache_hits == 6


class _Tokenizer(BaseHTTPRequestHandler):
    """A llama.cpp-style ``POST /tokenize``: one token per character."""
    calls = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if self.path != "/tokenize":
            self.send_response(404)
            self.end_headers()
            return
        type(self).calls += 1
        data = json.dumps({"tokens": list(range(len(body["content"])))}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_dry_run_uses_the_servers_tokenizer_when_there_is_one():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Tokenizer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        host, port = httpd.server_address[:2]
        judge = MIRPointwise({"base_url": f"http://{host}:{port}/v1", "model": "m", "cache_dir": "",
                              "mode": "completion", "progress": False})
        with dry_run() as run:
            judge(frame(("q1",)))
        row = run.report(judge).table.iloc[0]
        assert row["tokenizer"] == "the server's /tokenize" and row["calls"] == 6
        assert row["prompt_tokens"] > 0 and _Tokenizer.calls == 7   # one probe + one per prompt
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_dry_run_cli_run_json(server, tmp_path, capsys, monkeypatch):
    from pyterrier_sci import cli
    try:
        import pyterrier as pt
        pt.get_dataset("irds:sci/csfcube/method").get_topics()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CSFCube data not available ({e})")
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    config = tmp_path / "p.yaml"
    config.write_text(json.dumps({"llm": {**cfg(server, tmp_path), "budget": {"calls": 10_000}}}))
    args = ["run", "pool % 2 >> text >> mir_pointwise", "--dataset", "irds:sci/csfcube/method",
            "--config", str(config), "--trust-config"]
    assert cli.main(args + ["--dry-run", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert server.calls == 0
    (row,) = got["components"]
    assert row["component"] == "mir_pointwise" and row["cached"] == 0 and row["calls"] > 0
    assert got["totals"]["calls"] == row["calls"] and any("budget" in n for n in got["notes"])
    assert cli.main(args + ["--output", str(tmp_path / "run.res")]) == 0
    capsys.readouterr()
    assert server.calls == row["calls"]
    assert cli.main(args + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert server.calls == row["calls"] and "mir_pointwise" in text and "max_tokens of each call" in text
    assert f"total: {row['calls']:,} calls, {row['calls']:,} cached, 0 to send" in text
