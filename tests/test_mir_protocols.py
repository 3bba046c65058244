"""MIR's offline protocols as registered ids and as ``mir_dense`` options: the validation slice of the
training proposals, the rolling-origin folds (one model per fold, each query scored by its fold's
model) and WiSE-FT weight interpolation - what the declared tables mir/validation and mir/rolling run."""
import json

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.errors import ParameterError

DEV = "irds:sci/mir-multicite/dev"


@needs_data("mir-multicite")
def test_validation_and_rolling_ids_are_the_protocols_parts(mir_dev):
    from pyterrier_sci.datasets import mir_multicite as M
    train_q, test_q = M.chrono_parts(mir_dev)
    sub, val = M.validation_parts(train_q)
    assert (len(sub), len(val)) == (31, 21) and sub + val == train_q
    assert M.View("dev", "validation-train").qids() == sub and M.View("dev", "validation").qids() == val
    # the validation corpora mirror the test ones: restricted = the validation proposals' cited papers,
    # extended = the sub-training papers plus the proposal's own ground truth
    assert M.View("dev", "validation", "extended").training_view() == M.View("dev", "validation-train")
    assert dict(M.View("dev", "validation", "extended").pools()) == M.candidate_pools(
        mir_dev.cited(val), val, "extended", M.View("dev", "validation-train").training_docs())
    folds = M.rolling_parts(mir_dev)
    for k, (train, test) in enumerate(folds, 1):
        assert M.View("dev", f"rolling-{k}-train").qids() == train
        assert M.View("dev", f"rolling-{k}-test").qids() == test
    for corpus in ("restricted", "extended"):
        pooled = M.View("dev", "rolling-test", corpus)
        assert pooled.qids() == [q for _, te in folds for q in te]          # 52 proposals, each once
        # each proposal keeps its own fold's candidates (restricted: the fold's cited papers)
        expected = {}
        for train, test in folds:
            train_docs = list(dict.fromkeys(d for docs in mir_dev.cited(train).values() for d in docs))
            expected.update(M.candidate_pools(mir_dev.cited(test), test, corpus, train_docs))
        assert dict(pooled.pools()) == expected
    with pytest.raises(ValueError, match="folds"):
        M.View("dev", "rolling-test").training_view()
    import ir_datasets
    ds = ir_datasets.load("sci/mir-multicite/dev/rolling-test/extended")
    assert sum(1 for _ in ds.queries_iter()) == 52
    assert {q.query_id for q in ds.qrels_iter() if q.relevance} == {q for q, docs in mir_dev.cited(
        [q for _, te in folds for q in te]).items() if any(docs.values())}
    assert len({q.query_id for q in ds.qrels_iter() if q.relevance}) == 37


def test_rolling_router_scores_each_query_with_its_folds_transformer():
    from pyterrier_sci.plugins.mir.training import RollingRouted
    fold = [pt.apply.generic(lambda df, k=k: df.assign(score=float(k))) for k in (1, 2)]
    routed = RollingRouted([(["a", "b"], fold[0]), (["c"], fold[1])], "irds:test")
    inp = pd.DataFrame({"qid": ["c", "a", "b", "a"], "query": "q", "docno": ["x", "y", "z", "w"]})
    out = routed(inp)
    assert dict(zip(zip(out.qid, out.docno), out.score)) == {("c", "x"): 2.0, ("a", "y"): 1.0, ("b", "z"): 1.0,
                                                              ("a", "w"): 1.0}
    with pytest.raises(ValueError, match=r"no rolling-origin fold of irds:test.*'d'"):
        routed(pd.DataFrame({"qid": ["a", "d"], "query": "q", "docno": ["x", "y"]}))
    assert len(routed(inp.iloc[:0])) == 0


@needs_data("mir-multicite")
def test_rolling_and_wise_ft_options_are_checked_before_anything_trains(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    with pytest.raises(ParameterError, match="train_dataset .* must be left out"):
        ps.pipeline(f"mir_dense(train=True, rolling=True, train_dataset='{DEV}/chrono-train')",
                    dataset=f"{DEV}/rolling-test")
    with pytest.raises(ParameterError, match="rolling-test"):       # not a rolling-origin test set
        ps.pipeline("mir_dense(train=True, rolling=True)", dataset=f"{DEV}/chrono-test")
    with pytest.raises(ParameterError, match="rolling-test"):       # a fold's training side is not tested
        ps.pipeline("mir_dense(train=True, rolling=True)", dataset=f"{DEV}/rolling-2-train")
    with pytest.raises(ParameterError, match="train=True"):
        ps.pipeline("mir_dense(model='default', rolling=True)", dataset=f"{DEV}/rolling-test")
    with pytest.raises(ParameterError, match="train=True"):
        ps.pipeline("mir_dense(model='default', wise_ft=0.5)", dataset=f"{DEV}/rolling-test")
    with pytest.raises(ParameterError, match="wise_ft"):
        ps.pipeline(f"mir_dense(train=True, train_dataset='{DEV}/validation-train', wise_ft=1.5)",
                    dataset=f"{DEV}/validation")
    # the validation slice is chronological like the test split: training on it for the test set passes the check,
    # training on the validation proposals for their own sub-training ones does not
    with pytest.raises(ParameterError, match="chronological"):
        ps.pipeline(f"mir_dense(train=True, train_dataset='{DEV}/validation')", dataset=f"{DEV}/validation-train")
    assert not (tmp_path / "models").exists()


TINY = "max_steps=1, batch_size=2, sampling=False, triplets='T1', max_seq_length=32"


@needs_data("mir-multicite")
def test_rolling_fold_scores_with_the_model_trained_before_it(tmp_path, monkeypatch):
    """mir_dense(rolling=True) on one fold's test set is mir_dense trained on that fold's training id."""
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    from pyterrier_sci.plugins.mir.training import RollingRouted
    test = f"{DEV}/rolling-1-test"
    rolling = ps.pipeline(f"pool >> mir_dense(train=True, rolling=True, {TINY})", dataset=test)
    assert isinstance(list(rolling)[-1], RollingRouted)
    trained = sorted((tmp_path / "models" / "mir").iterdir())
    assert len(trained) == 1 and "rolling-1-train" in trained[0].name        # one fold, trained once
    assert json.loads((trained[0] / "mir_training.json").read_text())["dataset"] == f"{DEV}/rolling-1-train"
    direct = ps.pipeline(f"pool >> mir_dense(train=True, train_dataset='{DEV}/rolling-1-train', {TINY})",
                         dataset=test)
    assert len(list((tmp_path / "models" / "mir").iterdir())) == 1          # the same model, not trained again
    topics = pt.get_dataset(test).get_topics()
    a, b = rolling(topics), direct(topics)
    key = ["qid", "docno"]
    merged = a.merge(b, on=key, suffixes=("_rolling", "_direct"))
    assert len(merged) == len(a) == len(b) > 0
    assert np.allclose(merged.score_rolling, merged.score_direct)
    # queries of another fold are refused, not scored by a model that saw them
    other = pt.get_dataset(f"{DEV}/rolling-3-test").get_topics().head(1)
    with pytest.raises(ValueError, match="no rolling-origin fold"):
        list(rolling)[-1](ps.pipeline("pool", dataset=f"{DEV}/rolling-3-test")(other))


def test_wise_ft_interpolates_the_weights_with_the_base(tmp_path):
    from pyterrier_sci.plugins.dense import load_sentence_transformer
    from pyterrier_sci.plugins.mir.training import ARTIFACT_FORMAT, ARTIFACT_TYPE, TRAINING_FILE, wise_ft_model
    from pyterrier_sci.training import save_model, save_model_artifact
    base = load_sentence_transformer("default", "cpu")
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    tuned = tmp_path / "tuned"
    tmp = tmp_path / "tuned.tmp"
    with torch.no_grad():
        for p in base.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    tuned_state = {k: v.clone() for k, v in base.state_dict().items()}
    save_model(base, tmp)
    save_model_artifact(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT, {"base_model": "default", "seed": 0},
                        training_file=TRAINING_FILE)
    tmp.rename(tuned)
    for w in (0.0, 0.25, 1.0):
        path = wise_ft_model(tuned, w)
        assert path == tmp_path / f"tuned-wise-ft-{w:g}" and wise_ft_model(tuned, w) == path     # built once
        state = load_sentence_transformer(str(path), "cpu").state_dict()
        for k, v in state.items():
            if v.is_floating_point():
                assert torch.allclose(v, base_state[k] * (1 - w) + tuned_state[k] * w, atol=1e-6), k
        record = json.loads((path / TRAINING_FILE).read_text())
        assert record["wise_ft"]["weight"] == w and record["seed"] == 0
    with pytest.raises(ValueError, match="wise_ft"):
        wise_ft_model(tuned, 1.5)
