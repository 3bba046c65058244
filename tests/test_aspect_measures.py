"""Aspect (subtopic) measures over DORIS-MAE's aspects and CSFCube's facets: the subtopic qrels built from the
datasets' own annotations (datasets/subtopics.py), alpha-nDCG, ERR-IA and subtopic recall by name in ps.Experiment
and on the command line through ir_measures' pyndeval provider (TREC's ndeval), and this toolkit's implementation
(pyterrier_sci/diversity.py) equal to the provider wherever both compute, used where the provider cannot."""
import itertools
import json
import math
import random
import shutil
from pathlib import Path

import ir_datasets
import ir_measures
import pandas as pd
import pyterrier as pt
import pytest
from conftest import DATA, needs_data

import pyterrier_sci as ps
from pyterrier_sci import diversity as D
from pyterrier_sci import measures as M

FIXTURE = Path(__file__).parent / "fixtures" / "doris_mae_v1_tiny.json"
L3 = math.log2(3)


def _frames(rows_q, rows_r):
    qrels = pd.DataFrame(rows_q, columns=["qid", "docno", "label", "iteration"])
    run = pd.DataFrame(rows_r, columns=["qid", "docno", "score"])
    return qrels, run


def _values(measures, qrels, run):
    """Per-query values of ps.Experiment (the names resolved by the toolkit)."""
    topics = pd.DataFrame({"qid": sorted(set(qrels.qid)), "query": "x"})
    res = ps.Experiment([run], topics, qrels, measures, names=["r"], perquery=True)
    return {(r.qid, r.measure): r.value for r in res.itertuples()}


# ---------------------------------------------------------------- the definitions, on a hand example


def test_hand_example_by_name_in_experiment():
    # q1: subtopics a, b; d3 is judged for b but not relevant to it; d4 is relevant to b (grade 2), unretrieved
    qrels, run = _frames([("q1", "d1", 1, "a"), ("q1", "d2", 1, "b"), ("q1", "d3", 1, "a"), ("q1", "d3", 0, "b"),
                          ("q1", "d4", 2, "b")],
                         [("q1", "d1", 4.0), ("q1", "d3", 3.0), ("q1", "d2", 2.0), ("q1", "d5", 1.0)])
    names = ["alpha_nDCG@3", "ERR_IA@3", "StRecall@2", "alpha_nDCG(rel=2)@3", "alpha_nDCG@50", "ERR_IA@1"]
    got = _values(names, qrels, run)
    # run gains (alpha 0.5): d1 a new 1, d3 a seen once 0.5, d2 b new 1; ndeval's greedy ideal: d4 (b, the larger
    # docno of the ties), d3 (a), d2 (b seen: 0.5; d1 and d2 tie, d2 the larger), d1 (a seen: 0.5)
    assert got[("q1", "alpha_nDCG@3")] == pytest.approx((1 + 0.5 / L3 + 1 / 2) / (1 + 1 / L3 + 0.5 / 2))
    # ERR-IA: sum of gain / rank, over |S| = 2 subtopics new at every rank ("ideal ideal")
    assert got[("q1", "ERR_IA@3")] == pytest.approx((1 + 0.5 / 2 + 1 / 3) / (2 + 2 * 0.5 / 2 + 2 * 0.25 / 3))
    assert got[("q1", "StRecall@2")] == 0.5                                  # d1, d3 cover a only
    assert got[("q1", "alpha_nDCG(rel=2)@3")] == 0.0                          # only d4 is relevant at grade 2
    # beyond ndeval's depth: computed here, the whole list (d5 unjudged: gain 0) against a 4-document ideal
    assert got[("q1", "alpha_nDCG@50")] == pytest.approx((1 + 0.5 / L3 + 1 / 2) /
                                                         (1 + 1 / L3 + 0.5 / 2 + 0.5 / math.log2(5)))
    assert got[("q1", "ERR_IA@1")] == 0.5                                     # 1 of 2 subtopics (ndeval says 1.0)
    # the subtopics matter: without them every document has one subtopic and the figures change
    flat = ir_measures.calc_aggregate([ir_measures.parse_measure("ERR_IA@3")],
                                      qrels.drop(columns="iteration").drop_duplicates(["qid", "docno"], keep="last")
                                      .rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}),
                                      run.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    assert list(flat.values())[0] != pytest.approx(got[("q1", "ERR_IA@3")])


def test_names_go_to_the_provider_up_to_depth_20():
    for name in ("alpha_nDCG@10", "α_nDCG@20", "ERR_IA(rel=2)@5", "StRecall@20"):
        m = M.get(name)
        assert isinstance(m, D.SubtopicMeasure) and m.by_provider, name
        assert m == ir_measures.parse_measure(name)                 # the same name and meaning as ir_measures'
    for name in ("alpha_nDCG@21", "alpha_nDCG", "ERR_IA(rel=2)@100", "StRecall@50", "ERR_IA@1",
                 "alpha_nDCG(judged_only=True)@10", "α_nDCG@30"):
        m = M.get(name)
        assert isinstance(m, D.SubtopicMeasure) and not m.by_provider, name
    assert str(M.get("alpha_nDCG(alpha=0.25,rel=2)@50")) == "alpha_nDCG(alpha=0.25,rel=2)@50"


def test_measures_of_several_parameter_groups_in_one_experiment():
    """ir_measures 0.4.3's pyndeval provider reads the run once per call, so in one call only the first group of
    parameters (rel, alpha) gets values and the others 0: the toolkit asks it one measure at a time."""
    qrels, run = _random_subtopic_data(seed=3, queries=8)
    names = ["StRecall@5", "StRecall(rel=2)@5", "alpha_nDCG@10", "alpha_nDCG(alpha=0.2,rel=2)@10", "ERR_IA(rel=2)@10"]
    got = _values(names, qrels.rename(columns={"query_id": "qid", "doc_id": "docno", "relevance": "label"}),
                  run.rename(columns={"query_id": "qid", "doc_id": "docno"}))
    for name in names:
        m = ir_measures.parse_measure(name)
        alone = {x.query_id: x.value for x in ir_measures.iter_calc([m], qrels, run)}
        assert {q: got[(q, name)] for q in alone} == pytest.approx(alone, abs=1e-12), name
        assert sum(alone.values()) > 0, name


# ---------------------------------------------------------------- equal to ir_measures' pyndeval provider


def _random_subtopic_data(seed=0, queries=25):
    rng = random.Random(seed)
    qrels, run = [], []
    for q in range(queries):
        subs = [f"s{i}" for i in range(rng.randint(1, 4))]
        docs = list(dict.fromkeys(f"d{rng.randint(0, 60):02d}" for _ in range(40)))
        for d in docs[:30]:
            for s in subs:
                if rng.random() < 0.5:
                    qrels.append((f"q{q}", d, rng.choice([0, 0, 1, 2]), s))
        run += [(f"q{q}", d, float(rng.randint(0, 8))) for d in docs]      # many tied scores
    qrels = pd.DataFrame(qrels, columns=["query_id", "doc_id", "relevance", "iteration"])
    return qrels, pd.DataFrame(run, columns=["query_id", "doc_id", "score"])


def test_the_toolkit_equals_pyndeval_wherever_both_compute():
    qrels, run = _random_subtopic_data()
    checked = 0
    for name, k, params in itertools.product(["alpha_nDCG", "ERR_IA", "StRecall"], range(2, 21),
                                             ["", "(rel=2)", "(alpha=0.3)", "(alpha=0.9,rel=2)"]):
        if "alpha" in params and name != "alpha_nDCG":
            continue
        m = ir_measures.parse_measure(f"{name}{params}@{k}")
        theirs = {x.query_id: x.value for x in ir_measures.iter_calc([m], qrels, run)}
        ours = D.SubtopicMeasure(m).computed(qrels, run)
        assert set(ours) == set(theirs) and len(ours) == 25
        bad = {q: (ours[q], theirs[q]) for q in ours if abs(ours[q] - theirs[q]) > 1e-9}
        assert not bad, f"{m}: {bad}"
        checked += 1
    assert checked == 19 * (4 + 2 + 2)
    # ndeval leaves ERR-IA@1 unnormalised (the first document's subtopics); the toolkit normalises it as any depth
    m = ir_measures.parse_measure("ERR_IA@1")
    theirs = {x.query_id: x.value for x in ir_measures.iter_calc([m], qrels, run)}
    assert max(theirs.values()) > 1.0 and max(M.get("ERR_IA@1").values(qrels, run).values()) <= 1.0
    # judged_only (which the provider fails on): the provider's figure for the run without its unjudged documents
    judged = run.merge(qrels[["query_id", "doc_id"]].drop_duplicates())
    m = ir_measures.parse_measure("alpha_nDCG@10")
    theirs = {x.query_id: x.value for x in ir_measures.iter_calc([m], qrels, judged)}
    ours = M.get("alpha_nDCG(judged_only=True)@10").values(qrels, run)
    assert ours == {q: pytest.approx(v, abs=1e-12) for q, v in theirs.items()}


# ---------------------------------------------------------------- DORIS-MAE's aspects (the release's fixture)


@pytest.fixture
def release_dir(tmp_path, monkeypatch):
    d = tmp_path / "data"
    (d / "doris-mae").mkdir(parents=True)
    shutil.copy(FIXTURE, d / "doris-mae" / "DORIS-MAE_dataset_v1.json")
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(d))
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    return d


def test_doris_mae_aspect_qrels_and_measures(release_dir):
    ds = pt.get_dataset("irds:sci/doris-mae/aspects")
    qrels = ds.get_qrels()
    assert list(qrels.columns) == ["qid", "docno", "label", "iteration"]
    got = {(r.qid, r.docno, r.iteration): r.label for r in qrels.itertuples()}
    # query 1: aspects 5 (sub-aspect 6) and 7, pool 11, 14, 15; Anno-GPT's scores, 0 where the release has none
    assert {k: v for k, v in got.items() if k[0] == "1"} == {
        ("1", "11", "5"): 1, ("1", "11", "6"): 0, ("1", "11", "7"): 0,
        ("1", "14", "5"): 0, ("1", "14", "6"): 1, ("1", "14", "7"): 1,
        ("1", "15", "5"): 0, ("1", "15", "6"): 0, ("1", "15", "7"): 0}
    assert len(got) == 4 * 5 + 3 * 3                       # query 0: Q = {0, 1, 2, 3, 4}, 4 abstracts
    # summed over the subtopics, they are Eq. 1's S(p|Q): the qrels of sci/doris-mae
    sums = qrels.groupby(["qid", "docno"]).label.sum().to_dict()
    assert sums == {(q.query_id, q.doc_id): q.relevance for q in ir_datasets.load("sci/doris-mae").qrels_iter()}
    assert [q.query_id for q in ir_datasets.load("sci/doris-mae/aspects/test").queries_iter()] == ["1"]
    assert set(pt.get_dataset("irds:sci/doris-mae/aspects/train").get_qrels().qid) == {"0"}
    assert ds.get_topics()["query"].tolist()[0].startswith("I want a graph neural network")

    run = pd.DataFrame([("0", "12", 4.0), ("0", "10", 3.0), ("0", "11", 2.0), ("0", "13", 1.0),
                        ("1", "11", 3.0), ("1", "14", 2.0), ("1", "15", 1.0)], columns=["qid", "docno", "score"])
    res = ps.Experiment([run], ds.get_topics(), qrels, ["alpha_nDCG@2", "StRecall@1", "StRecall(rel=2)@2",
                                                        "alpha_nDCG@30"], names=["r"], perquery=True,
                        dataset="irds:sci/doris-mae/aspects")
    v = {(r.qid, r.measure): r.value for r in res.itertuples()}
    # query 1: 11 covers aspect 5 (gain 1), 14 covers 6 and 7 (gain 2); the ideal puts 14 first
    assert v[("1", "alpha_nDCG@2")] == pytest.approx((1 + 2 / L3) / (2 + 1 / L3))
    assert v[("1", "StRecall@1")] == pytest.approx(1 / 3)
    # query 0: 12 covers 2, 3, 4 of the five subtopics; at grade 2 only 0, 1, 2 have a relevant abstract
    assert v[("0", "StRecall@1")] == pytest.approx(3 / 5)
    assert v[("0", "StRecall(rel=2)@2")] == pytest.approx(2 / 3)
    # the whole ranking (computed here) ends where alpha_nDCG@4 would: 4 abstracts judged
    assert v[("0", "alpha_nDCG@30")] == pytest.approx(
        ir_measures.calc_aggregate([ir_measures.parse_measure("alpha_nDCG@4")],
                                   qrels[qrels.qid == "0"].rename(columns={"qid": "query_id", "docno": "doc_id",
                                                                           "label": "relevance"}),
                                   run[run.qid == "0"].rename(columns={"qid": "query_id", "docno": "doc_id"})
                                   )[ir_measures.parse_measure("alpha_nDCG@4")])


# ---------------------------------------------------------------- CSFCube's facets (the release)


@needs_data("csfcube")
def test_csfcube_facet_qrels_are_the_release_annotations_and_evaluate(tmp_path, capsys):
    from pyterrier_sci import cli
    papers = {}
    for facet in ("background", "method", "result"):
        for pid, ann in json.loads((DATA / "csfcube" / f"test-pid2anns-csfcube-{facet}.json").read_text()).items():
            papers.setdefault(pid, {})[facet] = ann
    two = {pid: f for pid, f in papers.items() if len(f) >= 2}
    expected = {(pid, str(c), facet): g for pid, facets in two.items() for facet, ann in facets.items()
                for c, g in zip(ann["cands"], ann["relevance_adju"])}
    ds = pt.get_dataset("irds:sci/csfcube/facets")
    qrels = ds.get_qrels()
    assert {(r.qid, r.docno, r.iteration): r.label for r in qrels.itertuples()} == expected
    assert len(two) == 16 and len(qrels) == len(expected) == 3578
    topics = ds.get_topics()
    assert sorted(topics.qid) == sorted(two)
    title = ir_datasets.load("sci/csfcube").docs_store().get(topics.qid[0]).title
    assert topics["query"][0].startswith(title)
    pool = ds.get_results()
    assert pool.groupby("qid").docno.apply(set).to_dict() == {
        pid: {str(c) for ann in f.values() for c in ann["cands"]} for pid, f in two.items()}

    rng = random.Random(1)
    run = pool.assign(score=[rng.random() for _ in range(len(pool))])
    names = ["alpha_nDCG@10", "ERR_IA@20", "StRecall@5", "alpha_nDCG(rel=2)@10", "alpha_nDCG(rel=2)@100"]
    table = ps.Experiment([run], topics, qrels, names, names=["random"], dataset="irds:sci/csfcube/facets")
    irq = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    irr = run.rename(columns={"qid": "query_id", "docno": "doc_id"})
    for name in names[:4]:
        m = ir_measures.parse_measure(name)
        assert table[name][0] == pytest.approx(ir_measures.calc_aggregate([m], irq, irr)[m], abs=1e-12)
    ranked = {q: list(g.sort_values("score", ascending=False).docno) for q, g in run.groupby("qid")}
    rel2 = {q: {} for q in ranked}
    for r in qrels[qrels.label >= 2].itertuples():
        rel2[r.qid].setdefault(r.docno, set()).add(r.iteration)
    judged = qrels.groupby("qid").docno.apply(set).to_dict()
    direct = [D.alpha_ndcg(ranked[q], rel2[q], 100, 0.5, judged[q]) for q in ranked]
    assert table["alpha_nDCG(rel=2)@100"][0] == pytest.approx(sum(direct) / len(direct), abs=1e-12)
    assert 0 < table["alpha_nDCG(rel=2)@100"][0] < 1

    path = tmp_path / "run.res"
    run.assign(Q0="Q0", rank=0, tag="t")[["qid", "Q0", "docno", "rank", "score", "tag"]].to_csv(
        path, sep=" ", header=False, index=False)
    assert cli.main(["evaluate", str(path), "--dataset", "sci/csfcube/facets", "--measures",
                     ",".join(names), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert {n: row[n] for n in names} == {n: pytest.approx(table[n][0], abs=1e-9) for n in names}
