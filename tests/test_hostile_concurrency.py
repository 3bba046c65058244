"""Concurrent builders of the same artifact (issue 18, item 12): they take a lock, the second waits
and uses the first one's result, and only the partial directories of dead builders are removed."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import popen_python, wait_for_file

from pyterrier_sci import artifacts
from pyterrier_sci.artifacts import build_atomically, remove_stale_partials

HOST = artifacts.host_tag()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# builds a PISA index of 3,000 documents and retrieves from it; the first builder ("slow") pauses
# half-way until the second one has started; the second records whether its documents were read
BUILD_AND_RETRIEVE = """
    import json, sys, time
    from pathlib import Path
    import pandas as pd
    from pyterrier_sci.plugins.bm25 import BM25, build_index
    path, role, marks = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    def docs():
        if role == "second":
            (marks / "second-read-documents").touch()
        for i in range(3000):
            if role == "first" and i == 1500:
                (marks / "first-half-way").touch()
                while not (marks / "second-started").exists():
                    time.sleep(0.02)
                time.sleep(1.5)  # the second is now waiting for the lock (or, before, deleting our work)
            yield {"docno": f"d{i}", "text": f"term{i % 31} shared words number{i % 7} doc{i}"}
    if role == "second":
        (marks / "second-started").touch()
    index = build_index(docs(), path)
    res = BM25(index, num_results=10)(pd.DataFrame({"qid": ["1", "2"], "query": ["term5 number3", "doc2999 words"]}))
    print(json.dumps(res[["qid", "docno", "score"]].astype(str).values.tolist()))
"""


def test_two_processes_building_the_same_pisa_index(tmp_path):
    path, marks = tmp_path / "indexes" / "pisa", tmp_path / "marks"
    marks.mkdir()
    first = popen_python(BUILD_AND_RETRIEVE, path, "first", marks)
    wait_for_file(marks / "first-half-way", first)
    second = popen_python(BUILD_AND_RETRIEVE, path, "second", marks)
    out1, err1 = first.communicate(timeout=300)
    out2, err2 = second.communicate(timeout=300)
    assert first.returncode == 0, f"first builder: exit {first.returncode}\n{err1[-3000:]}"
    assert second.returncode == 0, f"second builder: exit {second.returncode}\n{err2[-3000:]}"
    assert f"waiting for process {first.pid}" in err2 and str(path) in err2
    assert not (marks / "second-read-documents").exists()  # it used the first one's index
    res1, res2 = json.loads(out1.splitlines()[-1]), json.loads(out2.splitlines()[-1])
    assert res1 == res2 and len(res1) == 20 and res1[10][1] == "d2999"
    assert sorted(p.name for p in path.parent.iterdir()) == ["pisa"]  # no partial, no lock file left


def test_a_live_builders_partial_directory_is_kept_and_dead_ones_are_removed(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        path = tmp_path / "dense-index"
        names = {
            "live": f"dense-index.partial-{live.pid}.{HOST}",
            "dead": f"dense-index.partial-{_dead_pid()}.{HOST}",
            "dead-old-style": f"dense-index.partial-{_dead_pid()}",  # named by earlier versions
            "other-host-fresh": f"dense-index.partial-{live.pid}.elsewhere",
            "other-host-old": f"dense-index.partial-{live.pid}.elsewhere2",
            "other-artifact": f"dense-index-title.partial-{_dead_pid()}.{HOST}",
        }
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "part").write_text("encoded vectors\n")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(tmp_path / names["other-host-old"], (two_days_ago, two_days_ago))

        def build(tmp):
            tmp.mkdir()
            (tmp / "pt_meta.json").write_text("{}")
        assert build_atomically(path, build) == path and (path / "pt_meta.json").exists()
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {"dense-index", names["live"], names["other-host-fresh"], names["other-artifact"]}
        assert (tmp_path / names["live"] / "part").read_text() == "encoded vectors\n"
    finally:
        live.kill()
        live.wait()
    # once its builder is gone, the next build removes it
    assert remove_stale_partials(path) == [tmp_path / names["live"]]


HOLD_LOCK = """
    import sys, time
    from pathlib import Path
    from pyterrier_sci.artifacts import build_atomically
    def build(tmp):
        tmp.mkdir()
        (tmp / "half").write_text("x")
        Path(sys.argv[2]).touch()
        time.sleep(float(sys.argv[3]))
        (tmp / "done").write_text(sys.argv[4])
    build_atomically(sys.argv[1], build)
"""


def test_a_killed_builders_lock_is_released_and_its_partial_removed(tmp_path):
    path, ready = tmp_path / "model", tmp_path / "ready"
    holder = popen_python(HOLD_LOCK, path, ready, 300, "killed")
    wait_for_file(ready, holder)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=30)
    assert (tmp_path / f"model.partial-{holder.pid}.{HOST}").exists()
    start = time.monotonic()
    build_atomically(path, lambda tmp: (tmp.mkdir(), (tmp / "done").write_text("mine")))
    assert time.monotonic() - start < 10 and (path / "done").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "ready"]


def test_a_second_builder_waits_and_uses_the_first_ones_result(tmp_path):
    path, ready = tmp_path / "model", tmp_path / "ready"
    holder = popen_python(HOLD_LOCK, path, ready, 2, "theirs")
    wait_for_file(ready, holder)
    calls = []
    start = time.monotonic()
    result = build_atomically(path, lambda tmp: calls.append(tmp))
    assert holder.wait(timeout=60) == 0
    assert result == path and calls == [] and (path / "done").read_text() == "theirs"
    assert time.monotonic() - start > 0.5  # it waited for the lock
    assert f"waiting for process {holder.pid}" in _log_text()
    holder.stdout.close()
    holder.stderr.close()


_LOG: list = []


def _log_text() -> str:
    return "\n".join(_LOG)


@pytest.fixture(autouse=True)
def _capture_lock_log():
    import logging

    class Keep(logging.Handler):
        def emit(self, record):
            _LOG.append(record.getMessage())
    handler = Keep()
    logging.getLogger("pyterrier_sci.artifacts").addHandler(handler)
    _LOG.clear()
    yield
    logging.getLogger("pyterrier_sci.artifacts").removeHandler(handler)


def test_threads_of_one_process_build_once(tmp_path):
    path = tmp_path / "idx"
    calls = []

    def build(tmp):
        calls.append(threading.get_ident())
        tmp.mkdir()
        time.sleep(0.5)
        (tmp / "pt_meta.json").write_text("{}")
    threads = [threading.Thread(target=build_atomically, args=(path, build)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and (path / "pt_meta.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_a_build_that_starts_a_build_of_itself_is_an_error_not_a_deadlock(tmp_path):
    path = tmp_path / "idx"
    with pytest.raises(RuntimeError, match="already locked by this process"):
        build_atomically(path, lambda tmp: build_atomically(path, lambda t: t.mkdir()))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_artifact_moved_aside_by_a_killed_overwrite_is_put_back(tmp_path):
    path = tmp_path / "idx"
    aside = tmp_path / f"idx.replaced-{_dead_pid()}.{HOST}"  # killed between the two renames
    aside.mkdir()
    (aside / "pt_meta.json").write_text('{"old": true}')
    calls = []
    assert build_atomically(path, calls.append) == path
    assert calls == [] and (path / "pt_meta.json").read_text() == '{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    build_atomically(path, lambda tmp: (tmp.mkdir(), (tmp / "pt_meta.json").write_text("{}")), overwrite=True)
    assert (path / "pt_meta.json").read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_partials_named_by_earlier_versions_are_removed_when_their_builder_is_dead(tmp_path):
    path = tmp_path / "idx"
    dead, live = tmp_path / f".idx.building-{_dead_pid()}-x", tmp_path / f".idx.building-{os.getpid()}-y"
    dead.mkdir()
    live.mkdir()
    build_atomically(path, lambda tmp: artifacts.write_pt_meta(tmp.mkdir() or tmp, type="t", format="f", n=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "idx"]
    assert json.loads((path / "pt_meta.json").read_text()) == {"type": "t", "format": "f", "n": 1}


def test_write_pt_meta_takes_type_format_and_hint_from_the_artifact_class(tmp_path):
    class Index:
        ARTIFACT_TYPE, ARTIFACT_FORMAT, ARTIFACT_PACKAGE_HINT = "sparse_index", "lucene", "pyterrier-sci"
    meta = artifacts.write_pt_meta(tmp_path, Index, num_docs=3)
    assert meta == json.loads((tmp_path / "pt_meta.json").read_text()) == {
        "type": "sparse_index", "format": "lucene", "package_hint": "pyterrier-sci", "num_docs": 3}
    with pytest.raises(ValueError, match="type and a format"):
        artifacts.write_pt_meta(tmp_path, num_docs=3)


def test_two_dense_builders_of_one_index_encode_the_corpus_once(tmp_path):
    """Two retrievers (threads here; processes take the same lock) that need the same dense index:
    the corpus is encoded once and both search the same index."""
    import pandas as pd
    from ir_datasets.formats import GenericDoc

    from pyterrier_sci.irds import FnDocs, register
    from pyterrier_sci.plugins.dense import DenseRetriever
    reads = []

    def docs():
        reads.append(threading.get_ident())
        for i in range(40):
            time.sleep(0.01)  # slow enough that the second builder arrives during the first build
            yield GenericDoc(f"d{i}", f"document {i} about {'graphs' if i % 2 else 'proteins'} and topic {i % 5}")
    name = "sci-test/concurrent-dense"
    register(name, FnDocs(name, docs, GenericDoc))
    path = tmp_path / "dense-index"
    retrievers = [DenseRetriever(index=str(path), corpus=name, num_results=5, verbose=False) for _ in range(2)]
    results = [None, None]

    def search(i):
        results[i] = retrievers[i](pd.DataFrame({"qid": ["1"], "query": ["proteins topic 3"]}))
    threads = [threading.Thread(target=search, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1 and "waiting for process" in _log_text()
    pd.testing.assert_frame_equal(results[0], results[1])
    assert len(results[0]) == 5 and sorted(p.name for p in tmp_path.iterdir()) == ["dense-index"]
