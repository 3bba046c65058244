"""The label direction of SciFACE's fold training on real CSFCube data (benchmarks/sciface_fit_check.py, check 2):
every triplet's positive is the paper CSFCube grades higher for the query (Method: after the 0-3 -> 0-2 collapse, so
2 and 3 tie and make no triplet), and the texts handed to the trainer keep that direction (anchor = the query paper,
positive = the higher-graded candidate).  A table row at chance level could come from an inverted label; these pin
that it does not."""
import numpy as np
import pyterrier as pt
import pytest
from conftest import needs_data

from pyterrier_sci.datasets import csfcube
from pyterrier_sci.plugins.sciface.cross_encoder import pair_input
from pyterrier_sci.plugins.sciface.training import train_facet_cross_encoder
from pyterrier_sci.plugins.sciface.triplets import csfcube_pairs, make_triplets

pytestmark = needs_data("csfcube", "readable_annotations")


def _qrels(facet):
    q = pt.get_dataset(f"irds:sci/csfcube/{facet}").get_qrels()
    return {(str(a), str(b)): int(g) for a, b, g in zip(q["qid"], q["docno"], q["label"])}


@pytest.mark.parametrize("facet", ["method", "background"])
def test_triplet_positives_are_the_higher_graded_papers(facet):
    grades, collapse = _qrels(facet), facet == "method"
    for split in ("fold1-test", "fold2-test"):
        pairs = csfcube_pairs([facet], split=split)
        t = make_triplets(pairs, facet, collapse)
        pos = np.array([grades[(pairs.at[i, "seed_id"], pairs.at[i, "cand_id"])] for i in t["pos"]])
        neg = np.array([grades[(pairs.at[i, "seed_id"], pairs.at[i, "cand_id"])] for i in t["neg"]])
        assert (pairs.loc[t["pos"], "seed_id"].to_numpy() == pairs.loc[t["neg"], "seed_id"].to_numpy()).all()
        if collapse:
            assert ((pos == 3) & (neg == 2)).sum() == 0   # 2 and 3 tie after the collapse
            pos, neg = np.minimum(pos, 2), np.minimum(neg, 2)
        assert len(t) > 1000 and (pos > neg).all()
        assert (t["pos_score"].to_numpy() == pos).all() and (t["neg_score"].to_numpy() == neg).all()


class _StopError(Exception):
    pass


def test_the_trainer_gets_the_higher_graded_candidate_as_positive(tmp_path, monkeypatch):
    """The (anchor, positive, negative) texts ``train_facet_cross_encoder`` hands the trainer, on CSFCube's Method
    judgements of fold1-test: the anchor is the query paper, the positive a candidate graded above the negative."""
    import sentence_transformers.cross_encoder as st_ce
    got = {}

    class Spy:
        def __init__(self, *a, train_dataset=None, **kw):
            got["ds"] = train_dataset
            raise _StopError

    monkeypatch.setattr(st_ce, "CrossEncoderTrainer", Spy)
    pairs = csfcube_pairs(["method"], split="fold1-test")
    with pytest.raises(_StopError):
        train_facet_cross_encoder(pairs, tmp_path / "m", "method", epochs=2, triplets_per_seed=5, max_length=32)
    assert not (tmp_path / "m").exists()
    grades = _qrels("method")
    docs = csfcube.docs()
    by_text = {}   # (seed text, candidate text) -> collapsed grades (a set, should two candidates share a text)
    for seed, cand in zip(pairs["seed_id"], pairs["cand_id"]):
        s, c = docs[csfcube.query_paper_id(seed)], docs[cand]
        a, b = pair_input(s.title, s.abstract, c.title, c.abstract, "[SEP]")
        by_text.setdefault((a, b), set()).add(min(grades[(seed, cand)], 2))
    ds = got["ds"]
    assert ds.column_names == ["anchor", "positive", "negative"]
    n_seeds = pairs["seed_id"].nunique()
    assert len(ds) == 2 * 5 * n_seeds   # 2 epochs' draws of 5 triplets per seed (every seed has more)
    for a, p, n in zip(ds["anchor"], ds["positive"], ds["negative"]):
        assert min(by_text[(a, p)]) > max(by_text[(a, n)])
