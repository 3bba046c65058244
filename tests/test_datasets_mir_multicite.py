"""MIR-MultiCite as ir_datasets (sci/mir-multicite/...): the dev split, both corpus settings, the
chronological protocol, the official splits' missing-data error, and the §6.2 measures."""

import math

import ir_datasets
import ir_measures
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.data import MissingDataError
from pyterrier_sci.datasets import mir_multicite as M
from pyterrier_sci.plugins.mir import measures as mir_measures

pytestmark = needs_data("mir-multicite", "mir_dev_chronological.csv")


def test_dev_split_counts_match_the_release():
    ds = pt.get_dataset("irds:sci/mir-multicite/dev")
    topics, qrels = ds.get_topics(), ds.get_qrels()
    # Table 1: 86 dev proposals, 179 cited papers; 102 MultiCite paper ids merge into 86 citing papers
    assert len(topics) == 86 and topics["qid"].is_unique
    assert ir_datasets.load("sci/mir-multicite/dev").docs_count() == 179
    assert len(qrels) == 210 and int(qrels["label"].sum()) == 108
    assert qrels.groupby("qid")["label"].max().sum() == 68  # proposals with ground truth
    assert "ACL:W19-0804" in set(topics["qid"]) and topics["query"].str.startswith("The research problem").any()
    cites = list(ir_datasets.load("sci/mir-multicite/dev").citations_iter())
    assert len(cites) == 1004 and sum(c.methodological for c in cites) == 328  # Table 1: MI 328 of 1004
    assert {c.intent for c in cites if c.methodological} == {"Uses", "Extention"}
    # restricted pool: every corpus paper for every proposal
    pool = ds.get_results()
    assert len(pool) == 86 * 179
    assert pt.get_dataset("irds:sci/mir-multicite/dev/restricted").get_qrels().equals(qrels)


def test_chronological_protocol_is_disjoint_and_ordered():
    split = M.load_split("dev")
    train, test = M.chrono_parts(split)
    assert len(train) == 52 and len(test) == 34 and not set(train) & set(test)
    assert set(train) | set(test) == set(split.proposals)
    dates = [M.proposal_date(q) for q in train + test]
    assert dates == sorted(dates)
    assert M.proposal_date("ARXIV:1906.09912") == (2019, 6) and M.proposal_date("ACL:N19-1064") == (2019, 6)
    assert M.proposal_date("ACL:2020.findings-emnlp.292") == (2020, 13) and M.proposal_date("CorpusID:1")[0] == 9999
    tr = pt.get_dataset("irds:sci/mir-multicite/dev/chrono-train").get_topics()
    te = pt.get_dataset("irds:sci/mir-multicite/dev/chrono-test").get_topics()
    assert list(tr["qid"]) == train and list(te["qid"]) == test


def test_extended_pool_is_training_papers_plus_own_ground_truth():
    ext = pt.get_dataset("irds:sci/mir-multicite/dev/chrono-test/extended")
    qrels = ext.get_qrels()
    train_docs = {d.doc_id for d in ir_datasets.load("sci/mir-multicite/dev/chrono-train").docs_iter()}
    pool = ext.get_results()
    gt = qrels[qrels["label"] == 1].groupby("qid")["docno"].apply(set).to_dict()
    for qid, docs in pool.groupby("qid")["docno"]:
        assert set(docs) == train_docs | gt.get(qid, set())
    # another proposal's ground truth that is not a training paper stays out of a proposal's pool
    q1, q2 = [q for q in gt if gt[q] - train_docs][:2]
    other = next(iter(gt[q2] - train_docs - gt[q1]))
    assert other not in set(pool[pool["qid"] == q1]["docno"])
    # the documents are the union; texts come from the release
    docs = {d.doc_id: d for d in ir_datasets.load("sci/mir-multicite/dev/chrono-test/extended").docs_iter()}
    assert set(docs) == train_docs | set().union(*gt.values())
    assert (
        all(d.abstract for d in docs.values() if d.doc_id != "") and docs[other].default_text() == docs[other].abstract
    )


def test_official_splits_name_the_missing_file(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path))
    for split, name in (
        ("test", "test_chronological_df.csv"),
        ("train", "train_chronological_df.csv"),
        ("train-aug", "augmented_train_chronological_df.csv"),
    ):
        with pytest.raises(MissingDataError) as e:
            list(ir_datasets.load(f"sci/mir-multicite/{split}").queries_iter())
        assert name in str(e.value) and "PYTERRIER_SCI_DATA" in str(e.value)
    assert M.FILES["test"].url.startswith(
        "https://raw.githubusercontent.com/Anikethh/Methodology-Inspiration-Retrieval/"
    )
    with pytest.raises(MissingDataError):
        pt.get_dataset("irds:sci/mir-multicite/dev/extended").get_results()  # needs the train split


def test_registry_status_lists_the_ids():
    from pyterrier_sci.data import registry_status

    rows = {r["id"]: r for r in registry_status() if "mir-multicite" in r["id"]}
    assert rows["irds:sci/mir-multicite/dev/chrono-test"]["present"]
    assert not rows["irds:sci/mir-multicite/test/extended"]["present"]
    assert any("train_chronological_df.csv" in m for m in rows["irds:sci/mir-multicite/dev/extended"]["missing"])


def test_read_csv_rejects_a_foreign_file(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a MIR-MultiCite file"):
        M.read_csv(p)


# ---------------------------------------------------------------------------------------------
# measures (§6.2)
# ---------------------------------------------------------------------------------------------

QRELS = pd.DataFrame(
    {"qid": ["a", "a", "a", "b", "b", "c"], "docno": ["d1", "d2", "d3", "d1", "d4", "d2"], "label": [1, 0, 1, 0, 0, 1]}
)
RUN = pd.DataFrame(
    {
        "qid": ["a"] * 6 + ["b"] * 2 + ["c"] * 2,
        "docno": ["d2", "x", "d1", "y", "z", "d3", "d1", "d4", "d9", "d2"],
        "score": [9, 8, 7, 6, 5, 4, 2, 1, 2, 1],
    }
)


def test_measures_follow_section_6_2():
    m = ps.measures.parse(["R@3", "R@5", "mAP"], dataset="sci/mir-multicite/dev")
    assert [str(x) for x in m] == ["mir.R@3", "mir.R@5", "mir.mAP"]
    r3, r5, ap = m
    # query a: ground truth d1 (rank 3), d3 (rank 6): R@3 = 1/2, R@5 = 1/2, AP = (1/3 + 2/6) / 2
    # query c: d2 at rank 2: 1, 1, 1/2;  query b has no ground truth: left out
    assert r3.per_query(QRELS, RUN) == pytest.approx({"a": 0.5, "c": 1.0, "b": math.nan}, nan_ok=True)
    assert ap.per_query(QRELS, RUN)["a"] == pytest.approx((1 / 3 + 2 / 6) / 2)
    q = QRELS.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    r = RUN.rename(columns={"qid": "query_id", "docno": "doc_id"})
    agg = ir_measures.calc_aggregate([r3, r5, ap], q, r)
    assert agg[r3] == pytest.approx(0.75) and agg[r5] == pytest.approx(0.75)
    assert agg[ap] == pytest.approx(((1 / 3 + 2 / 6) / 2 + 0.5) / 2)


def test_per_query_values_equal_ir_measures_but_means_differ():
    """ir_measures' R@k / AP agree per proposal; their mean also counts proposals without ground truth as 0."""
    q = QRELS.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    r = RUN.rename(columns={"qid": "query_id", "docno": "doc_id"})
    for ours, theirs in (("mir.R@3", "R@3"), ("mir.R@5", "R@5"), ("mir.mAP", "AP")):
        mine = ps.measures.get(ours).per_query(QRELS, RUN)
        ref = {x.query_id: x.value for x in ir_measures.iter_calc([ir_measures.parse_measure(theirs)], q, r)}
        for qid in ("a", "c"):
            assert mine[qid] == pytest.approx(ref[qid])
        assert ref["b"] == 0.0 and math.isnan(mine["b"])
        assert (
            ir_measures.calc_aggregate([ir_measures.parse_measure(theirs)], q, r)[ir_measures.parse_measure(theirs)]
            < ir_measures.calc_aggregate([ps.measures.get(ours)], q, r)[ps.measures.get(ours)]
        )


def test_measures_in_pt_experiment_with_dataset_aliases():
    ds = pt.get_dataset("irds:sci/mir-multicite/dev/chrono-test")
    topics, qrels = ds.get_topics(), ds.get_qrels()
    oracle = qrels.assign(score=qrels["label"].astype(float))[["qid", "docno", "score"]]
    oracle = pt.Transformer.from_df(pt.model.add_ranks(oracle))
    res = ps.Experiment(
        [oracle], topics, qrels, ["R@3", "R@5", "mAP"], dataset="irds:sci/mir-multicite/dev", names=["oracle"]
    )
    # every test proposal has at most 3 ground-truth papers ranked first: all measures are 1
    assert res[["R@3", "R@5", "mAP"]].iloc[0].tolist() == pytest.approx([1.0, 1.0, 1.0])
    # pt.Experiment's plain mean cannot leave proposals out: it is NaN, never a made-up figure
    plain = pt.Experiment([oracle], topics, qrels, ps.measures.parse(["mAP"], dataset="irds:sci/mir-multicite/dev"))
    assert math.isnan(plain["mir.mAP"].iloc[0])
    table = mir_measures.evaluate({"oracle": oracle(topics)}, "irds:sci/mir-multicite/dev/chrono-test")
    assert table.loc[0, "mAP"] == pytest.approx(100.0) and table.loc[0, "n"] == 19
