"""SciFullBench's released layout, read from a tiny fixture (tests/fixtures/scifullbench)."""

from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci  # noqa: F401
from pyterrier_sci.data import MissingDataError
from pyterrier_sci.datasets.scifullbench import SciFullBench, match_key, parse_markdown_sections, register_scifullbench

FIXTURE = Path(__file__).parent / "fixtures" / "scifullbench"
NAME = "sci-test/scifullbench"


@pytest.fixture(scope="module")
def bench():
    return register_scifullbench(FIXTURE, name=NAME)


def test_corpus_documents(bench):
    import ir_datasets

    docs = {d.doc_id: d for d in ir_datasets.load(NAME).docs_iter()}
    assert len(docs) == 4
    nid = next(d for d in docs if d.startswith("sfb-"))  # the item without an id gets a stable one
    assert docs[nid].title == "Graph Neural Networks for Molecules"
    p = docs["2301.00001"]
    # the .mmd full text: markdown sections, the reference section dropped
    assert [s.heading for s in p.sections] == ["1 Introduction", "2 Method", "3 Experiments"]
    assert "Attention is all you need" not in p.full_text and p.full_text.startswith(p.abstract)
    assert p.text == f"{p.title} {p.abstract}"
    # without a full text file: the released segments
    q = docs["2302.00002"]
    assert q.full_text.endswith(
        "Segment two of Retrieval-Augmented Generation for Open-Domain QA: experiments and results."
    )


def test_queries_qrels_and_the_query_paper(bench):
    ds = pt.get_dataset("irds:" + NAME + "/acl/references")
    topics = ds.get_topics("text")
    assert list(topics.qid) == ["acl-ref-1"] and topics["query"][0].startswith("Efficient Transformers Survey")
    qrels = ds.get_qrels()
    # case/space differences still match; the candidate missing from the corpus is left out
    assert sorted(qrels.docno) == ["2301.00001", "2302.00002"] and set(qrels.label) == {1}
    cit = pt.get_dataset("irds:" + NAME + "/acl/citations").get_qrels()
    assert set(cit.docno) == {"2301.00001", next(d for d in bench.corpus() if d.startswith("sfb-"))}  # title match
    import ir_datasets

    q = next(iter(ir_datasets.load(NAME + "/acl/references").queries_iter()))
    assert [s.heading for s in q.sections] == [
        "Efficient Transformers Survey",
        "1 Introduction",
        "2 Approach",
        "3 Evaluation",
    ]
    assert q.paper_docno == ""
    iclr = next(iter(ir_datasets.load(NAME + "/iclr/references").queries_iter()))
    assert iclr.query_id == "iclr-7" and iclr.paper_docno == "2303.00003"  # the query paper is in the corpus


def test_segments_and_chunks(bench):
    import ir_datasets

    segs = list(ir_datasets.load(NAME + "/segments").docs_iter())
    assert len(segs) == 8 and segs[0].doc_id == "2301.00001%p0" and segs[0].text.startswith("Sparse Attention")
    chunks = list(ir_datasets.load(NAME + "/chunks-128").docs_iter())
    assert {c.paper_id for c in chunks} == set(bench.corpus())


def test_exclusion_by_paper_docno(bench):
    from pyterrier_sci.plugins.prism import ExcludeQueryPaper, PaperFields

    res = pd.DataFrame(
        {
            "qid": ["iclr-7"] * 2,
            "query": "x",
            "docno": ["2303.00003%p1", "2302.00002"],
            "score": [2.0, 1.0],
            "rank": [0, 1],
        }
    )
    res = PaperFields(NAME + "/iclr/references", fields=["paper_docno"])(res)
    out = ExcludeQueryPaper(column="paper_docno")(res)
    assert list(out.docno) == ["2302.00002"]


def test_helpers_and_missing_data(tmp_path):
    assert match_key("A  Title!", "Some abstract") == match_key("a title", "some   ABSTRACT")
    secs = parse_markdown_sections("intro text\n# Title\n## 2 Model **bold**\nbody\n## References\n[1] x")
    assert secs == (("", "intro text"), ("2 Model bold", "body"))
    with pytest.raises(MissingDataError, match="Jackson0018/SciFullBench"):
        SciFullBench(tmp_path).corpus()
    assert SciFullBench(tmp_path).missing_files()
