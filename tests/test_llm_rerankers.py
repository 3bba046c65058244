"""The LLM re-rankers against the scripted loopback server: ordering rules, repair, unusable
output, caching, interruption, accounting, registry and pickling."""

import math
import pickle
import re

import pandas as pd
import pyterrier as pt
import pytest
from llm_server import Reply, ScriptedServer, choice_reply, prompt_of, yes_no

from pyterrier_sci.llm import LLMError, add_usage_columns, reset_usage, usage_report, usage_totals
from pyterrier_sci.plugins.hlm_cite import HLMAgents
from pyterrier_sci.plugins.hlm_cite.agents import default_keep_top, parse_decision, split_analyses
from pyterrier_sci.plugins.llm import Listwise, PairwiseTournament, parse_permutation, swiss_pairs
from pyterrier_sci.plugins.mir import MIRAgent, MIRPointwise

# six candidates per query; grade in the text drives the scripted "oracle"
GRADES = {"d0": 0, "d1": 3, "d2": 0, "d3": 1, "d4": 2, "d5": 0}


def frame(qids=("q1", "q2")):
    rows = []
    for q in qids:
        for i, (d, g) in enumerate(GRADES.items()):
            rows.append(
                {
                    "qid": q,
                    "query": f"proposal {q} about graph neural networks",
                    "docno": d,
                    "title": f"Title {d}",
                    "text": f"paper {d} grade={g}" + (" [rel]" if g >= 2 else ""),
                    "score": 10.0 - i,
                    "rank": i,
                    "extra": f"keep-{d}",
                }
            )
    return pd.DataFrame(rows)


def candidate_section(prompt):
    return prompt.rsplit("Candidate paper", 1)[-1]


def judge_oracle(kind, body):
    """Yes when the judged paper is [rel]; completion mode with logprobs, chat mode with JSON."""
    p = prompt_of(kind, body)
    rel = "[rel]" in candidate_section(p)
    if kind == "completion":
        return yes_no(rel, 0.8)
    return Reply('{"reasoning": "because", "confidence": 0.7, "relevant": %d}' % int(rel))


def settings(srv, tmp_path=None, **kw):
    s = {
        "base_url": srv.base_url,
        "model": "test-model",
        "cache_dir": str(tmp_path / "cache") if tmp_path else "",
        "backoff": 0.01,
        "backoff_max": 0.02,
        "max_retries": 2,
        "progress": False,
        "timeout": 5,
        "mode": "completion",
        "concurrency": 4,
    }
    s.update(kw)
    return s


@pytest.fixture
def server():
    with ScriptedServer(judge_oracle) as srv:
        yield srv


def order(out, qid="q1"):
    return list(out[out.qid == qid].sort_values("rank")["docno"])


# -- permutation repair -----------------------------------------------------------------------
def test_parse_permutation_repair_rule():
    order_, stats = parse_permutation("[3] > [3] > [99] > [1]", 4)
    assert [i + 1 for i in order_] == [3, 1, 2, 4]
    assert stats == {"duplicates": 1, "unknown": 1, "missing": 2, "valid": 2}
    assert parse_permutation("no idea", 3) == ([0, 1, 2], {"duplicates": 0, "unknown": 0, "missing": 3, "valid": 0})


# -- pointwise ----------------------------------------------------------------------------------
def test_pointwise_order_relevant_first_keeps_first_stage_order(server):
    t = MIRPointwise(settings(server))
    out = t(frame())
    for q in ("q1", "q2"):
        assert order(out, q) == ["d1", "d4", "d0", "d2", "d3", "d5"]
    assert list(out[out.qid == "q1"].sort_values("rank")["rank"]) == list(range(6))
    assert (out.groupby("qid")["score"].apply(lambda s: s.is_monotonic_decreasing)).all()
    row = out.set_index(["qid", "docno"]).loc[("q1", "d1")]
    assert row["llm_relevant"] == 1.0 and row["llm_confidence"] == pytest.approx(0.8) and not row["llm_unusable"]
    assert row["extra"] == "keep-d1"  # input columns kept
    assert server.calls == 12 and t.usage.calls == 12
    assert all(k == "completion" and b["prompt"].rstrip().endswith("Answer (Yes or No):") for k, b in server.requests)


def test_pointwise_chat_mode_json_and_malformed(server):
    def responder(kind, body):
        p = candidate_section(prompt_of(kind, body))
        if "paper d2 " in p:
            return Reply('{"reasoning": "unfinished", "relevant": ')  # malformed JSON
        if "paper d3 " in p:
            return Reply("")  # empty output
        return judge_oracle(kind, body)

    server.responder = responder
    t = MIRPointwise(settings(server, mode="chat"))
    out = t(frame(["q1"])).set_index("docno")
    assert bool(out.loc["d2", "llm_unusable"]) and bool(out.loc["d3", "llm_unusable"])
    assert math.isnan(out.loc["d2", "llm_relevant"])
    assert out.loc["d1", "llm_confidence"] == pytest.approx(0.7) and out.loc["d1", "llm_reasoning"] == "because"
    # unusable rows are not demoted (unusable_as="relevant"): first-stage order among d1, d2, d3, d4
    assert list(out.sort_values("rank").index) == ["d1", "d2", "d3", "d4", "d0", "d5"]
    assert t.usage.unusable == 2
    t2 = MIRPointwise(settings(server, mode="chat"), unusable_as="non_relevant")
    assert order(t2(frame(["q1"]))) == ["d1", "d4", "d0", "d2", "d3", "d5"]


def test_pointwise_empty_input_and_validation(server):
    t = MIRPointwise(settings(server))
    empty = frame().iloc[:0]
    out = t(empty)
    assert len(out) == 0
    for c in [
        "qid",
        "docno",
        "extra",
        "score",
        "rank",
        "llm_relevant",
        "llm_confidence",
        "llm_reasoning",
        "llm_unusable",
    ]:
        assert c in out.columns
    with pytest.raises(Exception):
        t(frame().drop(columns=["text"]))
    assert server.calls == 0


def test_pointwise_cached_rerun_makes_no_calls(server, tmp_path):
    t = MIRPointwise(settings(server, tmp_path))
    first = t(frame())
    assert server.calls == 12
    t2 = MIRPointwise(settings(server, tmp_path))
    second = t2(frame())
    assert server.calls == 12 and t2.usage.calls == 0 and t2.usage.cache_hits == 12
    pd.testing.assert_frame_equal(first, second)


def test_pointwise_interrupted_run_resumes_from_cache(server, tmp_path):
    n_ok = 0

    def flaky(kind, body):
        nonlocal n_ok
        if n_ok >= 5:
            return Reply(status=500)
        n_ok += 1
        return judge_oracle(kind, body)

    server.responder = flaky
    t = MIRPointwise(settings(server, tmp_path, concurrency=1))
    with pytest.raises(LLMError, match="500"):
        t(frame())
    server.reset()
    server.responder = judge_oracle
    t2 = MIRPointwise(settings(server, tmp_path, concurrency=1))
    out = t2(frame())
    assert server.calls == 12 - 5 and t2.usage.cache_hits == 5
    assert order(out, "q2") == ["d1", "d4", "d0", "d2", "d3", "d5"]


def test_on_error_flag_keeps_first_stage_order(server):
    server.responder = lambda k, b: Reply(status=500)
    with pytest.raises(LLMError):
        MIRPointwise(settings(server))(frame(["q1"]))
    t = MIRPointwise(settings(server), on_error="flag")
    out = t(frame(["q1"]))
    assert order(out) == list(GRADES) and out["llm_unusable"].all()
    assert "500" in out["llm_reasoning"].iloc[0]


def test_pointwise_few_shot_contrastive_exemplars(server):
    train = pd.DataFrame(
        [
            {
                "qid": "t1",
                "query": "graph neural networks for molecules",
                "docno": "a",
                "title": "GNN A",
                "text": "message passing EXEMPLAR-POS",
                "label": 1,
            },
            {
                "qid": "t1",
                "query": "graph neural networks for molecules",
                "docno": "b",
                "title": "Poetry",
                "text": "sonnets EXEMPLAR-NEG",
                "label": 0,
            },
            {
                "qid": "t2",
                "query": "speech recognition with transducers",
                "docno": "c",
                "title": "ASR",
                "text": "UNRELATED-PROPOSAL-PAPER",
                "label": 1,
            },
            {
                "qid": "q1",
                "query": "proposal q1 about graph neural networks",
                "docno": "d1",
                "title": "leak",
                "text": "LEAK",
                "label": 1,
            },
        ]
    )
    t = MIRPointwise(settings(server), exemplars=train, num_shots=1)
    out = t(frame(["q1"]))
    assert order(out) == ["d1", "d4", "d0", "d2", "d3", "d5"]
    prompt = server.requests[0][1]["prompt"]
    assert "EXEMPLAR-POS" in prompt and "EXEMPLAR-NEG" in prompt
    assert prompt.index("EXEMPLAR-POS") < prompt.index("EXEMPLAR-NEG")  # relevant, then non-relevant
    assert "UNRELATED-PROPOSAL-PAPER" not in prompt and "LEAK" not in prompt
    assert "Relevant" in prompt and "Not relevant" in prompt


def test_template_override_and_text_fields(server):
    tmpl = "Proposal: $proposal\nCandidate paper: $title | $paper\n"
    t = MIRPointwise(settings(server), template=tmpl, text_field=["title", "text"], max_doc_tokens=5)
    t(frame(["q1"]))
    p = next(b["prompt"] for _, b in server.requests if "paper d0" in b["prompt"])
    assert p.startswith("Proposal: proposal q1") and "| Title d0\n\npaper d0 ..." in p


# -- MIR-Agent ------------------------------------------------------------------------------------
def test_mir_agent_three_steps(server):
    def responder(kind, body):
        p = prompt_of(kind, body)
        if p.rstrip().endswith("Answer (Yes or No):"):
            return yes_no("[rel]" in p.split("Analysis of the candidate paper:")[0].rsplit("Candidate paper", 1)[-1])
        if "Read the research proposal below" in p:
            return Reply("Core problem: X. Sub-problems: Y.")
        return Reply("The paper could solve sub-problem Y.")

    server.responder = responder
    t = MIRAgent(settings(server))
    out = t(frame())
    kinds = {"proposal": 0, "paper": 0, "judge": 0}
    for k, b in server.requests:
        p = prompt_of(k, b)
        if "Read the research proposal below" in p:
            kinds["proposal"] += 1
        elif p.rstrip().endswith("Answer (Yes or No):"):
            kinds["judge"] += 1
            assert "Core problem: X." in p and "could solve sub-problem Y" in p
        else:
            kinds["paper"] += 1
            assert "Core problem: X." in p
    assert kinds == {"proposal": 2, "paper": 12, "judge": 12}  # proposal analysis once per query
    assert order(out, "q2") == ["d1", "d4", "d0", "d2", "d3", "d5"]
    assert (out["llm_proposal_analysis"] == "Core problem: X. Sub-problems: Y.").all()
    assert out["llm_reasoning"].str.contains("sub-problem Y").all()


# -- listwise -------------------------------------------------------------------------------------
def listwise_oracle(kind, body):
    p = prompt_of(kind, body)
    items = re.findall(r"^\[(\d+)\] .*?grade=(\d)", p, re.M)
    ranked = sorted(items, key=lambda x: (-int(x[1]), int(x[0])))
    return Reply(" > ".join(f"[{i}]" for i, _ in ranked))


def test_listwise_windows():
    t = Listwise({"base_url": "http://x/v1"}, window=20, stride=10)
    assert t.windows(20) == [(0, 20)]
    assert t.windows(30) == [(10, 30), (0, 20)]
    assert t.windows(35) == [(15, 35), (5, 25), (0, 15)]
    assert Listwise({"base_url": "http://x/v1"}, window=4, stride=2).windows(6) == [(2, 6), (0, 4)]


def test_listwise_sliding_window_sorts(server):
    server.responder = listwise_oracle
    t = Listwise(settings(server), window=4, stride=2)
    out = t(frame())
    assert order(out) == ["d1", "d4", "d3", "d0", "d2", "d5"]
    assert server.calls == 2 * 2 and t.usage.repaired == 0 and not out["llm_unusable"].any()


def test_listwise_repair_and_unusable(server):
    server.script(Reply("[3] > [3] > [99] > [1]"), Reply("I cannot rank these."))
    t = Listwise(settings(server), window=4, stride=4)
    out = t(frame(["q1"]).iloc[:4].assign(rank=range(4)))
    assert order(out) == ["d2", "d0", "d1", "d3"]
    assert t.usage.repaired == 1 and t.usage.unusable == 0
    t2 = Listwise(settings(server), window=4, stride=4)
    out2 = t2(frame(["q1"]).iloc[:4])
    assert order(out2) == ["d0", "d1", "d2", "d3"] and out2["llm_unusable"].all() and t2.usage.unusable == 1


# -- pairwise tournament -------------------------------------------------------------------------
def pairwise_oracle(kind, body):
    p = prompt_of(kind, body)
    a = int(re.search(r"Paper A:.*?grade=(\d)", p, re.S).group(1))
    b = int(re.search(r"Paper B:.*?grade=(\d)", p, re.S).group(1))
    return choice_reply("A" if a >= b else "B")


def test_swiss_pairs_avoid_rematches():
    pairs, bye = swiss_pairs([0, 1, 2, 3], {frozenset((0, 1))})
    assert pairs == [(0, 2), (1, 3)] and bye is None
    assert swiss_pairs([0, 1, 2], set()) == ([(0, 1)], 2)


def test_pairwise_tournament(server):
    server.responder = pairwise_oracle
    t = PairwiseTournament(settings(server))
    out = t(frame(["q1"]))
    assert server.calls == 3 * 3  # 3 rounds x k/2 pairs
    got = order(out)
    assert got[0] == "d1"
    wins = out.set_index("docno")["llm_wins"]
    assert wins.sum() == 9 and wins["d1"] == 3
    assert list(out.sort_values("rank")["llm_wins"]) == sorted(wins, reverse=True)
    pairs = [frozenset(re.findall(r"paper (d\d) grade", prompt_of(k, b))) for k, b in server.requests]
    assert len(set(pairs)) == 9  # no pair met twice


def test_pairwise_unusable_flags_rows(server):
    server.responder = lambda k, b: Reply(" C", top_logprobs=[{" C": -0.1, " D": -2.0}])
    t = PairwiseTournament(settings(server), rounds=1)
    out = t(frame(["q1"]))
    assert order(out) == list(GRADES) and out["llm_unusable"].all() and t.usage.unusable == 3


# -- HLM-Cite agents ----------------------------------------------------------------------------
def hlm_oracle(kind, body):
    p = prompt_of(kind, body)
    if p.rstrip().endswith("Ranking: paper"):
        part = p.split("Candidates:")[-1]
        items = re.findall(r"Paper (\d+): Title: Title (d\d)", part)
        ranked = sorted(items, key=lambda x: (-GRADES.get(x[1], 0), int(x[0])))
        return Reply(
            " "
            + ", ".join(f"paper {i}" if j else i for j, (i, _) in enumerate(ranked))
            + "\nExplanations:\n"
            + "\n".join(f"Paper {i}: because {d}" for i, d in ranked)
        )
    items = re.findall(r"Paper (\d+): Title: (.*)", p.split("Candidate papers:")[-1])
    return Reply(" analysis one\n" + "\n".join(f"Paper {i}: analysis of {t}" for i, t in items[1:]))


def test_hlm_keep_top_and_rerank_lower_part(server, tmp_path):
    server.responder = hlm_oracle
    path = tmp_path / "example.txt"
    t = HLMAgents(settings(server), keep_top=2, example_path=path)
    out = t(frame(["q1"]))
    # d0, d1 stay on top; d2..d5 re-ranked by grade: d4 (2), d3 (1), d2, d5
    assert order(out) == ["d0", "d1", "d4", "d3", "d2", "d5"]
    o = out.set_index("docno")
    assert o.loc["d0", "llm_fixed"] and not o.loc["d4", "llm_fixed"]
    assert o.loc["d4", "llm_explanation"] == "because d4" and o.loc["d3", "llm_analysis"] == "analysis of Title d3"
    assert path.is_file() and "=== DECIDER EXAMPLE ===" in path.read_text()
    assert server.calls == 2 + 2  # guider (analyzer+decider) + one query
    # the stored example is reused (and editable): no guider calls, the edit reaches the prompts
    path.write_text(path.read_text().replace("Query paper:", "Query paper (EDITED):", 1))
    server.reset()
    t2 = HLMAgents(settings(server), keep_top=2, example_path=path)
    t2(frame(["q2"]))
    assert server.calls == 2 and "EDITED" in prompt_of(*server.requests[0])
    assert default_keep_top(8, 5) == 2 and default_keep_top(7, 5) == 3


def test_hlm_malformed_decider_output(server, tmp_path):
    server.script(
        Reply("Paper 1: a\nPaper 2: b"),
        Reply(" 3, paper 3, paper 9\nExplanations:\nPaper 3: x"),
        Reply("analysis"),
        Reply("nothing useful here"),
    )
    t = HLMAgents(settings(server), keep_top=1, guider=False)
    out = t(frame(["q1"]).iloc[:4])
    assert order(out) == ["d0", "d3", "d1", "d2"] and t.usage.repaired == 1
    out2 = t(frame(["q2"]).iloc[:4])
    assert order(out2, "q2") == ["d0", "d1", "d2", "d3"] and t.usage.unusable == 1
    assert out2.set_index("docno").loc["d1", "llm_unusable"] and not out2.set_index("docno").loc["d0", "llm_unusable"]


def test_split_and_decision_parsers():
    assert split_analyses(" first\nPaper 2: second\nPaper 3: third", 3) == ["first", "second", "third"]
    o, st, ex = parse_decision("Ranking: paper 2, paper 1\nExplanations:\nPaper 2: best\nPaper 1: ok", 2)
    assert o == [1, 0] and ex == ["ok", "best"] and st["valid"] == 2


# -- accounting, registry, pickling ---------------------------------------------------------
def test_usage_report_walks_pipeline(server, tmp_path):
    t = MIRPointwise(settings(server, tmp_path, prices={"test-model": {"prompt": 1.0, "completion": 1.0}}))
    pipe = pt.apply.generic(lambda df: df) >> t
    pipe(frame())
    pipe(frame())
    rep = usage_report([pipe, pt.apply.generic(lambda df: df)], names=["llm", "plain"])
    assert len(rep) == 1
    r = rep.iloc[0]
    assert (r["name"], r["component"], r["calls"], r["cache_hits"]) == ("llm", "mir_pointwise", 12, 12)
    assert r["prompt_tokens"] > 0 and r["cost"] > 0
    res = pd.DataFrame({"name": ["llm", "plain"], "AP": [0.5, 0.4]})
    merged = add_usage_columns(res, [pipe, pt.apply.generic(lambda df: df)])
    assert list(merged["llm_calls"]) == [12, 0] and list(merged["llm_cache_hits"]) == [12, 0]
    reset_usage(pipe)
    assert usage_totals(pipe)["llm_calls"].iloc[0] == 0


def test_registry_components_use_llm_config(server, tmp_path):
    from pyterrier_sci.registry import Context, get

    ctx = Context(settings={"llm": settings(server)}, work_dir=tmp_path)
    for name, cls in [
        ("mir_pointwise", MIRPointwise),
        ("mir_agent", MIRAgent),
        ("listwise", Listwise),
        ("pairwise_tournament", PairwiseTournament),
        ("hlm_agents", HLMAgents),
    ]:
        t = get(name).build(context=ctx)
        assert isinstance(t, cls) and t.settings.base_url == server.base_url
    t = get("listwise").build(context=ctx, window=10, stride=5, llm={"model": "other"})
    assert (t.window, t.stride, t.settings.model, t.settings.base_url) == (10, 5, "other", server.base_url)
    assert str(get("hlm_agents").build(context=ctx).example_path).startswith(str(tmp_path))


@pytest.mark.parametrize("cls", [MIRPointwise, MIRAgent, Listwise, PairwiseTournament, HLMAgents])
def test_components_pickle(server, cls):
    t = cls(settings(server))
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.settings == t.settings and t2._client is None
    out = t2(frame().iloc[:0])
    assert len(out) == 0 and "llm_unusable" in out.columns


@pytest.mark.parametrize("cls", [MIRPointwise, MIRAgent, Listwise, PairwiseTournament, HLMAgents])
def test_inspect_io(cls):
    """What pt.testing.TransformerTestCase.test_inspect_io checks (its schematic test needs the network)."""
    t = cls({"base_url": "http://127.0.0.1:9/v1", "cache_dir": ""})
    outputs = pt.inspect.transformer_outputs(t, ["qid", "query", "docno", "text", "score", "rank"])
    assert {"qid", "docno", "score", "rank", "llm_unusable"} <= set(outputs)


def test_declare_llm_params_takes_a_papers_own_ranges():
    """The generic plugin ranges the generic parameters (``window``, ``*_tokens``, ...); a paper's own
    parameters are ranged by the paper's plugin (issue 32 item 3), and a name the class does not take
    is refused."""
    from pyterrier_sci.plugins.llm import declare_llm_params
    from pyterrier_sci.registry import Param, declared_params

    class Judge:
        def __init__(self, llm=None, *, window: int = 20, per_label: int = 1, max_doc_tokens: int = 10):
            pass

    @declare_llm_params(Judge, per_label=Param(int, min=1, max=5))
    def factory(*inputs, context=None, **params):
        return params

    decl = declared_params(factory)
    assert decl.check("judge", {"per_label": 3, "window": 5, "max_doc_tokens": 7}) == \
        {"per_label": 3, "window": 5, "max_doc_tokens": 7}
    for bad in ({"per_label": 6}, {"window": 1}, {"max_doc_tokens": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            decl.check("judge", bad)

    @declare_llm_params(Judge)
    def unranged(*inputs, context=None, **params):
        return params

    assert declared_params(unranged).check("judge", {"per_label": 1000}) == {"per_label": 1000}
    with pytest.raises(TypeError, match="takes no parameter guider_task"):
        declare_llm_params(Judge, guider_task=Param(str))


def test_paper_plugins_range_their_own_llm_parameters():
    from pyterrier_sci.plugins.hlm_cite import hlm_agents_component
    from pyterrier_sci.plugins.mir import mir_pointwise_component
    from pyterrier_sci.registry import declared_params

    with pytest.raises(ValueError, match="per_label"):
        declared_params(mir_pointwise_component).check("mir_pointwise", {"per_label": 0})
    with pytest.raises(ValueError, match="keep_top"):
        declared_params(hlm_agents_component).check("hlm_agents", {"keep_top": -1})
