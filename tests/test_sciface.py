"""SciFACE facet cross-encoders: triplets, the margin ranking loss, training, the artifact, the
re-rankers and the controllable mode (tiny BERT built from scratch; seconds)."""

import json

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

from pyterrier_sci.plugins import sciface as F
from pyterrier_sci.plugins.sciface import triplets as T

WORDS = (
    "graph neural network convolution message passing molecule social vision transformer attention "
    "translation parsing tagging entity recognition speech adaptation reinforcement policy gradient "
    "reward robot image segmentation detection"
).split()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def make_tiny_bert(d):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        model_max_length=64,
    )
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(d)
    return str(d)


def toy_pairs(n_seeds=6, n_cands=6, seed=0):
    """Seeds about 'graph'; candidates whose method score is the number of 'graph' words (0-3)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        for c in range(n_cands):
            m = c % 4
            words = ["graph"] * m + list(rng.choice(["speech", "image", "policy", "reward"], size=4 - m))
            rows.append(
                {
                    "seed_id": f"s{s}",
                    "seed_title": "graph network",
                    "seed_abstract": "graph convolution graph",
                    "cand_id": f"s{s}c{c}",
                    "cand_title": "paper",
                    "cand_abstract": " ".join(words),
                    "method": m,
                    "background": 3 - m,
                }
            )
    return pd.DataFrame(rows)


# -- triplets ----------------------------------------------------------------------------------
def test_triplets_are_all_ordered_pairs_with_higher_positive():
    pairs = pd.DataFrame({c: ["x"] * 5 for c in T.PAIR_COLUMNS})
    pairs["seed_id"] = ["a", "a", "a", "b", "b"]
    pairs["method"] = [3, 2, 2, 1, 1]
    pairs["background"] = [0, 1, 3, 0, 2]
    t = T.make_triplets(pairs, "method")
    assert sorted(zip(t.pos, t.neg)) == [(0, 1), (0, 2)]  # ties (1,2) and (3,4) make none
    t = T.make_triplets(pairs, "method", collapse=True)  # 3 -> 2: seed a is all ties now
    assert len(t) == 0
    t = T.make_triplets(pairs, "background")
    assert sorted(zip(t.pos, t.neg)) == [(1, 0), (2, 0), (2, 1), (4, 3)]
    assert (t.pos_score > t.neg_score).all()
    with pytest.raises(ValueError, match="method facet only"):
        T.make_triplets(pairs, "background", collapse=True)


def test_collapse_and_sampling_and_split():
    assert T.collapse_method([0, 1, 2, 3]).tolist() == [0, 1, 2, 2]
    t = T.make_triplets(toy_pairs(n_seeds=3, n_cands=8), "method")
    assert t.groupby("seed_id").size().min() > 10
    a = T.sample_per_seed(t, 10, np.random.default_rng(0))
    b = T.sample_per_seed(t, 10, np.random.default_rng(1))
    assert a.groupby("seed_id").size().tolist() == [10, 10, 10]
    assert not a[["pos", "neg"]].equals(b[["pos", "neg"]])
    split = T.split_seeds([f"s{i}" for i in range(20)], val=0.15, test=0.15, seed=0)
    counts = pd.Series(split).value_counts()
    assert counts.to_dict() == {"train": 14, "val": 3, "test": 3}
    assert T.split_seeds(range(20), seed=0) == T.split_seeds(range(20), seed=0)
    with pytest.raises(ValueError):
        T.split_seeds(["a", "b"], val=0.5, test=0.5)


# -- loss --------------------------------------------------------------------------------------
def test_margin_ranking_loss_matches_torch(tiny_bert):
    from sentence_transformers import CrossEncoder

    from pyterrier_sci.plugins.sciface.loss import MarginRankingLoss

    model = CrossEncoder(tiny_bert, num_labels=1)
    loss = MarginRankingLoss(model, margin=0.5)
    pos = torch.tensor([2.0, 0.1, -1.0, 0.3])
    neg = torch.tensor([0.0, 0.0, 1.0, 0.3])
    expected = torch.nn.MarginRankingLoss(margin=0.5)(pos, neg, torch.ones(4))
    assert loss.loss_from_scores(pos, neg).item() == pytest.approx(expected.item())
    # by hand: max(0, .5 - (p - n)) = [0, .4, 2.5, .5] -> mean 0.85
    assert expected.item() == pytest.approx(0.85)
    # forward on texts equals the loss of the model's own scores
    a, p, n = ["graph network"] * 2, ["graph graph", "speech"], ["speech image", "graph"]
    lp = loss.logits_from_pairs(list(zip(a, p)))
    ln = loss.logits_from_pairs(list(zip(a, n)))
    assert loss([a, p, n]).item() == pytest.approx(torch.nn.functional.relu(0.5 - (lp - ln)).mean().item(), abs=1e-6)
    with pytest.raises(ValueError, match="CrossEncoder"):
        MarginRankingLoss(object())


def test_pair_input_is_the_papers_format_truncated_at_abstract_tails(tiny_bert):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(tiny_bert, num_labels=1, max_length=16)
    a, b = F.pair_input("graph", "convolution " * 20, "speech", "image " * 20)
    ids = model.preprocess([(a, b)])["input_ids"][0]
    toks = model.tokenizer.convert_ids_to_tokens(ids)
    assert toks[:4] == ["[CLS]", "graph", "[SEP]", "convolution"]
    i = toks.index("speech")
    assert toks[i - 1] == "[SEP]" and toks[i + 1] == "[SEP]" and toks[-1] == "[SEP]"
    assert len(toks) == 16 and abs(toks.count("convolution") - toks.count("image")) <= 1  # longest_first


# -- training, artifact, rerankers --------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("facet")
    pairs = toy_pairs(n_seeds=8, n_cands=8)
    split = T.split_seeds(pairs.seed_id, val=0.25, test=0, seed=0)
    tr, va = pairs[pairs.seed_id.map(split) == "train"], pairs[pairs.seed_id.map(split) == "val"]
    record = []
    models = {}
    for facet in F.FACETS:
        models[facet] = F.train_facet_cross_encoder(
            tr,
            root / facet,
            facet,
            val_pairs=va,
            base_model=tiny_bert,
            epochs=4,
            triplets_per_seed=10,
            learning_rate=5e-3,
            max_length=32,
            seed=0,
            _sampler_record=record if facet == "method" else None,
        )
    return models, record, pairs, root


def test_training_writes_artifact_and_learns(trained):
    models, record, pairs, root = trained
    m = models["method"]
    meta = json.loads((root / "method" / "pt_meta.json").read_text())
    assert meta["type"] == "facet_cross_encoder" and meta["facet"] == "method" and meta["collapse_method"] is True
    tr = meta["training"]
    assert tr["train_seeds"] == 6 and tr["val_seeds"] == 2 and tr["triplets_per_epoch"] == 60
    assert tr["steps"] == 4 * 4  # ceil(60 / 16) = 4 steps per epoch, 4 epochs
    assert len(tr["val_spearman_per_epoch"]) == 4
    assert tr["val_spearman"] == max(tr["val_spearman_per_epoch"])
    assert [b for _, b in record] == [0, 1, 2, 3]  # a fresh per-seed draw every epoch
    assert not list(root.glob("*.partial-*"))
    loaded = pt.Artifact.load(str(root / "method"))
    assert isinstance(loaded, F.FacetCrossEncoder)
    assert loaded == m and hash(loaded) == hash(m)
    # the toy task is learnable: the method model orders the graded candidates
    seeds = list(zip(pairs.seed_title, pairs.seed_abstract))
    cands = list(zip(pairs.cand_title, pairs.cand_abstract))
    s = loaded.score(seeds, cands)
    from scipy.stats import spearmanr

    assert spearmanr(s, pairs.method).statistic > 0.5
    assert spearmanr(models["background"].score(seeds, cands), pairs.background).statistic > 0.5
    with pytest.raises(FileExistsError):
        F.train_facet_cross_encoder(pairs, root / "method", "method")


def test_training_refuses_seed_leakage_and_bad_facet(tiny_bert, tmp_path):
    pairs = toy_pairs(n_seeds=2)
    with pytest.raises(ValueError, match="both training and validation"):
        F.train_facet_cross_encoder(pairs, tmp_path / "x", "method", val_pairs=pairs, base_model=tiny_bert)
    with pytest.raises(ValueError, match="facet must be"):
        F.train_facet_cross_encoder(pairs, tmp_path / "y", "result", base_model=tiny_bert)
    assert not (tmp_path / "x").exists()


def result_frame(pairs):
    df = pairs.rename(
        columns={
            "seed_id": "qid",
            "cand_id": "docno",
            "cand_title": "title",
            "cand_abstract": "abstract",
            "seed_title": "query_title",
            "seed_abstract": "query_abstract",
        }
    )
    df["query"] = df.query_title + " " + df.query_abstract
    df["extra"] = 7
    return df.drop(columns=["method", "background"])


def test_facet_reranker(trained):
    models, _, pairs, _ = trained
    rr = models["method"].scorer()
    inp = result_frame(pairs[pairs.seed_id.isin(["s0", "s1"])])
    out = rr(inp)
    assert len(out) == len(inp) and (out.extra == 7).all()
    assert np.allclose(out.score, out.method_score)
    for _, g in out.groupby("qid"):
        assert g["rank"].tolist() == list(range(len(g)))
        assert g.score.is_monotonic_decreasing
    expected = models["method"].score(
        list(zip(inp.query_title, inp.query_abstract)), list(zip(inp.title, inp.abstract))
    )
    got = inp.assign(s=expected).merge(out, on=["qid", "docno"])
    assert np.allclose(got.s, got.score)
    empty = rr(inp.iloc[:0])
    assert len(empty) == 0 and {"score", "rank", "method_score", "extra"} <= set(empty.columns)
    # without seed columns, the query text is the seed
    out2 = rr(inp.drop(columns=["query_title", "query_abstract"]))
    assert len(out2) == len(inp)
    assert rr == models["method"].scorer() and hash(rr) == hash(models["method"].scorer())
    with pytest.raises(Exception):
        rr(inp.drop(columns=["abstract"]))


def test_controllable_mode(trained):
    models, _, pairs, _ = trained
    inp = result_frame(pairs[pairs.seed_id.isin(["s0", "s1"])])
    both = F.FacetControl(models["background"], models["method"], weights="both")(inp)
    assert {"background_score", "method_score", "score", "rank", "extra"} <= set(both.columns)
    ctl = F.FacetControl(models["background"], models["method"], weights="same_method_different_problem")(inp)
    z = lambda c: ctl.groupby("qid")[c].transform(lambda x: (x - x.mean()) / x.std(ddof=0))  # noqa: E731
    assert np.allclose(ctl.score, z("method_score") - 0.5 * z("background_score"))
    only_m = F.FacetControl(models["background"], models["method"], weights={"method": 1.0})(inp)
    m = models["method"].scorer()(inp)
    assert only_m.groupby("qid").docno.apply(list).to_dict() == m.groupby("qid").docno.apply(list).to_dict()
    with pytest.raises(ValueError, match="unknown preset"):
        F.FacetControl(models["background"], models["method"], weights="nope")
    with pytest.raises(ValueError, match="background and a method"):
        F.FacetControl(models["method"], models["method"])
    assert len(F.FacetControl(models["background"], models["method"])(inp.iloc[:0])) == 0


def test_component_factory(trained):
    models, _, pairs, root = trained
    from pyterrier_sci.registry import Context

    rr = F.facet_rerank_component(facet="method", model=str(root / "method"))
    assert rr == models["method"].scorer()
    ctl = F.facet_rerank_component(
        weights={"method": 1, "background": -1},
        background_model=str(root / "background"),
        method_model=str(root / "method"),
    )
    assert ctl.weights == {"background": -1.0, "method": 1.0}
    with pytest.raises(ValueError, match="not background"):
        F.facet_rerank_component(facet="background", model=str(root / "method"))
    # without facet=..., the model's own facet is used (a background model is not refused as 'method')
    assert F.facet_rerank_component(model=str(root / "background")) == models["background"].scorer()
    with pytest.raises(FileNotFoundError, match="no method facet model"):
        F.facet_rerank_component(context=Context(dataset=None))
    with pytest.raises(FileNotFoundError, match="no method facet model"):
        F.facet_rerank_component(facet="method", context=Context(dataset=None))


class TestFacetReranker(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        """An untrained artifact (tiny BERT + pt_meta.json) is enough for the convention checks."""
        import tempfile
        from pathlib import Path

        d = Path(tempfile.mkdtemp(prefix="facet-art-"))
        make_tiny_bert(d / "model")
        (d / "pt_meta.json").write_text(
            json.dumps(
                {"type": "facet_cross_encoder", "format": "sentence-transformers", "facet": "method", "max_length": 32}
            )
        )
        return F.FacetCrossEncoder(d).scorer()


def test_saved_model_is_the_best_validation_epoch(trained):
    """The artifact holds the best epoch's weights: re-scoring the validation pairs with the saved
    model reproduces the recorded best validation Spearman (not the last epoch's)."""
    from scipy.stats import spearmanr

    models, _, pairs, root = trained
    split = T.split_seeds(pairs.seed_id, val=0.25, test=0, seed=0)
    va = pairs[pairs.seed_id.map(split) == "val"]
    for facet, m in models.items():
        tr = json.loads((root / facet / "pt_meta.json").read_text())["training"]
        s = m.score(list(zip(va.seed_title, va.seed_abstract)), list(zip(va.cand_title, va.cand_abstract)))
        rho = spearmanr(s, T.facet_scores(va, facet, collapse=facet == "method")).statistic
        assert rho == pytest.approx(tr["val_spearman"], abs=2e-3), (facet, rho, tr["val_spearman_per_epoch"])


def test_reranker_orders_by_descending_facet_score(trained):
    """End-to-end sign: the pair the model scores highest is rank 0, and the official-measure
    evaluation (score descending) sees the same order as ``rank``."""
    models, _, pairs, _ = trained
    inp = result_frame(pairs[pairs.seed_id == "s0"])
    out = models["method"].scorer()(inp.sample(frac=1.0, random_state=0))
    direct = models["method"].score(list(zip(inp.query_title, inp.query_abstract)), list(zip(inp.title, inp.abstract)))
    assert out.iloc[0].score == pytest.approx(direct.max(), abs=1e-5)  # ties: compare the score
    assert out.iloc[-1].score == pytest.approx(direct.min(), abs=1e-5)
    assert out.sort_values("score", ascending=False).docno.tolist() == out.sort_values("rank").docno.tolist()


class TestFacetRerankComponent(conftest.TransformerTestCase):
    """``sciface_rerank`` as the component composes it on a dataset: seed text >> candidate text >> model."""

    @staticmethod
    def get_transformer():
        import tempfile
        from pathlib import Path

        import pyterrier_sci  # noqa: F401  (registers the datasets)
        from pyterrier_sci.registry import Context

        if not (conftest.DATA / "csfcube").exists():
            pytest.skip("CSFCube data not found")
        d = Path(tempfile.mkdtemp(prefix="facet-art-"))
        make_tiny_bert(d / "model")
        (d / "pt_meta.json").write_text(
            json.dumps(
                {"type": "facet_cross_encoder", "format": "sentence-transformers", "facet": "method", "max_length": 32}
            )
        )
        return F.facet_rerank_component(model=str(d), context=Context(dataset="irds:sci/csfcube"))


def test_moved_names_keep_their_old_import_paths():
    """Issue 32 moved the factories to ``components``, training to ``training`` and ``FacetReranker``
    beside the artifact that hands it out; the old module paths still give the same objects."""
    from pyterrier_sci.plugins.sciface import components, cross_encoder, labels, rerank, training

    assert rerank.facet_rerank_component is components.facet_rerank_component is F.facet_rerank_component
    assert labels.facet_label_component is components.facet_label_component is F.facet_label_component
    assert cross_encoder.train_facet_cross_encoder is training.train_facet_cross_encoder
    assert rerank.FacetReranker is cross_encoder.FacetReranker is F.FacetReranker
    with pytest.raises(AttributeError, match="sciface.rerank' has no attribute 'nothing'"):
        rerank.nothing  # noqa: B018
