"""HLM-Cite's rule-based baseline, ``hlm_keyword_overlap`` (§4.1 "Keywords overlap"): a candidate's score is the
number of distinct keywords it shares with the query paper."""
import pandas as pd
import pytest

import pyterrier_sci as ps
from pyterrier_sci.plugins.hlm_cite.keywords import KeywordOverlap, keywords


def test_keywords_are_lower_cased_words_of_three_letters_without_stop_words():
    assert keywords("The Transformer-XL model, and the BERT model: an LM of 2019") == \
        {"transformer-xl", "model", "bert"}
    assert keywords("") == frozenset()


def test_scores_count_shared_keywords_and_rank_within_each_query():
    inp = pd.DataFrame({
        "qid": ["q1"] * 3 + ["q2"] * 2,
        "query": ["sparse attention for long documents"] * 3 + ["graph neural networks"] * 2,
        "docno": ["a", "b", "c", "a", "d"],
        "title": ["Long documents", "Sparse attention", "Images", "Long documents", "Neural networks on graphs"],
        "abstract": ["with sparse attention", "", "convolution", "with sparse attention", "graph networks"],
    })
    out = KeywordOverlap()(inp)
    got = {(q, d): (s, r) for q, d, s, r in zip(out.qid, out.docno, out.score, out["rank"])}
    # q1 keywords: sparse, attention, long, documents; q2: graph, neural, networks
    assert got[("q1", "a")] == (4.0, 0) and got[("q1", "b")] == (2.0, 1) and got[("q1", "c")] == (0.0, 2)
    assert got[("q2", "d")] == (3.0, 0) and got[("q2", "a")] == (0.0, 1)
    assert list(out.columns[:3]) == ["qid", "query", "docno"]


def test_ties_keep_the_input_order_and_missing_text_is_one_error():
    inp = pd.DataFrame({"qid": ["q"] * 3, "query": ["alpha beta"] * 3, "docno": ["z", "y", "x"],
                        "title": ["alpha", "beta", "gamma"], "abstract": ["", None, ""]})
    out = KeywordOverlap()(inp).sort_values("rank")
    assert list(out.docno) == ["z", "y", "x"]
    with pytest.raises(ValueError, match=r"hlm_keyword_overlap needs the columns abstract .*pool >> text"):
        KeywordOverlap()(inp.drop(columns="abstract"))


def test_the_component_is_registered_with_its_parameters():
    t = ps.pipeline('hlm_keyword_overlap(fields=["title"])')
    assert isinstance(t, KeywordOverlap) and t.fields == ["title"]
    with pytest.raises(Exception, match="fields"):
        ps.pipeline("hlm_keyword_overlap(fields=3)")
