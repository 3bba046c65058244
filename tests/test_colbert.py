"""ColBERT (PLAID, colbert-ai) on CPU: checkpoint building, index artifact, retrieval, re-scoring, the
``colbert`` component, and the worker guards (timeout, dead worker).

The index of 40 real CSFCube abstracts is built once per module with the offline MiniLM-built
checkpoint (untrained ColBERT, so the assertions are about exact-text matching and consistency, not
effectiveness).  On a fresh machine the first build also compiles colbert-ai's C++ extensions
(about 100 s, once; cached in torch's extensions directory)."""

import multiprocessing
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.plugins.colbert import (
    CheckpointNotFoundError,
    ColBERTIndex,
    ColBERTRetriever,
    ColBERTTimeoutError,
    ColBERTWorkerError,
    build_checkpoint,
    colbert_component,
    resolve_checkpoint,
)
from pyterrier_sci.registry import Context

N_DOCS = 40
DATASET = "sci-test/colbert-tiny"


@pytest.fixture(scope="module")
def tiny_docs():
    import pyterrier_sci  # noqa: F401
    from pyterrier_sci.datasets import csfcube
    from pyterrier_sci.irds import FnDocs, register

    if not (conftest.DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {conftest.DATA}")
    docs = sorted(csfcube.docs().values(), key=lambda d: d.doc_id)[:N_DOCS]
    import ir_datasets

    if DATASET not in ir_datasets.registry._registered:
        register(DATASET, FnDocs(DATASET, lambda: iter(docs), csfcube.CSFCubeDoc))
    return docs


@pytest.fixture(scope="module")
def retriever(tiny_docs):
    ret = colbert_component(context=Context(dataset="irds:" + DATASET), query_maxlen=64, timeout=900, verbose=False)
    ret.built_index()
    return ret


def _queries(docs, words=30):
    return pd.DataFrame(
        {
            "qid": [f"q{i}" for i in range(len(docs))],
            "query": [" ".join(d.abstract.split()[:words]) for d in docs],
            "target": [d.doc_id for d in docs],
        }
    )


def test_exact_text_query_retrieves_its_own_abstract_first(retriever, tiny_docs):
    topics = _queries(tiny_docs)
    res = retriever(topics)
    top = res[res["rank"] == 0].set_index("qid")
    assert (top["docno"] == top["target"]).all()  # extra input columns are kept
    second = res[res["rank"] == 1].set_index("qid")["score"]
    assert (top["score"] > second.reindex(top.index) + 0.5).all()  # a clear margin, not a tie
    assert set(res["docno"]) <= {d.doc_id for d in tiny_docs}
    for _, g in res.groupby("qid"):
        assert list(g["rank"]) == list(range(len(g))) and g["score"].is_monotonic_decreasing
        assert g["docno"].is_unique


def test_rescoring_matches_retrieval_scores_and_reranks(retriever, tiny_docs):
    topics = _queries(tiny_docs[:5])
    first = retriever(topics).groupby("qid").head(8)
    shuffled = first.sample(frac=1.0, random_state=0).assign(extra="x")
    rescored = retriever(shuffled)
    a = first.set_index(["qid", "docno"])["score"].sort_index()
    b = rescored.set_index(["qid", "docno"])["score"].sort_index()
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-5)  # PLAID's final scores are exact MaxSim
    assert (rescored["extra"] == "x").all() and len(rescored) == len(first)
    for qid, g in rescored.groupby("qid"):
        assert list(g["rank"]) == list(range(len(g))) and g["score"].is_monotonic_decreasing
        assert g["docno"].iloc[0] == topics.set_index("qid").loc[qid, "target"]


def test_rescoring_a_document_outside_the_index_is_one_clear_error(retriever):
    res = pd.DataFrame([["q", "some words", "not-a-doc", 1.0, 0]], columns=["qid", "query", "docno", "score", "rank"])
    with pytest.raises(ValueError, match="not-a-doc"):
        retriever(res)


def test_index_is_an_artifact(retriever, tiny_docs):
    loaded = pt.Artifact.load(str(retriever.index.path))
    assert isinstance(loaded, ColBERTIndex) and len(loaded) == N_DOCS
    meta = loaded.metadata()
    assert (meta["type"], meta["format"], meta["checkpoint"], meta["nbits"]) == (
        "multi_vector_index",
        "plaid",
        "default",
        2,
    )
    assert meta["num_embeddings"] > N_DOCS * 50  # one vector per (non-punctuation) word piece
    t = meta["build_timings"]
    assert 0 < t["kmeans_s"] < t["worker_s"] and t["encode_and_write_s"] > 0
    # colbert-ai's k-means sample is the whole collection here: its encoding is reused, not repeated
    assert t["passages_encoded"] == N_DOCS
    # every token vector got its nearest centroid from FAISS (the index pass; k-means' held-out vectors too)
    assert t["codes_by"] == "faiss" and t["code_vectors"] >= meta["num_embeddings"] and 0 < t["codes_s"] < t["worker_s"]
    assert sorted(loaded.docnos().fwd.lookup(np.arange(N_DOCS))) == sorted(d.doc_id for d in tiny_docs)
    assert not list(Path(retriever.index.path).parent.glob("*.building-*"))
    top = loaded.retriever(num_results=3, query_maxlen=64)(_queries(tiny_docs[:3]))
    assert list(top[top["rank"] == 0]["docno"]) == [d.doc_id for d in tiny_docs[:3]]


def test_cutoff_empty_input_pickle_and_equality(retriever, tiny_docs):
    topics = _queries(tiny_docs[:4]).drop(columns="target")
    assert (retriever % 3)(topics).groupby("qid").size().tolist() == [3, 3, 3, 3]
    empty = retriever(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0 and {"docno", "score", "rank"} <= set(empty.columns)
    clone = pickle.loads(pickle.dumps(retriever))
    assert clone == retriever and hash(clone) == hash(retriever)
    pd.testing.assert_frame_equal(clone(topics), retriever(topics))


def test_component_in_the_pipeline_language(retriever, tiny_docs):
    assert "colbert" in ps.registry.names()
    pipe = ps.pipeline("colbert(query_maxlen=64, num_results=5)", dataset="irds:" + DATASET)
    assert pipe.index.path == retriever.index.path  # same parameters, same (already built) index
    assert pipe.index.searcher() is retriever.index.searcher()  # loaded once per process
    res = pipe(_queries(tiny_docs[:2]))
    assert res.groupby("qid").size().tolist() == [5, 5]
    with pytest.raises(ValueError, match="needs a corpus"):
        colbert_component()


def test_minilm_checkpoint_is_deterministic_and_documented_as_untrained(retriever, tmp_path):
    import json

    from safetensors.torch import load_file

    default = Path(resolve_checkpoint("default"))
    again = build_checkpoint("default", tmp_path / "ckpt")
    w1 = load_file(str(default / "model.safetensors"))["linear.weight"]
    w2 = load_file(str(again / "model.safetensors"))["linear.weight"]
    assert w1.shape == (128, 384) and bool((w1 == w2).all())
    np.testing.assert_allclose((w1 @ w1.T).numpy(), np.eye(128), atol=1e-5)  # orthonormal projection
    assert (again / "artifact.metadata").exists()
    assert json.loads((again / "pyterrier_sci_checkpoint.json").read_text())["trained"] is False


def test_checkpoint_errors_are_clear(tmp_path):
    (tmp_path / "bert").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="not a ColBERT checkpoint"):
        resolve_checkpoint(str(tmp_path / "bert"))
    with pytest.raises(CheckpointNotFoundError, match="colbert-ir/colbertv2.0"):
        resolve_checkpoint("colbert-ir/no-such-checkpoint-here")  # tests are offline (HF_HUB_OFFLINE=1)
    with pytest.raises(CheckpointNotFoundError, match="not found"):
        resolve_checkpoint(str(tmp_path / "missing" / "ckpt"))


def test_bad_documents_are_clear_errors(tmp_path, retriever):
    stale = tmp_path / f".empty.building-{2**22 + 1}-x"  # left by a killed builder (no such pid)
    stale.mkdir()
    with pytest.raises(ValueError, match="no documents"):
        ColBERTIndex(tmp_path / "empty").indexer(verbose=False).index([])
    assert not stale.exists()
    with pytest.raises(ValueError, match="has no 'text'"):
        ColBERTIndex(tmp_path / "nofield").indexer(verbose=False).index([{"docno": "a", "title": "x"}])
    assert not list(tmp_path.glob(".*building-*"))
    with pytest.raises(FileExistsError):
        ColBERTIndex(retriever.index.path).indexer(verbose=False).index([{"docno": "a", "text": "x"}])


def _worker_pids():
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmdline = (p / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"colbert._worker" in cmdline:
            pids.append(int(p.name))
    return pids


def test_timeout_stops_the_worker_and_leaves_nothing(tmp_path, tiny_docs, retriever):
    docs = [{"docno": d.doc_id, "text": d.default_text()} for d in tiny_docs]
    target = tmp_path / "idx"
    start = time.monotonic()
    with pytest.raises(ColBERTTimeoutError, match="timeout=1"):
        ColBERTIndex(target).indexer(timeout=1, verbose=False).index(docs)
    assert time.monotonic() - start < 30
    assert not target.exists() and not list(tmp_path.glob(".*building-*"))
    assert _worker_pids() == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker through /proc")
def test_a_dead_worker_is_one_clear_error(tmp_path, tiny_docs, retriever):
    docs = [{"docno": d.doc_id, "text": d.default_text()} for d in tiny_docs]
    killed = []

    def kill_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for pid in _worker_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_worker)
    killer.start()
    try:
        with pytest.raises(ColBERTWorkerError, match="killed by SIGKILL"):
            ColBERTIndex(tmp_path / "idx").indexer(verbose=False).index(docs)
    finally:
        killer.join()
    assert killed and not (tmp_path / "idx").exists() and not list(tmp_path.glob(".*building-*"))


def test_importing_colbert_leaves_the_process_settings_alone(retriever):
    import colbert.modeling.hf_colbert as hf

    from pyterrier_sci.plugins.colbert._compat import import_colbert

    import_colbert()
    assert multiprocessing.get_start_method(allow_none=True) != "spawn" or os.name != "posix"
    assert os.environ.get("TOKENIZERS_PARALLELISM") == "false"  # conftest's setting, not colbert-ai's "true"
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        assert getattr(hf.class_factory, "_pyterrier_sci_shim", False)


def _unseen_queries(n=30, words=30):
    """The first words of CSFCube abstracts that are not in the tiny index."""
    from pyterrier_sci.datasets import csfcube

    docs = sorted(csfcube.docs().values(), key=lambda d: d.doc_id)[N_DOCS:N_DOCS + n]
    return pd.DataFrame({"qid": [f"u{i}" for i in range(len(docs))],
                         "query": [" ".join(d.abstract.split()[:words]) for d in docs]})


def _exact_top(retriever, topics, k):
    """The exact MaxSim top k of every query: every document of the index re-scored (the re-scoring path)."""
    docnos = list(retriever.index.docnos().fwd.lookup(np.arange(len(retriever.index))))
    everything = pd.DataFrame([(q.qid, q.query, d) for q in topics.itertuples() for d in docnos],
                              columns=["qid", "query", "docno"])
    res = retriever(everything)
    return {qid: set(g[g["rank"] < k]["docno"]) for qid, g in res.groupby("qid")}


def test_plaid_settings_scale_with_k_and_index_size():
    from pyterrier_sci.plugins.colbert.plaid import plaid_settings

    assert plaid_settings(1000, 2244) == {"ncells": 4, "centroid_score_threshold": 0.4, "ndocs": 4096,
                                          "exhaustive": False}
    assert plaid_settings(10, 10_000) == {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256,
                                          "exhaustive": False}
    assert plaid_settings(100, 10_000)["ndocs"] == 1024 and plaid_settings(5000, 10**6)["ndocs"] == 20_000
    # PLAID would score 90% of the index or more: every passage is scored exactly instead
    assert plaid_settings(1000, 1137)["exhaustive"] and not plaid_settings(1000, 1138)["exhaustive"]
    assert plaid_settings(100, 284)["exhaustive"] and not plaid_settings(100, 285)["exhaustive"]
    assert plaid_settings(10, N_DOCS)["exhaustive"]
    given = plaid_settings(1000, 2244, ncells=2, centroid_score_threshold=0.3, ndocs=2000)
    assert given == {"ncells": 2, "centroid_score_threshold": 0.3, "ndocs": 2000, "exhaustive": False}
    with pytest.raises(ValueError):
        plaid_settings(0, 10)


def test_plaid_search_is_colbert_ais_search(retriever, tiny_docs):
    """The retriever's own last stage (blocked exact MaxSim) finds the passages and scores colbert-ai's
    Searcher.dense_search finds, with the filter (ndocs // 4 < candidates) and without it."""
    from pyterrier_sci.plugins.colbert._compat import quiet
    from pyterrier_sci.plugins.colbert.plaid import _fast_path, plaid_search

    searcher = retriever.index.searcher()
    assert _fast_path(searcher)
    searcher.checkpoint.query_tokenizer.query_maxlen = 64
    with quiet():
        qvecs = searcher.checkpoint.queryFromText(_unseen_queries(6)["query"].tolist(), bsize=128, to_cpu=True)
    for k, ndocs in ((10, 40), (5, 16), (1000, 4096)):
        searcher.configure(ncells=2, centroid_score_threshold=0.45, ndocs=ndocs, query_maxlen=64)
        for i in range(len(qvecs)):
            with quiet():
                ref_pids, _, ref_scores = searcher.dense_search(qvecs[i:i + 1], k=k)
            pids, scores = plaid_search(searcher, qvecs[i:i + 1], k, block=300)  # blocks of one or two passages
            assert sorted(pids.tolist()) == sorted(ref_pids)
            np.testing.assert_allclose(np.sort(scores), np.sort(ref_scores), rtol=1e-6)
            assert list(scores) == sorted(scores, reverse=True)


def test_plaid_top_k_overlaps_exact_maxsim(retriever):
    """PLAID's top k against the exact MaxSim top k (every passage re-scored), so that faster settings
    cannot lose quality silently: PLAID proper (ndocs // 4 = 20 of the 40 passages scored exactly), and the
    default settings, which on an index this small score every passage (exhaustive, exact)."""
    topics = _unseen_queries(30)
    k = 10
    exact = _exact_top(retriever, topics, k)
    plaid = retriever.index.retriever(num_results=k, query_maxlen=64, ndocs=80)
    assert plaid.search_settings()["exhaustive"] is False
    res = plaid(topics)
    overlap = [len(set(g["docno"]) & exact[qid]) / k for qid, g in res.groupby("qid")]
    assert len(overlap) == len(topics) and np.mean(overlap) >= 0.9  # measured: 0.957
    default = retriever.index.retriever(num_results=k, query_maxlen=64)
    assert default.search_settings()["exhaustive"] is True
    res = default(topics)
    assert all(set(g["docno"]) == exact[qid] for qid, g in res.groupby("qid"))


def test_exact_maxsim_in_blocks_is_colbert_ais_scoring(retriever):
    from pyterrier_sci.plugins.colbert._compat import quiet
    from pyterrier_sci.plugins.colbert.plaid import exact_maxsim

    searcher = retriever.index.searcher()
    with quiet():
        qvec = searcher.checkpoint.queryFromText(["citation recommendation with graphs"], bsize=128, to_cpu=True)
    pids = np.array([5, 0, 39, 12, 7, 33])
    ranked, ranked_scores = searcher.ranker.rank(searcher.config, qvec, pids=pids.tolist())
    reference = dict(zip(ranked, ranked_scores))
    for block in (1, 300, 10**6):
        np.testing.assert_allclose(exact_maxsim(searcher, qvec, pids, block=block),
                                   [reference[p] for p in pids], rtol=1e-6)
    assert len(exact_maxsim(searcher, qvec, np.array([], dtype=np.int64))) == 0


def test_one_searcher_and_one_query_encoding_per_call(retriever, tmp_path, monkeypatch):
    """A fresh index object loads colbert-ai's Searcher once for any number of queries and calls, and
    each call encodes all its queries in one batch."""
    import shutil

    import colbert

    copy = tmp_path / "copy"
    shutil.copytree(retriever.index.path, copy)  # another index path: not the module's loaded searcher
    loads = []

    class CountingSearcher(colbert.Searcher):
        def __init__(self, *args, **kwargs):
            loads.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(colbert, "Searcher", CountingSearcher)
    index = ColBERTIndex(copy)
    ret = index.retriever(num_results=20, query_maxlen=64, ndocs=80)
    topics = _unseen_queries(12)
    first = ret(topics)
    searcher = index.searcher()
    encodings = []
    encode = searcher.checkpoint.queryFromText

    def counting(queries, *args, **kwargs):
        encodings.append(len(queries))
        return encode(queries, *args, **kwargs)

    monkeypatch.setattr(searcher.checkpoint, "queryFromText", counting)
    for _ in range(3):
        pd.testing.assert_frame_equal(ret(topics), first)
    assert ColBERTIndex(copy).retriever(num_results=5)(topics.head(2)).groupby("qid").size().tolist() == [5, 5]
    assert loads == [1] and encodings == [12, 12, 12, 2]


def test_parallel_search_is_the_serial_search_and_restores_threads(retriever):
    import torch

    topics = _unseen_queries(8)
    ret = retriever.index.retriever(num_results=10, query_maxlen=64, ndocs=80)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # three queries at a time, one thread each
        parallel = ret(topics)
        assert torch.get_num_threads() == 3
        torch.set_num_threads(1)  # one query at a time
        serial = ret(topics)
    finally:
        torch.set_num_threads(threads)
    pd.testing.assert_frame_equal(parallel, serial)


def test_one_ninja_for_the_extensions(tmp_path, monkeypatch):
    """Two ninja versions on one extensions directory rebuild the extensions whenever the other one
    built last: every process puts the same ninja (the PyPI package's) first on PATH."""
    from pyterrier_sci.plugins.colbert import _compat

    monkeypatch.setattr(_compat, "_ninja_dir", lambda: "/opt/ninja-bin")
    assert _compat._path_with_ninja("/usr/bin:/opt/ninja-bin:/bin") == "/opt/ninja-bin:/usr/bin:/bin"
    assert _compat.worker_env()["PATH"].split(os.pathsep)[0] == "/opt/ninja-bin"
    monkeypatch.setattr(_compat, "_ninja_dir", lambda: None)
    (tmp_path / "ninja").write_text("")
    (tmp_path / "ninja").chmod(0o755)
    assert _compat._path_with_ninja(str(tmp_path)) == str(tmp_path)  # a ninja on PATH: left alone


class TestColBERTTransformer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return ColBERTRetriever("/nonexistent/colbert-index", num_results=10)


# ----------------------------------------------------------------- reusing the k-means sample's encoding

def _fake_encoder(calls):
    """colbert-ai's CollectionEncoder.encode_passages stand-in: per passage 1-3 vectors of 4 small integers
    (exact in float16) derived from its text; records the passages it was asked to encode."""
    import torch

    def encode_passages(self, passages):
        calls.append(list(passages))
        if not passages:
            return None, None
        doclens = [1 + sum(map(ord, p)) % 3 for p in passages]
        rows = [[(sum(map(ord, p)) * (j + 1) + d) % 97 for d in range(4)] for p, n in zip(passages, doclens)
                for j in range(n)]
        return torch.tensor(rows, dtype=torch.float32), doclens
    return encode_passages


@pytest.mark.parametrize("sample_every", [1, 3])
def test_reuse_sample_encoding_serves_the_sample_and_encodes_the_rest(monkeypatch, sample_every):
    """The index pass gets exactly the embeddings a fresh encoding gives, in order, with the sample's passages
    (the whole collection, or every third passage, one of them duplicated elsewhere) served from the k-means
    pass and only the others encoded."""
    from types import SimpleNamespace

    from colbert.indexing.collection_encoder import CollectionEncoder

    from pyterrier_sci.plugins.colbert._worker import reuse_sample_encoding
    collection = [f"passage {i} " + "w" * (i % 7) for i in range(50)]
    collection[40] = collection[9]  # duplicate texts: with every third passage sampled, 9 is and 40 is not,
    collection[10] = collection[12]  # and 12 is while 10 is not, so 10 is served 12's embeddings and 12 is encoded
    sample = [p for i, p in enumerate(collection) if i % sample_every == 0]
    calls, events = [], []
    fake = _fake_encoder(calls)
    monkeypatch.setattr(CollectionEncoder, "encode_passages", fake)
    reuse_sample_encoding(lambda **e: events.append(e))
    enc = SimpleNamespace(use_gpu=False)
    first = CollectionEncoder.encode_passages(enc, sample)  # the k-means sample
    assert first[1] == fake(enc, sample)[1]
    calls.clear()
    for a, b in ((0, 17), (17, 33), (33, 50)):  # the index pass, chunk by chunk
        embs, doclens = CollectionEncoder.encode_passages(enc, collection[a:b])
        ref_embs, ref_doclens = _fake_encoder([])(enc, collection[a:b])
        assert doclens == ref_doclens and embs.dtype == ref_embs.dtype and bool((embs == ref_embs).all())
    encoded = [p for c in calls for p in c]
    reused = sum(e["n"] for e in events if e["event"] == "reused")
    assert reused + len(encoded) == len(collection)
    assert reused == len(sample)
    if sample_every == 1:
        assert not encoded
    else:
        # only the unsampled copies of sampled texts (positions 12 and 40) are encoded again
        assert set(encoded) & set(sample) == {collection[12], collection[40]}
    # after the index pass every call encodes as colbert-ai does
    calls.clear()
    CollectionEncoder.encode_passages(enc, collection[:5])
    assert calls == [collection[:5]]


def test_reuse_sample_encoding_keeps_nothing_above_its_budget(monkeypatch):
    from types import SimpleNamespace

    from colbert.indexing.collection_encoder import CollectionEncoder

    from pyterrier_sci.plugins.colbert._worker import reuse_sample_encoding
    calls, events = [], []
    monkeypatch.setattr(CollectionEncoder, "encode_passages", _fake_encoder(calls))
    reuse_sample_encoding(lambda **e: events.append(e), max_bytes=8)
    enc = SimpleNamespace(use_gpu=False)
    passages = [f"p{i}" for i in range(10)]
    CollectionEncoder.encode_passages(enc, passages)
    CollectionEncoder.encode_passages(enc, passages)
    assert calls == [passages, passages] and not events


# ----------------------------------------------------------------- nearest-centroid codes with FAISS

def test_faiss_codes_are_colbert_ais_codes(monkeypatch):
    """The index pass's nearest-centroid codes: FAISS's exact inner-product search gives what colbert-ai's
    ``centroids @ batch.T`` reduction gives (up to float rounding of near-ties), for realistic near-ties,
    exact ties (duplicated centroids: the lower id), batches below FAISS's BLAS threshold, above 64K rows
    and none; the GPU path is untouched."""
    from types import SimpleNamespace

    import torch
    from colbert.indexing.codecs.residual import ResidualCodec

    from pyterrier_sci.plugins.colbert._worker import assign_codes_with_faiss
    original = ResidualCodec.compress_into_codes
    monkeypatch.setattr(ResidualCodec, "compress_into_codes", original)
    assign_codes_with_faiss(threads=1)
    patched = ResidualCodec.compress_into_codes
    assert patched is not original
    stats = assign_codes_with_faiss()  # idempotent: not wrapped twice
    assert ResidualCodec.compress_into_codes is patched and stats == {"vectors": 0, "seconds": 0.0}
    g = torch.Generator().manual_seed(0)
    centroids = torch.nn.functional.normalize(torch.randn(2048, 128, generator=g), dim=1)
    centroids[1500] = centroids[7]  # an exact tie: both choose 7
    centroids[1501] = centroids[900]
    near = centroids[torch.randint(0, 2048, (70_000,), generator=g)]
    embs = torch.nn.functional.normalize(near + 0.05 * torch.randn(70_000, 128, generator=g), dim=1)
    embs[:5] = centroids[[7, 900, 1500, 1501, 3]]
    codec = SimpleNamespace(use_gpu=False, centroids=centroids)
    want = original(codec, embs, out_device="cpu")
    got = patched(codec, embs, out_device="cpu")
    assert got.dtype == want.dtype == torch.int64 and got.shape == (70_000,)
    # the same centroid, except where two scores tie to float rounding (BLAS kernels sum in other orders)
    differ = (got != want).nonzero().flatten()
    assert len(differ) <= 7
    for i in differ.tolist():
        s = centroids @ embs[i]
        assert 0 <= float(s[want[i]] - s[got[i]]) < 1e-5
    assert got[:5].tolist() == [7, 900, 7, 900, 3]
    small = embs[10:13]  # FAISS searches fewer than 20 queries without BLAS
    assert torch.equal(patched(codec, small, out_device="cpu"), original(codec, small, out_device="cpu"))
    assert patched(codec, embs[:0], out_device="cpu").shape == (0,)
    # another codec (new centroids) gets its own search structure
    other = SimpleNamespace(use_gpu=False, centroids=centroids[:100].clone())
    assert torch.equal(patched(other, embs[:1000], out_device="cpu"), original(other, embs[:1000], out_device="cpu"))
    # the GPU path is colbert-ai's own (no CUDA here: it fails as it does unpatched)
    gpu = SimpleNamespace(use_gpu=True, centroids=centroids)
    errors = []
    for fn in (patched, original):
        with pytest.raises(Exception) as err:
            fn(gpu, embs[:10], out_device="cpu")
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1]


def test_the_factory_lives_in_components_and_keeps_its_old_path():
    from pyterrier_sci.plugins.colbert import components, plaid

    assert plaid.colbert_component is components.colbert_component is colbert_component
    with pytest.raises(AttributeError, match="colbert.plaid' has no attribute 'nothing'"):
        plaid.nothing  # noqa: B018
