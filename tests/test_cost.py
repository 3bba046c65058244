"""Cost as a measure (issue 61, item 6): cost.calls, cost.prompt_tokens, cost.completion_tokens,
cost.seconds and cost.dollars per query beside effectiveness, against the loopback server, whose token
counts are known (prompt tokens: the prompt's whitespace words; completion tokens: the answer's); in
ps.Experiment (cache hits count as first answered, so a warm rerun gives the same figures), in a saved
run's costs file, in an experiment from a pipeline file, on the command line, and in the report's
effectiveness-against-cost plots."""
import json
import math
import re
import sqlite3
import threading

import pandas as pd
import pyterrier as pt
import pytest
from llm_server import Reply, ScriptedServer, prompt_of

import pyterrier_sci as ps
from pyterrier_sci import cost, report
from pyterrier_sci.cli import main
from pyterrier_sci.evaluation import read_run
from pyterrier_sci.experiment import experiment_outcome, run_pipeline_on, write_run
from pyterrier_sci.llm import Usage, settings_from
from pyterrier_sci.plugins.llm import Listwise, Setwise

COSTS = ["cost.calls", "cost.prompt_tokens", "cost.completion_tokens", "cost.seconds", "cost.dollars"]
PRICE = {"prompt": 1.5, "completion": 4.0}     # USD per million tokens
LATENCY = 0.02


def candidates(qids=("q1", "q2", "q3"), n=6):
    rows = []
    for q in qids:
        for i in range(n):
            grade = (i * 7 + int(q[1:])) % n
            rows.append({"qid": q, "query": f"query {q} about cost", "docno": f"{q}-d{i}", "title": f"T{i}",
                         "text": f"paper {i} grade={grade}" + " word" * (i + int(q[1:])), "score": 10.0 - i})
    return pt.model.add_ranks(pd.DataFrame(rows))


def qrels_of(frame):
    grades = frame["text"].str.extract(r"grade=(\d+)")[0].astype(int)
    return pd.DataFrame({"qid": frame["qid"], "docno": frame["docno"], "label": (grades >= 4).astype(int)})


def respond(kind, body):
    """Setwise: the label of the highest grade; listwise: a fixed permutation."""
    p = prompt_of(kind, body)
    if "Ranking: [" in p:
        return Reply("2] > [1] > [3")
    grades = {label: int(g) for label, g in re.findall(r'Passage ([A-W]): "[^"]*grade=(\d+)', p)}
    best = max(grades, key=grades.get)
    return Reply(content=" " + best, top_logprobs=[{" " + best: math.log(0.9), " Z": math.log(0.1)}])


def expected_costs(requests, prices=PRICE):
    """Per query, from the requests the server received: calls, tokens (the loopback server's counts) and
    dollars."""
    out = {}
    for kind, body in requests:
        prompt = prompt_of(kind, body)
        qid = re.search(r"query (q\d+) about cost", prompt).group(1)
        reply = respond(kind, body).content
        e = out.setdefault(qid, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        e["calls"] += 1
        e["prompt_tokens"] += len(prompt.split())
        e["completion_tokens"] += max(1, len(reply.split()))
    for e in out.values():
        e["dollars"] = (e["prompt_tokens"] * prices["prompt"] + e["completion_tokens"] * prices["completion"]) / 1e6
    return out


def llm(srv, tmp_path, **kw):
    s = {"base_url": srv.base_url, "model": "test-model", "cache_dir": str(tmp_path / "cache"), "progress": False,
         "mode": "completion", "concurrency": 4, "timeout": 5, "prices": {"test-model": PRICE}}
    s.update(kw)
    return s


def per_query(perq, system, measure):
    sel = perq[(perq["name"] == system) & (perq["measure"] == measure)]
    return dict(zip(sel["qid"], sel["value"]))


def test_cost_measures_in_experiment(tmp_path):
    frame = candidates()
    topics = frame[["qid", "query"]].drop_duplicates()
    first = pt.Transformer.from_df(frame)
    with ScriptedServer(respond, latency=LATENCY) as srv:
        systems = [first, first >> Setwise(llm(srv, tmp_path), num_child=2, k=3),
                   first >> Listwise(llm(srv, tmp_path), window=4, stride=2)]
        names = ["first", "setwise", "listwise"]
        table, perq = ps.Experiment(systems, topics, qrels_of(frame), ["nDCG@10", *COSTS], names=names,
                                    perquery="both")
        requests = list(srv.requests)
        setwise_requests = [r for r in requests if "Ranking: [" not in prompt_of(*r)]
        listwise_requests = [r for r in requests if "Ranking: [" in prompt_of(*r)]
        assert len(setwise_requests) and len(listwise_requests)
        for system, reqs in (("setwise", setwise_requests), ("listwise", listwise_requests)):
            want = expected_costs(reqs)
            for m in ("calls", "prompt_tokens", "completion_tokens", "dollars"):
                got = per_query(perq, system, f"cost.{m}")
                assert got == pytest.approx({q: w[m] for q, w in want.items()}), (system, m)
            seconds = per_query(perq, system, "cost.seconds")
            for q, w in want.items():
                assert w["calls"] * LATENCY <= seconds[q] < w["calls"] * (LATENCY + 2.0)
        for m in COSTS:
            assert set(per_query(perq, "first", m).values()) == {0.0}     # no LLM: costs nothing
        row = table.set_index("name")
        calls = per_query(perq, "setwise", "cost.calls")
        assert row.at["setwise", "cost.calls"] == pytest.approx(sum(calls.values()) / len(calls))
        assert row.at["setwise", "nDCG@10"] > row.at["first", "nDCG@10"]

        # a rerun on a warm cache sends nothing and gives the same figures: the method's cost
        again = [first, first >> Setwise(llm(srv, tmp_path), num_child=2, k=3),
                 first >> Listwise(llm(srv, tmp_path), window=4, stride=2)]
        table2 = ps.Experiment(again, topics, qrels_of(frame), ["nDCG@10", *COSTS], names=names)
        assert len(srv.requests) == len(requests)
        pd.testing.assert_frame_equal(table, table2)


def test_unpriced_model_and_runs_without_costs(tmp_path):
    frame = candidates(("q1", "q2"))
    topics = frame[["qid", "query"]].drop_duplicates()
    first = pt.Transformer.from_df(frame)
    with ScriptedServer(respond) as srv:
        sw = first >> Setwise(llm(srv, tmp_path, prices={}), num_child=2, k=2)
        table = ps.Experiment([sw], topics, qrels_of(frame), ["cost.calls", "cost.dollars"], names=["sw"])
    assert table.at[0, "cost.calls"] > 0 and math.isnan(table.at[0, "cost.dollars"])   # no price: unknown
    with pytest.warns(cost.CostWarning, match="carries no costs"):
        plain = ps.Experiment([frame], topics, qrels_of(frame), ["nDCG@10", "cost.calls"], names=["frame"])
    assert math.isnan(plain.at[0, "cost.calls"]) and plain.at[0, "nDCG@10"] > 0


def test_cache_entries_without_a_time(tmp_path):
    """An answer cached without the seconds it took (an entry written before answers were timed) leaves its
    query's cost.seconds unknown; the other costs come from the entry."""
    frame = candidates(("q1", "q2"))
    topics = frame[["qid", "query"]].drop_duplicates()
    first = pt.Transformer.from_df(frame)
    with ScriptedServer(respond) as srv:
        measures = ["cost.calls", "cost.prompt_tokens", "cost.seconds"]
        before = ps.Experiment([first >> Setwise(llm(srv, tmp_path), num_child=2, k=2)], topics, qrels_of(frame),
                               measures, names=["sw"])
        with sqlite3.connect(tmp_path / "cache" / "responses.sqlite3") as db:
            for key, value in db.execute("SELECT key, value FROM responses").fetchall():
                entry = json.loads(value)
                assert entry.pop("seconds") > 0
                db.execute("UPDATE responses SET value=? WHERE key=?", (json.dumps(entry), key))
        sent = srv.calls
        after = ps.Experiment([first >> Setwise(llm(srv, tmp_path), num_child=2, k=2)], topics, qrels_of(frame),
                              measures, names=["sw"])
        assert srv.calls == sent
    assert before.at[0, "cost.seconds"] > 0 and math.isnan(after.at[0, "cost.seconds"])
    assert after.at[0, "cost.calls"] == before.at[0, "cost.calls"] > 0
    assert after.at[0, "cost.prompt_tokens"] == before.at[0, "cost.prompt_tokens"]


class Remote(pt.Transformer):
    """Stands for an LLM stage whose calls are made in another process (a Ray worker): its usage counters grow
    as scale.py adds the workers' counts, but no answer is recorded in this process."""

    def __init__(self):
        self.usage = Usage(model="test-model")

    def sci_usage(self):
        return self.usage

    def sci_llm_settings(self):
        return settings_from({"prices": {"test-model": PRICE}})

    def transform(self, inp):
        self.usage.add(calls=2, prompt_tokens=10, completion_tokens=2)
        return inp


def test_calls_made_elsewhere_give_unknown_costs():
    frame = candidates(("q1", "q2"))
    topics = frame[["qid", "query"]].drop_duplicates()
    out = cost.CostMeter(pt.Transformer.from_df(frame) >> Remote())(topics)
    assert out[list(cost.COLUMNS.values())].isna().all().all()


def test_costs_kept_beside_a_saved_run(tmp_path):
    frame = candidates(("q1", "q2"))
    topics = frame[["qid", "query"]].drop_duplicates()
    first = pt.Transformer.from_df(frame)
    saved = tmp_path / "runs" / "setwise.res.gz"
    with ScriptedServer(respond) as srv:
        sw = first >> Setwise(llm(srv, tmp_path), num_child=2, k=3)
        res = run_pipeline_on(sw, topics, saved, costs=True)
        assert cost.costs_path(saved).is_file()
        kept = cost.read_costs(saved)
        assert list(kept["qid"]) == ["q1", "q2"]
        want = expected_costs(srv.requests)
        assert dict(zip(kept["qid"], kept["cost_calls"])) == {q: w["calls"] for q, w in want.items()}
        # read back: the run is not run again (not even from the cache), the costs come with it
        sw2 = first >> Setwise(llm(srv, tmp_path), num_child=2, k=3)
        back = run_pipeline_on(sw2, topics, saved, costs=True)
        assert sw2[1].usage.calls + sw2[1].usage.cache_hits == 0
        assert back.groupby("qid")["cost_calls"].first().to_dict() == {q: w["calls"] for q, w in want.items()}
        # what `pyterrier-sci evaluate` reads: the run file with its costs
        assert read_run(saved).groupby("qid")["cost_prompt_tokens"].first().to_dict() == \
            {q: w["prompt_tokens"] for q, w in want.items()}
        # costs asked for a run saved without them: the pipeline runs again (its calls from the cache)
        plain = tmp_path / "runs" / "plain.res.gz"
        run_pipeline_on(sw2, topics, plain)
        assert not cost.costs_path(plain).exists()
        sent = len(srv.requests)
        again = run_pipeline_on(sw2, topics, plain, costs=True)
        assert len(srv.requests) == sent and cost.read_costs(plain) is not None
        assert again.groupby("qid")["cost_calls"].first().to_dict() == {q: w["calls"] for q, w in want.items()}
    # a run file written again is never given the costs of the one before
    write_run(res.assign(score=res["score"] + 1), saved, checksum=True)
    assert cost.read_costs(saved) is None and "cost_calls" not in read_run(saved).columns
    write_run(res, saved)
    cost.write_costs(res.drop(columns=cost.cost_columns(res)), saved)      # a run without costs removes them
    assert not cost.costs_path(saved).exists()


def _config(tmp_path, srv, save_dir):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube/method
llm: {{base_url: "{srv.base_url}", model: test-model, mode: completion, progress: false, timeout: 5,
      cache_dir: "{tmp_path / 'cache'}", prices: {{test-model: {{prompt: 1.5, completion: 4.0}}}}}}
pipelines:
  first: pool % 4
  sw: pool % 4 >> text >> setwise(num_child=2, k=2)
experiments:
  costs:
    pipelines: [first, sw]
    measures: [nDCG@10, cost.calls, cost.dollars]
    baseline: first
    save_dir: {save_dir}
""")
    return cfg


def test_experiment_cli_and_report(csfcube, tmp_path, capsys):
    seen = []
    lock = threading.Lock()

    def answer_b(kind, body):
        with lock:
            seen.append(prompt_of(kind, body))
        return Reply(content=" B", top_logprobs=[{" B": math.log(0.9), " A": math.log(0.1)}])

    with ScriptedServer(answer_b) as srv:
        cfg = _config(tmp_path, srv, tmp_path / "runs")
        outcome = experiment_outcome(cfg)
        table = outcome.table.set_index("name")
        queries = outcome.datasets[0].topics["qid"].nunique()
        # heapsort of 4 candidates, 2 children per node, top 2, every answer B: building the heap asks node 1
        # (once) and node 0 (down to node 1: twice), the one extraction asks node 0: 4 calls per query
        assert srv.calls == 4 * queries
        assert table.at["sw", "cost.calls"] == 4.0 and table.at["first", "cost.calls"] == 0.0
        words = sum(len(p.split()) for p in seen)
        assert table.at["sw", "cost.dollars"] == pytest.approx((words * 1.5 + srv.calls * 4.0) / 1e6 / queries)
        run_file = outcome.datasets[0].run_paths["sw"]
        assert cost.read_costs(run_file) is not None

        # the report: lowest cost in bold, an effectiveness-against-cost plot per cost measure
        html = report.render_html(outcome, report.perquery_frame(outcome))
        assert "<h2 id='cost'>Effectiveness against cost</h2>" in html
        plots = re.findall(r"<figure class='cost-plot' data-dataset='[^']*' data-cost='([^']*)' "
                           r"data-measure='([^']*)'><svg", html)
        assert plots == [("cost.calls", "nDCG@10"), ("cost.dollars", "nDCG@10")]
        assert html.count("data-measure='cost.calls' data-system") == 0        # no difference plots of costs
        start = html.index("<table class='results'>")
        results = html[start:html.index("</table>", start)]
        first_row = results[results.index("<td>first"):results.index("</tr>", results.index("<td>first"))]
        assert first_row.count("class='best'") >= 2                           # cheapest: bold in both cost columns

        # a rerun reads the saved runs and their costs: nothing is run, the same figures (the llm_* columns
        # say what this invocation spent: nothing)
        sent = srv.calls
        again = experiment_outcome(cfg)
        assert srv.calls == sent and (again.table["llm_calls"] == 0).all()
        assert outcome.table.at[1, "llm_calls"] == sent
        figures = [c for c in outcome.table.columns if not c.startswith("llm_")]
        pd.testing.assert_frame_equal(again.table[figures], outcome.table[figures])

        # the command line: run --costs, then evaluate reads the costs beside the run
        out = tmp_path / "setwise.res"
        assert main(["run", "pool % 4 >> text >> setwise(num_child=2, k=2)", "--dataset", "irds:sci/csfcube/method",
                     "--config", str(cfg), "--output", str(out), "--costs"]) == 0
        assert srv.calls == sent                                                # all from the cache
        assert cost.costs_path(out).is_file()
        capsys.readouterr()
        assert main(["evaluate", str(out), "--dataset", "irds:sci/csfcube/method", "--measures",
                     "nDCG@10,cost.calls,cost.dollars", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert rows[0]["cost.calls"] == 4.0 and rows[0]["cost.dollars"] > 0
