"""DORIS-MAE datasets: the offline part of shared/data and the full-release loader on a tiny fixture
in the Zenodo v1 layout (appendix A.4)."""

import shutil
from pathlib import Path

import ir_datasets
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.data import MissingDataError, registry_status
from pyterrier_sci.datasets import doris_mae as dm

FIXTURE = Path(__file__).parent / "fixtures" / "doris_mae_v1_tiny.json"
offline = needs_data("doris-mae", "birco_dev", "qrels.tsv")


# ---------------------------------------------------------------- the offline part


@offline
def test_birco_dev_counts_and_fields():
    ds = ir_datasets.load("sci/doris-mae/birco-dev")
    queries = list(ds.queries_iter())
    assert len(queries) == 40 and ds.docs_count() == 2938
    qrels = list(ds.qrels_iter())
    assert len(qrels) == 3129 and all(isinstance(q.relevance, int) for q in qrels)
    # the 40 offline queries are the paper's 40 training queries
    assert sorted(int(q.query_id) for q in queries) == list(dm.TRAIN_QUERY_IDS)
    doc = ds.docs_store().get("190473")
    assert doc.title == "" and doc.abstract.startswith("This document serves") and doc.default_text() == doc.abstract
    topics = pt.get_dataset("irds:sci/doris-mae/birco-dev").get_topics()
    assert list(topics.columns) == ["qid", "query"] and topics["query"].str.len().min() > 300


@offline
def test_offline_scores_are_eq1_sums_of_the_normalised_scores():
    sf = dm.scores_frame("irds:sci/doris-mae/birco-dev")
    pools = dm.birco_pools()
    norm = {(q, d): v for q, items in pools.items() for d, v in items}
    # S = normalised x |Q| is an integer, and S/|Q| gives back BIRCO's score
    for row in sf.itertuples():
        assert row.score == round(row.score)
        assert row.score / row.n_aspects == pytest.approx(norm[(row.qid, row.docno)], abs=1e-9)
    assert int(sf["relevant"].sum()) == sum(1 for v in norm.values() if v >= 1) == 478
    sizes = sf.groupby("qid").size()
    assert sizes.min() == 58 and sizes.max() == 103
    no_rel = sorted((q for q, g in sf.groupby("qid") if not g["relevant"].any()), key=int)
    assert no_rel == ["18", "21", "39", "40", "41", "43", "45"]


@offline
def test_aspect_counts_count_distinct_texts():
    q2 = dm.offline_queries()["2"]
    # query 2: 4 aspects with 3+2+2+4 sub-aspects, one sub-aspect text repeated -> 14 distinct
    assert len(q2.aspects) == 4 and sum(len(a.sub_aspects) for a in q2.aspects) == 11
    assert q2.n_aspects == 14 and dm.aspect_count("2") == 14
    sub = dm.subquery_of(q2, (0, 3))
    assert sub.query_id == "2_1_4" and sub.n_aspects == 1 + 3 + 1 + 4 - 1
    assert dm.aspect_count("2_1_4") == sub.n_aspects
    with pytest.raises(ValueError, match="n_aspects"):
        dm.aspect_count("777")


@offline
def test_aspect_queries_and_topics():
    ds = ir_datasets.load("sci/doris-mae/birco-dev/test20")
    aq = list(ds.aspect_queries_iter())
    assert len(aq) == 20 and all(q.aspects and q.parent_id == q.query_id for q in aq)
    topics = dm.aspect_topics("irds:sci/doris-mae/birco-dev/test20")
    assert list(topics.columns) == ["qid", "query", "aspects", "sub_aspects", "n_aspects"]
    row = topics.iloc[0]
    assert row["aspects"] == tuple(a.text for a in aq[0].aspects) and row["n_aspects"] == aq[0].n_aspects


@offline
def test_train20_test20_split():
    tr, te = dm.birco_query_ids("train20"), dm.birco_query_ids("test20")
    assert len(tr) == len(te) == 20 and not set(tr) & set(te)
    assert sorted(tr + te, key=int) == dm.birco_query_ids()
    ids = {q.query_id for q in ir_datasets.load("sci/doris-mae/birco-dev/train20").queries_iter()}
    assert ids == set(tr)
    pool = pt.get_dataset("irds:sci/doris-mae/birco-dev/test20").get_results()
    assert set(pool["qid"]) == set(te)


@offline
def test_pool_is_the_judged_set():
    ds = pt.get_dataset("irds:sci/doris-mae/birco-dev")
    pool, qrels = ds.get_results(), ds.get_qrels()
    assert set(zip(pool["qid"], pool["docno"])) == set(zip(qrels["qid"], qrels["docno"]))
    res = ps.pipeline("pool", dataset="irds:sci/doris-mae/birco-dev")(ds.get_topics().head(2))
    assert res.groupby("qid").size().tolist() == pool.groupby("qid").size().loc[res["qid"].unique()].tolist()


@needs_data("doris-mae", "queries_parsed.json")
def test_queries_only_ids():
    qs = list(ir_datasets.load("sci/doris-mae/queries").aspect_queries_iter())
    assert len(qs) == 100 and sum(len(q.aspects) for q in qs) == 566
    assert sum(len(a.sub_aspects) for q in qs for a in q.aspects) == 1149
    subs = list(ir_datasets.load("sci/doris-mae/subquery-2-texts").aspect_queries_iter())
    assert len(subs) == 1003 and all(s.parent_id for s in subs)
    # a sub-query text is made of its parent's sentences
    s = subs[0]
    parent = dm.offline_queries()[s.parent_id]
    first = s.text.split(". ")[0]
    assert first in " ".join(parent.text.split())


def test_registry_status_lists_offline_and_full_ids_separately(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path))
    rows = {r["id"]: r for r in registry_status()}
    assert rows["irds:sci/doris-mae"]["present"] is False
    assert rows["irds:sci/doris-mae"]["missing"] == [str(tmp_path / "doris-mae" / "DORIS-MAE_dataset_v1.json")]
    assert any(m.endswith("qrels.tsv") for m in rows["irds:sci/doris-mae/birco-dev/test20"]["missing"])
    assert "irds:sci/doris-mae/subquery-2" in rows and "irds:sci/doris-mae/test" in rows


def test_missing_release_names_the_file_and_zenodo(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path))
    monkeypatch.setenv("PYTERRIER_SCI_OFFLINE", "1")
    with pytest.raises(MissingDataError) as e:
        list(ir_datasets.load("sci/doris-mae/test").queries_iter())
    msg = str(e.value)
    assert "DORIS-MAE_dataset_v1.json" in msg and "zenodo.8299749" in msg and "PYTERRIER_SCI_DATA" in msg


# ---------------------------------------------------------------- the full release (fixture)


@pytest.fixture
def release_dir(tmp_path, monkeypatch):
    d = tmp_path / "data"
    (d / "doris-mae").mkdir(parents=True)
    shutil.copy(FIXTURE, d / "doris-mae" / "DORIS-MAE_dataset_v1.json")
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(d))
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    return d


def _qrels(name):
    return {(q.query_id, q.doc_id): q.relevance for q in ir_datasets.load(name).qrels_iter()}


def test_release_queries_docs_pools(release_dir):
    ds = ir_datasets.load("sci/doris-mae")
    assert [q.query_id for q in ds.queries_iter()] == ["0", "1"]
    assert ds.docs_count() == 16
    doc = ds.docs_store().get("14")
    assert (
        doc.title == "Low-resource ASR" and doc.abstract.startswith("Speech recognition") and doc.url.endswith("00014")
    )
    pool = [(s.query_id, s.doc_id) for s in ds.scoreddocs_iter()]
    assert pool == [("0", "10"), ("0", "11"), ("0", "12"), ("0", "13"), ("1", "11"), ("1", "14"), ("1", "15")]
    q0 = ds.aspect_queries()["0"]
    assert q0.query_type == "ML" and [a.aspect_id for a in q0.aspects] == ["0", "3", "4"]
    assert q0.aspects[2].sub_aspects == (("1", "The model should be a graph neural network."),)


def test_release_qrels_follow_eq1(release_dir):
    # query 0: aspects 0 (sub 1, 2), 3, 4 (sub 1 again) -> Q = {0, 1, 2, 3, 4}, |Q| = 5
    assert dm.aspect_count("0") == 5 and dm.aspect_count("1") == 3
    assert _qrels("sci/doris-mae") == {
        ("0", "10"): 2 + 2 + 1 + 1 + 0,
        ("0", "11"): 2 + 2 + 2 + 0 + 0,
        ("0", "12"): 0 + 0 + 1 + 1 + 1,
        ("0", "13"): 0,
        ("1", "11"): 1,
        ("1", "14"): 2,
        ("1", "15"): 0,
    }
    sf = dm.scores_frame("sci/doris-mae")
    assert sf.loc[sf["relevant"], "docno"].tolist() == ["10", "11"]  # 6/5 >= 1; query 1 has none (2/3)


def test_release_subqueries_follow_eq2_and_the_authors_filter(release_dir):
    sub2 = list(ir_datasets.load("sci/doris-mae/subquery-2").aspect_queries_iter())
    # (aspects 0,3) and (0,4) are left out: their sentences also belong to a third aspect
    assert [q.query_id for q in sub2] == ["0_2_3", "1_1_2"]
    q = sub2[0]
    assert (
        q.text
        == "It should be benchmarked on drug discovery data. Toxicity prediction results would be especially useful."
    )
    assert q.parent_id == "0" and q.aspect_ids() == ["3", "4", "1"] and dm.aspect_count("0_2_3") == 3
    assert _qrels("sci/doris-mae/subquery-2") == {
        ("0_2_3", "10"): 1 + 0 + 2,
        ("0_2_3", "11"): 0 + 0 + 2,
        ("0_2_3", "12"): 1 + 1 + 0,
        ("0_2_3", "13"): 0,
        ("1_1_2", "11"): 1,
        ("1_1_2", "14"): 2,
        ("1_1_2", "15"): 0,
    }
    sub1 = [q.query_id for q in ir_datasets.load("sci/doris-mae/subquery-1").queries_iter()]
    assert sub1 == ["0_1", "1_1", "1_2"]
    pool = pt.get_dataset("irds:sci/doris-mae/subquery-2").get_results()
    assert pool[pool["qid"] == "0_2_3"]["docno"].tolist() == ["10", "11", "12", "13"]


def test_release_train_test_split(release_dir):
    assert [q.query_id for q in ir_datasets.load("sci/doris-mae/train").queries_iter()] == ["0"]
    assert [q.query_id for q in ir_datasets.load("sci/doris-mae/test").queries_iter()] == ["1"]
    assert len(dm.TRAIN_QUERY_IDS) == 40 and len(dm.TEST_QUERY_IDS) == 60
    assert not set(dm.TRAIN_QUERY_IDS) & set(dm.TEST_QUERY_IDS)


def test_release_human_test_set(release_dir):
    hts = dm.human_test_set()
    assert list(hts.columns) == [
        "aspect_id",
        "abstract_id",
        "aspect",
        "gpt",
        "annotator_1",
        "annotator_2",
        "annotator_3",
    ]
    assert len(hts) == 6 and hts.iloc[0].to_dict()["gpt"] == 2 and hts.iloc[0]["annotator_3"] == 1


def test_release_evaluates_in_pt_experiment(release_dir):
    ds = pt.get_dataset("irds:sci/doris-mae")
    topics, qrels = ds.get_topics(), ds.get_qrels()
    best = pd.DataFrame(
        [
            ("0", "11", 4.0),
            ("0", "10", 3.0),
            ("0", "12", 2.0),
            ("0", "13", 1.0),
            ("1", "14", 3.0),
            ("1", "11", 2.0),
            ("1", "15", 1.0),
        ],
        columns=["qid", "docno", "score"],
    )
    table = ps.Experiment(
        [best], topics, qrels, ["RP", "MRR@10", "NDCGexp@10%"], dataset="sci/doris-mae", names=["oracle"]
    )
    assert table["RP"].iloc[0] == pytest.approx(1.0)  # query 1 has no relevant abstract: left out
    assert table["MRR@10"].iloc[0] == pytest.approx(1.0)
    assert table["NDCGexp@10%"].iloc[0] == pytest.approx(0.0)  # pools of 4 and 3: int(0.1 n) = 0 ranks
