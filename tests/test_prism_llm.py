"""PRISM's LLM query optimisers against a deterministic OpenAI-compatible server on loopback."""

import json

import pandas as pd
import pytest
from llm_server import Reply, ScriptedServer, prompt_of

import pyterrier_sci as ps
from pyterrier_sci.llm import LLMError
from pyterrier_sci.plugins.prism import AspectAgents, SingleAgent, parse_single_agent

SECTIONS = [
    ("1 Introduction", "We motivate the problem of citation recommendation."),
    ("2 Model", "A bi-encoder embeds papers."),
    ("3 Experiments", "Recall on ACL papers."),
]
FRAME = pd.DataFrame(
    {
        "qid": ["p1", "p2"],
        "query": ["x", "y"],
        "title": ["Paper One", "Paper Two"],
        "abstract": ["abstract one", "abstract two"],
        "full_text": ["full text one " * 50, "full text two"],
        "sections": [SECTIONS, SECTIONS],
    }
)


def _aspect_of(kind, body):
    text = prompt_of(kind, body)
    for word, aspect in (
        ("METHOD wise", "method"),
        ("EXPERIMENT wise", "experiment"),
        ("RESEARCH QUESTION wise", "rq"),
    ):
        if word in text:
            return aspect
    return "?"


def _responder(kind, body):
    text = prompt_of(kind, body)
    paper = "one" if "Paper One" in text else "two"
    aspect = _aspect_of(kind, body)
    if paper == "two" and aspect == "experiment":
        return Reply("")  # an empty answer: falls back to the paper's experiment section
    return f"**Explanation:** {aspect} of paper {paper}"


@pytest.fixture
def server():
    with ScriptedServer(_responder) as srv:
        yield srv


def _llm(srv, **kw):
    return {"base_url": srv.base_url, "cache_dir": "", "mode": "chat", "max_retries": 0, "progress": False, **kw}


def test_aspect_agents_one_call_per_paper_and_aspect(server):
    agents = AspectAgents(_llm(server), max_tokens=300, max_paper_tokens=20)
    out = agents(FRAME)
    assert server.calls == 6
    assert list(out["method_query"]) == ["method of paper one", "method of paper two"]
    assert list(out["research_question_query"]) == ["rq of paper one", "rq of paper two"]
    assert out.loc[0, "experiment_query"] == "experiment of paper one"
    assert out.loc[1, "experiment_query"] == "Recall on ACL papers."  # the section-based fallback
    assert list(out["aspect_fallback"]) == ["", "experiment"]
    assert list(out["query"]) == ["x", "y"]  # the query is not replaced
    kind, body = server.requests[0]
    assert kind == "chat" and body["messages"][0]["role"] == "system" and body["max_tokens"] == 300
    user = body["messages"][1]["content"]
    assert "Title: Paper One" in user or "Title: Paper Two" in user
    assert all(
        len(prompt_of(k, b).split("Full text of the paper:")[1]) < 200 for k, b in server.requests
    )  # cut to ~20 tokens
    assert agents.usage.calls == 6


def test_aspect_agents_subset_completion_mode_and_errors(server):
    agents = AspectAgents(_llm(server, mode="completion"), aspects=["method"])
    out = agents(FRAME.iloc[:1])
    assert server.calls == 1 and server.requests[0][0] == "completion"
    assert "METHOD wise" in server.requests[0][1]["prompt"]  # the system prompt goes before the paper
    assert "experiment_query" not in out.columns and out.loc[0, "method_query"] == "method of paper one"
    with ScriptedServer(lambda k, b: Reply(status=500)) as bad:
        with pytest.raises(LLMError):
            AspectAgents(_llm(bad))(FRAME)
        flagged = AspectAgents(_llm(bad), on_error="flag")(FRAME)
        assert list(flagged["aspect_fallback"]) == ["research_question,method,experiment"] * 2
        assert flagged.loc[0, "method_query"] == "A bi-encoder embeds papers."
    empty = AspectAgents(_llm(server))(FRAME.iloc[:0])
    assert len(empty) == 0 and "method_query" in empty.columns
    with pytest.raises(ValueError, match="unknown aspects"):
        AspectAgents(_llm(server), aspects=["results"])


def test_single_agent_json_and_fallback():
    answers = iter(
        [
            json.dumps({"method_query": "M1", "experiment_query": ["E1", "E2"], "research_question_query": "R1"}),
            "I cannot produce JSON.",
        ]
    )
    with ScriptedServer(lambda k, b: next(answers)) as srv:
        out = SingleAgent(_llm(srv, concurrency=1))(FRAME)
        assert srv.calls == 2
        assert "method_query" in prompt_of(*srv.requests[0])
    assert out.loc[0, ["research_question_query", "method_query", "experiment_query"]].tolist() == ["R1", "M1", "E1 E2"]
    assert out.loc[0, "aspect_fallback"] == ""
    assert out.loc[1, "method_query"] == "A bi-encoder embeds papers."
    assert out.loc[1, "aspect_fallback"] == "research_question,method,experiment"


def test_parse_single_agent_keys():
    text = 'Sure! ```json\n{"Method Query": "m", "research_question_query": "", "experiment_query": "e"}\n```'
    assert parse_single_agent(text) == {"method": "m", "experiment": "e"}
    assert parse_single_agent("no json") == {}


def test_components_take_the_llm_section(server):
    cfg = {
        "llm": _llm(server),
        "pipelines": {"Q": "prism_agents(aspects=['method'], max_tokens=50)", "S": "prism_single_agent(max_tokens=60)"},
    }
    q = ps.pipeline("Q", config=cfg)
    assert q.settings.base_url == server.base_url and q.aspects == ("method",) and q.max_tokens == 50
    out = q(FRAME.iloc[:1])
    assert out.loc[0, "method_query"] == "method of paper one"
    assert ps.pipeline("S", config=cfg).max_tokens == 60
