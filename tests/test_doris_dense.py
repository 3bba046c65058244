"""DORIS-MAE dense methods: the Eq. 4 scorer and its query modes, triplets, contrastive fine-tuning
and its artifact."""

import json
import pickle

import conftest
import numpy as np
import pandas as pd
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.plugins.doris_mae import (
    ContrastiveModel,
    MaxSimScorer,
    fine_tune,
    make_triplets,
    maxsim_component,
    split_sentences,
)
from pyterrier_sci.plugins.doris_mae import maxsim as doris
from pyterrier_sci.plugins.doris_mae.maxsim import maxsim
from pyterrier_sci.registry import Context

offline = needs_data("doris-mae", "birco_dev", "qrels.tsv")
DS = "irds:sci/doris-mae/birco-dev"


def test_split_sentences():
    assert split_sentences("We propose XNet. It works well! Does it scale? Yes.") == [
        "We propose XNet.",
        "It works well!",
        "Does it scale?",
        "Yes.",
    ]
    # abbreviations, initials, numbers and hard-wrapped lines
    assert split_sentences(
        "Methods, e.g. BERT, help. See Fig. 2 for details.\nResults by J. Smith et al. are\ngood."
    ) == ["Methods, e.g. BERT, help.", "See Fig. 2 for details.", "Results by J. Smith et al. are good."]
    assert split_sentences("accuracy of 91.30 on the test set") == ["accuracy of 91.30 on the test set"]
    assert split_sentences("") == [""]


def frame():
    rows = [
        (
            "q1",
            "graph networks for molecules. They predict toxicity.",
            "d1",
            "We study graph neural networks on molecules. Toxicity is predicted well.",
            ("Graph neural networks for molecules.", "Toxicity prediction."),
        ),
        (
            "q1",
            "graph networks for molecules. They predict toxicity.",
            "d2",
            "Images are segmented with convolutions.",
            ("Graph neural networks for molecules.", "Toxicity prediction."),
        ),
        (
            "q2",
            "speech recognition on phones",
            "d3",
            "Low-resource speech recognition. It runs on mobile phones.",
            ("Speech recognition.", "Mobile deployment."),
        ),
    ]
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "text", "aspects"]).assign(score=0.0, rank=0, keep="k")


@pytest.fixture(scope="module")
def encoder():
    return doris.shared_encoder("default")


def _unit(encoder, texts):
    v = encoder.model.encode(list(texts), convert_to_numpy=True)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize(
    "qmode, dmode",
    [
        ("whole", "whole"),
        ("sentences", "sentences"),
        ("aspects", "sentences"),
        ("aspects_concat", "whole"),
        ("sentences", "whole"),
    ],
)
def test_scores_are_eq4(encoder, qmode, dmode):
    inp = frame()
    out = MaxSimScorer("default", query_mode=qmode, doc_mode=dmode)(inp)
    for row in out.itertuples():
        if qmode == "whole":
            q = [row.query]
        elif qmode == "sentences":
            q = split_sentences(row.query)
        elif qmode == "aspects":
            q = list(row.aspects)
        else:
            q = [" ".join(row.aspects)]
        d = [row.text] if dmode == "whole" else split_sentences(row.text)
        sims = _unit(encoder, q) @ _unit(encoder, d).T
        want = float(np.mean(sims.max(axis=1)))  # 1/n sum_i max_j cos(Q_i, p_j)
        assert row.score == pytest.approx(want, abs=1e-5)
    assert (out["keep"] == "k").all() and {"aspects", "text"} <= set(out.columns)
    for _, g in out.groupby("qid"):
        assert g["score"].is_monotonic_decreasing and list(g["rank"]) == list(range(len(g)))


def test_single_vectors_give_the_cosine(encoder):
    out = MaxSimScorer("default", query_mode="whole", doc_mode="whole")(frame())
    row = out[out.docno == "d3"].iloc[0]
    q, d = _unit(encoder, [row.query]), _unit(encoder, [row.text])
    cos = float((q @ d.T)[0, 0])
    assert row.score == pytest.approx(cos, abs=1e-5) and maxsim(q, d) == pytest.approx(cos)


def test_aspect_modes_need_aspects():
    with pytest.raises(ValueError, match="needs the aspects"):
        MaxSimScorer("default", query_mode="aspects")(frame().drop(columns=["aspects"]))
    with pytest.raises(ValueError, match="query_mode"):
        MaxSimScorer(query_mode="paragraphs")
    empty = MaxSimScorer()(pd.DataFrame(columns=["qid", "query", "docno"]))
    assert len(empty) == 0 and {"score", "rank"} <= set(empty.columns)


@offline
def test_aspects_and_texts_from_the_dataset():
    topics = ps.datasets.doris_mae.aspect_topics(DS).head(1)
    res = ps.pipeline("pool", dataset=DS)(topics[["qid", "query"]]).head(5)
    by_dataset = MaxSimScorer("default", query_mode="aspects", doc_mode="sentences", dataset=DS)(res)
    import ir_datasets

    store = ir_datasets.load(DS[5:]).docs_store()
    with_cols = res.merge(topics[["qid", "aspects"]], on="qid").assign(
        text=lambda d: [store.get(x).abstract for x in d["docno"]]
    )
    by_columns = MaxSimScorer("default", query_mode="aspects", doc_mode="sentences")(with_cols)
    a = by_dataset.set_index("docno")["score"].sort_index()
    b = by_columns.set_index("docno")["score"].sort_index()
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), atol=1e-6)


def test_component_and_pickle():
    t = maxsim_component(context=Context(dataset=DS), query_mode="aspects_concat", doc_mode="whole")
    assert t.dataset == DS and t.query_mode == "aspects_concat"
    clone = pickle.loads(pickle.dumps(t))
    assert clone == t and hash(clone) == hash(t)


class TestMaxSimScorer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return MaxSimScorer("default")


# ---------------------------------------------------------------- fine-tuning


@offline
def test_triplets_follow_the_scores():
    tr = make_triplets(DS, qids=["0", "3"], per_query=10, seed=1)
    assert len(tr) == 20 and set(tr["qid"]) == {"0", "3"}
    assert (tr["pos_score"] > tr["neg_score"]).all()
    q = ps.datasets.doris_mae.aspect_queries(DS)
    assert (tr["anchor"] == [q[x].text for x in tr["qid"]]).all()
    again = make_triplets(DS, qids=["0", "3"], per_query=10, seed=1)
    pd.testing.assert_frame_equal(tr, again)
    gap = make_triplets(DS, qids=["0"], per_query=5, seed=1, min_gap=0.5)
    assert ((gap["pos_score"] - gap["neg_score"]) > 0.5).all()


TRIPLETS = pd.DataFrame(
    {
        "anchor": ["graph neural networks for molecules"] * 4,
        "positive": ["message passing networks predict molecular properties", "graph networks on chemistry data"] * 2,
        "negative": ["stock market prediction with trees", "image segmentation of street scenes"] * 2,
        "qid": ["q1", "q1", "q2", "q2"],
    }
)


@pytest.mark.parametrize("trainer", ["auto", "st"])
def test_fine_tune_writes_an_artifact(tmp_path, trainer):
    out = tmp_path / "model"
    art = fine_tune(TRIPLETS, out, margin=0.5, batch_size=2, max_steps=2, max_seq_length=32, trainer=trainer)
    assert isinstance(art, ContrastiveModel) and (out / "modules.json").exists()
    assert not list(tmp_path.glob("model.partial-*"))
    meta = json.loads((out / "doris_contrastive.json").read_text())
    assert (
        meta["trainer"] == "st" and meta["margin"] == 0.5 and meta["triplets"] == 4 and meta["queries"] == ["q1", "q2"]
    )
    assert len(meta["loss_history"]) == 2 and meta["max_seq_length"] == 32
    pt_meta = json.loads((out / "pt_meta.json").read_text())
    assert pt_meta["type"] == "dense_model" and pt_meta["training_file"] == "doris_contrastive.json"
    loaded = ContrastiveModel.load(str(out))
    assert loaded.training["base_model"] == "default"
    # usable by the dense components as model=<path>
    res = MaxSimScorer(str(out), query_mode="whole", doc_mode="whole")(frame())
    assert len(res) == 3 and res["score"].between(-1, 1).all()
    with pytest.raises(FileExistsError):
        fine_tune(TRIPLETS, out, max_steps=1, batch_size=2, max_seq_length=32, trainer=trainer)


def test_the_torch_fallback_is_gone(tmp_path):
    with pytest.raises(ValueError, match="fallback was removed"):
        fine_tune(TRIPLETS, tmp_path / "m", max_steps=1, trainer="torch")
    with pytest.raises(ValueError, match="'auto' or 'st'"):
        fine_tune(TRIPLETS, tmp_path / "m", max_steps=1, trainer="jax")
    assert not (tmp_path / "m").exists()


def test_fine_tune_changes_the_model_and_is_atomic(tmp_path, monkeypatch):
    from pyterrier_sci.plugins.doris_mae import training

    out = tmp_path / "m"
    fine_tune(TRIPLETS, out, margin=1.0, batch_size=4, max_steps=3, max_seq_length=32, learning_rate=1e-4)
    base = doris.shared_encoder("default").model
    from sentence_transformers import SentenceTransformer

    tuned = SentenceTransformer(str(out), device="cpu")
    a = base.encode(["graph neural networks for molecules"])[0]
    b = tuned.encode(["graph neural networks for molecules"])[0]
    assert not np.allclose(a, b)

    # an interrupted training leaves neither a model nor a partial directory, and keeps the old model
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "_train_st", boom)
    with pytest.raises(KeyboardInterrupt):
        fine_tune(TRIPLETS, out, overwrite=True, max_steps=1, batch_size=2, max_seq_length=32)
    assert (out / "modules.json").exists() and not list(tmp_path.glob("m.partial-*"))
    kept = SentenceTransformer(str(out), device="cpu").encode(["graph neural networks for molecules"])[0]
    assert np.allclose(kept, b)
    with pytest.raises(KeyboardInterrupt):
        fine_tune(TRIPLETS, tmp_path / "new", max_steps=1, batch_size=2, max_seq_length=32)
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob("new.partial-*"))


def test_the_factory_lives_in_components_and_keeps_its_old_path():
    from pyterrier_sci.plugins.doris_mae import components

    assert doris.maxsim_component is components.maxsim_component is maxsim_component


# ---------------------------------------------------------------- doris_maxsim(train=True): a declared training step

TRAIN20, TEST20 = "irds:sci/doris-mae/birco-dev/train20", "irds:sci/doris-mae/birco-dev/test20"
TINY = dict(train=True, train_dataset=TRAIN20, per_query=2, max_steps=1, train_batch_size=4, max_seq_length=32,
            learning_rate=1e-4, query_mode="whole", doc_mode="whole")


@offline
def test_the_component_trains_once_on_the_training_queries_and_scores_with_that_model(tmp_path, monkeypatch):
    from pyterrier_sci.plugins.doris_mae import training as T
    ctx = Context(dataset=TEST20, work_dir=str(tmp_path))
    scorer = maxsim_component(context=ctx, **TINY)
    model = T.ContrastiveModel(scorer.model)
    assert str(tmp_path) in scorer.model and model.training["train_dataset"] == TRAIN20
    assert model.training["triplets"] == 2 * 20 and model.training["queries"] == sorted(
        ps.datasets.doris_mae.birco_query_ids("train20"), key=lambda q: (len(q), q))
    # kept and found again by its settings: no second training
    monkeypatch.setattr(T, "fine_tune", lambda *a, **k: pytest.fail("trained twice"))
    assert maxsim_component(context=ctx, **TINY).model == scorer.model
    # other settings, another model
    monkeypatch.undo()
    other = maxsim_component(context=ctx, **{**TINY, "seed": 1})
    assert other.model != scorer.model
    # the trained model, not the base one, scores
    topics = ps.datasets.doris_mae.aspect_topics(TEST20).head(1)
    pool = ps.pipeline("pool", dataset=TEST20)(topics[["qid", "query"]]).head(5)
    base = maxsim_component(context=Context(dataset=TEST20), query_mode="whole", doc_mode="whole")(pool)
    tuned = scorer(pool)
    assert not np.allclose(base.sort_values("docno")["score"], tuned.sort_values("docno")["score"])


@offline
def test_training_on_the_test_queries_is_refused(tmp_path):
    from pyterrier_sci.errors import ParameterError
    with pytest.raises(ParameterError, match="20 query id.*also queries of irds:sci/doris-mae/birco-dev"):
        maxsim_component(context=Context(dataset="irds:sci/doris-mae/birco-dev", work_dir=str(tmp_path)), **TINY)
    assert not (tmp_path / "models").exists()
    with pytest.raises(ParameterError, match="need train=True"):
        maxsim_component(context=Context(dataset=TEST20), margin=0.3)
    with pytest.raises(ParameterError, match="needs train_dataset"):
        maxsim_component(context=Context(dataset=TEST20), train=True)
