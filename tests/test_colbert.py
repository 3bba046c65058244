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


class TestColBERTTransformer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return ColBERTRetriever("/nonexistent/colbert-index", num_results=10)
