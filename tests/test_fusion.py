import conftest
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_sci.plugins.fusion import RRFusion, rrf_scores


class Fixed(pt.Transformer):
    def __init__(self, docs):
        self.docs = docs

    def transform(self, inp):
        rows = [(qid, q, d, float(len(self.docs) - i)) for qid, q in zip(inp["qid"], inp["query"])
                for i, d in enumerate(self.docs)]
        return pt.model.add_ranks(pd.DataFrame(rows, columns=["qid", "query", "docno", "score"]))


TOPICS = pd.DataFrame([["q1", "a", "x"], ["q2", "b", "y"]], columns=["qid", "query", "extra"])


def test_rrf_scores_by_hand_with_one_based_ranks():
    f = RRFusion(Fixed(["a", "b", "c"]), Fixed(["c", "a"]), k=60)
    res = f(TOPICS)
    q1 = res[res["qid"] == "q1"].set_index("docno")["score"]
    assert q1["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert q1["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert q1["b"] == pytest.approx(1 / 62)
    assert list(res[res["qid"] == "q1"].sort_values("rank")["docno"]) == ["a", "c", "b"]
    assert list(res[res["qid"] == "q1"]["rank"]) == [0, 1, 2]
    assert set(res["extra"]) == {"x", "y"}


def test_rank_base_zero_matches_pyterrier_alpha():
    import pyterrier_alpha as pta
    a, b = Fixed(["a", "b", "c"]), Fixed(["c", "a"])
    ours = RRFusion(a, b, k=60, rank_base=0)(TOPICS[["qid", "query"]]).set_index(["qid", "docno"])["score"]
    theirs = pta.RRFusion(a, b, k=60)(TOPICS[["qid", "query"]]).set_index(["qid", "docno"])["score"]
    pd.testing.assert_series_equal(ours.sort_index(), theirs.sort_index(), check_names=False)


def test_weights_cutoff_empty():
    res = RRFusion(Fixed(["a", "b"]), Fixed(["b", "a"]), weights=[2.0, 1.0])(TOPICS)
    assert res[res["qid"] == "q1"].sort_values("rank")["docno"].iloc[0] == "a"
    cut = (RRFusion(Fixed(["a", "b", "c"]), Fixed(["c"])) % 2).compile()
    assert isinstance(cut, RRFusion) and cut.num_results == 2 and len(cut(TOPICS)) == 4
    empty = RRFusion(Fixed(["a"]))(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0 and list(empty.columns) == ["qid", "query", "docno", "score", "rank"]
    with pytest.raises(ValueError):
        RRFusion(Fixed(["a"]), weights=[1.0, 2.0])
    assert len(rrf_scores([])) == 0


class TestRRFusion(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return RRFusion(Fixed(["a", "b"]), Fixed(["b"]))


def test_the_factory_lives_in_components_and_keeps_its_old_path():
    from pyterrier_sci.plugins import fusion
    from pyterrier_sci.plugins.fusion import components, rrf

    assert rrf.rrf_component is components.rrf_component is fusion.rrf_component
    with pytest.raises(AttributeError, match="fusion.rrf' has no attribute 'nothing'"):
        rrf.nothing  # noqa: B018


def test_long_query_texts_are_kept_by_reference_and_the_fused_frame_is_unchanged():
    """PRISM fuses four rankings of 949 full-paper queries, each row carrying its paper's fields: in
    pandas' Arrow-backed ``str`` dtype every text was copied once per result (3.1 GB in one block).
    The fused frame holds the same values as a merge of the query frame with the fused scores (the
    earlier code), and its text column's rows are the query's own string objects."""
    import numpy as np

    from pyterrier_sci.corpus import repeat_rows
    texts = pd.Series([f"{'word ' * 5000}{i}" for i in range(3)], dtype="str")
    topics = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["a", "b", "c"], "fulltext": texts})
    assert isinstance(topics["fulltext"].dtype, pd.StringDtype)

    class Many(pt.Transformer):
        def __init__(self, shift):
            self.shift = shift

        def transform(self, inp):
            out = repeat_rows(inp, 40)
            out["docno"] = [f"d{(i + self.shift) % 40}" for i in range(len(out))]
            out["score"] = np.tile(np.arange(40, 0, -1), len(inp)).astype(float)
            return pt.model.add_ranks(out)

    a, b = Many(0), Many(7)
    got = RRFusion(a, b, k=60, num_results=25)(topics)
    fused = rrf_scores([a(topics), b(topics)], 60, None, 1)
    want = topics.merge(fused, on="qid").sort_values(["qid", "score", "docno"], ascending=[True, False, True],
                                                     kind="stable").reset_index(drop=True)
    want["rank"] = want.groupby("qid").cumcount()
    want = want[want["rank"] < 25].reset_index(drop=True)
    assert len(got) == 75
    for c in ("qid", "query", "fulltext", "docno", "score", "rank"):
        assert got[c].tolist() == want[c].tolist(), c
    rows = got[got["qid"] == "q2"]["fulltext"].tolist()
    assert all(r is rows[0] for r in rows)            # one string, referred to 25 times
    assert got["fulltext"].dtype == object
