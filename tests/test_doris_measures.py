"""DORIS-MAE measures against values computed by hand from the definitions of the paper's
evaluation code: relevant = S(p|Q)/|Q| >= 1 (the removed abstracts never relevant), R@k / RP / MAP
leave out queries without a relevant abstract, nDCG at int(0.1 x pool size) ranks with gain 2^S or S
and discount 1/log2(rank+1), MRR@10 counts the abstracts tied at the pool's maximum S."""
import math

import ir_measures
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci import measures as M
from pyterrier_sci.plugins.doris_mae import measures as dm

L = math.log2

# Query A: a pool of 58 (cutoff int(5.8) = 5), |Q| = 4; relevant (S >= 4): a0 (6), a1 (4), a2 (8), a3 (8);
# "205580" scores 5 but is one of the paper's removed abstracts; a4 scores 2, the rest 0.
A_GRADES = {"a0": 6, "a1": 4, "a2": 8, "a3": 8, "a4": 2, "205580": 5}
A_POOL = ["a%d" % i for i in range(57)] + ["205580"]
A_RUN = ["a4", "a0", "a9", "a3", "205580", "a1", "a2"] + [d for d in A_POOL if d not in
                                                          {"a4", "a0", "a9", "a3", "205580", "a1", "a2"}]
# Query B: a pool of 138 (cutoff 13), |Q| = 3, no relevant abstract (max S = 2, held by b7 and b100)
B_GRADES = {"b7": 2, "b100": 2, "b3": 1}
B_POOL = ["b%d" % i for i in range(138)]
B_RUN = list(B_POOL)
# Query C: a pool of 60 (cutoff 6), |Q| = 5, one relevant abstract c10 (S = 5); the run puts an
# abstract from outside the pool first (dropped) and leaves c59 out.
C_GRADES = {"c10": 5}
C_POOL = ["c%d" % i for i in range(60)]
C_RUN = ["outside", "c10"] + [d for d in C_POOL if d not in ("c10", "c59")]


def frames():
    qrels, run = [], []
    for q, pool, grades, n, order in (("A", A_POOL, A_GRADES, 4, A_RUN), ("B", B_POOL, B_GRADES, 3, B_RUN),
                                      ("C", C_POOL, C_GRADES, 5, C_RUN)):
        qrels += [(q, d, grades.get(d, 0), n) for d in pool]
        run += [(q, d, float(len(order) - i), i) for i, d in enumerate(order)]
    return (pd.DataFrame(qrels, columns=["qid", "docno", "label", "n_aspects"]),
            pd.DataFrame(run, columns=["qid", "docno", "score", "rank"]))


def by_hand():
    """Every value worked out from the definitions (no call into the implementation)."""
    v = {}
    # A: relevant {a0, a1, a2, a3} (205580 removed), ranks of the hits 2, 4, 6, 7
    v["R@5", "A"] = 2 / 4                  # a0, a3 in the top 5
    v["R@20", "A"] = 4 / 4
    v["RP", "A"] = 2 / 4                   # top R = 4: a4, a0, a9, a3
    v["MAP", "A"] = (1 / 2 + 2 / 4 + 3 / 6 + 4 / 7) / 4
    v["MRR@10", "A"] = 1 / 4               # max S = 8 (a2, a3 tied): a3 at rank 4
    top5 = [2, 6, 0, 8, 5]                 # a4, a0, a9, a3, 205580
    ideal5 = [8, 8, 6, 5, 4]
    disc = [1, L(3), L(4), L(5), L(6)]
    v["NDCGexp@10%", "A"] = sum(2 ** g / d for g, d in zip(top5, disc)) / sum(2 ** g / d for g, d in zip(ideal5, disc))
    v["NDCG@10%", "A"] = sum(g / d for g, d in zip(top5, disc)) / sum(g / d for g, d in zip(ideal5, disc))
    # B: no relevant abstract -> R@k, RP, MAP left out; MRR counts b7/b100 (tied at the max S = 2)
    for m in ("R@5", "R@20", "RP", "MAP"):
        v[m, "B"] = float("nan")
    v["MRR@10", "B"] = 1 / 8               # b7 at rank 8
    disc13 = [L(i + 2) for i in range(13)]
    dcg = sum(1 / d for d in disc13) + (2 - 1) / L(5) + (4 - 1) / L(9)       # b3 (S=1) at rank 4, b7 (S=2) at rank 8
    idcg = 4 / 1 + 4 / L(3) + 2 / L(4) + sum(1 / L(i + 2) for i in range(3, 13))
    v["NDCGexp@10%", "B"] = dcg / idcg
    v["NDCG@10%", "B"] = (1 / L(5) + 2 / L(9)) / (2 / 1 + 2 / L(3) + 1 / L(4))
    # C: "outside" dropped, c10 first
    for m in ("R@5", "R@20", "RP", "MAP", "MRR@10", "NDCG@10%"):
        v[m, "C"] = 1.0
    v["NDCGexp@10%", "C"] = 1.0
    return v


MEASURES = ["R@5", "R@20", "RP", "NDCG@10%", "NDCGexp@10%", "MRR@10", "MAP"]


def test_cutoff_is_ten_percent_of_the_pool():
    assert all(int(0.1 * n) == n // 10 for n in range(58, 139))
    assert (int(0.1 * 58), int(0.1 * 103), int(0.1 * 138)) == (5, 10, 13)


@pytest.mark.parametrize("name", MEASURES)
def test_per_query_values_match_the_hand_computed_ones(name):
    qrels, run = frames()
    got = dm.measure(name).per_query(qrels, run)
    want = by_hand()
    for q in "ABC":
        if math.isnan(want[name, q]):
            assert math.isnan(got[q]), (name, q)
        else:
            assert got[q] == pytest.approx(want[name, q], rel=1e-12), (name, q)


def test_experiment_means_leave_out_queries_without_relevant_abstracts():
    qrels, run = frames()
    want = by_hand()
    topics = pd.DataFrame({"qid": list("ABC"), "query": ["x"] * 3})
    table = ps.Experiment([run], topics, qrels, MEASURES, dataset="irds:sci/doris-mae/birco-dev", names=["run"])
    assert list(table.columns) == ["name"] + MEASURES
    for m in MEASURES:
        vals = [want[m, q] for q in "ABC" if not math.isnan(want[m, q])]
        assert table[m].iloc[0] == pytest.approx(sum(vals) / len(vals)), m
    # the R@5 mean is over A and C only: (0.5 + 1) / 2, not (0.5 + 0 + 1) / 3
    assert table["R@5"].iloc[0] == pytest.approx(0.75)
    # and evaluate() gives the same means x100
    ev = dm.evaluate({"run": run}, qrels, measures=MEASURES)
    for m in MEASURES:
        assert ev[m].iloc[0] == pytest.approx(100 * table[m].iloc[0])
    # per query: the true values, NaN for the query that does not count
    per_q = ps.Experiment([run], topics, qrels, MEASURES, dataset="irds:sci/doris-mae/birco-dev", perquery=True)
    for m in MEASURES:
        got = per_q[per_q["measure"] == m].set_index("qid")["value"].to_dict()
        assert got == pytest.approx({q: want[m, q] for q in "ABC"}, nan_ok=True), m


def test_true_values_in_ir_measures():
    qrels, run = frames()
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    r = run.rename(columns={"qid": "query_id", "docno": "doc_id"})
    m = dm.measure("RP")
    vals = {x.query_id: x.value for x in ir_measures.iter_calc([m], q, r)}
    assert vals == pytest.approx({"A": 0.5, "B": math.nan, "C": 1.0}, nan_ok=True)
    assert ir_measures.calc_aggregate([m], q, r)[m] == pytest.approx(0.75)   # the NaN-skipping aggregator


def test_primitives_by_hand():
    assert dm.recall_at_k(["x", "r1", "y"], {"r1", "r2"}, 2) == 0.5
    assert dm.r_precision(["r1", "x", "r2"], {"r1", "r2"}) == 0.5
    assert dm.average_precision(["x", "r1", "r2"], {"r1", "r2", "r3"}) == pytest.approx((1 / 2 + 2 / 3) / 3)
    # gain 2^S: a zero-scored abstract still gains 1
    assert dm.ndcg_at_fraction([0, 3], [3, 0] + [0] * 18, 0.1) == pytest.approx((1 + 8 / L(3)) / (8 + 1 / L(3)))
    assert dm.ndcg_at_fraction([1, 2], [2, 1], 0.1) == 0.0        # int(0.2) = 0 ranks
    assert dm.reciprocal_rank_at_max([1, 2, 2], [2, 2, 1], 10) == 0.5
    assert dm.reciprocal_rank_at_max([1, 1, 2], [2, 1, 1], 2) == 0.0


def test_names_and_aliases():
    assert str(M.get("RP", dataset="irds:sci/doris-mae/birco-dev")) == "doris.RP"
    assert str(M.get("R@5", dataset="sci/doris-mae/subquery-2")) == "doris.R@5"
    assert M.get("R@5") == ir_measures.R @ 5                        # elsewhere the usual measure
    assert {"doris.NDCGexp@10%", "doris.NDCG@10%", "doris.MRR@10", "doris.MAP"} <= set(M.names())
    assert dm.measure("doris.MAP") is dm.measure("MAP")


def test_bootstrap_se_drops_left_out_queries_inside_each_resample():
    vals = [0.2, 0.4, float("nan"), 0.9]
    se = dm.bootstrap_se(vals, n=2000, seed=3)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 4, size=(2000, 4))
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            means = np.nanmean(np.asarray(vals)[idx], axis=1)
    assert se == pytest.approx(float(np.nanstd(means)))
    qrels, run = frames()
    ev = dm.evaluate({"run": run}, qrels, measures=["MRR@10"], bootstrap=500, seed=1)
    per_q = dm.measure("MRR@10").per_query(qrels, run)
    assert ev["MRR@10 SE"].iloc[0] == pytest.approx(100 * dm.bootstrap_se(list(per_q.values()), 500, 1))


def test_random_baseline_is_the_mean_over_shuffles():
    qrels, _ = frames()
    rb = dm.random_baseline(qrels, trials=1000, seed=0, measures=["R@20"])
    # expected R@20 of a random ranking of a pool of n with R relevant: 20/n (queries A and C)
    assert rb["R@20"].iloc[0] == pytest.approx(100 * (20 / 58 + 20 / 60) / 2, abs=3.0)


@needs_data("doris-mae", "birco_dev", "qrels.tsv")
def test_oracle_ranking_on_the_offline_data():
    ds = pt.get_dataset("irds:sci/doris-mae/birco-dev")
    qrels = ds.get_qrels()
    oracle = qrels.assign(score=qrels["label"].astype(float))[["qid", "docno", "score"]]
    ev = dm.evaluate({"oracle": oracle}, "irds:sci/doris-mae/birco-dev")
    for m in ("RP", "NDCG@10%", "NDCGexp@10%", "MRR@10", "MAP"):
        assert ev[m].iloc[0] == pytest.approx(100.0), m
    table = ps.Experiment([oracle], ds.get_topics(), qrels, ["MAP", "MRR@10"], dataset="sci/doris-mae/birco-dev",
                          names=["oracle"])
    assert table["MAP"].iloc[0] == pytest.approx(1.0) and table["MRR@10"].iloc[0] == pytest.approx(1.0)


@needs_data("doris-mae")
def test_the_declared_random_row_is_the_example_s_mean_over_shuffles(tmp_path, monkeypatch):
    """doris_mae/table2's Random row (``random: {trials: 100, seed: 0}`` in pipelines/reproduce/doris_mae.yaml)
    runs each shuffling through the table's evaluation; it equals the reference mean over shufflings
    (:func:`random_baseline`, 1,000 shufflings) within three standard deviations of a 100-shuffle mean on these
    40 queries (measured with ten seeds: at most 0.52 points, R@20); the reference's own standard error is a
    third of that (sqrt(100 / 1,000)), so the band is still 2.9 standard deviations of the difference."""
    from pyterrier_sci import reproduce as R
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    (res,) = R.reproduce("doris_mae/table2", tier="full", systems=["Random"])
    got = {(c.system, c.measure): c.reproduced for c in res.cells}
    ref = dm.random_baseline("irds:sci/doris-mae/birco-dev", trials=1000, seed=99).iloc[0]
    sd = {"R@5": 0.22, "R@20": 0.52, "RP": 0.22, "NDCGexp@10%": 0.19, "MRR@10": 0.29, "MAP": 0.17}
    for m, s in sd.items():
        assert abs(got[("Random", m)] - ref[m]) <= 3 * s, (m, got[("Random", m)], ref[m])
    # the same seed gives the same figures
    (again,) = R.reproduce("doris_mae/table2", tier="full", systems=["Random"])
    assert [c.reproduced for c in again.cells if c.system == "Random"] == \
        [got[("Random", c.measure)] for c in again.cells if c.system == "Random"]


def test_a_random_row_is_declared_with_trials_and_seed_only(tmp_path):
    from pyterrier_sci import reproduce as R
    from pyterrier_sci.errors import ReproductionError
    doc = {"paper": {"id": "toy", "title": "t"}, "tables": {"t": {
        "number": "1", "title": "t", "source": {"table": "1"}, "datasets": {"D": "irds:sci/doris-mae/birco-dev"},
        "measures": ["MAP"], "differs": "toy", "systems": {"Random": {"random": {"trials": 0}}}}}}
    import yaml
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ReproductionError, match=r"'random' must be a mapping \{trials: N >= 1"):
        R.load_paper(path)
    doc["tables"]["t"]["systems"]["Random"] = {"random": {"trials": 5}, "pipeline": "pool"}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ReproductionError, match="give one of 'pipeline'"):
        R.load_paper(path)
    doc["tables"]["t"]["systems"]["Random"] = {"random": {}}
    path.write_text(yaml.safe_dump(doc))
    assert R.load_paper(path).tables["t"].systems["Random"].random == {"trials": 100, "seed": 0}
