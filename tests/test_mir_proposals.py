"""Proposal extraction with the LLM layer (MIR §4.1, appendix A.1) and MIR data built from one's own
papers, against the deterministic loopback OpenAI-compatible server (the real client code runs)."""

import json

import pandas as pd
import pytest
from llm_server import ScriptedServer, prompt_of

from pyterrier_sci.datasets import mir_multicite as M
from pyterrier_sci.plugins.mir import proposals as P
from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph


def test_parse_proposal():
    ok = P.parse_proposal(
        '```json\n{"problem": "Parsing is slow.", "motivation": "Speed matters.", "methodology": "We use a GPU."}\n```'
    )
    assert ok == {"problem": "Parsing is slow.", "motivation": "Speed matters."}  # methodology dropped
    assert P.parse_proposal('{"Research_Problem": " A  gap. ", "Motivation": "Why."}') == {
        "problem": "A gap.",
        "motivation": "Why.",
    }
    for bad in [
        "",
        "The problem is parsing.",
        '{"problem": "x"}',
        '{"problem": "", "motivation": "y"}',
        '{"problem": ["x"], "motivation": "y"}',
        '{"problem": 3, "motivation": "y"}',
    ]:
        assert P.parse_proposal(bad) is None, bad


PAPERS = pd.DataFrame(
    {
        "docno": ["c1", "c2", "c3", "r1", "r2", "r3"],
        "title": ["Fast parsing", "Speech codes", "Empty", "A parser", "A vocoder", "A corpus"],
        "abstract": [
            "We study slow parsing. We propose a GPU parser.",
            "Speaker adaptation is hard. We use codes.",
            "",
            "A shift-reduce parser.",
            "A neural vocoder.",
            "A large treebank.",
        ],
    }
)
CITATIONS = pd.DataFrame(
    {
        "citing": ["c1", "c1", "c2", "c2", "c3", "c1"],
        "cited": ["r1", "r3", "r2", "r3", "r1", "zz"],
        "context": [
            "we use the parser of [1]",
            "the treebank [3] is large",
            "we extend the vocoder [2]",
            "see [3]",
            "as [1]",
            "unknown paper",
        ],
        "intent": ["Uses", "Background", "Extention", "Background", "Uses", "Uses"],
    }
)


def responder(kind, body):
    p = prompt_of(kind, body)
    abstract = p.rsplit("Abstract:", 1)[1]
    if "Speaker" in abstract:
        return "The problem is speaker adaptation."  # no JSON: unusable
    return json.dumps({"problem": "Parsing is slow.", "motivation": "Parsers must be fast.", "methodology": "GPU"})


def test_extractor_flags_unusable_output_and_never_guesses():
    with ScriptedServer(responder=responder) as srv:
        ex = P.ProposalExtractor({"base_url": srv.base_url, "cache_dir": "", "mode": "chat", "progress": False})
        out = ex(PAPERS[PAPERS["docno"].isin(["c1", "c2"])])
        prompts = [prompt_of(k, b) for k, b in srv.requests]
    assert list(out["proposal_unusable"]) == [False, True]
    assert out.loc[0, "proposal"] == "Parsing is slow. Parsers must be fast." and "GPU" not in out.loc[0, "proposal"]
    assert pd.isna(out.loc[1, "problem"]) and pd.isna(out.loc[1, "proposal"])
    assert ex.usage.unusable == 1 and len(prompts) == 2
    first = next(p for p in prompts if "We study slow parsing" in p)  # calls run concurrently
    assert "Methodology" in first and '"problem"' in first and "Title: Fast parsing" in first
    empty = ex(PAPERS.iloc[:0])
    assert list(empty.columns)[-4:] == ["problem", "motivation", "proposal", "proposal_unusable"]


def test_build_mir_data_round_trips_through_the_loader_and_the_graph(tmp_path):
    out = tmp_path / "mine.csv"
    with ScriptedServer(responder=responder) as srv:
        rows = P.build_mir_data(
            PAPERS, CITATIONS, out, {"base_url": srv.base_url, "cache_dir": "", "mode": "chat", "progress": False}
        )
    # c2's extraction is unusable (its citations skipped); c3 has no abstract and "zz" is unknown (skipped)
    assert rows.attrs["unusable"] == 1 and rows.attrs["missing"] == 2
    assert set(rows["actual_ids"]) == {"c1"} and len(rows) == 2
    assert list(rows["inspirational"]) == [1, 0]
    split = M.read_csv(out)
    assert list(split.proposals) == ["c1"] and split.proposals["c1"].text == "Parsing is slow. Parsers must be fast."
    assert split.titles["r1"] == "A parser" and split.papers["r1"] == "A shift-reduce parser."
    g = MethodologyAdjacencyGraph.from_csv(out)
    assert g.methodological("c1") == ["r1"] and g.non_methodological("c1") == ["r3"]
    assert g.papers["r1"] == "A parser A shift-reduce parser."


def test_command_line(tmp_path, capsys):
    papers = tmp_path / "papers.jsonl"
    papers.write_text("\n".join(json.dumps(r) for r in PAPERS.to_dict("records")))
    cites = tmp_path / "cites.tsv"
    CITATIONS.to_csv(cites, sep="\t", index=False)
    out = tmp_path / "out.csv"
    with ScriptedServer(responder=responder) as srv:
        code = P.main(
            [
                "--papers",
                str(papers),
                "--citations",
                str(cites),
                "--output",
                str(out),
                "--base-url",
                srv.base_url,
                "--mode",
                "chat",
            ]
        )
    assert code == 0 and out.exists()
    assert "1 unusable" in capsys.readouterr().err
    assert P.main(["--papers", str(tmp_path / "none.jsonl"), "--citations", str(cites), "--output", str(out)]) == 2
    with pytest.raises(ValueError, match="lacks columns"):
        P.build_mir_data(PAPERS, CITATIONS.drop(columns=["intent"]))
