"""``sciface_rerank(train=True)``: SciFACE's facet cross-encoders trained on CSFCube's own judgements,
cross-fitted on its official folds (plugins/sciface/folds.py).  Each query must be re-ranked by the model
trained on the other fold's test queries, and no model may have seen a query it re-ranks."""
import conftest
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.datasets import csfcube
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.plugins.sciface import folds as F  # noqa: N812
from pyterrier_sci.plugins.sciface import warm_start as W  # noqa: N812
from pyterrier_sci.plugins.sciface.components import facet_rerank_component
from pyterrier_sci.plugins.sciface.cross_encoder import FacetReranker, score_pairs
from pyterrier_sci.plugins.sciface.rerank import SeedText
from pyterrier_sci.plugins.sciface.warm_start import WarmStartSettings
from pyterrier_sci.protocol import walk
from pyterrier_sci.registry import Context, get
from pyterrier_sci.training import settings_key

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


def test_fresh_head_model_keys_are_those_of_before_warm_starts():
    # the keys of the models in users' work directories (trained before warm starts were settings) must not move
    # (base_model keys by its weights; models keyed by its path before are found by their legacy key)
    before = dict(facet="method", base_model="default", epochs=3, triplets_per_seed=10, learning_rate=2e-5,
                  max_length=256, val_seeds=2, seed=42, collapse=None)
    old_key = settings_key({**before, "train": "fold2-test"})
    assert F.FoldSettings(facet="method").key("fold2-test") == old_key
    assert F.FoldSettings(facet="method").key("fold2-test", legacy=True) == \
        settings_key({**before, "train": "fold2-test"}, legacy=True)
    assert F.FoldSettings(facet="method", warm_start=WarmStartSettings()).key("fold2-test") != old_key


@conftest.needs_data("acl-fulltext")
def test_warm_started_fold_models_start_from_one_shared_student(trained, monkeypatch):
    """``warm_loss``: both folds train from one cross-encoder distilled on unlabelled ACL papers (built once,
    keyed by its settings, reused by a second facet and pipeline), not from a fresh head."""
    warm = dict(warm_loss="margin_mse", warm_seeds=3, warm_docs=40)
    distilled, bases = [], []
    real_distil, real_train = W.distil_cross_encoder, F.train_facet_cross_encoder

    def distil(pairs, path, **kw):
        distilled.append((set(pairs["seed_id"]) | set(pairs["cand_id"]), kw))
        return real_distil(pairs, path, **kw)

    def train(pairs, path, facet, **kw):
        bases.append(kw["base_model"])
        return real_train(pairs, path, facet, **kw)

    monkeypatch.setattr(W, "distil_cross_encoder", distil)
    monkeypatch.setattr(F, "train_facet_cross_encoder", train)
    tmp_path, fresh_pipe, _ = trained      # the module's work directory, which holds the fresh-head models
    ctx = Context(dataset=METHOD, work_dir=str(tmp_path))
    pipe = facet_rerank_component(context=ctx, **TINY, **warm)
    student = W.warm_start_model(W.WarmStartSettings(loss="margin_mse", seeds=3, docs=40, max_length=48), tmp_path)
    assert student.parent == tmp_path / "models" / "sciface" and student.name.startswith(
        "sci__acl-core-citations__train-warm-margin_mse-")
    assert W.WarmStartCrossEncoder(student).metadata["seeds"] == 3
    # one distillation, on the first 40 ACL papers, at the fold training's input length
    acl = [d for d, _, _ in W.distillation_corpus("acl")]
    assert len(distilled) == 1 and distilled[0][0] <= set(acl[:40])
    assert distilled[0][1]["max_length"] == 48 and distilled[0][1]["loss"] == "margin_mse"
    assert bases == [str(student)] * 2
    routed = _routed(pipe)
    for fold, reranker in routed.by_fold.items():
        assert reranker.model.meta["base_model"] == str(student), fold
    # the fresh-head models of the same settings are other models; a second warm pipeline reuses all
    fresh = {t.model.path for t in _routed(fresh_pipe).by_fold.values()}
    assert len(fresh) == 2 and not fresh & {t.model.path for t in routed.by_fold.values()}
    monkeypatch.setattr(W, "distil_cross_encoder", lambda *a, **k: pytest.fail("distilled twice"))
    n = len(bases)
    again = facet_rerank_component(context=ctx, **TINY, **warm)
    assert len(bases) == n and {t.model.path for t in _routed(again).by_fold.values()} == \
        {t.model.path for t in routed.by_fold.values()}


def test_csfcube_distillation_corpus_leaves_out_the_query_papers():
    tested = {csfcube.query_paper_id(q) for facet in ("background", "method")
              for split in csfcube.splits()[facet].values() for q in split}
    docs = [d for d, _, _ in W.distillation_corpus("csfcube")]
    assert len(tested) == 28 and not tested & set(docs)
    # all 34 released query papers are left out (28 in the test folds), nothing else
    assert len(docs) == len(set(docs)) == 4205 - 34 and set(csfcube.docs()) - set(docs) >= tested
    assert set(csfcube.docs()) - set(docs) == csfcube.query_papers() and len(csfcube.query_papers()) == 34
    assert W.distillation_corpus("csfcube", docs=10) == W.distillation_corpus("csfcube")[:10]
    with pytest.raises(ValueError, match="unknown warm-start corpus 'pubmed'"):
        W.distillation_corpus("pubmed")


@pytest.mark.parametrize("extra,match", [
    ({"warm_seeds": 10}, "warm_seeds need warm_loss"),
    ({"warm_loss": "kl"}, "warm_loss"),
    ({"warm_loss": "mse", "warm_corpus": "pubmed"}, "warm_corpus"),
    ({"warm_loss": "mse", "warm_docs": 1}, "warm_docs"),
])
def test_warm_start_settings_are_checked(tmp_path, extra, match):
    with pytest.raises(ParameterError, match=match):   # through the registry, as a pipeline file builds it
        get("sciface_rerank").build(context=Context(dataset=METHOD, work_dir=str(tmp_path)), **TINY, **extra)
    assert not (tmp_path / "models").exists()


def test_zero_epochs_reranks_with_the_distilled_student_alone(trained):
    """``epochs=0`` with ``warm_loss``: no facet training; each fold's model is the student itself (the same
    scores, on pairs it was never trained on), and its record says that nothing was trained."""
    work = trained[0]
    ctx = Context(dataset=METHOD, work_dir=str(work))
    zero = {**TINY, "epochs": 0}
    warm = dict(warm_loss="margin_mse", warm_seeds=3, warm_docs=40)
    pipe = facet_rerank_component(context=ctx, **zero, **warm)
    student = W.WarmStartCrossEncoder(
        W.warm_start_model(W.WarmStartSettings(loss="margin_mse", seeds=3, docs=40, max_length=48), work))
    seeds = [("A title", "an abstract about parsing"), ("", "graph neural networks for molecules")]
    cands = [("Parsing", "a dependency parser"), ("Molecules", "message passing on molecular graphs")]
    expected = score_pairs(student.cross_encoder(48), seeds, cands)
    routed = _routed(pipe)
    assert set(routed.by_fold) == set(F.FOLDS)
    for fold, reranker in routed.by_fold.items():
        meta = reranker.model.meta
        assert meta["base_model"] == str(student.path) and meta["training"]["epochs"] == 0, fold
        assert meta["training"]["steps"] == 0 and meta["training"]["val_spearman"] is None, fold
        assert reranker.model.score(seeds, cands) == pytest.approx(expected, abs=1e-5), fold
    # and a fresh head is never used untrained: epochs=0 needs a warm start
    with pytest.raises(ParameterError, match="epochs=0") as e:
        get("sciface_rerank").build(context=ctx, **zero)
    assert e.value.param == "epochs"
