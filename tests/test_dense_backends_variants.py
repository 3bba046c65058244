"""Every encoder takes a backend and a precision (issue 21): DORIS-MAE's ``doris_maxsim`` scorer on
OpenVINO fp32 gives the torch scores, on int8 a ranking close to them, never reuses vectors of another
precision and keeps ``max_seq_length``; HLM-Cite's retrieval module (a locally trained curriculum model
directory) exports to OpenVINO fp32 and int8.  The sharded builder's backends are tested in
``test_dense_sharded.py``.  One int8 export per model, calibrated on 16 documents, is shared by the
tests of this module (the session's work directory caches it)."""
import pickle

import numpy as np
import pandas as pd
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.models import BackendError
from pyterrier_sci.plugins.dense.backends import (
    calibration_from_corpus,
    calibration_from_texts,
    encoder_path,
    load_encoder,
)
from pyterrier_sci.plugins.doris_mae import MaxSimScorer, maxsim_component
from pyterrier_sci.plugins.doris_mae import maxsim as doris
from pyterrier_sci.registry import Context

pytest.importorskip("openvino")
pytest.importorskip("nncf")

DORIS = "irds:sci/doris-mae/birco-dev"
HEPTH = "irds:sci/hepth-core-citations/test/c10"
doris_data = needs_data("doris-mae", "birco_dev", "qrels.tsv")
hepth_data = needs_data("hepth-citations", "raw")


def frame():
    q1 = "graph networks for molecules. They predict toxicity."
    rows = [
        ("q1", q1, "d1", "We study graph neural networks on molecules. Toxicity is predicted well."),
        ("q1", q1, "d2", "Images are segmented with convolutions. Street scenes are labelled."),
        ("q1", q1, "d3", "Molecular property prediction. Message passing helps."),
        ("q2", "speech recognition on phones", "d4", "Low-resource speech recognition. It runs on mobile phones."),
        ("q2", "speech recognition on phones", "d5", "A survey of stock market prediction."),
    ]
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "text"]).assign(score=0.0, rank=0)


def scores(out: pd.DataFrame) -> pd.Series:
    return out.set_index(["qid", "docno"])["score"].sort_index()


@pytest.fixture(scope="module")
def doris_calibration():
    return calibration_from_corpus(DORIS, size=16)


# ---------------------------------------------------------------------------- DORIS-MAE's MaxSim

@pytest.mark.parametrize("qmode, dmode", [("sentences", "sentences"), ("whole", "whole"), ("whole", "sentences")])
def test_maxsim_openvino_fp32_equals_torch(qmode, dmode):
    ref = MaxSimScorer("default", query_mode=qmode, doc_mode=dmode)(frame())
    ov = MaxSimScorer("default", query_mode=qmode, doc_mode=dmode, backend="openvino")
    got = ov(frame())
    assert ov.encoder.model.backend == "openvino" and ov.encoder.model.precision == "fp32"
    np.testing.assert_allclose(scores(got).to_numpy(), scores(ref).to_numpy(), atol=1e-5)
    assert list(got["docno"]) == list(ref["docno"])  # the same ranking
    assert scores(ref).std() > 0.1  # scores that can differ


@doris_data
def test_maxsim_int8_ranks_like_fp32(doris_calibration):
    from scipy.stats import spearmanr
    topics = ps.datasets.doris_mae.aspect_topics(DORIS).head(2)
    res = ps.pipeline("pool", dataset=DORIS)(topics[["qid", "query"]]).groupby("qid").head(15)
    ref = scores(MaxSimScorer("default", dataset=DORIS)(res))
    q8 = MaxSimScorer("default", dataset=DORIS, backend="openvino", precision="int8", calibration=doris_calibration)
    got = scores(q8(res))
    meta = q8.encoder.model.meta
    assert meta["precision"] == "int8" and meta["calibration"]["source"] == "sci/doris-mae/birco-dev"
    assert meta["calibration"]["documents"] == 16
    diff = np.abs(got.to_numpy() - ref.to_numpy())
    assert 1e-4 < diff.max() < 0.05  # int8 vectors, close to fp32
    rhos = [spearmanr(got.loc[q], ref.loc[q]).statistic for q in ref.index.get_level_values("qid").unique()]
    # 15 documents a query, an export calibrated on 16 texts: one swapped pair of neighbours costs ~0.01
    assert min(rhos) >= 0.9 and np.mean(rhos) >= 0.95, rhos


def test_the_vector_cache_does_not_mix_precisions(doris_calibration):
    text = "We study graph neural networks on molecules."
    fp32 = doris.shared_encoder("default")
    ov = doris.shared_encoder("default", backend="openvino")
    q8 = doris.shared_encoder("default", backend="openvino", precision="int8", calibration=doris_calibration)
    other = doris.shared_encoder("default", backend="openvino", precision="int8",
                                 calibration=calibration_from_texts([text, "another calibration text"]))
    assert len({id(fp32), id(ov), id(q8), id(other)}) == 4
    assert q8 is doris.shared_encoder("default", backend="openvino", precision="int8", calibration=doris_calibration)
    a = fp32.encode([text])[0]  # cached first by the torch encoder
    b = q8.encode([text])[0]
    direct = q8.model.encode([text])[0]
    np.testing.assert_allclose(b, direct / np.linalg.norm(direct), atol=1e-6)  # its own vectors, not torch's
    assert np.abs(a - b).max() > 1e-4
    assert float(a @ b) > 0.98
    np.testing.assert_allclose(ov.encode([text])[0], a, atol=1e-5)
    # scorers that differ only in precision are different transformers
    s32 = MaxSimScorer("default", backend="openvino")
    s8 = MaxSimScorer("default", backend="openvino", precision="int8", calibration=doris_calibration)
    assert s32 != s8 and s8.encoder is q8 and s32.encoder is ov


def test_max_seq_length_applies_to_exported_encoders():
    text = "Graph neural networks predict the toxicity of molecules from their structure, " * 3
    torch4 = doris.shared_encoder("default", max_seq_length=8)
    ov4 = doris.shared_encoder("default", max_seq_length=8, backend="openvino")
    ov_full = doris.shared_encoder("default", backend="openvino")
    assert ov4.model.max_seq_length == 8 and ov_full.model.max_seq_length == 256
    truncated = ov4.encode([text])[0]
    np.testing.assert_allclose(truncated, torch4.encode([text])[0], atol=1e-5)
    assert np.abs(truncated - ov_full.encode([text])[0]).max() > 1e-2
    # the shared export is not changed by one encoder's truncation
    assert ov4.model.path == ov_full.model.path


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="tensorrt"), "choose one of 'torch', 'openvino', 'onnx'"),
    (dict(backend="openvino", precision="int4"), "choose one of 'fp32', 'int8'"),
    (dict(precision="int8", dataset=DORIS), "needs backend 'openvino' or 'onnx'"),
    (dict(backend="openvino", precision="int8"), "calibrates on documents: give dataset="),
    (dict(backend="openvino", device="cuda"), "runs on the CPU"),
])
def test_bad_backend_is_one_error(kwargs, match):
    with pytest.raises(BackendError, match=match):
        MaxSimScorer("default", **kwargs)


def test_component_takes_backend_and_precision():
    with pytest.raises(ValueError, match="'backend' got 'tensorrt'.*one of 'torch', 'openvino', 'onnx'"):
        ps.pipeline('doris_maxsim(backend="tensorrt")')
    with pytest.raises(ValueError, match="needs backend 'openvino' or 'onnx'"):
        ps.pipeline('doris_maxsim(precision="int8")', dataset=DORIS)
    t = maxsim_component(context=Context(dataset=DORIS), backend="openvino", precision="int8")
    assert (t.backend, t.precision, t.calibration) == ("openvino", "int8", None)
    assert t._calibration() == DORIS  # the dataset's corpus calibrates
    clone = pickle.loads(pickle.dumps(t))
    assert clone == t and hash(clone) == hash(t)
    assert t != maxsim_component(context=Context(dataset=DORIS), backend="openvino")
    other = maxsim_component(context=Context(dataset=DORIS), backend="openvino", precision="int8",
                             calibration="irds:sci/csfcube")
    assert other != t and other._calibration() == "irds:sci/csfcube"


# ------------------------------------------------------------------ HLM-Cite's trained retrieval module

def _toy():
    words = "quark gluon string brane duality anomaly".split()
    texts, cands, queries = {}, {}, []
    for i, w in enumerate(words):
        q = f"q{i}"
        queries.append(q)
        texts[q] = f"{w} theory of {w} fields"
        items = [(f"c{i}", 2), (f"s{i}", 1)] + [(f"n{i}_{j}", 0) for j in range(2)]
        texts[f"c{i}"] = f"{w} model {w} results"
        texts[f"s{i}"] = f"{w} brief note"
        for j in range(2):
            texts[f"n{i}_{j}"] = f"{words[(i + 2 + j) % len(words)]} unrelated {j}"
        cands[q] = items
    return queries, cands, texts


@pytest.fixture(scope="module")
def curriculum_model(tmp_path_factory):
    from pyterrier_sci.plugins.hlm_cite.curriculum import train_curriculum
    queries, cands, texts = _toy()
    out = tmp_path_factory.mktemp("hlm") / "retriever"
    train_curriculum("default", queries, cands, texts, str(out), frozen_layers=4, stages=(1,), batch_size=6,
                     lr=1e-3, max_steps=2, max_seq_length=32)
    return str(out)


TEXTS = ["Holographic duality and the string landscape.", "Anomaly cancellation in heterotic strings.",
         "Lattice gauge theory on quantum computers.", "short", "Solitons in supersymmetric gauge theories " * 8]


@hepth_data
def test_trained_curriculum_model_runs_on_openvino(curriculum_model):
    from pyterrier_sci.models import weights_sha256
    assert weights_sha256(curriculum_model) not in (None, weights_sha256("default"))
    torch_model = load_encoder(curriculum_model)
    ref = torch_model.encode(TEXTS)
    base = load_encoder("default").encode(TEXTS)
    assert np.abs(ref - base).max() > 1e-3  # the trained weights are the ones loaded, not the base's
    ov = load_encoder(curriculum_model, backend="openvino")
    assert ov.meta["source_path"] == curriculum_model and ov.meta["weights_sha256"] == weights_sha256(curriculum_model)
    assert ov.max_seq_length == torch_model.max_seq_length == 256  # the base's encoding length, not training's 32
    np.testing.assert_allclose(ov.encode(TEXTS), ref, atol=1e-4)
    # int8 calibrated as the dense component calibrates it: on the corpus's first documents (16 here)
    cal = calibration_from_corpus(HEPTH, ["title", "abstract"], size=16)
    q8 = load_encoder(curriculum_model, backend="openvino", precision="int8", calibration=cal)
    assert q8.meta["calibration"]["documents"] == 16 and q8.meta["weights_sha256"] == ov.meta["weights_sha256"]
    got = q8.encode(TEXTS)
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.mean() > 0.98 and cos.min() > 0.95 and np.abs(got - ref).max() > 1e-4, cos


def test_retrained_model_gets_a_new_export(curriculum_model, tmp_path):
    """Retraining into the same directory changes the weights' hash, hence the export's cache entry."""
    import shutil

    from pyterrier_sci.plugins.hlm_cite.curriculum import train_curriculum
    path = tmp_path / "retriever"
    shutil.copytree(curriculum_model, path)
    before = encoder_path(str(path), "openvino", "fp32")
    queries, cands, texts = _toy()
    train_curriculum("default", queries, cands, texts, str(path), frozen_layers=4, stages=(1,), batch_size=6,
                     lr=1e-3, max_steps=1, max_seq_length=32, seed=1)
    assert encoder_path(str(path), "openvino", "fp32") != before


def test_hlm_retriever_component_on_openvino(curriculum_model):
    """The HLM-Cite retrieval module as pipelines/hlm_cite.yaml builds it, with a fast encoder."""
    frame = pd.DataFrame({"qid": ["1"] * 3, "query": ["string duality"] * 3, "docno": ["a", "b", "c"],
                          "title": ["Holographic duality", "Lattice gauge theory", "Heterotic strings"],
                          "abstract": ["Strings and branes.", "Quarks on a lattice.", "Anomalies cancel."]})
    spec = f'dense(model="{curriculum_model}", index=False, fields=["title", "abstract"]'
    ref = ps.pipeline(spec + ")", dataset=HEPTH)(frame).set_index("docno")["score"]
    ov = ps.pipeline(spec + ', backend="openvino")', dataset=HEPTH)
    got = ov(frame).set_index("docno")["score"]
    assert ov.encoder.backend == "openvino"
    np.testing.assert_allclose(got.loc[ref.index].to_numpy(), ref.to_numpy(), atol=1e-4)
