"""``sciface_rerank(train=True)``: SciFACE's facet cross-encoders trained on CSFCube's own judgements,
cross-fitted on its official folds (plugins/sciface/folds.py).  Each query must be re-ranked by the model
trained on the other fold's test queries, and no model may have seen a query it re-ranks."""
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.datasets import csfcube
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.plugins.sciface import folds as F  # noqa: N812
from pyterrier_sci.plugins.sciface.components import facet_rerank_component
from pyterrier_sci.plugins.sciface.cross_encoder import FacetReranker
from pyterrier_sci.plugins.sciface.rerank import SeedText
from pyterrier_sci.protocol import walk
from pyterrier_sci.registry import Context

pytestmark = needs_data("csfcube", "readable_annotations")

METHOD = "irds:sci/csfcube/method"
#: three optimiser steps at a short input (the first at warm-up's learning rate 0): the behaviour, not the figure
TINY = dict(train=True, epochs=1, triplets_per_seed=8, max_length=48, val_seeds=1, seed=0, learning_rate=1e-4)


def _routed(pipeline) -> F.FoldRouted:
    found = [t for t in walk(pipeline) if isinstance(t, F.FoldRouted)]
    assert found, f"no FoldRouted in {pipeline!r}"
    return found[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The two fold models of the method facet (trained once for the module), and the seeds each saw."""
    work = tmp_path_factory.mktemp("sciface-folds")
    seen = {}
    real = F.train_facet_cross_encoder

    def spy(pairs, path, facet, **kw):  # records what each model is trained and validated on, then trains it
        seen[path.name] = set(pairs["seed_id"]) | set(kw["val_pairs"]["seed_id"])
        return real(pairs, path, facet, **kw)

    F.train_facet_cross_encoder = spy
    try:
        pipe = facet_rerank_component(context=Context(dataset=METHOD, work_dir=str(work)), **TINY)
    finally:
        F.train_facet_cross_encoder = real
    return work, pipe, seen


def test_each_fold_model_is_trained_on_the_other_folds_queries_only(trained):
    work, pipe, seen = trained
    splits = csfcube.splits()["method"]
    settings = F.FoldSettings(facet="method", **{k: v for k, v in TINY.items() if k != "train"})
    assert len(seen) == 2
    for fold in F.FOLDS:
        path = F.fold_model_path(fold, settings, work)
        assert (path / "pt_meta.json").exists() and str(work) in str(path)
        other = "fold2" if fold == "fold1" else "fold1"
        assert seen[path.name] == set(splits[f"{other}_test"]), fold
        assert not seen[path.name] & set(splits[f"{fold}_test"])
        meta = F.FacetCrossEncoder(path).meta["training"]
        assert meta["train_seeds"] + meta["val_seeds"] == len(splits[f"{other}_test"]) and meta["val_seeds"] == 1


def test_each_query_is_reranked_by_the_model_that_never_saw_it(trained):
    work, pipe, _ = trained
    routed = _routed(pipe)
    splits = csfcube.splits()["method"]
    q1, q2 = splits["fold1_test"][0], splits["fold2_test"][0]
    topics = ps.pipeline("pool", dataset=METHOD).transform(
        pd.DataFrame({"qid": [q1, q2], "query": ["", ""]})).groupby("qid").head(6)
    out = pipe(topics[["qid", "query", "docno", "score", "rank"]])
    assert set(out["qid"]) == {q1, q2} and len(out) == 12
    # the pipeline adds the texts, then each query goes to its fold's model: the same scores as that model
    # alone, and not those of the other fold's model
    add_text = SeedText(METHOD) >> pt.text.get_text(pt.get_dataset(METHOD), ["title", "abstract"])
    with_text = add_text(topics[["qid", "query", "docno", "score", "rank"]])
    for q, fold, other in ((q1, "fold1", "fold2"), (q2, "fold2", "fold1")):
        rows = with_text[with_text.qid == q]
        own = routed.by_fold[fold](rows).set_index("docno")["score"]
        theirs = routed.by_fold[other](rows).set_index("docno")["score"]
        got = out[out.qid == q].set_index("docno")["score"]
        pd.testing.assert_series_equal(got.sort_index(), own.sort_index(), check_names=False)
        assert not (got.sort_index() - theirs.sort_index()).abs().lt(1e-6).all()


def test_a_second_pipeline_reuses_the_models(trained, monkeypatch):
    work, pipe, _ = trained
    monkeypatch.setattr(F, "train_facet_cross_encoder", lambda *a, **k: pytest.fail("trained twice"))
    again = facet_rerank_component(context=Context(dataset=METHOD, work_dir=str(work)), **TINY)
    assert {f: t.model.path for f, t in _routed(again).by_fold.items()} == \
        {f: t.model.path for f, t in _routed(pipe).by_fold.items()}
    assert all(isinstance(t, FacetReranker) for t in _routed(again).by_fold.values())


def test_a_query_in_no_test_fold_is_refused(trained):
    _, pipe, _ = trained
    frame = pd.DataFrame({"qid": ["123_method"], "query": [""], "docno": ["1"], "score": [1.0], "rank": [0],
                          "query_title": ["t"], "query_abstract": ["a"], "title": ["t"], "abstract": ["a"]})
    with pytest.raises(ValueError, match="in no CSFCube test fold.*123_method"):
        _routed(pipe)(frame)


@pytest.mark.parametrize("dataset,extra,match", [
    ("irds:sci/csfcube", {}, "CSFCube facet dataset"),
    ("irds:sci/doris-mae/birco-dev", {}, "CSFCube facet dataset"),
    (METHOD, {"facet": "background"}, "whose queries are method queries"),
    (METHOD, {"model": "/somewhere"}, "trains its own models: model"),
])
def test_train_true_is_refused_where_it_cannot_hold(tmp_path, dataset, extra, match):
    with pytest.raises(ParameterError, match=match):
        facet_rerank_component(context=Context(dataset=dataset, work_dir=str(tmp_path)), **TINY, **extra)
    assert not (tmp_path / "models").exists()


def test_training_settings_need_train_true(tmp_path):
    with pytest.raises(ParameterError, match="epochs need train=True"):
        facet_rerank_component(context=Context(dataset=METHOD, work_dir=str(tmp_path)), model="/x", epochs=2)
