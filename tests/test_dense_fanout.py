"""Fan-out retrieval over a sharded dense index (plugins/dense/fanout.py): the same results as the
flat FlexIndex of the same vectors (docnos equal, scores to 1e-5) on CSFCube and on hep-th, for
retrieval at k=1000, ``% 10`` (pushed down) and re-scoring; one clear error per damaged manifest.

Encoding a corpus with MiniLM takes minutes on two shared cores, so the corpus-scale tests use a
deterministic real text encoder instead (TF-IDF of the abstracts, randomly projected to a dense
space, for documents and queries alike); one end-to-end test builds a small index with MiniLM
through ``build_sharded_index`` on Ray.
"""
import json
import pickle
import shutil

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import DATA

from pyterrier_sci.plugins.dense import DenseRetriever, ShardedDenseIndex, ShardedIndexError, write_sharded_flex
from pyterrier_sci.plugins.dense.components import dense_component
from pyterrier_sci.plugins.dense.search import topk

ENCODER = "tfidf-projection"


class TfidfProjection:
    """A text encoder with sentence-transformers' ``encode`` signature: sublinear TF-IDF fitted on a
    corpus, times a fixed Gaussian projection to ``dim`` dimensions."""

    def __init__(self, texts, dim: int = 128, seed: int = 0):
        from sklearn.feature_extraction.text import TfidfVectorizer
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, dtype=np.float32).fit(texts)
        vocab = len(self.vectorizer.vocabulary_)
        self.proj = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32) / np.sqrt(dim)
        self.dim = dim

    def encode(self, texts, batch_size=32, show_progress_bar=False, convert_to_numpy=True):
        return np.asarray(self.vectorizer.transform(list(texts)) @ self.proj, dtype=np.float32)

    def get_sentence_embedding_dimension(self):
        return self.dim


def _corpus(dataset, fields):
    from pyterrier_sci.corpus import corpus_texts
    docs = list(corpus_texts(dataset, fields))
    return [d["docno"] for d in docs], [d["text"] for d in docs]


def _indexes(tmp, dataset, fields, num_shards, dim):
    """(encoder, flat FlexIndex, sharded index) of the same vectors of ``dataset``."""
    from pyterrier_dr import FlexIndex
    docnos, texts = _corpus(dataset, fields)
    enc = TfidfProjection(texts, dim=dim)
    vecs = enc.encode(texts)
    flat = FlexIndex(str(tmp / "flat"), verbose=False)
    flat.indexer().index({"docno": d, "doc_vec": v} for d, v in zip(docnos, vecs))
    sharded = write_sharded_flex(tmp / "sharded", docnos, vecs, num_shards, model=ENCODER, corpus=dataset,
                                 fields=fields)
    return enc, flat, sharded


def _retriever(enc, index, **kw):
    r = DenseRetriever(ENCODER, index=index, verbose=False, **kw)
    r._encoder = enc  # the test's encoder under the index's model name
    return r


def _assert_same(a: pd.DataFrame, b: pd.DataFrame):
    assert len(a) == len(b)
    assert a["qid"].tolist() == b["qid"].tolist() and a["rank"].tolist() == b["rank"].tolist()
    assert a["docno"].tolist() == b["docno"].tolist()
    np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-5, rtol=0)


def _check_equivalence(enc, flat, sharded, topics):
    flat_r, shard_r = _retriever(enc, flat), _retriever(enc, sharded)
    full = shard_r(topics)
    _assert_same(full, flat_r(topics))  # k=1000, every query
    assert full.groupby("qid").size().eq(1000).all()

    cut = (shard_r % 10).compile()  # the cutoff is pushed down: one transformer retrieving 10
    assert isinstance(cut, DenseRetriever) and cut.rank_cutoff == 10
    top10 = cut(topics)
    _assert_same(top10, (flat_r % 10)(topics))
    _assert_same(top10, full[full["rank"] < 10].reset_index(drop=True))

    # re-scoring a shuffled first stage with the stored vectors (docno -> shard), then % 10 still
    # scores every candidate before cutting
    first = full[full["rank"] % 7 == 0][["qid", "query", "docno"]].sample(frac=1.0, random_state=1)
    _assert_same(shard_r(first), flat_r(first))
    cut_rescored = cut(first)
    _assert_same(cut_rescored, flat_r(first).groupby("qid").head(10).reset_index(drop=True))
    assert cut_rescored.groupby("qid").size().max() == 10


@pytest.fixture(scope="module")
def csfcube(tmp_path_factory):
    if not (DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {DATA}")
    return _indexes(tmp_path_factory.mktemp("csfcube"), "sci/csfcube", ["title", "abstract"], 3, 384)


def test_csfcube_fanout_equals_flat(csfcube):
    enc, flat, sharded = csfcube
    assert isinstance(pt.Artifact.load(str(sharded.path)), ShardedDenseIndex)
    assert len(sharded) == len(flat) == 4205 and sharded.num_shards == 3
    topics = pt.get_dataset("irds:sci/csfcube").get_topics()  # all 50 queries
    _check_equivalence(enc, flat, sharded, topics)


def test_hepth_fanout_equals_flat(tmp_path):
    if not (DATA / "hepth-citations").exists():
        pytest.skip(f"hep-th data not found under {DATA}")
    enc, flat, sharded = _indexes(tmp_path, "sci/hepth-core-citations/test", ["title", "abstract"], 2, 128)
    assert len(sharded) == len(flat) == 29555
    topics = pt.get_dataset("irds:sci/hepth-core-citations/test").get_topics()  # all 858 test queries
    _check_equivalence(enc, flat, sharded, topics)


@pytest.mark.parametrize("num_shards", [1, 4, 7])
def test_ties_go_to_the_lower_position_in_flat_and_fanout(tmp_path, num_shards):
    """Coarse vectors (many equal scores) and duplicate documents: both orders are (score desc,
    position asc), checked against a full sort."""
    rng = np.random.default_rng(num_shards)
    vecs = np.round(rng.standard_normal((3000, 16)), 0).astype(np.float32)
    vecs[2000:2050] = vecs[7]
    qvecs = np.round(rng.standard_normal((20, 16)), 0).astype(np.float32)
    qvecs[0] = vecs[7]
    idx = write_sharded_flex(tmp_path / "idx", [f"d{i}" for i in range(3000)], vecs, num_shards, model="m")
    s = qvecs @ vecs.T
    for k in (1, 37, 3000):
        ref = np.lexsort((np.broadcast_to(np.arange(3000), s.shape), -s), axis=1)[:, :k]
        flat_s, flat_i = topk(vecs, qvecs, k, batch_size=512)
        shard_s, shard_i = idx.search(qvecs, k)
        assert (flat_i == ref).all() and (shard_i == ref).all()
        np.testing.assert_allclose(shard_s, np.take_along_axis(s, ref, 1), atol=1e-5)
    assert idx.docnos_of([[0, 2999]]).tolist() == [["d0", "d2999"]]
    assert idx.positions_of(["d2999", "nope", "d5"]).tolist() == [2999, -1, 5]


# ------------------------------------------------------------------------------ damaged indexes

@pytest.fixture
def small(tmp_path):
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((50, 8)).astype(np.float32)
    return write_sharded_flex(tmp_path / "idx", [f"d{i}" for i in range(50)], vecs, 3, model=ENCODER,
                              corpus="sci/test"), vecs


def _edit(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_missing_shard(small):
    idx, _ = small
    shutil.rmtree(idx.path / "shard-00001")
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00001' is missing"):
        pt.Artifact.load(str(idx.path))


@pytest.mark.parametrize("key,value", [("model_id", "other-model"), ("corpus", "sci/other"), ("start", 17),
                                       ("num_shards", 4)])
def test_shard_from_another_build(small, key, value):
    idx, _ = small
    _edit(idx.path / "shard-00002" / "shard.json", lambda d: d.update({key: value}))
    with pytest.raises(ShardedIndexError, match=rf"shard 'shard-00002' .*another build.*{key}="):
        ShardedDenseIndex(idx.path)


def test_counts_that_do_not_add_up(small):
    idx, _ = small
    _edit(idx.path / "pt_meta.json", lambda d: d.update(num_docs=51))
    with pytest.raises(ShardedIndexError, match=r"hold 50 documents but the manifest says num_docs=51"):
        ShardedDenseIndex(idx.path)
    _edit(idx.path / "pt_meta.json", lambda d: (d.update(num_docs=50), d["shards"][1].update(start=15)))
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00001' .*expected start 16"):
        ShardedDenseIndex(idx.path)


def test_shard_of_another_dimension(small, tmp_path):
    idx, vecs = small
    other = write_sharded_flex(tmp_path / "other", [f"d{i}" for i in range(50)], np.hstack([vecs, vecs]), 3,
                               model=ENCODER, corpus="sci/test")
    shutil.rmtree(idx.path / "shard-00001")
    shutil.copytree(other.path / "shard-00001", idx.path / "shard-00001")
    _edit(idx.path / "shard-00001" / "shard.json", lambda d: d.update(dim=8))  # only the vectors differ
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00001' .*dimension 16, the manifest says dim=8"):
        ShardedDenseIndex(idx.path)


def test_truncated_vectors_and_unfinished_build(small):
    idx, _ = small
    vecs = idx.path / "shard-00000" / "vecs.f4"
    vecs.write_bytes(vecs.read_bytes()[:-4])
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00000' .*truncated"):
        ShardedDenseIndex(idx.path)
    (idx.path / "pt_meta.json").unlink()
    with pytest.raises(ShardedIndexError, match="unfinished build"):
        DenseRetriever(ENCODER, index=str(idx.path), verbose=False).flex_index()
    with pytest.raises(ShardedIndexError, match="unfinished build"):
        dense_component(index=str(idx.path), model=ENCODER)


def test_vectors_overwritten_with_bytes_of_the_same_size_are_refused(small):
    """Sizes alone missed this: the search used the altered vectors (issue 31, item 5)."""
    from pyterrier_sci.data import forget_verdicts
    idx, vecs = small
    ShardedDenseIndex(idx.path)  # intact: checked once
    f = idx.path / "shard-00001" / "vecs.f4"
    original = f.read_bytes()
    data = bytearray(original)
    data[:4] = np.float32(1e6).tobytes()
    f.write_bytes(bytes(data))
    forget_verdicts()
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00001' is damaged: .*vecs.f4 does not match its "
                                                r"recorded SHA-256.*rerun the build"):
        ShardedDenseIndex(idx.path)
    (idx.path / "shard-00002" / "extra.bin").write_bytes(b"x")
    f.write_bytes(original)  # restored: now the other shard's extra file is the problem
    with pytest.raises(ShardedIndexError, match=r"shard 'shard-00002' is damaged: .*extra.bin is not one of the files"):
        ShardedDenseIndex(idx.path)


@pytest.mark.parametrize("entry", ["shard-00000", 7, None, {"name": "shard-00000", "start": "0", "end": 16,
                                                             "num_docs": 16}])
def test_malformed_shards_entry_is_one_error(small, entry):
    idx, _ = small
    _edit(idx.path / "pt_meta.json", lambda d: d["shards"].__setitem__(0, entry))
    with pytest.raises(ShardedIndexError, match=r"pt_meta.json's shards entry 0 .*the manifest is damaged"):
        ShardedDenseIndex(idx.path)


def test_query_model_must_be_the_index_model(small):
    idx, vecs = small
    from pyterrier_sci.plugins.dense.index_meta import IndexSettingsError
    with pytest.raises(IndexSettingsError, match=rf"^model='default' contradicts the dense index '{idx.path}', whose "
                                                 r"vectors were encoded with model='tfidf-projection'"):
        dense_component(index=str(idx.path), model="default")
    with pytest.raises(IndexSettingsError, match="encoded with model='tfidf-projection'"):
        DenseRetriever("default", index=idx)
    assert dense_component(index=str(idx.path)).model == ENCODER  # left out: the index's
    r = dense_component(index=str(idx.path), model=ENCODER, num_results=5, verbose=False)
    r._encoder = type("Fixed", (), {"encode": lambda self, t, **kw: vecs[:len(t)] * 1.0,
                                    "get_sentence_embedding_dimension": lambda self: 8})()
    res = r(pd.DataFrame({"qid": ["q1", "q2"], "query": ["a", "b"]}))
    best = np.argsort(-(vecs[:2] @ vecs.T), axis=1, kind="stable")[:, :5]
    assert res["docno"].tolist() == [f"d{i}" for i in best.ravel()]
    clone = pickle.loads(pickle.dumps(r))
    assert clone == r and isinstance(clone.flex_index(), ShardedDenseIndex)


# ------------------------------------------------------------------- end to end through the builder

@pytest.fixture(scope="module")
def ray_local():
    import ray

    from pyterrier_sci.scale import init_ray
    init_ray(num_cpus=2)
    try:
        yield
    finally:
        ray.shutdown()


def test_built_sharded_index_searches_like_its_flat_copy(tmp_path, ray_local):
    """A MiniLM index of CSFCube's first 40 titles built on Ray in 2 shards: its vectors are the
    model's, and its search equals a flat FlexIndex holding the same vectors."""
    if not (DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {DATA}")
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense.sharded import build_sharded_index
    path = build_sharded_index("sci/csfcube", "default", tmp_path / "idx", num_shards=2, workers=1,
                               fields=["title"], limit=40, verbose=False, cpus_per_worker=1)
    idx = pt.Artifact.load(str(path))
    assert isinstance(idx, ShardedDenseIndex) and len(idx) == 40 and idx.num_shards == 2
    docnos, texts = _corpus("sci/csfcube", ["title"])
    stored = idx.vectors(np.arange(40))
    assert idx.docnos_of(np.arange(40)).tolist() == docnos[:40]
    dense = idx.retriever(verbose=False)
    np.testing.assert_allclose(stored, dense.encode(texts[:40]), atol=1e-4)
    flat = FlexIndex(str(tmp_path / "flat"), verbose=False)
    flat.indexer().index({"docno": d, "doc_vec": v} for d, v in zip(docnos[:40], stored))
    topics = pt.get_dataset("irds:sci/csfcube").get_topics().head(3)
    _assert_same(dense(topics), DenseRetriever("default", index=flat, verbose=False)(topics))


@pytest.mark.parametrize("cuts", [[0, 10000, 20000, 30001], [0, 1, 4095, 17000, 30001], [0, 30001]])
@pytest.mark.parametrize("cos", [False, True])
def test_scores_are_bit_identical_in_every_sharding(cuts, cos):
    """Exact search scores every (query, document) pair with the same product shape at the same place
    (blocks aligned to global positions): a flat index's scores and any sharding's are equal bit for bit.
    (With blocks starting at each shard's start, 2-4 % of them differed in the last bits on a Zen 5 CPU.)"""
    from pyterrier_sci.plugins.dense.search import SCORE_ALIGN
    from pyterrier_sci.plugins.dense.search import aligned_scores as _scores
    rng = np.random.default_rng(1)
    d = rng.standard_normal((30001, 96)).astype(np.float32)
    q = rng.standard_normal((37, 96)).astype(np.float32)
    flat = _scores(q, d, 0, len(d), 0, cos)
    parts = np.concatenate([_scores(q, d[a:b], 0, b - a, a, cos) for a, b in zip(cuts[:-1], cuts[1:])], axis=1)
    assert np.array_equal(flat, parts)
    # a sub-range of a shard (the retriever's selection blocks) scores the same as well
    assert np.array_equal(_scores(q, d[4095:17000], 100, 9000, 4095, cos), flat[:, 4195:13095])
    ref = (q @ (d / np.linalg.norm(d, axis=1, keepdims=True) if cos else d).T)
    np.testing.assert_allclose(flat, ref, atol=1e-4, rtol=0)  # and they are the products
    assert SCORE_ALIGN >= 256


def test_the_search_helpers_keep_their_old_import_paths():
    """The benchmarks (and earlier code) import the search helpers and the factory from retriever.py."""
    from pyterrier_sci.plugins.dense import components, retriever, search
    from pyterrier_sci.plugins.dense.retriever import _merge_topk, _prepare_queries, _scores, _search, _topk
    assert (_topk, _merge_topk, _prepare_queries, _scores) == (search.topk, search.merge_topk,
                                                               search.prepare_queries, search.aligned_scores)
    assert retriever.dense_component is components.dense_component and callable(_search)


def test_unordered_shard_topk_merges_to_the_flat_order():
    """A shard's top k is left unordered (merge_topk orders once for all shards): the same documents and
    scores as the ordered top k, and merged, the flat search's order, ties by position included."""
    from pyterrier_sci.plugins.dense.search import merge_topk, topk
    rng = np.random.default_rng(1)
    d = rng.integers(0, 3, size=(3000, 8)).astype(np.float32)   # few distinct scores: many ties
    q = rng.integers(0, 3, size=(5, 8)).astype(np.float32)
    flat = topk(d, q, 50)
    parts = [topk(d[a:b], q, 50, offset=a, ordered=False) for a, b in ((0, 1100), (1100, 3000))]
    ordered = topk(d[:1100], q, 50)
    assert all(set(map(tuple, np.stack([s, i], -1).reshape(-1, 2).tolist())) ==
               set(map(tuple, np.stack([os_, oi], -1).reshape(-1, 2).tolist()))
               for s, i, os_, oi in zip(parts[0][0], parts[0][1], ordered[0], ordered[1]))
    merged = merge_topk([p[0] for p in parts], [p[1] for p in parts], 50)
    np.testing.assert_array_equal(merged[1], flat[1])
    np.testing.assert_array_equal(merged[0], flat[0])
