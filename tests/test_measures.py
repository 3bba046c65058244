import json
import math

import ir_measures
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data, popen_python, specter_run

import pyterrier_sci as ps
from pyterrier_sci import measures as M

# ---------------------------------------------------------------- primitives, by hand

def test_dcg_first_rank_undiscounted_as_rank_metrics():
    # rank_metrics method 0: 3 + 2/log2(2) + 3/log2(3)
    assert M.dcg([3, 2, 3], 3) == pytest.approx(3 + 2 + 3 / math.log2(3))
    # the usual discount
    assert M.dcg([3, 2, 3], 3, first_undiscounted=False) == pytest.approx(3 + 2 / math.log2(3) + 3 / 2)
    assert M.dcg([1, 1], 2, gain="exp") == pytest.approx(1 + 1)
    assert M.dcg([2], 1, gain="exp") == pytest.approx(3)


def test_ndcg_at_k_ideal_from_the_ranked_list():
    # stanford example used by rank_metrics: r = [2, 1, 2, 0], k=4 -> 0.9203 (method 0)
    assert M.ndcg_at_k([2, 1, 2, 0], 4) == pytest.approx(0.9203032077642922)
    assert M.ndcg_at_k([0, 0], 2) == 0.0
    assert M.ndcg_at_k([3, 2, 3, 0, 0, 1, 2, 2, 3, 0], 1) == 1.0


def test_binary_list_measures():
    r = [0, 1, 0, 1, 0]
    assert M.average_precision(r) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert M.reciprocal_rank(r) == 0.5
    # precision at the last relevant rank (rank 4): 2/4
    assert M.r_precision_last_relevant(r) == 0.5
    assert M.precision_at_k(r, 2) == 0.5
    assert M.recall_at_k(r, 2) == 0.5
    for fn in (M.average_precision, M.reciprocal_rank, M.r_precision_last_relevant):
        assert fn([0, 0, 0]) == 0.0


# ---------------------------------------------------------------- the measure class

def _frames(qrels, run):
    return (pd.DataFrame(qrels, columns=["query_id", "doc_id", "relevance"]),
            pd.DataFrame(run, columns=["query_id", "doc_id", "score"]))


def test_unjudged_run_documents_are_dropped_and_missing_pool_documents_not_appended():
    m = M.RankListMeasure("t.AP", lambda g, j: M.average_precision([x >= 2 for x in g]))
    qrels, run = _frames(
        [("q", "a", 3), ("q", "b", 0), ("q", "c", 2)],
        [("q", "x", 9.0), ("q", "b", 8.0), ("q", "a", 7.0)])  # x is outside the pool, c is missing
    # ranked judged list: b(0), a(3) -> AP over the list = 1/2 (c not appended)
    (metric,) = list(ir_measures.iter_calc([m], qrels, run))
    assert metric.value == pytest.approx(0.5)


def test_query_without_results_scores_zero_and_counts():
    m = M.RankListMeasure("t.RR", lambda g, j: M.reciprocal_rank([x >= 1 for x in g]))
    qrels, run = _frames([("q1", "a", 1), ("q2", "b", 1)], [("q1", "a", 1.0)])
    assert ir_measures.calc_aggregate([m], qrels, run)[m] == pytest.approx(0.5)


def test_group_weights_give_the_mean_of_group_means():
    groups = {"a1": "A", "a2": "A", "a3": "A", "b1": "B"}
    m = M.RankListMeasure("t.RR", lambda g, j: M.reciprocal_rank([x >= 1 for x in g]), group_of=groups.get)
    qrels, run = _frames([(q, "d", 1) for q in groups] + [("a2", "n", 0)],
                         [("a1", "d", 1.0), ("a2", "n", 2.0), ("a2", "d", 1.0), ("a3", "z", 1.0), ("b1", "d", 1.0)])
    # a1: 1, a2: 1/2 (judged non-relevant n first), a3: 0 (only an unjudged document),
    # b1: 1 -> fold means A=0.5, B=1 -> 0.75 (the plain mean would be 0.625)
    assert M.calc_aggregate([m], qrels, run)[m] == pytest.approx(0.75)
    # per-query values are the queries' own values, whatever the averaging (no weights)
    per_q = m.per_query(qrels, run)
    assert per_q == pytest.approx({"a1": 1.0, "a2": 0.5, "a3": 0.0, "b1": 1.0})
    assert {x.query_id: x.value for x in ir_measures.iter_calc([m], qrels, run)} == pytest.approx(per_q)
    assert m.aggregate(per_q) == pytest.approx(0.75)


def test_parse_names_and_aliases():
    assert str(M.get("sciface.NDCG%20")) == "sciface.NDCG%20"
    assert str(M.get("NDCG%20", dataset="irds:sci/csfcube/method")) == "sciface.NDCG%20"
    assert str(M.get("MAP", dataset="irds:sci/csfcube/method")) == "sciface.MAP"
    assert M.get("nDCG@10") == ir_measures.nDCG @ 10
    assert M.get("map") == ir_measures.AP
    assert [str(x) for x in M.parse("sciface.NDCG%20, R@3")] == ["sciface.NDCG%20", "R@3"]
    with pytest.raises(ValueError, match="unknown measure 'NDCG%21'"):
        M.get("NDCG%21")
    assert "sciface.RP" in M.names()


def test_dataset_modules_register_no_measure_and_the_plugins_register_them_when_looked_up():
    """The benchmark modules hold data only: importing them (every one, through ``import pyterrier_sci``)
    registers no measure; the paper plugins' ``pyterrier_sci.measures`` entry points do, on first lookup."""
    proc = popen_python("""
        import json
        import pyterrier_sci.datasets.csfcube, pyterrier_sci.datasets.doris_mae, pyterrier_sci.datasets.mir_multicite
        import pyterrier_sci.datasets.core_citations, pyterrier_sci.datasets.acl_fulltext
        from pyterrier_sci import measures
        before = (sorted(measures._REGISTRY), sorted(measures._DATASET_ALIASES), measures._PLUGINS_LOADED)
        names = measures.names()
        print(json.dumps({"before": before, "names": names,
                          "MAP": str(measures.get("MAP", dataset="irds:sci/csfcube/method")),
                          "Recall": str(measures.get("Recall@50", dataset="irds:sci/scifullbench/acl/references"))}))
    """)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["before"] == [[], [], False]
    assert {"sciface.NDCG%20", "doris.R@5", "mir.mAP", "hlm.NDCG@3", "hlm.PREC@3"} <= set(got["names"])
    assert not {"NDCG%20", "PREC@3", "csfcube.MAP"} & set(got["names"])  # former names: aliases, not listed
    assert got["MAP"] == "sciface.MAP" and got["Recall"] == "R@50"


# ---------------------------------------------------------------- CSFCube: the published SPECTER figures

PUBLISHED = {  # SciFACE/CSFCube: SPECTER on the official sample rankings (NDCG%20, MAP)
    "background": (66.70, 43.95),
    "method": (37.41, 22.44),
    None: (53.28, 34.23),
}


@needs_data("csfcube", "sample_ranked_pools")
@pytest.mark.parametrize("facet", ["background", "method", None])
def test_reproduces_published_specter_figures_in_pt_experiment(csfcube, facet):
    ds_id = "irds:sci/csfcube" + (f"/{facet}" if facet else "")
    ds = pt.get_dataset(ds_id)
    run = specter_run([facet] if facet else ["background", "method", "result"])
    table = ps.Experiment([run], ds.get_topics(), ds.get_qrels(), ["NDCG%20", "MAP"], names=["SPECTER"], dataset=ds_id)
    ndcg, ap = PUBLISHED[facet]
    assert list(table.columns) == ["name", "NDCG%20", "MAP"]
    assert table["NDCG%20"].iloc[0] * 100 == pytest.approx(ndcg, abs=0.01)
    assert table["MAP"].iloc[0] * 100 == pytest.approx(ap, abs=0.01)
    # pt.Experiment's per-query values are the true values; its plain mean is the fold mean only
    # where the folds are of equal size
    per_q = pt.Experiment([run], ds.get_topics(), ds.get_qrels(), ps.measures.parse(["NDCG%20"], dataset=ds_id),
                          names=["SPECTER"], perquery=True)
    assert per_q["value"].between(0, 1).all()


@needs_data("csfcube", "sample_ranked_pools")
def test_fold_aggregation_differs_from_plain_mean_on_unequal_folds(csfcube):
    """method has folds of 9 and 8 queries: the official figure is the mean of the fold means."""
    ds = pt.get_dataset("irds:sci/csfcube/method")
    qrels = ds.get_qrels().rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    run = specter_run(["method"]).rename(columns={"qid": "query_id", "docno": "doc_id"})
    m = M.get("sciface.NDCG%20")
    per_q = m.per_query(qrels, run)
    from pyterrier_sci.datasets.csfcube import test_fold_of
    folds = {}
    for q, v in per_q.items():
        folds.setdefault(test_fold_of(q), []).append(v)
    assert sorted(len(v) for v in folds.values()) == [8, 9]
    official = sum(sum(v) / len(v) for v in folds.values()) / 2
    assert M.calc_aggregate([m], qrels, run)[m] == pytest.approx(official)
    assert abs(official - sum(per_q.values()) / len(per_q)) > 1e-6
    # ir_measures' own aggregate is the plain mean of the true per-query values
    assert ir_measures.calc_aggregate([m], qrels, run)[m] == pytest.approx(sum(per_q.values()) / len(per_q))


@needs_data("csfcube")
def test_a_cut_run_warns_that_pool_measures_change_and_the_uncut_run_matches_the_readme(csfcube):
    """Issue 31, item 13: the README's `pool >> bm25 % 100` gave 0.4125 / 0.2272 against the table's
    0.4098 / 0.2227 for the same BM25 without a word."""
    import warnings
    ds = pt.get_dataset("irds:sci/csfcube/method")
    topics, qrels = ds.get_topics()[["qid", "query"]], ds.get_qrels()
    full = ps.pipeline("pool >> bm25", dataset="irds:sci/csfcube")(topics)
    with warnings.catch_warnings():
        warnings.simplefilter("error", M.ShortRunWarning)
        table = ps.Experiment([full], topics, qrels, ["NDCG%20", "MAP", "sciface.RR"], dataset="sci/csfcube/method")
    assert (table["NDCG%20"][0], table["MAP"][0]) == (pytest.approx(0.4098, abs=5e-5), pytest.approx(0.2227, abs=5e-5))
    cut = full[full["rank"] < 100]
    with pytest.warns(M.ShortRunWarning, match=r"ranks only part of the judged pool for 11 of its 17 queries .*100 of "
                                               r"253.*not comparable"):
        table = ps.Experiment([cut], topics, qrels, ["NDCG%20", "MAP"], dataset="sci/csfcube/method")
    assert (table["NDCG%20"][0], table["MAP"][0]) == (pytest.approx(0.4125, abs=5e-5), pytest.approx(0.2272, abs=5e-5))
    # measures that do not depend on the pool's length stay silent on the cut run
    with warnings.catch_warnings():
        warnings.simplefilter("error", M.ShortRunWarning)
        ps.Experiment([cut], topics, qrels, ["sciface.RR", "sciface.P@20"], dataset="sci/csfcube/method")
