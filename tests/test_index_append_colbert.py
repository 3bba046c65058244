"""ColBERT/PLAID indexes that grow (issue 35, plugins/colbert/plaid.py): documents appended as a new partition
(a PLAID index of their own, searched beside the others and merged by score) and retracted (never returned
again), each change a new generation; retrieval and exact re-scoring over the grown index agree with an index
rebuilt on the final collection (PLAID compresses each partition with its own centroids, so scores differ in
the compression error: the top-10 lists are compared as sets).  CSFCube abstracts, the offline MiniLM-built
checkpoint (untrained ColBERT: exact-text queries)."""
import json

import conftest  # noqa: F401 - the data directory
import numpy as np
import pandas as pd
import pytest

from pyterrier_sci.cli import main
from pyterrier_sci.generations import DocSet, IndexUpdateError
from pyterrier_sci.plugins.colbert import ColBERTIndex

N_BASE, N_NEW = 40, 12


@pytest.fixture(scope="module")
def docs():
    from pyterrier_sci.datasets import csfcube
    if not (conftest.DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {conftest.DATA}")
    found = sorted(csfcube.docs().values(), key=lambda d: d.doc_id)[:N_BASE + N_NEW]
    return [{"docno": d.doc_id, "text": d.abstract} for d in found]


def _queries(docs, words=30):
    return pd.DataFrame({"qid": [f"q{i}" for i in range(len(docs))],
                         "query": [" ".join(d["text"].split()[:words]) for d in docs],
                         "target": [d["docno"] for d in docs]})


def test_colbert_append_and_retract(docs, tmp_path):
    base, new = docs[:N_BASE], docs[N_BASE:]
    gone = [base[2]["docno"], base[17]["docno"], new[3]["docno"]]
    index = ColBERTIndex(tmp_path / "grown", verbose=False)
    index.indexer(timeout=900).index(base)
    grown = index.indexer(mode="append", timeout=900).index(new)
    assert grown.generation == 1 and len(grown) == N_BASE + N_NEW
    assert [name for name, _ in grown.parts()] == ["", "segments/g00001"]
    grown = grown.retract(gone)
    final = [d for d in docs if d["docno"] not in gone]
    assert grown.generation == 2 and len(grown) == len(final)
    assert grown.metadata()["docs"] == DocSet.of(d["docno"] for d in final).record()
    with pytest.raises(IndexUpdateError, match="already in"):
        grown.indexer(mode="append", timeout=900).index([base[0]])
    with pytest.raises(IndexUpdateError, match="not in"):
        grown.retract(["nope"])

    retriever = grown.retriever(num_results=10, query_maxlen=64)
    res = retriever(_queries(final))
    top = res[res["rank"] == 0].set_index("qid")
    assert (top["docno"] == top["target"]).all()  # every live document, old or appended, found by its own text
    assert not set(gone) & set(res["docno"])  # retracted documents are never returned
    rebuilt = ColBERTIndex(tmp_path / "rebuilt", verbose=False)
    rebuilt.indexer(timeout=900).index(final)
    ref = rebuilt.retriever(num_results=10, query_maxlen=64)(_queries(final))
    overlap = np.mean([len(set(res[res.qid == q].docno) & set(ref[ref.qid == q].docno)) / 10
                       for q in ref.qid.unique()])
    assert overlap >= 0.8, overlap
    # exact re-scoring finds each document in its partition
    pool = ref[["qid", "query", "docno"]]
    rescored = retriever(pool)
    assert len(rescored) == len(pool)
    assert rescored[rescored["rank"] == 0].set_index("qid")["docno"].to_dict() == \
        ref[ref["rank"] == 0].set_index("qid")["docno"].to_dict()
    with pytest.raises(ValueError, match="not in"):
        retriever(pd.DataFrame({"qid": ["q"], "query": ["x"], "docno": [gone[0]]}))

    # the command line: one retracted, one appended (a one-document partition), over what a killed append left
    (tmp_path / "grown" / "segments" / "g00003").mkdir()
    (tmp_path / "grown" / "segments" / "g00003" / "junk").write_text("half-written")
    extra = docs[N_BASE + N_NEW - 1]
    docs_file = tmp_path / "more.jsonl"
    docs_file.write_text(json.dumps({"docno": "extra-1", "text": extra["text"] + " appended"}) + "\n")
    (tmp_path / "gone.txt").write_text(f"{final[0]['docno']}\n")
    assert main(["index", "--output", str(tmp_path / "grown"), "--retract", str(tmp_path / "gone.txt"),
                 "--append", str(docs_file), "--quiet"]) == 0
    again = ColBERTIndex(tmp_path / "grown", verbose=False)
    assert again.generation == 4 and len(again) == len(final)
    assert not (tmp_path / "grown" / "segments" / "g00003" / "junk").exists()
    hit = again.retriever(num_results=3, query_maxlen=64)(
        pd.DataFrame({"qid": ["x"], "query": [extra["text"] + " appended"]}))
    assert "extra-1" in set(hit.docno) and final[0]["docno"] not in set(hit.docno)
