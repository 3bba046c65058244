"""The ``tfidf`` component (plugins/bm25/tfidf.py): TF-IDF cosine re-ranking with the IDF fitted on each query's
candidates, as DORIS-MAE's authors computed it, checked against scikit-learn called directly on the same texts."""
import json
import pickle

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import DATA, needs_data
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import cosine_similarity

import pyterrier_sci as ps
from pyterrier_sci.plugins.bm25 import TfidfScorer, clean_text, tfidf_component
from pyterrier_sci.registry import Context

DS = "irds:sci/doris-mae/birco-dev"
offline = needs_data("doris-mae", "birco_dev", "qrels.tsv")


def reference(query, texts, **settings):
    """The authors' ``all_ranking_tfidf`` (paragraph mode): TfidfVectorizer fitted on the pool, cosine_similarity."""
    vec = TfidfVectorizer(**settings)
    docs = vec.fit_transform(texts)
    return cosine_similarity(vec.transform([query]), docs)[0]


def frame(query, texts, qid="q1"):
    return pd.DataFrame({"qid": qid, "query": query, "docno": [f"d{i}" for i in range(len(texts))], "text": texts,
                         "score": 0.0, "rank": range(len(texts))})


TEXTS = ["Graph neural networks predict molecular toxicity.",
         "Convolutional networks segment images of cells.",
         "We study toxicity of molecules with graph kernels and neural models.",
         "A survey of reinforcement learning in robotics."]
QUERY = "graph neural networks for molecular toxicity prediction"


# ------------------------------------------------------------------------------------------------ against sklearn

@offline
def test_scores_equal_sklearn_on_every_birco_dev_pool():
    """Each of the 40 real pools (texts read from the raw files, not through the toolkit): the scores are the
    authors' computation and the order is theirs (by score, descending)."""
    base = DATA / "doris-mae" / "birco_dev"
    corpus = {}
    for line in (base / "corpus.jsonl").open(encoding="utf-8"):
        d = json.loads(line)
        corpus[d["cid"].removeprefix("c_")] = d["text"]
    queries = {}
    for line in (base / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[q["qid"].removeprefix("q_")] = q["text"]
    pools = pd.read_csv(base / "qrels.tsv", sep="\t", dtype=str)
    topics = pt.get_dataset(DS).get_topics()
    res = ps.pipeline("pool >> tfidf", dataset=DS)(topics)
    assert set(res["qid"]) == set(queries) and len(res) == len(pools)
    for qid, pool in pools.groupby("qid"):
        qid = qid.removeprefix("q_")
        docnos = [c.removeprefix("c_") for c in pool["cid"]]
        query = topics.loc[topics["qid"] == qid, "query"].iat[0]
        assert query.split() == queries[qid].split()   # the same words (the dataset joins sentences with line breaks)
        want = reference(query, [corpus[d] for d in docnos])
        got = res[res["qid"] == qid]
        assert got["rank"].tolist() == list(range(len(docnos)))
        np.testing.assert_allclose(got.set_index("docno").loc[docnos, "score"].to_numpy(), want, rtol=0, atol=1e-12)
        order = [docnos[i] for i in np.argsort(-want, kind="stable")]
        assert got["docno"].tolist() == order, qid
        assert want.max() > 0.1   # a real pool shares terms with its query: the comparison is not of zeros


def test_scores_equal_sklearn_for_each_setting():
    query = QUERY + " graph graph"   # a repeated term: sublinear tf changes the query's vector
    for settings in ({}, {"sublinear_tf": True}, {"stop_words": "english"}, {"lowercase": False}):
        got = TfidfScorer(**settings)(frame(query, TEXTS))
        want = reference(query, TEXTS, **settings)
        np.testing.assert_allclose(got.set_index("docno").loc[[f"d{i}" for i in range(4)], "score"], want, atol=1e-12)
    # each setting changes the scores of this frame, so the comparisons above tell the settings apart
    assert not np.allclose(reference(QUERY, TEXTS), reference(QUERY, TEXTS, stop_words="english"))
    assert not np.allclose(reference(query, TEXTS), reference(query, TEXTS, sublinear_tf=True))
    assert reference("GRAPH", TEXTS, lowercase=False).max() == 0 < reference("GRAPH", TEXTS).max()


def test_the_idf_is_fitted_on_the_query_candidates_not_fixed():
    """The same query and document score differently beside other candidates (the authors fit per pool)."""
    alone = TfidfScorer()(frame(QUERY, TEXTS[:2]))
    more = TfidfScorer()(frame(QUERY, TEXTS))
    s_alone = alone.set_index("docno").at["d0", "score"]
    s_more = more.set_index("docno").at["d0", "score"]
    assert s_alone != pytest.approx(s_more)
    assert s_alone == pytest.approx(reference(QUERY, TEXTS[:2])[0])
    # two queries in one frame: each fitted on its own rows only
    both = TfidfScorer()(pd.concat([frame(QUERY, TEXTS[:2], "a"), frame(QUERY, TEXTS, "b")], ignore_index=True))
    assert both.set_index(["qid", "docno"]).at[("a", "d0"), "score"] == pytest.approx(s_alone)
    assert both.set_index(["qid", "docno"]).at[("b", "d0"), "score"] == pytest.approx(s_more)


# ------------------------------------------------------------------------------------------------ ranking

def test_ranking_order_and_columns():
    inp = frame(QUERY, TEXTS).assign(extra=list("wxyz"))
    out = TfidfScorer()(inp)
    assert out["docno"].tolist()[:2] == ["d0", "d2"] and set(out["docno"].tolist()[2:]) == {"d1", "d3"}
    assert out["rank"].tolist() == [0, 1, 2, 3]
    assert out["score"].is_monotonic_decreasing and out["score"].between(0, 1 + 1e-12).all()
    assert out.set_index("docno").at["d3", "score"] == 0   # no common term
    assert set(out.columns) == {"qid", "query", "docno", "text", "score", "rank", "extra"}
    assert out.set_index("docno").loc["d2", "extra"] == "y"   # input columns travel with their rows
    assert out["rank"].dtype.kind == "i"


def test_ties_keep_the_input_order():
    texts = ["nothing in common", "graph networks", "unrelated words", "graph networks"]
    out = TfidfScorer()(frame("graph networks", texts))
    assert out["docno"].tolist() == ["d1", "d3", "d0", "d2"]


def test_clean_removes_urls_and_dollars_from_documents_only():
    assert clean_text("see https://github.com/x/y and $x^2$\nnext") == "see  and x^2 next"
    texts = ["code at https://github.com/lab/tool", "a graph model"]
    assert TfidfScorer()(frame("github", texts))["score"].max() == 0
    assert TfidfScorer(clean=False)(frame("github", texts)).set_index("docno").at["d0", "score"] > 0
    # the query is not cleaned (as in the authors' code): its URL terms still match uncleaned documents
    assert TfidfScorer(clean=False)(frame("https://github.com", texts))["score"].max() > 0


# ------------------------------------------------------------------------------------------------ bad input

def test_empty_input_gives_an_empty_frame_with_score_and_rank():
    empty = frame(QUERY, TEXTS).iloc[:0]
    out = TfidfScorer()(empty)
    assert len(out) == 0 and {"score", "rank"} <= set(out.columns)
    out = TfidfScorer()(pd.DataFrame(columns=["qid", "query", "docno"]))   # no text column: still nothing to read
    assert len(out) == 0 and {"score", "rank"} <= set(out.columns)


def test_unknown_query_terms_empty_texts_and_empty_pools_score_zero():
    out = TfidfScorer()(frame("zzyzx quux", TEXTS))
    assert (out["score"] == 0).all() and out["docno"].tolist() == ["d0", "d1", "d2", "d3"]
    out = TfidfScorer()(frame("", TEXTS))
    assert (out["score"] == 0).all()
    texts = ["", None, np.nan, "graph networks"]
    out = TfidfScorer()(frame("graph", texts))
    assert out["docno"].tolist() == ["d3", "d0", "d1", "d2"] and out["score"].tolist()[1:] == [0, 0, 0]
    for pool in (["", "", ""], ["a", "b b", "!"], ["the of", "and", "is"]):   # no term at all (the last: stop words)
        out = TfidfScorer(stop_words="english")(frame("graph", pool))
        assert (out["score"] == 0).all() and out["rank"].tolist() == [0, 1, 2]
    out = TfidfScorer()(frame("graph", ["graph"]))   # a pool of one
    assert out["score"].tolist() == [pytest.approx(1.0)]


def test_a_missing_text_column_is_one_error_naming_it():
    inp = frame(QUERY, TEXTS).drop(columns="text")
    with pytest.raises(ValueError, match="tfidf needs a 'text' column"):
        TfidfScorer()(inp)
    with pytest.raises(ValueError, match="tfidf needs a 'abstract' column"):
        TfidfScorer(text_field="abstract")(frame(QUERY, TEXTS))
    with pytest.raises(pt.validate.InputValidationError, match="query"):
        TfidfScorer()(frame(QUERY, TEXTS).drop(columns="query"))


@offline
def test_an_unknown_docno_is_named():
    inp = pd.DataFrame({"qid": ["0"], "query": ["x"], "docno": ["no-such-abstract"]})
    with pytest.raises(KeyError, match="no-such-abstract"):
        TfidfScorer(dataset=DS)(inp)


# ------------------------------------------------------------------------------------------------ the component

@offline
def test_the_component_reads_texts_from_the_pipeline_dataset():
    pipe = ps.pipeline("pool >> tfidf", dataset=DS)
    scorer = pipe[1]
    assert isinstance(scorer, TfidfScorer) and scorer.dataset == DS
    topics = pt.get_dataset(DS).get_topics().head(2)
    with_text = ps.pipeline("pool >> text(fields='abstract')", dataset=DS)(topics).rename(columns={"abstract": "text"})
    pd.testing.assert_frame_equal(pipe(topics)[["qid", "docno", "score", "rank"]],
                                  TfidfScorer()(with_text)[["qid", "docno", "score", "rank"]])
    assert tfidf_component(context=Context(dataset=DS), fields=["abstract"]) == TfidfScorer(DS, fields=["abstract"])


def test_parameters_are_declared_and_checked():
    with pytest.raises(ps.PipelineError, match="stop_words"):
        ps.pipeline("tfidf(stop_words='french')")
    with pytest.raises(ps.PipelineError, match="sublinear_tf"):
        ps.pipeline("tfidf(sublinear_tf='yes')")
    with pytest.raises(ps.PipelineError, match="nope"):
        ps.pipeline("tfidf(nope=1)")
    assert ps.pipeline("tfidf(stop_words='english', clean=False)") == TfidfScorer(stop_words="english", clean=False)


@offline
def test_unknown_fields_are_refused_when_built():
    with pytest.raises(ps.PipelineError, match="not a field"):
        ps.pipeline("tfidf(fields=['abstrct'])", dataset=DS)


def test_equality_hash_and_pickle():
    a, b = TfidfScorer(DS, sublinear_tf=True), TfidfScorer(DS, sublinear_tf=True)
    assert a == b and hash(a) == hash(b) and a != TfidfScorer(DS)
    c = pickle.loads(pickle.dumps(a))
    assert c == a
    pd.testing.assert_frame_equal(c(frame(QUERY, TEXTS)), a(frame(QUERY, TEXTS)))


class TestTfidfTransformer(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return TfidfScorer()
