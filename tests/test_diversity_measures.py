"""The embedding diversity measures (pyterrier_sci/diversity.py, plugins/prism/diversity.py): PRISM's Table 8
dispersion measures and ILS, against direct numpy computations, pyterrier_dr's ILS over a FlexIndex its own encoder
built, and volumes known in closed form; by name in ps.Experiment and on the command line, with the encoder as a
setting and the document vectors kept per docno in the work directory."""
import itertools
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci import diversity as D
from pyterrier_sci import measures as M


def _rotation(dim: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return q


# ---------------------------------------------------------------- the functions, on numbers known without them


def test_cosine_and_centroid_distance_equal_a_direct_computation():
    x = np.random.default_rng(0).normal(size=(37, 16)) * np.linspace(0.5, 3.0, 37)[:, None]   # unnormalised rows
    pairs = [np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b) for a, b in itertools.combinations(x, 2)]
    assert len(pairs) == 37 * 36 // 2
    assert D.ils(x) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert D.cosine_distance(x) == pytest.approx(1.0 - np.mean(pairs), abs=1e-12)
    centre = x.sum(axis=0) / len(x)
    assert D.centroid_distance(x) == pytest.approx(np.mean([math.sqrt(sum((v - centre) ** 2)) for v in x]), abs=1e-12)
    # orthogonal unit vectors: no similarity, each sqrt(1 - 1/n) from the centroid
    e = np.eye(5)
    assert D.cosine_distance(e) == pytest.approx(1.0) and D.ils(e) == pytest.approx(0.0)
    assert D.centroid_distance(e) == pytest.approx(math.sqrt(1 - 1 / 5))
    # one document: no pair (pyterrier_dr's ILS says 0; PRISM's measures leave the query out)
    assert D.ils(x[:1]) == 0.0 and math.isnan(D.cosine_distance(x[:1])) and math.isnan(D.centroid_distance(x[:1]))


def test_convex_hull_volume_of_shapes_rotated_into_many_dimensions():
    rot, shift = _rotation(384, 1), np.random.default_rng(2).normal(size=384)
    cube = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))          # side 2: volume 8
    inside = np.random.default_rng(3).uniform(-1, 1, size=(40, 3))           # points inside change nothing
    pts = np.vstack([cube, inside])
    lifted = np.hstack([pts, np.zeros((len(pts), 381))]) @ rot.T + shift
    assert D.convex_hull_volume(lifted) == pytest.approx(8.0, rel=1e-9)
    box = np.hstack([cube * [3.0, 1.0, 0.5], np.zeros((8, 381))]) @ rot.T     # 6 x 2 x 1 box
    assert D.convex_hull_volume(box) == pytest.approx(12.0, rel=1e-9)
    # the projection keeps the three widest directions: a small fourth one is dropped
    flat4 = np.hstack([np.array(list(itertools.product([-1.0, 1.0], repeat=4))) * [2, 2, 2, 0.1],
                       np.zeros((16, 380))]) @ rot.T
    assert D.convex_hull_volume(flat4) == pytest.approx(64.0, rel=1e-9)
    plane = np.hstack([np.random.default_rng(4).normal(size=(20, 2)), np.zeros((20, 382))]) @ rot.T
    assert D.convex_hull_volume(plane) == 0.0 and D.convex_hull_volume(lifted[:3]) == 0.0
    assert math.isnan(D.convex_hull_volume(lifted[:1]))


def test_ils_equals_pyterrier_dr_on_the_same_vectors(tmp_path):
    import ir_measures
    import pyterrier_dr
    rng = np.random.default_rng(5)
    docnos = [f"d{i}" for i in range(30)]
    vecs = rng.normal(size=(30, 8)).astype(np.float32)
    index = pyterrier_dr.FlexIndex(str(tmp_path / "vecs.flex"))
    index.indexer().index([{"docno": d, "doc_vec": v} for d, v in zip(docnos, vecs)])
    run = pd.DataFrame([(f"q{q}", d, float(rng.random())) for q in range(4) for d in rng.choice(docnos, 12, False)],
                       columns=["query_id", "doc_id", "score"])
    qrels = pd.DataFrame({"query_id": [f"q{q}" for q in range(4)], "doc_id": "d0", "relevance": 1})
    for k in (2, 5, 10):
        theirs = {m.query_id: m.value for m in ir_measures.iter_calc([pyterrier_dr.ILS(index) @ k], qrels, run)}
        by_vectors = D.EmbeddingMeasure("ILS", D.ils, k=k, vectors=dict(zip(docnos, vecs))).values(qrels, run)
        by_index = M.get(f"ILS(index='{tmp_path / 'vecs.flex'}')@{k}").values(qrels, run)
        assert set(theirs) == set(by_vectors) == set(by_index) == {"q0", "q1", "q2", "q3"}
        for q in theirs:
            assert by_vectors[q] == pytest.approx(theirs[q], abs=1e-6)
            assert by_index[q] == pytest.approx(theirs[q], abs=1e-6)
            top = run[run.query_id == q].sort_values("score", ascending=False).doc_id[:k]
            direct = np.stack([vecs[docnos.index(d)] for d in top]).astype(np.float64)
            assert 1.0 - theirs[q] == pytest.approx(D.cosine_distance(direct), abs=1e-6)


def test_names_take_the_cutoff_and_settings():
    assert str(M.get("prism.CosineDistance@200")) == "prism.CosineDistance@200"
    assert str(M.get("prism.CosineDistance")) == "prism.CosineDistance@200"           # Table 8's cutoff
    m = M.get("prism.ConvexHullVolume(encoder=/models/specter2, fields=title+abstract)@50")
    assert (m.k, m.encoder, m.fields) == (50, "/models/specter2", ("title", "abstract"))
    assert str(m) == "prism.ConvexHullVolume(encoder='/models/specter2',fields='title+abstract')@50"
    assert M.get(str(m)).NAME == m.NAME                                               # the canonical name parses
    assert str(M.get('ILS(encoder="default")@10')) == "ILS@10" and M.get("ILS").k is None
    assert M.get("ILS@3", dataset="irds:sci/csfcube").dataset == "sci/csfcube"
    assert M.get("ILS@3").dataset is None
    for bad, why in [("prism.CosineDistance(model=x)@10", "unknown setting 'model'"),
                     ("ILS(encoder=)@10", "is empty"), ("ILS(encoder=a,encoder=b)@10", "given twice")]:
        with pytest.raises(ValueError, match=re.escape(why)):
            M.get(bad)
    with pytest.raises(ValueError, match="needs the dataset"):
        M.get("ILS@2").values(pd.DataFrame(columns=["query_id", "doc_id", "relevance"]),
                              pd.DataFrame({"query_id": ["q"] * 2, "doc_id": ["a", "b"], "score": [2.0, 1.0]}))
    assert {"ILS@10", "prism.CosineDistance@200", "prism.CentroidDistance@200",
            "prism.ConvexHullVolume@200"} <= set(M.names())


# ---------------------------------------------------------------- with the offline encoder, on CSFCube


@pytest.fixture(scope="module")
def csfcube_run():
    """Three CSFCube method queries, the first 12 candidates of each pool in a seeded order (about 36 abstracts)."""
    import pyterrier as pt
    ds = pt.get_dataset("irds:sci/csfcube/method")
    pool = ds.get_results()
    qids = sorted(pool.qid.unique())[:3]
    rng = np.random.default_rng(7)
    run = pool[pool.qid.isin(qids)].groupby("qid").head(12).copy()
    run["score"] = rng.permutation(len(run)).astype(float)
    return ds, run.reset_index(drop=True)


@needs_data("csfcube")
def test_by_name_in_experiments_and_on_the_command_line(csfcube_run, tmp_path, monkeypatch, capsys):
    """ps.Experiment's figures equal numpy over the vectors sentence-transformers gives for the same texts; ILS equals
    pyterrier_dr's ILS over a FlexIndex that pyterrier_dr's own encoder built; the vectors are kept per docno in the
    work directory and read back by a new process's store; the command line gives the same figures."""
    import ir_measures
    import pyterrier_dr

    from pyterrier_sci import cli
    from pyterrier_sci.corpus import doc_texts
    from pyterrier_sci.models import load_sentence_transformer, resolve_model
    ds, run = csfcube_run
    topics = ds.get_topics()[lambda t: t.qid.isin(run.qid)]
    names = ["prism.CosineDistance@10", "prism.CentroidDistance@10", "prism.ConvexHullVolume@10", "ILS@10"]
    res = ps.Experiment([run], topics, ds.get_qrels(), names, names=["run"], dataset="irds:sci/csfcube/method",
                        perquery=True)
    got = {(r.qid, r.measure): r.value for r in res.itertuples()}

    docnos = sorted(set(run.docno))
    st = load_sentence_transformer("default")
    vec = dict(zip(docnos, st.encode(doc_texts("sci/csfcube", docnos), convert_to_numpy=True)))
    for q, g in run.groupby("qid"):
        x = np.stack([vec[d] for d in g.sort_values("score", ascending=False).docno[:10]]).astype(np.float64)
        assert got[(q, "prism.CosineDistance@10")] == pytest.approx(D.cosine_distance(x), abs=1e-5)
        assert got[(q, "prism.CentroidDistance@10")] == pytest.approx(D.centroid_distance(x), abs=1e-5)
        assert got[(q, "prism.ConvexHullVolume@10")] == pytest.approx(D.convex_hull_volume(x), rel=1e-3)
        assert 0.05 < got[(q, "prism.CosineDistance@10")] < 1.0 and got[(q, "prism.ConvexHullVolume@10")] > 0

    # pyterrier_dr end to end: its encoder indexes the texts, its ILS reads the index
    index = pyterrier_dr.FlexIndex(str(tmp_path / "minilm.flex"))
    encoder = pyterrier_dr.SBertBiEncoder(resolve_model("default"), device="cpu")
    (encoder >> index.indexer()).index([{"docno": d, "text": t} for d, t in zip(docnos, doc_texts("sci/csfcube",
                                                                                                    docnos))])
    theirs = {m.query_id: m.value for m in ir_measures.iter_calc(
        [pyterrier_dr.ILS(index) @ 10], ds.get_qrels().rename(columns={"qid": "query_id", "docno": "doc_id",
                                                                      "label": "relevance"}),
        run.rename(columns={"qid": "query_id", "docno": "doc_id"}))}
    assert all(got[(q, "ILS@10")] == pytest.approx(theirs[q], abs=1e-5) for q in set(run.qid))

    # the vectors were kept: a fresh store reads them back and loads no model
    store = D.DocumentEmbeddings.of("sci/csfcube/method")
    top10 = set(run.sort_values("score", ascending=False).groupby("qid").head(10).docno)
    assert len(top10) < len(docnos) and store.path.is_file() and set(np.load(store.path)["docnos"]) == top10
    monkeypatch.setattr(D, "_STORES", {})
    monkeypatch.setattr(D, "load_sentence_transformer", lambda *a, **k: pytest.fail("embedded again"))
    again = M.get("prism.CosineDistance@10", dataset="sci/csfcube").per_query(ds.get_qrels(), run)
    assert again == {q: pytest.approx(got[(q, "prism.CosineDistance@10")], abs=1e-7) for q in again}

    path = tmp_path / "run.res"
    pd.DataFrame({"qid": run.qid, "Q0": "Q0", "docno": run.docno, "rank": 0, "score": run.score, "tag": "t"}).to_csv(
        path, sep=" ", header=False, index=False)
    assert cli.main(["evaluate", str(path), "--dataset", "irds:sci/csfcube/method", "--measures",
                     "prism.CosineDistance@10,ILS@10", "--perquery", "--json"]) == 0
    rows = {(r["qid"], r["measure"]): r["value"] for r in json.loads(capsys.readouterr().out)}
    assert {k: v for k, v in rows.items() if k[0] in set(run.qid)} == {
        k: pytest.approx(v, abs=1e-7) for k, v in got.items() if k[1] in ("prism.CosineDistance@10", "ILS@10")}
    # the other method queries have no document in this run: no dispersion (left out), ILS 0 as pyterrier_dr says
    others = {k: v for k, v in rows.items() if k[0] not in set(run.qid)}
    assert len(others) == 2 * 14 and all(v is None if m.startswith("prism.") else v == 0.0
                                         for (_, m), v in others.items())
