"""HLM-Cite's workflow as one named pipeline (pipelines/hlm_cite.yaml) on real hep-th candidate
sets: retrieve the top r=8 with the dense retriever, the agents re-rank all but the top keep_top=2,
the top k=5 are returned.  The LLM is the loopback server answering as an oracle that knows which
candidates are core citations, so the expected final lists can be computed exactly."""
import re

import conftest
import yaml
from llm_server import Reply, ScriptedServer, prompt_of

pytestmark = conftest.needs_data("hepth-citations", "raw")
DS = "irds:sci/hepth-core-citations/test/c10"


def _oracle(core_titles):
    def respond(kind, body):
        p = prompt_of(kind, body)
        if p.rstrip().endswith("Ranking: paper"):  # the decider: core citations first, else in order
            items = re.findall(r"(?m)^Paper (\d+): Title: (.*)$", p.split("Candidates:")[-1])
            ranked = sorted(items, key=lambda x: (x[1].strip() not in core_titles, int(x[0])))
            return Reply(" " + ", ".join(f"paper {i}" if j else i for j, (i, _) in enumerate(ranked))
                         + "\nExplanations:\n" + "\n".join(f"Paper {i}: reason" for i, _ in ranked))
        items = re.findall(r"(?m)^Paper (\d+): Title: (.*)$", p.split("Candidate papers:")[-1])
        return Reply(" first\n" + "\n".join(f"Paper {i}: analysis" for i, _ in items[1:]))
    return respond


def _first_queries(n):
    """The first ``n`` test queries by id, the qrels, and those queries' core citations."""
    import pyterrier as pt
    ds = pt.get_dataset(DS)
    topics = ds.get_topics().sort_values("qid").head(n)
    qrels = ds.get_qrels()
    return topics, qrels, qrels[(qrels["qid"].isin(topics["qid"])) & (qrels["label"] > 0)]


def test_named_workflow_pipeline_keeps_top_and_reranks_the_rest(tmp_path):
    import pyterrier as pt

    import pyterrier_sci as ps
    from pyterrier_sci.pipeline import build_all
    topics, qrels, core = _first_queries(3)
    docs = ps.pipeline("pool >> text", dataset=DS)(topics)
    core_titles = {t.strip() for t in docs.merge(core[["qid", "docno"]])["title"]}

    cfg = yaml.safe_load((conftest.ROOT / "pipelines" / "hlm_cite.yaml").read_text())
    with ScriptedServer(_oracle(core_titles)) as srv:
        cfg["llm"] = {"base_url": srv.base_url, "model": "test-model", "cache_dir": "", "progress": False,
                      "mode": "completion", "timeout": 5, "max_retries": 1}
        pipes = build_all(cfg, ["retrieval", "HLM-Cite"], dataset=DS)
        retrieval, workflow = pipes["retrieval"](topics), pipes["HLM-Cite"](topics)
        assert srv.calls > 0
        measures = ps.measures.parse(["PREC@5"], dataset=DS)
        res = pt.Experiment([pipes["retrieval"], pipes["HLM-Cite"]], topics, qrels, measures, names=["r", "w"])

    is_core = set(zip(core["qid"], core["docno"]))
    for qid, got in workflow.groupby("qid"):
        got = list(got.sort_values("rank")["docno"])
        ranked = list(retrieval[retrieval.qid == qid].sort_values("rank")["docno"])
        assert len(got) == 5
        assert got[:2] == ranked[:2]                      # keep_top stays in place
        lower = ranked[2:8]                              # r = 8: the agents see ranks 3..8
        expected = sorted(lower, key=lambda d: ((qid, d) not in is_core, lower.index(d)))[:3]
        assert got[2:] == expected
    # the oracle only moves core citations up: precision at 5 cannot drop
    assert res.iloc[1, 1] >= res.iloc[0, 1]


def test_without_the_analyzer_the_decider_reads_the_abstracts_in_one_call(tmp_path):
    """The ablation "w/o Analyzer" (§4.4): no analyzer call; the decider ranks from the raw titles and
    abstracts, one call per query; the oracle's ranking is applied below keep_top as with the analyzer."""
    import pyterrier_sci as ps
    topics, _, core = _first_queries(2)
    first = ps.pipeline('pool >> text >> dense(index=False, fields=["title", "abstract"]) % 8', dataset=DS)(topics)
    core_titles = {t.strip() for t in first.merge(core[["qid", "docno"]])["title"]}
    prompts = []
    oracle = _oracle(core_titles)

    def respond(kind, body):
        prompts.append(prompt_of(kind, body))
        return oracle(kind, body)

    llm = {"model": "test-model", "cache_dir": "", "progress": False, "mode": "completion", "timeout": 5,
           "max_retries": 1}
    with ScriptedServer(respond) as srv:
        llm["base_url"] = srv.base_url
        agents = ps.pipeline('hlm_agents(keep_top=2, text_field="abstract", analyzer=False, guider=False)',
                             dataset=DS, config={"llm": llm})
        out = agents(first)
        assert srv.calls == len(topics)                        # the decider alone, once per query
    assert all(p.rstrip().endswith("Ranking: paper") for p in prompts)
    assert all("Abstract: " in p and "Analysis:" not in p for p in prompts)
    assert (out["llm_analysis"] == "").all() and not out["llm_unusable"].any()
    is_core = set(zip(core["qid"], core["docno"]))
    for qid, got in out.groupby("qid"):
        got = list(got.sort_values("rank")["docno"])
        ranked = list(first[first.qid == qid].sort_values("rank")["docno"])
        lower = ranked[2:]
        assert got[:2] == ranked[:2]
        assert got[2:] == sorted(lower, key=lambda d: ((qid, d) not in is_core, lower.index(d)))
