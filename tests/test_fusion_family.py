"""The ``fuse`` component (plugins/fusion/fuse.py, tuning.py): every method x normalisation equals ranx's
``fuse`` on real CSFCube runs (BM25, TF-IDF, SPECTER's released rankings), weights and RRF's k included; tuning
walks ranx's grid with ranx's values, never sees the queries it scores, and is recorded in the run manifest."""
import os
import sys

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.datasets import csfcube
from pyterrier_sci.errors import PipelineError
from pyterrier_sci.experiment import topics_and_qrels
from pyterrier_sci.manifest import pipeline_manifest
from pyterrier_sci.plugins.fusion import (
    METHODS,
    NORMS,
    FoldTunedFusion,
    Fusion,
    fuse_scores,
    normalise,
    rrf_scores,
    tune,
    tuned_fusion,
    weight_grid,
)

if "numba" not in sys.modules:
    # ranx's own Python code, run as written rather than compiled by numba: compiling its kernels costs about 40 s
    # of CPU in every process (NUMBA_DISABLE_JIT=0 checks the compiled kernels: the same figures, to 1e-9)
    os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
ranx = pytest.importorskip("ranx")
from ranx.fusion.rrf import _rrf_score_parallel  # noqa: E402 - ranx's per-run 1/(k + rank), for weighted RRF
from ranx.fusion_optimization.optimize_weights import get_possible_weights, get_trial_configs  # noqa: E402

DS = "irds:sci/csfcube/method"
#: our names -> ranx's (plugins/fusion/fuse.py, RANX_NAMES)
RANX_METHOD = {"combsum": "sum", "combmnz": "mnz", "combmax": "max", "combmin": "min", "combmed": "med",
               "combanz": "anz"}
RANX_NORM = {"minmax": "min-max", "zscore": "zmuv", "rank": "rank", "sum": "sum", "max": "max", "none": None}


def _untied(res: pd.DataFrame) -> pd.DataFrame:
    """``res`` with tied scores of a query pulled apart by 1e-6 in docno order: ranx orders tied documents as its
    (unstable) sort happens to, the toolkit by docno; the rank-based methods agree once nothing is tied."""
    r = res.sort_values(["qid", "score", "docno"], ascending=[True, False, True]).copy()
    r["score"] = r["score"].astype(float) - 1e-6 * r.groupby(["qid", "score"]).cumcount()
    return r.reset_index(drop=True)


def _ranx_run(res: pd.DataFrame):
    d = {}
    for q, doc, s in zip(res["qid"].astype(str), res["docno"].astype(str), res["score"].astype(float)):
        d.setdefault(q, {})[doc] = s
    return ranx.Run(d)


def _ranx_rrf(run, k):
    """One ranx run turned into its RRF terms 1/(k + rank): weighted RRF is ranx's wsum of these."""
    out = ranx.Run()
    out.run = _rrf_score_parallel(run.run, k)
    return out


def _series(fused: pd.DataFrame) -> pd.Series:
    return fused.assign(qid=fused["qid"].astype(str), docno=fused["docno"].astype(str)) \
        .set_index(["qid", "docno"])["score"].astype(float).sort_index()


def _ranx_series(run) -> pd.Series:
    d = {(q, doc): s for q, docs in run.to_dict().items() for doc, s in docs.items()}
    return pd.Series(d, dtype=float).rename_axis(["qid", "docno"]).sort_index()


def _same(ours: pd.DataFrame, theirs, what: str) -> None:
    a, b = _series(ours), _ranx_series(theirs)
    assert list(a.index) == list(b.index), f"{what}: other (query, document) pairs than ranx's"
    diff = float((a - b).abs().max())
    assert diff < 1e-9, f"{what}: differs from ranx by {diff}"


@pytest.fixture(scope="module")
def runs():
    """Real runs on CSFCube's method queries: BM25 and TF-IDF over each pool cut at 60 (so each ranking misses
    documents the other holds), SPECTER's released rankings (their 1st..nth as scores n..1)."""
    topics, qrels = topics_and_qrels(DS)
    bm25 = ps.pipeline("pool >> bm25 % 60", dataset=DS)(topics)
    tfidf = ps.pipeline("pool >> tfidf % 60", dataset=DS)(topics)
    specter = conftest.specter_run(["method"])
    return {"topics": topics, "qrels": qrels, "bm25": bm25, "tfidf": tfidf, "specter": specter}


def test_the_runs_are_real_and_partly_disjoint(runs):
    a, b = runs["bm25"], runs["tfidf"]
    assert a["qid"].nunique() == b["qid"].nunique() == 17
    pairs_a, pairs_b = set(zip(a["qid"], a["docno"])), set(zip(b["qid"], b["docno"])),
    assert pairs_a - pairs_b and pairs_b - pairs_a, "the cut rankings should each hold documents the other lacks"


def test_every_method_and_norm_equals_ranx(runs):
    a, b = _untied(runs["bm25"]), _untied(runs["tfidf"])
    ra, rb = _ranx_run(a), _ranx_run(b)
    for method, rm in RANX_METHOD.items():
        for norm, rn in RANX_NORM.items():
            _same(fuse_scores([a, b], method, norm), ranx.fuse([ra, rb], norm=rn, method=rm), f"{method}/{norm}")
    assert set(METHODS) == set(RANX_METHOD) | {"wsum", "rrf"} and set(NORMS) == set(RANX_NORM)


def test_weights_and_rrf_equal_ranx(runs):
    """wsum and weighted combmnz (ranx's wsum, wmnz) under every norm, three rankings; RRF and weighted RRF."""
    a, b, c = _untied(runs["bm25"]), _untied(runs["tfidf"]), runs["specter"]
    ra, rb, rc = _ranx_run(a), _ranx_run(b), _ranx_run(c)
    w = [0.2, 0.3, 0.5]
    for norm, rn in RANX_NORM.items():
        _same(fuse_scores([a, b, c], "wsum", norm, w), ranx.fuse([ra, rb, rc], norm=rn, method="wsum",
                                                                  params={"weights": w}), f"wsum/{norm}")
        _same(fuse_scores([a, b, c], "combmnz", norm, w), ranx.fuse([ra, rb, rc], norm=rn, method="wmnz",
                                                                     params={"weights": w}), f"wmnz/{norm}")
    for k in (1, 60):
        _same(fuse_scores([a, b, c], "rrf", k=k), ranx.fuse([ra, rb, rc], norm=None, method="rrf",
                                                            params={"k": k}), f"rrf k={k}")
        _same(fuse_scores([a, b, c], "rrf", weights=w, k=k),
              ranx.fuse([_ranx_rrf(r, k) for r in (ra, rb, rc)], norm=None, method="wsum", params={"weights": w}),
              f"weighted rrf k={k}")
    # the existing rrf component is the same reciprocal rank fusion
    ours = _series(fuse_scores([a, b], "rrf", k=60))
    theirs = _series(rrf_scores([a, b], k=60))
    assert float((ours - theirs.reindex(ours.index)).abs().max()) < 1e-12


def test_the_pipeline_language_builds_the_same_fusion(runs):
    """``fuse(...)`` in an expression, on the (tied) runs as the retrievers give them: a score method, which ties
    do not affect, equals ranx; the output is a PyTerrier ranking (0-based ranks, sorted, query columns kept)."""
    expr = 'fuse(pool >> bm25 % 60, pool >> tfidf % 60, method="combmnz", norm="zscore", weights=[0.3, 0.7])'
    pipe = ps.pipeline(expr, dataset=DS)
    assert isinstance(pipe, Fusion) and pipe.weights == (0.3, 0.7) and pipe.norm == "zscore"
    res = pipe(runs["topics"])
    theirs = ranx.fuse([_ranx_run(runs["bm25"]), _ranx_run(runs["tfidf"])], norm="zmuv", method="wmnz",
                       params={"weights": [0.3, 0.7]})
    _same(res, theirs, expr)
    assert list(res.columns) == ["qid", "query", "docno", "score", "rank"]
    for _, g in res.groupby("qid"):
        assert list(g["rank"]) == list(range(len(g)))
        assert (np.diff(g["score"].to_numpy()) <= 0).all()
    assert isinstance(ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="rrf")', dataset=DS), Fusion)


def test_ties_are_broken_by_docno_and_missing_documents_count_zero():
    one = pd.DataFrame({"qid": ["q"] * 4, "docno": ["d", "b", "c", "a"], "score": [2.0, 2.0, 1.0, 3.0]})
    other = pd.DataFrame({"qid": ["q"], "docno": ["z"], "score": [5.0]})
    ranked = normalise(one, "rank").set_index("docno")["score"]
    assert ranked.to_dict() == {"a": 1.0, "b": 0.75, "d": 0.5, "c": 0.25}   # b before d: docno breaks the tie
    mm = normalise(one, "minmax").set_index("docno")["score"]
    assert mm.to_dict() == {"a": 1.0, "b": 0.5, "d": 0.5, "c": 0.0}
    fused = fuse_scores([one, other], "combsum", "minmax").set_index("docno")["score"]
    assert fused["z"] == 0.0 and fused["a"] == 1.0   # z alone in its ranking: min-max 0 (ranx's 1e-9 floor)
    mnz = fuse_scores([one, one], "combmnz", "minmax").set_index("docno")["score"]
    assert mnz["a"] == 4.0   # (1 + 1) x 2 rankings
    # ranx's sort keeps the given order of a short ranking's ties (numba's insertion sort): given in docno order,
    # its rank normalisation is the toolkit's
    ours = fuse_scores([one, other], "combsum", "rank")
    ordered = one.sort_values(["score", "docno"], ascending=[False, True])
    _same(ours, ranx.fuse([_ranx_run(ordered), _ranx_run(other)], norm="rank", method="sum"), "ties")


def test_tuning_walks_ranx_grid_with_ranx_values(runs):
    """On fold 2's queries: every grid point's nDCG@10 is ranx's ``optimize_fusion`` report (wsum over min-max;
    RRF's k), and the weights chosen are ranx's best."""
    fold2 = csfcube.splits()["method"]["fold2_test"]
    a, b = (_untied(r[r["qid"].isin(fold2)]) for r in (runs["bm25"], runs["tfidf"]))
    qrels = runs["qrels"][runs["qrels"]["qid"].isin(fold2)]
    rq = ranx.Qrels.from_dict({q: {d: int(x) for d, x in zip(g["docno"], g["label"])} for q, g in qrels.groupby("qid")})
    best, report = ranx.optimize_fusion(rq, [_ranx_run(a), _ranx_run(b)], norm="min-max", method="wsum",
                                        metric="ndcg@10", return_optimization_report=True, show_progress=False)
    t = tune([a, b], qrels, "wsum", "minmax", "nDCG@10", tuned_on="fold2", step=0.1)
    configs = get_trial_configs(get_possible_weights(0.1), 2)   # the order of ranx's report
    assert len(report.results) == len(configs)
    assert [w for w, _, _ in t.grid] == [tuple(float(x) for x in c) for c in configs] == weight_grid(2, 0.1)
    assert np.allclose([v for _, _, v in t.grid], report.results, atol=1e-9, rtol=0)
    assert t.weights == tuple(float(x) for x in best["weights"]) and set(t.qids) == set(fold2)
    best_k, report_k = ranx.optimize_fusion(rq, [_ranx_run(a), _ranx_run(b)], norm=None, method="rrf",
                                            metric="ndcg@10", return_optimization_report=True, show_progress=False)
    tk = tune([a, b], qrels, "rrf", None, "nDCG@10", tuned_on="fold2", step=0.5)
    equal = {k: v for w, k, v in tk.grid if w == (0.5, 0.5)}   # equal weights: ranx's (unweighted) RRF
    assert sorted(equal) == [float(c) for c in report_k.configs] == list(range(10, 101, 10))
    assert np.allclose([equal[float(c)] for c in report_k.configs], report_k.results, atol=1e-9, rtol=0)
    assert best_k["k"] in [k for w, k, v in tk.grid if w == (0.5, 0.5) and v == max(equal.values())]


def test_other_fold_tunes_each_fold_on_the_other_folds_queries(runs):
    pipe = ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="wsum", tune_on="other-fold")', dataset=DS)
    assert isinstance(pipe, FoldTunedFusion)
    splits = csfcube.splits()["method"]
    chosen = pipe.chosen()
    assert set(chosen) == {"fold1", "fold2"}
    for fold, other in (("fold1", "fold2"), ("fold2", "fold1")):
        c = chosen[fold]
        assert set(c["qids"]) == set(splits[f"{other}_test"])   # exactly the other fold's queries
        assert not set(c["qids"]) & set(splits[f"{fold}_test"])
        assert c["tuned_on"] == f"sci/csfcube/method/{other}-test" and c["measure"] == "NDCG%20"
        assert len(c["weights"]) == 2 and abs(sum(c["weights"]) - 1) < 1e-9
    # the recorded value is what the chosen weights score on the tuning queries, evaluated afresh, and no grid
    # point scores more
    topics, qrels = runs["topics"], runs["qrels"]
    tr_topics = topics[topics["qid"].isin(splits["fold2_test"])]
    tr_qrels = qrels[qrels["qid"].isin(splits["fold2_test"])]
    inputs = [ps.pipeline("pool >> bm25", dataset=DS), ps.pipeline("pool >> tfidf", dataset=DS)]
    tr_runs = [t(tr_topics) for t in inputs]
    m = ps.measures.get("NDCG%20", dataset=DS)
    tr_qrels = tr_qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})

    def score(w):
        res = fuse_scores(tr_runs, "wsum", "minmax", w).rename(columns={"qid": "query_id", "docno": "doc_id"})
        return ps.measures.calc_aggregate([m], tr_qrels, res)[m]
    assert score(chosen["fold1"]["weights"]) == pytest.approx(chosen["fold1"]["value"], abs=1e-12)
    assert max(score(w) for w in weight_grid(2, 0.1)) == pytest.approx(chosen["fold1"]["value"], abs=1e-12)
    # each query is fused with its fold's weights
    res = pipe(topics)
    f1 = topics[topics["qid"].isin(splits["fold1_test"])]
    alone = Fusion(*inputs, method="wsum", weights=chosen["fold1"]["weights"])(f1)
    got = res[res["qid"].isin(splits["fold1_test"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, alone.reset_index(drop=True), check_dtype=False)
    with pytest.raises(ValueError, match="in no test fold"):
        pipe(pd.DataFrame({"qid": ["nope"], "query": ["x"]}))
    cut = (pipe % 10).compile()
    assert isinstance(cut, FoldTunedFusion) and {t.num_results for t in cut.by_fold.values()} == {10}
    assert cut.chosen() == chosen


def test_the_manifest_records_the_chosen_weights(runs):
    pipe = ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="rrf", tune_on="other-fold", tune_step=0.5)',
                       dataset=DS)
    models = pipeline_manifest({"fused": pipe})["models"]
    tuned = {name: e for name, e in models.items() if e["kind"] == "tuned fusion weights"}
    assert len(tuned) == 2
    for fold, c in pipe.chosen().items():
        (entry,) = [e for name, e in tuned.items() if f"for sci/csfcube/method/{fold}-test" in name]
        assert f"weights {c['weights']}, k {c['k']:g}:" in entry["note"]
        assert all(q in entry["note"] for q in c["qids"])
        assert c["k"] in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)


def test_tuning_never_scores_its_own_queries(runs):
    splits = csfcube.splits()["method"]
    with pytest.raises(PipelineError, match="evaluated on"):
        ps.pipeline(f'fuse(pool >> bm25, pool >> tfidf, method="wsum", tune_on="{DS}")', dataset=DS)
    with pytest.raises(PipelineError, match="holds every query"):
        ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="wsum", tune_on="irds:sci/csfcube")',
                    dataset="irds:sci/csfcube/method/fold1-test")
    pipe = ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="wsum", tune_on="irds:sci/csfcube/method/fold1-test")',
                       dataset=DS)
    assert set(pipe.tuning.qids) == set(splits["fold1_test"]) and pipe.tuning.measure == "NDCG%20"
    with pytest.raises(ValueError, match="tuned its weights") as e:
        pipe(runs["topics"])
    assert sorted(splits["fold1_test"])[0] in str(e.value)
    res = pipe(runs["topics"][runs["topics"]["qid"].isin(splits["fold2_test"])])
    assert set(res["qid"]) == set(splits["fold2_test"])
    # from Python: training queries given as frames
    f1 = runs["topics"][runs["topics"]["qid"].isin(splits["fold1_test"])]
    f1_qrels = runs["qrels"][runs["qrels"]["qid"].isin(splits["fold1_test"])]
    inputs = [ps.pipeline("pool >> bm25", dataset=DS), ps.pipeline("pool >> tfidf", dataset=DS)]
    given = tuned_fusion(*inputs, method="combmnz", tune_on=(f1, f1_qrels), dataset=DS)
    assert isinstance(given, Fusion) and given.method == "combmnz" and given.tuning.measure == "NDCG%20"
    assert set(given.tuning.qids) == set(splits["fold1_test"]) and given.tuning.tuned_on == "the given topics"
    with pytest.raises(ValueError, match="tuned its weights"):
        given(f1.head(1))
    with pytest.raises(PipelineError, match="official test folds"):
        ps.pipeline('fuse(pool >> bm25, pool >> tfidf, method="wsum", tune_on="other-fold")',
                    dataset="irds:sci/doris-mae/birco-dev/test20")


@pytest.mark.parametrize("expr,match", [
    ('fuse(pool >> bm25, method="combsun")', "did you mean 'combsum'"),
    ('fuse(pool >> bm25, pool >> tfidf, method="combmax", weights=[1, 2])', "takes no weights"),
    ('fuse(pool >> bm25, pool >> tfidf, weights=[1])', "2 pipelines to fuse but 1 weights"),
    ('fuse(pool >> bm25, pool >> tfidf, weights=[0, 0])', "all 0"),
    ('fuse(pool >> bm25, pool >> tfidf, weights=[-1, 2])', "out of range"),
    ('fuse(pool >> bm25, pool >> tfidf, method="rrf", norm="minmax")', "rrf fuses ranks"),
    ('fuse(pool >> bm25, pool >> tfidf, method="wsum", k=20)', "RRF's constant"),
    ('fuse(pool >> bm25, pool >> tfidf, norm="l2")', "it takes one of"),
    ('fuse(pool >> bm25, pool >> tfidf, weights=[1, 2], tune_on="other-fold")', "either given or tuned"),
    ('fuse(pool >> bm25, pool >> tfidf, tune_k=[10])', "only with tune_on"),
    ('fuse(pool >> bm25, pool >> tfidf, tune_on="other-fold", tune_step=0.3)', "must divide 1"),
    ('fuse(pool >> bm25, pool >> tfidf, method="combmax", tune_on="other-fold")', "takes no weights"),
    ('fuse(pool >> bm25, pool >> tfidf, tune_on="irds:sci/csfcub")', "unknown dataset"),
    ('fuse(method="wsum")', "give the pipelines to fuse"),
    ('fuse(pool >> bm25, pool >> tfidf, tune_on="other-fold", tune_measure="NDCG%21")', "tune_measure: unknown"),
])
def test_bad_parameters_are_one_clear_error(expr, match):
    with pytest.raises(PipelineError, match=match) as e:
        ps.pipeline(expr, dataset=DS)
    assert str(e.value).startswith("component 'fuse'")


class _Fixed(pt.Transformer):
    def __init__(self, docs):
        self.docs = docs

    def transform(self, inp):
        rows = [(q, t, d, float(len(self.docs) - i)) for q, t in zip(inp["qid"], inp["query"])
                for i, d in enumerate(self.docs)]
        return pt.model.add_ranks(pd.DataFrame(rows, columns=["qid", "query", "docno", "score"]))


def test_cutoff_and_empty_input():
    f = Fusion(_Fixed(["a", "b", "c"]), _Fixed(["c", "d"]), method="combmnz")
    cut = (f % 2).compile()
    assert isinstance(cut, Fusion) and cut.num_results == 2
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["x", "y"]})
    assert cut(topics).groupby("qid").size().tolist() == [2, 2]
    assert cut(topics)["docno"].tolist()[:2] == f(topics)["docno"].tolist()[:2] == ["c", "a"]
    empty = f(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0 and list(empty.columns) == ["qid", "query", "docno", "score", "rank"]


class TestFusion(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return Fusion(_Fixed(["a", "b"]), _Fixed(["b"]), method="wsum", norm="zscore", weights=[0.4, 0.6])
