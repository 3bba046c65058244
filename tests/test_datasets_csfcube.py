import conftest
import ir_datasets
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.corpus import PoolRetriever
from pyterrier_sci.data import MissingDataError, registry_status
from pyterrier_sci.datasets import csfcube as csf


def test_counts_and_fields(csfcube):
    ds = ir_datasets.load("sci/csfcube")
    assert ds.docs_count() == 4205
    assert len(list(ds.queries_iter())) == 50
    qrels = list(ds.qrels_iter())
    assert len(qrels) == 6244 and {q.relevance for q in qrels} == {0, 1, 2, 3}
    doc = ds.docs_store().get("388")
    assert doc.title.startswith("A Sentimental Education")
    assert len(doc.sentences) == len(doc.sentence_labels) == 3 and doc.sentence_labels[1] == "method_label"
    assert doc.abstract == " ".join(doc.sentences)
    topics = pt.get_dataset("irds:sci/csfcube").get_topics()
    assert list(topics.columns) == ["qid", "query"]


@pytest.mark.parametrize("facet, n", [("background", 16), ("method", 17), ("result", 17)])
def test_facets_and_official_folds(csfcube, facet, n):
    q = lambda name: {x.query_id for x in ir_datasets.load(name).queries_iter()}
    all_q = q(f"sci/csfcube/{facet}")
    assert len(all_q) == n and all(x.endswith("_" + facet) for x in all_q)
    f1, f2 = q(f"sci/csfcube/{facet}/fold1-test"), q(f"sci/csfcube/{facet}/fold2-test")
    assert f1 | f2 == all_q and not f1 & f2
    assert q(f"sci/csfcube/{facet}/fold1-dev") == f2  # the official split: fold1 dev = fold2 test
    assert {csf.test_fold_of(x) for x in f1} == {"fold1"}


def test_pool_is_the_candidate_set(csfcube):
    ds = pt.get_dataset("irds:sci/csfcube/method")
    pool = ds.get_results()
    qrels = ds.get_qrels()
    assert set(zip(pool["qid"], pool["docno"])) == set(zip(qrels["qid"], qrels["docno"]))
    topics = ds.get_topics().assign(extra=1)
    res = PoolRetriever("irds:sci/csfcube/method")(topics)
    assert len(res) == len(pool) and (res["extra"] == 1).all()
    assert res.groupby("qid")["rank"].min().eq(0).all()
    assert len(PoolRetriever("irds:sci/csfcube")(pd.DataFrame(columns=["qid", "query"]))) == 0


def test_rebuilt_corpus_matches_the_data_directory(tmp_path, csfcube):
    out = csf.rebuild_corpus(out=tmp_path / "corpus.jsonl")
    shipped = (conftest.DATA / "csfcube" / "abstracts-csfcube-reconstructed.jsonl").read_text().splitlines()
    import json
    ours = {d["paper_id"]: d for d in map(json.loads, out.read_text().splitlines())}
    theirs = {d["paper_id"]: d for d in map(json.loads, shipped)}
    assert ours.keys() == theirs.keys()
    assert all(ours[k]["abstract"] == theirs[k]["abstract"] and ours[k]["title"] == theirs[k]["title"] for k in theirs)


def test_missing_data_names_the_file(tmp_path, monkeypatch, csfcube):
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path))
    monkeypatch.setenv("PYTERRIER_SCI_OFFLINE", "1")
    with pytest.raises(MissingDataError) as e:
        list(ir_datasets.load("sci/csfcube/background").qrels_iter())
    msg = str(e.value)
    assert str(tmp_path / "csfcube" / "test-pid2anns-csfcube-background.json") in msg
    assert "PYTERRIER_SCI_DATA" in msg and "iesl/CSFCube" in msg
    rows = {r["id"]: r for r in registry_status()}
    assert rows["irds:sci/csfcube"]["present"] is False
    assert any(m.endswith("queries-release.csv") for m in rows["irds:sci/csfcube"]["missing"])


def test_registry_status_present(csfcube):
    rows = {r["id"]: r for r in registry_status()}
    assert rows["irds:sci/csfcube/method/fold2-test"]["present"] is True


class TestPoolRetriever(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        import pyterrier_sci  # noqa: F401
        return PoolRetriever("irds:sci/csfcube/method")


def test_text_component_adds_document_fields(csfcube):
    p = ps.pipeline("pool % 3 >> text(fields=['title', 'abstract'])", dataset="irds:sci/csfcube/method")
    res = p(pt.get_dataset("irds:sci/csfcube/method").get_topics().head(2))
    assert len(res) == 6 and res["title"].str.len().min() > 0 and res["abstract"].str.len().min() > 20
    with pytest.raises(ps.PipelineError, match="text needs a dataset"):
        ps.pipeline("text")
