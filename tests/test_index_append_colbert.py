"""ColBERT/PLAID indexes that grow (issue 35, plugins/colbert/plaid.py): documents appended as a new partition
(a PLAID index of their own, searched beside the others and merged by score) and retracted (never returned
again), each change a new generation; retrieval and exact re-scoring over the grown index agree with an index
rebuilt on the final collection (PLAID compresses each partition with its own centroids, so scores differ in
the compression error: the top-10 lists are compared as sets).  CSFCube abstracts, the offline MiniLM-built
checkpoint (untrained ColBERT: exact-text queries)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

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


APPENDER = textwrap.dedent("""
    import json, sys
    from pyterrier_sci.plugins.colbert import ColBERTIndex
    path, docs = sys.argv[1:3]
    ColBERTIndex(path, verbose=False).indexer(mode="append", timeout=900).index(json.load(open(docs)))
    print("done")
""")


def test_colbert_append_killed_midway_then_rerun(docs, tmp_path):
    """An append killed with SIGKILL while its indexing worker runs: the worker (in a session of its own, so
    not killed with its parent) ends within seconds instead of writing on into the partial partition; the
    previous generation is intact and answers as before; the rerun removes what was left and commits."""
    import psutil
    base, new = docs[:N_BASE], docs[N_BASE:]
    path = tmp_path / "killed"
    ColBERTIndex(path, verbose=False).indexer(timeout=900).index(base)
    queries = _queries(base)
    before = ColBERTIndex(path, verbose=False).retriever(num_results=10, query_maxlen=64)(queries)
    meta_before = (path / "pt_meta.json").read_text()
    (tmp_path / "new.json").write_text(json.dumps(new))
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(tmp_path / "new.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONSAFEPATH="1"))
    workers, deadline = [], time.monotonic() + 300
    while not workers and proc.poll() is None and time.monotonic() < deadline:
        try:
            workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                       if "pyterrier_sci.plugins.colbert._worker" in " ".join(c.cmdline())]
        except psutil.Error:
            pass
        time.sleep(0.05)
    assert workers, f"no indexing worker started ({proc.poll()}): {proc.stderr.read()[-2000:] if proc.poll() else ''}"
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    _, alive = psutil.wait_procs(workers, timeout=8)
    assert not alive, "the indexing worker outlived its killed parent"
    assert workers[0].returncode in (None, 3)   # ORPHANED (None: reaped by another parent before we asked)

    assert (path / "pt_meta.json").read_text() == meta_before
    after = ColBERTIndex(path, verbose=False).retriever(num_results=10, query_maxlen=64)(queries)
    assert after[["qid", "docno"]].values.tolist() == before[["qid", "docno"]].values.tolist()
    assert np.allclose(after["score"], before["score"])

    grown = ColBERTIndex(path, verbose=False).indexer(mode="append", timeout=900).index(new)
    assert grown.generation == 1 and len(grown) == N_BASE + N_NEW
    assert sorted(p.name for p in (path / "segments").iterdir()) == ["g00001"]
    top = grown.retriever(num_results=1, query_maxlen=64)(_queries(new)).set_index("qid")
    assert (top["docno"] == top["target"]).all()


ORPHAN_PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    watch = ("import sys, time\\n"
             "from pyterrier_sci.plugins.colbert._worker import exit_when_orphaned\\n"
             "exit_when_orphaned(int(sys.argv[1]))\\n"
             "time.sleep(600)\\n")   # a worker in a long silent step (k-means): it writes no event to fail on
    w = subprocess.Popen([sys.executable, "-c", watch, str(os.getpid())], start_new_session=True)
    print(w.pid, flush=True)
    time.sleep(600)
""")


def test_an_indexing_worker_ends_when_its_parent_is_killed():
    """The worker's watch (``exit_when_orphaned``): a worker whose parent is killed outright ends within
    seconds even while it writes nothing (before, it ran on until its next progress event failed)."""
    import psutil
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONSAFEPATH="1"))
    worker = psutil.Process(int(parent.stdout.readline()))
    time.sleep(3)                          # its imports done, the watch running
    assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=30)
    try:
        worker.wait(timeout=10)
    except psutil.TimeoutExpired:
        worker.kill()
        raise AssertionError("the worker outlived its killed parent") from None
