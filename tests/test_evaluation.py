"""ps.Experiment and per-query output: true per-query values, the papers' averaging, paired tests over
the queries that count, columns in the order asked for (issue: weighted per-query values)."""
import json
import math

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data, specter_run
from scipy import stats

import pyterrier_sci as ps
from pyterrier_sci import measures as M
from pyterrier_sci.cli import main


@needs_data("csfcube", "sample_ranked_pools")
def test_evaluate_perquery_prints_true_values(csfcube, tmp_path, capsys):
    """A query whose first result is relevant has reciprocal rank 1 (the weighted values gave 1.0625)."""
    run = specter_run(["result"])
    path = tmp_path / "specter.res"
    pt.io.write_results(run, str(path), format="trec")
    qrels = pt.get_dataset("irds:sci/csfcube/result").get_qrels()
    grade = {(q, d): g for q, d, g in zip(qrels["qid"], qrels["docno"], qrels["label"])}
    firsts = {}
    for qid, df in run.sort_values(["qid", "rank"]).groupby("qid"):
        judged = [grade[(qid, d)] for d in df["docno"] if (qid, d) in grade]
        firsts[qid] = judged[0]
    top_relevant = [q for q, g in firsts.items() if g >= 2]
    assert top_relevant
    assert main(["evaluate", str(path), "--dataset", "irds:sci/csfcube/result", "--measures", "RR,NDCG%20",
                 "--perquery", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rr = {r["qid"]: r["value"] for r in rows if r["measure"] == "RR"}
    assert all(rr[q] == 1.0 for q in top_relevant)
    assert max(r["value"] for r in rows) <= 1.0
    # rows come per query in the order the measures were asked for
    assert [r["measure"] for r in rows[:2]] == ["RR", "NDCG%20"]


@pytest.fixture(scope="module")
def mir_runs():
    ds = pt.get_dataset("irds:sci/mir-multicite/dev/chrono-test")
    topics, qrels = ds.get_topics(), ds.get_qrels()
    if not len(qrels):
        pytest.skip("MIR-MultiCite data not found")
    docs = sorted(qrels["docno"].unique())
    rng = np.random.default_rng(0)
    rows_a, rows_b = [], []
    for qid in topics["qid"]:
        order = rng.permutation(docs)
        rows_a += [(qid, d, float(len(docs) - i)) for i, d in enumerate(order)]
        order = rng.permutation(docs)
        rows_b += [(qid, d, float(len(docs) - i)) for i, d in enumerate(order)]
    a = pt.model.add_ranks(pd.DataFrame(rows_a, columns=["qid", "docno", "score"]))
    b = pt.model.add_ranks(pd.DataFrame(rows_b, columns=["qid", "docno", "score"]))
    return topics, qrels, a, b


def _ap_by_hand(run, qrels):
    """Average precision of each proposal with ground truth (relevant = label >= 1), by hand."""
    out = {}
    for qid, df in qrels.groupby("qid"):
        rel = set(df.loc[df["label"] >= 1, "docno"])
        if not rel:
            continue
        ranked = run[run["qid"] == qid].sort_values("rank")["docno"].tolist()
        hits, total = 0, 0.0
        for i, d in enumerate(ranked):
            if d in rel:
                hits += 1
                total += hits / (i + 1)
        out[qid] = total / len(rel)
    return out


def test_significance_pairs_true_values_over_the_proposals_that_count(mir_runs):
    topics, qrels, a, b = mir_runs
    table = ps.Experiment([a, b], topics, qrels, ["mAP", "R@5"], names=["A", "B"], baseline=0,
                          dataset="irds:sci/mir-multicite/dev")
    ap_a, ap_b = _ap_by_hand(a, qrels), _ap_by_hand(b, qrels)
    counted = sorted(ap_a)
    assert len(counted) == 19 < topics["qid"].nunique()          # proposals without ground truth do not count
    x, y = np.array([ap_b[q] for q in counted]), np.array([ap_a[q] for q in counted])
    assert table.loc[1, "mAP"] == pytest.approx(x.mean())
    assert table.loc[0, "mAP"] == pytest.approx(y.mean())
    assert table.loc[1, "mAP p-value"] == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-9)
    assert table.loc[1, "mAP +"] == int((x > y).sum()) and table.loc[1, "mAP -"] == int((x < y).sum())
    assert list(table.columns) == ["name", "mAP", "R@5", "mAP +", "mAP -", "mAP p-value", "R@5 +", "R@5 -",
                                   "R@5 p-value"]
    # per query: the true values, NaN where a proposal does not count
    per_q = ps.Experiment([a], topics, qrels, ["mAP"], names=["A"], perquery=True, dataset="irds:sci/mir-multicite/dev")
    got = per_q.set_index("qid")["value"]
    assert got[counted].to_numpy() == pytest.approx(y)
    assert got.drop(counted).isna().all()


def test_columns_follow_the_order_asked_and_corrections(mir_runs):
    topics, qrels, a, b = mir_runs
    for order in (["R@5", "mAP", "R@3"], ["R@3", "mAP", "R@5"]):
        table = ps.Experiment([a, b], topics, qrels, order, names=["A", "B"], baseline=0, correction="holm",
                              dataset="irds:sci/mir-multicite/dev")
        measure_cols = [c for c in table.columns if c in order]
        assert measure_cols == order
        p_cols = [c[:-len(" p-value")] for c in table.columns if c.endswith(" p-value")]
        assert p_cols == order
        assert f"{order[0]} reject" in table.columns and f"{order[0]} p-value corrected" in table.columns


def test_evaluate_perquery_marks_left_out_proposals(mir_runs, tmp_path, capsys):
    topics, qrels, a, _ = mir_runs
    path = tmp_path / "a.res"
    pt.io.write_results(a, str(path), format="trec")
    assert main(["evaluate", str(path), "--dataset", "irds:sci/mir-multicite/dev/chrono-test",
                 "--measures", "R@3,mAP", "--perquery"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines()[1:] if ln.strip()]
    not_counted = [ln for ln in lines if "not counted" in ln]
    assert len(not_counted) == 2 * (topics["qid"].nunique() - 19)
    values = [float(ln.split()[-1]) for ln in lines if "not counted" not in ln]
    assert len(values) == 2 * 19 and max(values) <= 1.0


def test_aggregate_of_other_measures_is_the_plain_mean():
    import ir_measures
    assert M.aggregate(ir_measures.nDCG @ 10, {"a": 0.5, "b": 1.0}) == 0.75
    assert math.isnan(M.aggregate(ir_measures.nDCG @ 10, {}))


def test_experiment_refuses_an_unknown_dataset_before_running(tmp_path):
    from pyterrier_sci.experiment import run_experiment
    cfg = {"pipelines": {"BM25": "pool >> bm25"},
           "experiments": {"e": {"datasets": ["irds:sci/csfcube/methd"], "measures": ["NDCG%20"]}}}
    with pytest.raises(ps.PipelineError, match="unknown dataset 'irds:sci/csfcube/methd'; did you mean"):
        run_experiment(cfg)


@needs_data("csfcube", "sample_ranked_pools")
def test_a_topic_without_judgements_is_left_out_as_pt_experiment_leaves_it_out(csfcube):
    """pt.Experiment backfills a topic that has no judgement with NaN and leaves it out of its means; ps.Experiment
    gave NaN means instead (a local corpus whose qrels judge only some of its topics)."""
    import ir_measures
    run = specter_run(["method"])
    qrels = pt.get_dataset("irds:sci/csfcube/method").get_qrels()
    qids = sorted(run["qid"].unique())
    topics = pd.DataFrame({"qid": qids, "query": ["x"] * len(qids)})
    partial = qrels[qrels["qid"] != qids[0]]     # the first topic has no judgement left
    system = pt.Transformer.from_df(run, uniform=False)
    ours = ps.Experiment([system], topics, partial, ["nDCG@10", "AP"], names=["SPECTER"])
    theirs = pt.Experiment([system], topics, partial, [ir_measures.nDCG @ 10, ir_measures.AP], names=["SPECTER"])
    assert ours["nDCG@10"].iloc[0] == pytest.approx(theirs["nDCG@10"].iloc[0], abs=1e-12)
    assert ours["AP"].iloc[0] == pytest.approx(theirs["AP"].iloc[0], abs=1e-12)
    assert not math.isnan(ours["AP"].iloc[0])
