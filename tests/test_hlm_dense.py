"""``hlm_dense(train=True)``: HLM-Cite's retrieval curriculum as a declared training step
(plugins/hlm_cite/training.py): trained on the training split's first queries on first use, kept in the work
directory by its settings, found again, refused on its own training queries, and scoring with the trained
model, not the base one."""
import json

import numpy as np
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.plugins.dense.components import dense_component
from pyterrier_sci.plugins.hlm_cite import components as C  # noqa: N812
from pyterrier_sci.plugins.hlm_cite import training as T  # noqa: N812
from pyterrier_sci.plugins.hlm_cite.components import hlm_dense_component
from pyterrier_sci.registry import Context

pytestmark = needs_data("hepth-citations")

TEST = "irds:sci/hepth-core-citations/test/c10"
TINY = dict(train=True, train_queries=6, max_steps=3, train_batch_size=4, list_size=4, max_seq_length=32,
            learning_rate=1e-4, fields=["title", "abstract"])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("hlm-dense")
    return work, hlm_dense_component(context=Context(dataset=TEST, work_dir=str(work)), **TINY)


def test_trains_once_on_the_training_split_and_keeps_the_model_by_its_settings(trained, monkeypatch):
    work, retriever = trained
    settings = T.CurriculumSettings(train_queries=6, max_steps=3, batch_size=4, list_size=4, max_seq_length=32,
                                    learning_rate=1e-4)
    path = T.curriculum_model_path(settings, work)
    assert str(retriever.model) == str(path) and str(work) in str(path)
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["stages"] == [1, 2] and meta["frozen_layers"] == 3 and meta["train_max_seq_length"] == 32
    assert set(meta["loss_history"]) == {"stage1", "stage2"}
    # found again by its settings: no second training; another setting is another model
    monkeypatch.setattr(T, "train_curriculum", lambda *a, **k: pytest.fail("trained twice"))
    again = hlm_dense_component(context=Context(dataset=TEST, work_dir=str(work)), **TINY)
    assert str(again.model) == str(path)
    assert T.curriculum_model_path(T.CurriculumSettings(**{**settings.__dict__, "stages": "1"}), work) != path


def test_the_trained_model_scores_not_the_base(trained):
    work, retriever = trained
    frame = ps.pipeline("pool >> text", dataset=TEST)(pt.get_dataset(TEST).get_topics().head(2))
    base = dense_component(context=Context(dataset=TEST), index=False, fields=["title", "abstract"])(frame)
    tuned = retriever(frame)
    key = ["qid", "docno"]
    merged = base[key + ["score"]].merge(tuned[key + ["score"]], on=key, suffixes=("_base", "_tuned"))
    assert len(merged) == len(frame) > 0
    assert not np.allclose(merged["score_base"], merged["score_tuned"])


def test_training_queries_are_never_the_test_queries():
    settings = T.CurriculumSettings(train_queries=10_000)
    test_q = set(pt.get_dataset(TEST).get_topics()["qid"].astype(str))
    assert T.training_queries(settings) and not set(T.training_queries(settings)) & test_q


def test_refusals(tmp_path, monkeypatch):
    ctx = Context(dataset=TEST, work_dir=str(tmp_path))
    with pytest.raises(ParameterError, match="epochs need train=True"):
        hlm_dense_component(context=ctx, epochs=2)
    with pytest.raises(ParameterError, match="stages"):
        hlm_dense_component(context=ctx, train=True, stages="3")
    # a training split that shared a query with the dataset would test the model on its own training queries
    one = str(pt.get_dataset(TEST).get_topics()["qid"].iloc[0])
    monkeypatch.setattr(C, "training_queries", lambda s: [one, "another"])
    with pytest.raises(ParameterError, match=f"1 query id.*of {T.TRAIN_DATASET} are also queries of.*{one}"):
        hlm_dense_component(context=ctx, **TINY)
    assert not (tmp_path / "models").exists()
