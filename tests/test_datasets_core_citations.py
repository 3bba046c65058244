import conftest
import ir_measures
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.data import MissingDataError
from pyterrier_sci.datasets import core_citations as cc

# A hand-made graph.  q cites r1..r4; p1 and p2 cite q.
# p1 also cites r1 and r2, p2 also cites r2 and x  ->  core(q) = {r1, r2}, superficial(q) = {r3, r4}.
EDGES = [("q", "r1"), ("q", "r2"), ("q", "r3"), ("q", "r4"),
         ("p1", "q"), ("p1", "r1"), ("p1", "r2"), ("p2", "q"), ("p2", "r2"), ("p2", "x"),
         ("s", "r3")]  # s cites r3 but not q: r3 stays superficial


def test_eq1_core_and_superficial_on_a_hand_made_graph():
    g = cc.CitationGraph.from_edges(EDGES)
    assert g.core("q") == {"r1", "r2"}
    assert g.superficial("q") == {"r3", "r4"}
    assert g.core("p1") == set()  # nobody cites p1
    assert g.cited_by["q"] == {"p1", "p2"}


def _graph(n_queries=30, k=2, seed=1):
    """Queries Q_i with k+1 core (followed by a citer) and k+1 superficial references."""
    edges = []
    for i in range(n_queries):
        q = f"Q{i}"
        core = [f"C{i}_{j}" for j in range(k + 1)]
        sup = [f"S{i}_{j}" for j in range(k + 1)]
        edges += [(q, d) for d in core + sup]
        edges += [(f"F{i}", q)] + [(f"F{i}", d) for d in core]
    edges += [(f"N{j}", f"N{j + 1}") for j in range(200)]
    return cc.CitationGraph.from_edges(edges), {a for e in edges for a in e}


def test_builder_samples_k_core_k_superficial_and_non_citations():
    g, text = _graph()
    built = cc.build(g, text, k=2, candidate_size=12, test_fraction=0.2, seed=7)
    train, test = built["train"], built["test"]
    assert len(test.queries) == 6 and len(train.queries) == 24
    assert not set(train.queries) & set(test.queries)
    for q in test.queries:
        cands = dict(test.candidates[q])
        assert len(test.candidates[q]) == 12 and len(cands) == 12
        assert sorted(cands.values()).count(2) == 2 and sorted(cands.values()).count(1) == 2
        for d, grade in cands.items():
            if grade == 2:
                assert d in g.core(q)
            elif grade == 1:
                assert d in g.superficial(q)
            else:
                assert d not in g.references[q] and d != q
    # deterministic by seed; another seed samples differently
    again = cc.build(g, text, k=2, candidate_size=12, test_fraction=0.2, seed=7)
    assert again["test"] == test
    other = cc.build(g, text, k=2, candidate_size=12, test_fraction=0.2, seed=8)
    assert other["test"] != test
    with pytest.raises(ValueError, match="at least 2k"):
        cc.build(g, text, k=2, candidate_size=3)


def test_ineligible_queries_are_left_out():
    g, text = _graph(n_queries=3, k=2)
    assert cc.eligible_queries(g, text, k=3) == [f"Q{i}" for i in range(3)]
    assert cc.eligible_queries(g, text, k=4) == []
    # without text for its core references a query is not eligible
    assert cc.eligible_queries(g, text - {"C0_0", "C0_1"}, k=2) == ["Q1", "Q2"]


def test_measures_by_hand():
    qrels = pd.DataFrame([("q", d, g) for d, g in [("a", 2), ("b", 2), ("c", 1), ("d", 0), ("e", 2)]],
                         columns=["query_id", "doc_id", "relevance"])
    run = pd.DataFrame([("q", d, s) for d, s in [("c", 5), ("a", 4), ("d", 3), ("b", 2), ("e", 1)]],
                       columns=["query_id", "doc_id", "score"])
    res = ir_measures.calc_aggregate([ps.measures.get("hlm.PREC@3"), ps.measures.get("hlm.NDCG@3")], qrels, run)
    assert res[ps.measures.get("hlm.PREC@3")] == pytest.approx(1 / 3)
    ideal = 1 + 1 / np.log2(3) + 1 / np.log2(4)
    assert res[ps.measures.get("hlm.NDCG@3")] == pytest.approx((1 / np.log2(3)) / ideal)
    assert str(ps.measures.get("NDCG@5", dataset="irds:sci/hepth-core-citations/test/c10")) == "hlm.NDCG@5"


@conftest.needs_data("hepth-citations", "raw")
def test_hepth_registration_matches_the_data_directory():
    g = cc.HEPTH.graph()
    # the README's counts: 352,768 edges between 27,769 papers
    assert sum(len(v) for v in g.references.values()) == 352768
    assert len(set(g.references) | set(g.cited_by)) == 27769
    import json
    # the derived queries_B.jsonl of the data directory was built with the same definition
    line = json.loads(open(conftest.DATA / "hepth-citations" / "queries_B.jsonl").readline())
    q = str(line["query_id"])
    assert g.core(q) == {str(x) for x in line["core"]}
    assert g.superficial(q) == {str(x) for x in line["superficial"]}
    ds = pt.get_dataset("irds:sci/hepth-core-citations/test/c100")
    pool = ds.get_results()
    qrels = ds.get_qrels()
    assert pool.groupby("qid").size().eq(100).all()
    assert qrels.groupby("qid")["label"].apply(lambda s: (s == 2).sum()).eq(5).all()
    topics = ds.get_topics()
    # 4,292 queries have >= 5 core and >= 5 superficial references; 20% are test queries
    assert set(topics["qid"]) == set(pool["qid"]) and len(topics) == 858


def test_hlm_release_loader_on_a_fixture(tmp_path):
    ids = [[100, 11, 12, 13, 14, 15, 21, 22, 23, 24, 25], [200, 31, 32, 33, 34, 35, 41, 42, 43, 44, 45]]
    np.save(tmp_path / "test_table.npy", np.array(ids, dtype=np.int64))
    for pid in {x for row in ids for x in row}:
        d = tmp_path / "text" / str(pid)[-1]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{pid}.txt").write_text(f"Title {pid}\nAbstract of paper {pid}.\nSecond line.\n")
    split, papers = cc.read_hlm_release(tmp_path, "test")
    assert split.queries == ["100", "200"]
    assert split.candidates["100"][:2] == [("11", 2), ("12", 2)] and split.candidates["100"][5] == ("21", 1)
    assert papers["31"].title == "Title 31" and papers["31"].abstract == "Abstract of paper 31. Second line."
    cc.register_hlm_release(tmp_path, name="sci-test/hlm")
    ds = pt.get_dataset("irds:sci-test/hlm/test")
    assert len(ds.get_qrels()) == 20 and set(ds.get_topics()["qid"]) == {"100", "200"}
    with pytest.raises(MissingDataError, match="train_table.npy"):
        cc.read_hlm_release(tmp_path, "train")
