"""sci/acl-fulltext: the 1,672 ACL full papers, 949 full-paper queries, qrels, chunk corpora."""

import json

import pytest
from conftest import DATA, needs_data

pytestmark = needs_data("acl-fulltext", "papers.jsonl")


@pytest.fixture(scope="module")
def irds():
    import ir_datasets

    import pyterrier_sci  # noqa: F401

    return ir_datasets


def test_documents(irds):
    ds = irds.load("sci/acl-fulltext")
    docs = {d.doc_id: d for d in ds.docs_iter()}
    assert len(docs) == 1672
    d = docs["A00-1020"]
    assert d.title == "Multilingual Coreference Resolution"
    assert d.abstract.startswith(
        "In this paper we present a new, multilingual data-driven method"
    )  # soft hyphen joined
    assert d.text == f"{d.title} {d.abstract}" and d.default_text() == d.text
    assert d.full_text.startswith(d.abstract) and "&quot;" not in d.full_text
    assert d.sections[0].heading == "Introduction"
    assert not any(s.heading.lower().startswith("acknowledg") for p in docs.values() for s in p.sections)


def test_queries_and_qrels(irds):
    refs = irds.load("sci/acl-fulltext/references")
    queries = list(refs.queries_iter())
    assert len(queries) == 949
    qrels = list(refs.qrels_iter())
    assert len(qrels) == 8979  # the in-set references of queries_A.jsonl
    by_q = {}
    for r in qrels:
        by_q.setdefault(r.query_id, set()).add(r.doc_id)
    assert min(map(len, by_q.values())) >= 5
    assert all(q not in rel for q, rel in by_q.items())  # a paper is never relevant to itself
    with open(DATA / "acl-fulltext" / "queries_A.jsonl") as f:
        first = json.loads(f.readline())
    assert by_q[first["query_id"]] == set(first["relevant_refs"])
    both = list(irds.load("sci/acl-fulltext/references-or-citers").qrels_iter())
    assert len(both) == 15188 and {(r.query_id, r.doc_id) for r in qrels} <= {(r.query_id, r.doc_id) for r in both}
    q = queries[0]
    assert q.query_id == "A00-1020" and q.full_text and q.sections and q.text.startswith(q.title)


def test_chunk_corpus_covers_every_paper(irds):
    chunks = list(irds.load("sci/acl-fulltext/chunks-3000").docs_iter())
    papers = {d.doc_id: d for d in irds.load("sci/acl-fulltext").docs_iter()}
    assert {c.paper_id for c in chunks} == set(papers)
    assert len(chunks) == 3628
    assert all(c.doc_id.startswith(c.paper_id + "%p") for c in chunks)
    # every word of a paper's full text is in one of its chunks, and no chunk exceeds the unit
    by_paper = {}
    for c in chunks:
        by_paper.setdefault(c.paper_id, []).append(c)
    assert (
        by_paper["J93-2004"][0].body == "" and by_paper["J93-2004"][0].text == papers["J93-2004"].title
    )  # no text: its title
    for pid in ("A00-1020", "J10-4006"):  # J10-4006: the longest paper, 23,621 words
        words = papers[pid].full_text.split()
        got = by_paper[pid]
        assert all(len(c.body.split()) <= 3000 for c in got)
        assert got[-1].body.split()[-1] == words[-1]
        assert set(words) == {w for c in got for w in c.body.split()}


def test_measure_aliases_are_the_papers_measures():
    import ir_measures

    import pyterrier_sci as ps

    ms = ps.measures.parse(["Recall@100", "MRR@50", "nDCG@50"], dataset="sci/acl-fulltext/references")
    assert [str(m) for m in ms] == ["R@100", "RR@50", "nDCG@50"]
    # PRISM B.2: Recall@K = relevant in the top K / all relevant; MRR@K = 1 / rank of the first relevant in the top K
    qrels = [ir_measures.Qrel("q", d, 1) for d in ("a", "b", "c", "d")]
    run = [ir_measures.ScoredDoc("q", d, 10 - i) for i, d in enumerate(["x", "y", "b", "z", "a"])]
    R3, RR50 = ir_measures.parse_measure("R@3"), ir_measures.parse_measure("RR@50")
    agg = ir_measures.calc_aggregate([R3, RR50], qrels, run)
    assert agg[R3] == pytest.approx(1 / 4) and agg[RR50] == pytest.approx(1 / 3)
    rr2 = ir_measures.calc_aggregate([ir_measures.parse_measure("RR@2")], qrels, run)
    assert list(rr2.values()) == [0.0]  # the first relevant paper at rank 3 is outside the top 2
