import pickle

import conftest
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.plugins.bm25 import BM25, bm25_component
from pyterrier_sci.registry import Context

NASTY = [
    (
        "latex",
        r"We bound $\|\nabla f(x)\|_2^{2} \leq \frac{L}{2}$ via \begin{equation} \sum_{i=1}^{n} \alpha_i \end{equation} lemma",  # noqa: E501
    ),
    ("unicode", "Étude des modèles de Markov cachés – Ωμέγα, 中文分词, emoji 😀, zero\u200bwidth, NUL\x00char"),
    ("punct", "!!! ??? ((( ))) [[[ ]]] {{{ }}} *** ::: ;;; ,,, ... --- ___ +++ === ||| &&& ^^^ ~~~ \\\\ // \"\" ''"),
    ("syntax", 'title:"x"~3 AND [a TO z] dual* /re/ OR NOT (semantic parsing)^2'),
    ("empty", "   "),
]


@pytest.fixture(scope="module")
def bm25(csfcube):
    return bm25_component(context=Context(dataset="irds:sci/csfcube"))


def test_retrieves_query_paper_first(bm25, csfcube):
    topics = csfcube.get_topics()
    res = bm25(topics)
    assert set(res.columns) >= {"qid", "query", "docno", "score", "rank"}
    from pyterrier_sci.datasets.csfcube import query_paper_id

    top = res[res["rank"] == 0].set_index("qid")["docno"]
    # the query paper is in the corpus: its own title+abstract must come first
    assert sum(top[q] == query_paper_id(q) for q in top.index) == len(topics)
    # ranks are 0-based and follow the scores
    for _, g in res.groupby("qid"):
        assert list(g["rank"]) == list(range(len(g)))
        assert g["score"].is_monotonic_decreasing


def test_rescoring_scores_exactly_the_pool(bm25, csfcube):
    from pyterrier_sci.corpus import PoolRetriever

    topics = csfcube.get_topics().head(5)
    pool = PoolRetriever("irds:sci/csfcube")(topics)
    res = bm25(pool.assign(extra="kept"))
    assert len(res) == len(pool)
    assert set(zip(res["qid"], res["docno"])) == set(zip(pool["qid"], pool["docno"]))
    assert (res["extra"] == "kept").all() and res["qid"].dtype == pool["qid"].dtype
    # scores equal those of plain retrieval for the same pairs
    full = BM25(bm25.index, num_results=len(bm25.index))(topics).set_index(["qid", "docno"])["score"]
    scored = res[res["score"] > 0].set_index(["qid", "docno"])["score"]
    assert len(scored) > 0.9 * len(res)
    pd.testing.assert_series_equal(scored.sort_index(), full.loc[scored.index].sort_index(), check_dtype=False)
    for _, g in res.groupby("qid"):
        assert g["score"].is_monotonic_decreasing and list(g["rank"]) == list(range(len(g)))


def test_nasty_queries_do_not_break_pisa(bm25, csfcube):
    abstract = csfcube.get_topics()["query"].iloc[0]
    long_query = " ".join(csfcube.get_topics()["query"])  # ~2,000 distinct terms
    queries = pd.DataFrame(
        [(k, q) for k, q in NASTY] + [("abstract", abstract), ("long", long_query)], columns=["qid", "query"]
    )
    res = bm25(queries)
    counts = res.groupby("qid").size()
    assert counts.get("empty", 0) == 0
    assert counts["abstract"] == 1000 and counts["long"] == 1000
    assert counts["latex"] > 0 and counts["unicode"] > 0
    # the caller's query text comes back unchanged
    assert set(res.loc[res["qid"] == "unicode", "query"]) == {NASTY[1][1]}


def test_empty_input_and_cutoff_and_equality(bm25):
    empty = bm25(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0 and {"docno", "score", "rank"} <= set(empty.columns)
    fused = (bm25 % 5).compile()
    assert isinstance(fused, BM25) and fused.num_results == 5
    again = BM25(bm25.index)
    assert again == bm25 and hash(again) == hash(bm25)
    assert BM25(bm25.index, k1=1.2) != bm25
    res = (bm25 % 5)(pd.DataFrame([["q", "semantic parsing"]], columns=["qid", "query"]))
    assert len(res) == 5


def test_index_is_an_artifact_and_pickles(bm25):
    loaded = pt.Artifact.load(str(bm25.index.path))
    assert type(loaded).__name__ == "PisaIndex" and len(loaded) == 4205
    q = pd.DataFrame([["q", "citation intent classification"]], columns=["qid", "query"])
    pd.testing.assert_frame_equal(BM25(str(bm25.index.path))(q), bm25(q))
    clone = pickle.loads(pickle.dumps(bm25))
    pd.testing.assert_frame_equal(clone(q), bm25(q))


def test_interrupted_build_leaves_no_index(tmp_path):
    target = tmp_path / "idx"

    def failing(tmp):
        tmp.mkdir()
        (tmp / "half-written").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_atomically(target, failing)
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_pipeline_language_builds_bm25(csfcube):
    p = ps.pipeline("pool >> bm25(k1=1.2, b=0.75)", dataset="irds:sci/csfcube/method")
    res = p(pt.get_dataset("irds:sci/csfcube/method").get_topics())
    assert res["qid"].nunique() == 17
    with pytest.raises(ps.PipelineError, match="unknown BM25 backend 'terrier'"):
        ps.pipeline("bm25(backend='terrier')", dataset="irds:sci/csfcube")
    with pytest.raises(ps.PipelineError, match="bm25 needs an index path or a dataset"):
        ps.pipeline("bm25")


class TestBM25Transformer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        from conftest import DATA

        import pyterrier_sci  # noqa: F401

        if not (DATA / "csfcube").exists():
            pytest.skip("no CSFCube data")
        return bm25_component(context=Context(dataset="irds:sci/csfcube"))


def test_the_factory_lives_in_components_and_keeps_its_old_path():
    from pyterrier_sci.plugins.bm25 import components, retriever

    assert retriever.bm25_component is components.bm25_component is bm25_component
    with pytest.raises(AttributeError, match="bm25.retriever' has no attribute 'nothing'"):
        retriever.nothing  # noqa: B018
