"""The bi-encoder distillation warm start of facet cross-encoders (plugins/sciface/warm_start.py)."""
import json

import conftest
import numpy as np
import pytest

from pyterrier_sci.plugins.sciface.warm_start import distil_cross_encoder, neighbour_pairs

pytestmark = conftest.needs_data("csfcube")


@pytest.fixture(scope="module")
def docs():
    from pyterrier_sci.datasets import csfcube
    d = sorted(csfcube.docs().values(), key=lambda x: x.doc_id)[:60]
    return [(x.doc_id, x.title, x.abstract) for x in d]


def test_neighbour_pairs_span_near_to_random(docs):
    pairs = neighbour_pairs(docs, n_seeds=5, ranks=(1, 2, 8), n_random=1, seed=3)
    assert len(pairs) == 5 * 4 and pairs.seed_id.nunique() == 5
    assert not (pairs.seed_id == pairs.cand_id).any()
    for _, g in pairs.groupby("seed_id", sort=False):
        s = g.teacher_score.to_numpy()
        assert s[0] >= s[1] >= s[2] and s[0] >= s[3]       # ranks 1, 2, 8 then a random paper
    assert neighbour_pairs(docs, n_seeds=5, ranks=(1, 2, 8), seed=3).equals(pairs)   # deterministic
    with pytest.raises(ValueError, match="at least two documents"):
        neighbour_pairs(docs[:1])


def test_distilled_cross_encoder_follows_its_teacher(docs, tmp_path):
    from scipy.stats import spearmanr

    from pyterrier_sci.plugins.sciface.cross_encoder import open_cross_encoder
    pairs = neighbour_pairs(docs, n_seeds=8, ranks=(1, 3, 20), n_random=1, seed=0)
    path = distil_cross_encoder(pairs, tmp_path / "warm", scale=5.0, epochs=6, batch_size=8, learning_rate=1e-4,
                                max_length=96)
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["type"] == "cross_encoder_warm_start" and meta["pairs"] == len(pairs)
    from pyterrier_sci.plugins.dense import resolve_model
    from pyterrier_sci.plugins.sciface import score_pairs
    target = 5.0 * pairs.teacher_score.to_numpy()
    seeds = list(zip(pairs.seed_title, pairs.seed_abstract))
    cands = list(zip(pairs.cand_title, pairs.cand_abstract))
    before = score_pairs(open_cross_encoder(resolve_model("default"), 96), seeds, cands)   # raw logits
    import pyterrier as pt

    from pyterrier_sci.plugins.sciface.warm_start import WarmStartCrossEncoder
    artifact = pt.Artifact.load(str(path))                       # round-trips as a registered artifact
    assert isinstance(artifact, WarmStartCrossEncoder)
    pred = score_pairs(artifact.cross_encoder(), seeds, cands)
    mse = lambda p: float(np.mean((p - target) ** 2))  # noqa: E731
    rho = spearmanr(pred, target).statistic
    # closer to the teacher's targets than the fresh head, and in the teacher's order
    assert mse(pred) < 0.5 * mse(before) and rho > 0.2, (mse(pred), mse(before), rho)
    assert distil_cross_encoder(pairs.head(0), path) == path   # an existing model is kept, not retrained
    assert not list(tmp_path.glob("*.partial-*"))
    with pytest.raises(ValueError, match="lack columns"):
        distil_cross_encoder(pairs.drop(columns=["teacher_score"]), tmp_path / "x")


def test_sampled_ranks_add_near_neighbours_in_rank_order(docs):
    base = neighbour_pairs(docs, n_seeds=4, ranks=(1,), n_random=1, seed=5)
    more = neighbour_pairs(docs, n_seeds=4, ranks=(1,), n_random=1, seed=5, n_sampled_ranks=3, max_rank=10)
    assert len(base) == 4 * 2 and len(more) == 4 * 5
    assert set(base.seed_id) == set(more.seed_id)
    for _, g in more.groupby("seed_id", sort=False):
        s = g.teacher_score.to_numpy()
        assert len(set(g.cand_id)) == 5 and (np.diff(s[:4]) <= 1e-6).all()   # 4 neighbours by rank, then random
    # sampled ranks stay within max_rank: every sampled neighbour is at least as close as the 10th
    from pyterrier_sci.plugins.dense import load_sentence_transformer
    enc = load_sentence_transformer("default", "cpu")
    vecs = dict(zip([d for d, _, _ in docs], enc.encode([f"{t} {a}" for _, t, a in docs], normalize_embeddings=True)))
    for sid, g in more.groupby("seed_id", sort=False):
        sims = sorted((float(vecs[sid] @ v) for d, v in vecs.items() if d != sid), reverse=True)
        assert (g.teacher_score.to_numpy()[:4] >= sims[9] - 1e-5).all()


def test_margin_mse_distillation_learns_the_order_within_seeds(docs, tmp_path):
    from scipy.stats import spearmanr

    from pyterrier_sci.plugins.dense import resolve_model
    from pyterrier_sci.plugins.sciface.cross_encoder import open_cross_encoder, score_pairs
    pairs = neighbour_pairs(docs, n_seeds=12, ranks=(1, 3, 20), n_random=1, seed=0)
    path = distil_cross_encoder(pairs, tmp_path / "mm", loss="margin_mse", epochs=8, batch_size=8,
                                learning_rate=1e-4, max_length=96)
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["loss"] == "margin_mse" and meta["group_size"] == 4 and meta["groups"] == 12 and meta["pairs_cut"] == 0

    def within_seed_rho(model):
        pred = score_pairs(model, list(zip(pairs.seed_title, pairs.seed_abstract)),
                           list(zip(pairs.cand_title, pairs.cand_abstract)))
        f = pairs.assign(pred=pred)
        return float(np.mean([spearmanr(g.pred, g.teacher_score).statistic for _, g in f.groupby("seed_id")]))
    before = within_seed_rho(open_cross_encoder(resolve_model("default"), 96))
    after = within_seed_rho(open_cross_encoder(str(path), 96))
    assert after > 0.5 and after > before + 0.2, (before, after)
    with pytest.raises(ValueError, match="unknown distillation loss"):
        distil_cross_encoder(pairs, tmp_path / "x", loss="kl")
    with pytest.raises(ValueError, match="at least two candidates"):
        distil_cross_encoder(pairs.groupby("seed_id").head(1), tmp_path / "y", loss="margin_mse")
    assert not list(tmp_path.glob("*.partial-*"))
