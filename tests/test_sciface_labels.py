"""SciFACE LLM facet labelling, candidate gathering and the end-to-end LLM-labelled route, against
the deterministic loopback OpenAI-compatible server (the real client code runs)."""

import json

import pandas as pd
import pyterrier as pt
from llm_server import ScriptedServer, prompt_of

from pyterrier_sci.plugins import sciface as F
from pyterrier_sci.plugins.sciface import labels as A


def test_parse_facet_label():
    ok = A.parse_facet_label(
        '```json\n{"background": {"score": 1, "reason": "diff domain"}, '
        '"method": {"score": "3", "reason": "both GCN"}}\n```'
    )
    assert ok == {"background": 1, "background_reason": "diff domain", "method": 3, "method_reason": "both GCN"}
    assert A.parse_facet_label('{"Background": 2, "Method": 0}')["method"] == 0
    for bad in [
        "",
        "Background 2, Method 1",
        '{"background": {"score": 4}, "method": {"score": 1}}',
        '{"background": {"score": 2.5}, "method": {"score": 1}}',
        '{"background": {"score": 2}}',
        '{"background": {"score": "high"}, "method": {"score": 1}}',
        '{"background": true, "method": 1}',
    ]:
        assert A.parse_facet_label(bad) is None, bad


CORPUS = pd.DataFrame(
    {
        "docno": ["s1", "a", "b", "c", "d", "s2"],
        "title": [
            "GCN for molecules",
            "GCN for social networks",
            "CRF tagging",
            "GraphSAGE nodes",
            "speech adaptation",
            "BERT for NER",
        ],
        "abstract": [
            "graph convolution molecule property",
            "graph convolution social network",
            "conditional random field sequence tagging",
            "graph sampling aggregation node",
            "speaker codes hybrid DNN HMM",
            "transformer named entity recognition",
        ],
    }
)


class Overlap(pt.Transformer):
    """A toy first stage: word overlap with the query over CORPUS."""

    def transform(self, q):
        rows = []
        for r in q.itertuples():
            qw = set(r.query.lower().split())
            for d in CORPUS.itertuples():
                rows.append(
                    (r.qid, r.query, d.docno, float(len(qw & set((d.title + " " + d.abstract).lower().split()))))
                )
        return pt.model.add_ranks(pd.DataFrame(rows, columns=["qid", "query", "docno", "score"]))


def responder(kind, body):
    """Method 3 when both papers say 'graph', background 2 when both say 'molecule'/'network', and a
    malformed answer for the speech paper."""
    p = prompt_of(kind, body)
    cand = p.rsplit("Candidate paper", 1)[1]
    if "speaker" in cand:
        return "I think they are similar."
    seed = p.rsplit("Seed paper", 1)[1].split("Candidate paper")[0]
    m = 3 if ("graph" in seed and "graph" in cand) else 0
    b = 2 if "network" in cand or "molecule" in cand else 1
    return json.dumps({"background": {"score": b, "reason": "r"}, "method": {"score": m, "reason": "why"}})


def seeds():
    s = CORPUS[CORPUS.docno.isin(["s1", "s2"])]
    return pd.DataFrame({"seed_id": s.docno, "seed_title": s.title, "seed_abstract": s.abstract})


def test_gather_candidates_excludes_seed_and_cuts():
    res = A.gather_candidates(Overlap(), seeds(), k=3)
    assert res.groupby("qid").size().to_dict() == {"s1": 3, "s2": 3}
    assert not (res.docno == res.qid).any()
    assert res.groupby("qid")["rank"].apply(list).tolist() == [[0, 1, 2]] * 2
    assert {"query_title", "query_abstract"} <= set(res.columns)


def test_labeller_counts_and_skips_unusable_and_prompt_is_the_papers():
    with ScriptedServer(responder=responder) as srv:
        lab = A.FacetLabeller(llm={"base_url": srv.base_url, "cache_dir": "", "mode": "chat", "progress": False})
        res = A.gather_candidates(Overlap(), seeds(), k=5)
        res = res.merge(CORPUS, on="docno")
        out = lab(res)
        system = srv.requests[0][1]["messages"][0]["content"]
    assert "Be conservative: if unsure, choose the LOWER score." in system and "EDGE RULES" in system
    assert len(out) == len(res) and out.label_unusable.sum() == 2  # the speech paper, for both seeds
    assert lab.usage.unusable == 2
    assert out[out.label_unusable].method.isna().all()
    s1 = out[(out.qid == "s1")].set_index("docno")
    assert s1.loc["a", "method"] == 3 and s1.loc["b", "method"] == 0 and s1.loc["a", "method_reason"] == "why"
    pairs = A.label_pairs(out)
    assert len(pairs) == len(out) - 2 and pairs.attrs["unusable"] == 2
    assert pairs.method.dtype.kind == "i"
    assert len(lab(res.iloc[:0])) == 0


def test_llm_labelled_route_end_to_end(tmp_path):
    """gather -> LLM labels -> triplets -> cross-encoder training -> facet re-ranking."""
    from test_sciface import make_tiny_bert

    base = make_tiny_bert(tmp_path / "bert")
    with ScriptedServer(responder=responder) as srv:
        lab = A.FacetLabeller(llm={"base_url": srv.base_url, "cache_dir": "", "mode": "chat", "progress": False})
        res = A.gather_candidates(Overlap(), seeds(), k=5).merge(CORPUS, on="docno")
        pairs = A.label_pairs(lab(res))
    assert len(F.make_triplets(pairs, "method")) > 0
    model = F.train_facet_cross_encoder(pairs, tmp_path / "m", "method", base_model=base, epochs=1, max_length=32)
    assert model.meta["training"]["train_pairs"] == len(pairs)
    out = model.scorer()(res)
    assert len(out) == len(res) and "method_score" in out.columns
