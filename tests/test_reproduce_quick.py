"""The quick tier of every declared reproduction (pipelines/reproduce/*.yaml), run for real and compared
with the figures recorded by `pyterrier-sci reproduce --tier quick --record`: a figure that drifts
beyond its tolerance, or a published figure a table claims to reproduce and misses, fails here.

The LLM rows of the quick tier run against the loopback OpenAI-compatible server: their call counts,
and their behaviour (a judge that says "Yes" to every paper keeps the first-stage order, §5.2.1)."""
import json

import pytest
from conftest import DATA

from pyterrier_sci import reproduce as R
from pyterrier_sci.llm.loopback import ScriptedServer, prompt_of

TABLES = [(p.id, t.key) for p, t in R.select()]
DATA_OF = {"sciface": "csfcube", "mir": "mir-multicite", "doris_mae": "doris-mae", "prism": "acl-fulltext",
           "hlm_cite": "hepth-citations"}


@pytest.mark.parametrize("paper,table", TABLES, ids=[f"{p}/{t}" for p, t in TABLES])
def test_quick_tier_keeps_its_recorded_figures(paper, table):
    if not (DATA / DATA_OF.get(paper, paper)).exists():
        pytest.skip(f"no data for {paper} under {DATA}")
    declared = R.load_paper(paper).tables[table]
    if not any(s.runs_here for s in declared.systems.values()):
        # a table declared for its published figures only (every row needs what is not offline): nothing runs
        (res,) = R.reproduce(f"{paper}/{table}", tier="full")
        assert res.cells and all(c.status in (R.STATUS_NEEDS_CHECKPOINT, R.STATUS_NEEDS_DATA) and c.reason
                                 for c in res.cells)
        return
    (res,) = R.reproduce(f"{paper}/{table}", tier="quick")
    ran = [c for c in res.cells if c.reproduced is not None]
    assert ran, f"{paper}/{table}: the quick tier ran nothing"
    unrecorded = [c for c in ran if c.recorded is None]
    missing = [(c.system, c.dataset, c.measure) for c in unrecorded][:5]
    assert not unrecorded, (f"{paper}/{table}: no recorded figure for {missing}; run pyterrier-sci "
                            f"reproduce {paper}/{table} --tier quick --record")
    assert not res.failed, "\n".join(f"{c.system} {c.dataset} {c.measure}: {c.reason}" for c in res.failed)


@pytest.mark.skipif(not (DATA / "mir-multicite").exists(), reason="no MIR-MultiCite data")
def test_mir_llm_rows_against_the_loopback_server():
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        (res,) = R.reproduce("mir/table3", tier="quick", llm=srv.base_url)
        calls = srv.calls
    cells = {(c.system, c.measure): c for c in res.cells}
    # 3 proposals x top 10: one pointwise judgement per paper; the agent analyses each proposal once,
    # then each paper
    assert calls >= 3 * 10 * 2
    for m in ("R@3", "R@5", "mAP"):
        first = cells[("MiniLM_FT_top10", m)].reproduced
        assert first is not None
        # every paper judged relevant: the first-stage order stays, so do the figures
        assert cells[("Pointwise_ZS", m)].reproduced == pytest.approx(first, abs=1e-6)
        assert cells[("Agent_ZS", m)].reproduced == pytest.approx(first, abs=1e-6)
        # the loopback server stands in for the paper's LLM: shown, never compared with the published figure
        assert cells[("Pointwise_ZS", m)].status == R.STATUS_STAND_IN
    assert not [c for c in res.failed if c.system == "MiniLM_FT_top10"]


@pytest.mark.skipif(not (DATA / "doris-mae").exists(), reason="no DORIS-MAE data")
def test_the_doris_mae_example_is_the_reproduction_with_its_errors():
    """examples/doris_mae.py reads the declared tables' saved runs back and adds bootstrap SEs: its figures,
    the declared random row's included, are the reproduction's, to the digit."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "examples" / "doris_mae.py"
    spec = importlib.util.spec_from_file_location("doris_mae_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    (res,) = R.reproduce("doris_mae/table8", tier="quick")
    table = example.with_errors(res, bootstrap=50, seed=0).set_index("name")
    assert "Random" in table.index
    for c in res.cells:
        if c.reproduced is None:
            continue
        assert table.loc[c.system, c.measure] == pytest.approx(c.reproduced, abs=1e-6)
        if c.system == "Random":    # a mean over shufflings, declared: no bootstrap over queries
            assert table.loc[c.system, c.measure + " SE"] != table.loc[c.system, c.measure + " SE"]
        else:
            assert table.loc[c.system, c.measure + " SE"] >= 0
    # the random row is below every MiniLM row on MAP (a chance level, not a copy of a system)
    assert table.loc["Random", "MAP"] < table.drop(index="Random")["MAP"].min()


@pytest.mark.skipif(not (DATA / "hepth-citations").exists(), reason="no hep-th data")
def test_hlm_cite_agent_rows_against_the_loopback_server():
    """HLM-Cite's four agent rows of Table 3 (workflow, w/o guider, w/o analyzer, w/o both) on the quick tier:
    a decider that keeps the retrieved order leaves the curriculum's top 5, so every row's figures are the
    curriculum's; the calls are the agents' (two per query with the analyzer, one without) and the
    decider reads the abstracts exactly when there is no analyzer."""
    prompts = []
    rows = ("Full_workflow", "No_guider", "No_analyzer", "No_analyzer_guider")

    def respond(kind, body):
        p = prompt_of(kind, body)
        prompts.append(p)
        if p.rstrip().endswith("Ranking: paper"):
            return " 1, paper 2, paper 3, paper 4, paper 5, paper 6\nExplanations:\nPaper 1: first"
        return " analysis of the first paper\nPaper 2: analysis"

    with ScriptedServer(responder=respond) as srv:
        (res,) = R.reproduce("hlm_cite/table3", tier="quick", llm=srv.base_url,
                             systems=["Full_curriculum", *rows])
    cells = {(c.system, c.measure): c for c in res.cells}
    for m in ("PREC@3", "PREC@5", "NDCG@3", "NDCG@5"):
        base = cells[("Full_curriculum", m)].reproduced
        assert base is not None
        for row in rows:
            assert cells[(row, m)].reproduced == pytest.approx(base, abs=1e-9), (row, m)
            assert cells[(row, m)].published is not None
    deciders = [p for p in prompts if p.rstrip().endswith("Ranking: paper")]
    raw = [p for p in deciders if "Abstract: " in p.split("Candidates:")[-1]]
    queries = 20
    # with the analyzer: analyzer + decider per query (the guider's two calls once, when no example is kept)
    assert len(prompts) - len(deciders) in (2 * queries, 2 * queries + 1)
    assert len(raw) == 2 * queries and len(deciders) in (4 * queries, 4 * queries + 1)


@pytest.mark.skipif(not (DATA / "acl-fulltext").exists(), reason="no ACL full-text data")
def test_prism_agent_rows_against_the_loopback_server():
    """PRISM's Table 2 on the quick tier: three aspect agents (one call per paper and aspect) against one
    agent writing all three queries as JSON (one call per paper).  A server that gives both the same aspect
    queries makes the two rows' rankings, hence their figures, the same, and unlike the section optimiser's."""
    import json
    import re
    calls = {"multi": 0, "single": 0}
    words = {"research question, motivation and contributions": "motivation", "methodology": "method",
             "experimental setup and results": "experiments"}

    def respond(kind, body):
        p = prompt_of(kind, body)
        title = re.search(r"(?m)^Title: (.*)$", p).group(1).strip()
        if "JSON object with the keys" in p:
            calls["single"] += 1
            return json.dumps({"research_question_query": f"{title} motivation",
                               "method_query": f"{title} method", "experiment_query": f"{title} experiments"})
        calls["multi"] += 1
        aspect = re.search(r"Your explanation \((.*)\):", p).group(1)
        return f" {title} {words[aspect]}"

    with ScriptedServer(responder=respond) as srv:
        (res,) = R.reproduce("prism/table2", tier="quick", llm=srv.base_url)
    cells = {(c.system, c.measure): c.reproduced for c in res.cells}
    queries = 20
    assert calls == {"multi": 3 * queries, "single": queries}
    for m in ("Recall@100", "Recall@200"):
        assert cells[("Multi_bm25", m)] is not None
        assert cells[("Multi_bm25", m)] == pytest.approx(cells[("Single_bm25", m)], abs=1e-9)
    assert cells[("Multi_bm25", "Recall@100")] != pytest.approx(cells[("Sections_bm25", "Recall@100")], abs=1e-6)


@pytest.mark.skipif(not (DATA / "csfcube").exists(), reason="no CSFCube data")
def test_sciface_label_agreement_row_against_the_loopback_server(tmp_path, monkeypatch):
    """SciFACE's Table 3, the labeller's row: it labels the 100 sampled judged pairs of each facet (one call
    each, seed paper and candidate in the prompt), and the figure is the agreement of its labels with CSFCube's
    adjudicated grades on those pairs: a server that answers each pair with its adjudicated grades agrees
    perfectly (Spearman 1), one that answers with their reverse (3 - grade) disagrees perfectly (-1)."""
    import numpy as np

    from pyterrier_sci import agreement
    from pyterrier_sci.datasets import csfcube
    docs = csfcube.docs()
    grade, sampled = {}, set()
    for facet in ("background", "method"):
        adj = agreement.judgements(f"sci/csfcube/{facet}", "adjudicated")
        for q, d, g in adj.itertuples(index=False):
            seed = docs[q.split("_")[0]]
            grade.setdefault((seed.default_text()[:80], docs[d].title), {})[facet] = int(g)
        # the declared sample: 100 of the judged pairs in (qid, docno) order, drawn with seed 0
        pairs = adj.sort_values(["qid", "docno"]).reset_index(drop=True)
        pick = pairs.iloc[np.sort(np.random.default_rng(0).choice(len(pairs), 100, replace=False))]
        sampled |= {(q.split("_")[0], d) for q, d in zip(pick["qid"], pick["docno"])}
    prompts = []

    def answer(flip):
        def respond(kind, body):
            p = prompt_of(kind, body)
            prompts.append(p)
            seed = p.split("Seed paper\nTitle: \nAbstract: ", 1)[1][:80]
            cand = p.split("Candidate paper\nTitle: ", 1)[1].split("\n", 1)[0]
            g = grade[(seed, cand)]
            return json.dumps({f: (3 - g.get(f, 0)) if flip else g.get(f, 0) for f in ("background", "method")})
        return respond

    for flip, expected in ((False, 1.0), (True, -1.0)):
        prompts.clear()
        monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / f"work-{flip}"))   # LLM answers cached per work dir
        with ScriptedServer(responder=answer(flip)) as srv:
            (res,) = R.reproduce("sciface/table3", tier="quick", llm=srv.base_url, systems=["LLM_vs_adjudicated"])
        # one call per sampled pair; a pair sampled on both facets has the same prompt (the seed paper's text is
        # the query of both), asked once
        assert len(prompts) == len(set(prompts)) == len(sampled) > 190
        for c in res.cells:
            assert c.reproduced == pytest.approx(expected), c
