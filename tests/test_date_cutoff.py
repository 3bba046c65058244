"""Dates of papers and the date cutoff (docs/dates.md; issue 35, item 4): ISO dates of reduced precision,
the dates the datasets carry, DateCutoff / ``date_cutoff`` (filter, checks at build time, pushdown into the
dense retriever equal to the post-filter of an exhaustive search), MIR's chronological check, HLM-Cite's
pipelines, and no query answered with a later paper on the real hep-th and ACL data."""
import datetime

import ir_datasets
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci.dates import (
    DateCutoff,
    QueryDates,
    acl_anthology_date,
    arxiv_header_date,
    arxiv_id_date,
    document_dates,
    has_document_dates,
    later_training_query,
    optional_date,
    parse_date,
    query_dates,
)
from pyterrier_sci.errors import ParameterError, PipelineError, SciError
from pyterrier_sci.irds import FnDocs, FnQueries, register

D = datetime.date


# ---------------------------------------------------------------------------------------------
# dates
# ---------------------------------------------------------------------------------------------

def test_iso_dates_of_each_precision_are_intervals_of_days():
    year, month, day = parse_date("2005"), parse_date("2004-02"), parse_date("2005-06-30")
    assert (year.start, year.end) == (D(2005, 1, 1).toordinal(), D(2005, 12, 31).toordinal())
    assert (month.start, month.end) == (D(2004, 2, 1).toordinal(), D(2004, 2, 29).toordinal())  # a leap year
    assert day.start == day.end == D(2005, 6, 30).toordinal()
    assert parse_date(D(2005, 6, 30)) == day and str(day) == "2005-06-30"
    assert optional_date("") is None and optional_date(None) is None and optional_date(" 2005 ") == year


@pytest.mark.parametrize("bad", ["2005-13", "2005-02-30", "0000", "05-06-2005", "2005/06/30", "June 2005", "20050",
                                 "2005-6-1", "yesterday", 2005])
def test_a_malformed_date_is_one_parameter_error(bad):
    with pytest.raises(ParameterError) as e:
        parse_date(bad, "before")
    assert isinstance(e.value, SciError) and "before" in str(e.value) and repr(bad) in str(e.value)


def test_dates_from_identifiers_and_arxiv_headers():
    assert [acl_anthology_date(i) for i in ("P98-2143", "J82-3002", "A00-1020", "ACL:W19-0804", "ACL:2020.acl-main.1",
                                            "hep-th/9912001")] == ["1998", "1982", "2000", "2019", "2020", ""]
    assert [arxiv_id_date(i) for i in ("hep-th/9912001", "hep-th/0001001", "ARXIV:1901.01234", "1901.01234v2",
                                       "A00-1020")] == ["1999-12", "2000-01", "2019-01", "2019-01", ""]
    assert arxiv_header_date("Sat, 1 Jan 2000 00:02:31 GMT   (84kb)", "hep-th/0001001") == "2000-01-01"
    assert arxiv_header_date("Tue, 1 Sep 92 11:23:18 JST   (12kb)", "hep-th/9208080") == "1992-09-01"  # a month on
    assert arxiv_header_date("Tue Dec 31 23:54:17 MET 1991 +0100", "hep-th/9201001") == "1991-12-31"
    # a submitter's clock a year off, or a line that does not parse: the id's month
    assert arxiv_header_date("Wed, 5 Aug 92 18:42:48 +0100   (27kb)", "hep-th/9308022") == "1993-08"
    assert arxiv_header_date("01/01/93 13:35:33 GMT+0100", "hep-th/9301001") == "1993-01"


# ---------------------------------------------------------------------------------------------
# the datasets' dates (real data)
# ---------------------------------------------------------------------------------------------

@needs_data("hepth-citations")
def test_hepth_papers_carry_their_submission_day_and_queries_their_own():
    docs = {d.doc_id: d for d in ir_datasets.load("sci/hepth-core-citations/test").docs_iter()}
    dates = {k: parse_date(d.date) for k, d in docs.items()}  # every paper has a date
    assert len(dates) == 29555 and docs["1001"].date == "2000-01-01"
    assert sum(len(d.iso) == 10 for d in dates.values()) >= 29500  # the day for all but a few
    for doc_id, d in dates.items():  # within a month of the month its arXiv id was assigned in
        month = parse_date(arxiv_id_date(f"hep-th/{int(doc_id):07d}"))
        assert month.start - 31 <= d.start and d.end <= month.end + 31, (doc_id, d)
    qd = query_dates("sci/hepth-core-citations/test/c10")
    assert len(qd) > 500 and all(qd[q] == dates[q] for q in qd)  # a query is a paper of the corpus
    topics = pt.get_dataset("irds:sci/hepth-core-citations/test/c10").get_topics()
    assert list(topics.columns) == ["qid", "query"]  # the query dates do not change get_topics()


@needs_data("acl-fulltext")
def test_acl_papers_carry_their_year():
    core = {d.doc_id: d.date for d in ir_datasets.load("sci/acl-core-citations/test").docs_iter()}
    assert len(core) == 1672 and core["A00-1020"] == "2000" and core["P98-2143"] == "1998"
    assert all(d == acl_anthology_date(k) and len(d) == 4 for k, d in core.items())
    full = document_dates("sci/acl-fulltext")
    assert {k: d.iso for k, d in full.items()} == core
    qd = query_dates("sci/acl-fulltext/references")
    assert len(qd) == 949 and all(qd[q] == full[q] for q in qd)


@needs_data("mir-multicite")
def test_mir_proposals_are_dated_and_cited_papers_are_not():
    qd = query_dates("sci/mir-multicite/dev")
    assert qd["ACL:W19-0804"].iso == "2019"
    arxiv = [q for q in qd if q.startswith("ARXIV:")]
    assert arxiv and all(qd[q].iso == f"20{q[6:8]}-{q[8:10]}" for q in arxiv)
    assert all(qd[q] is None for q in qd if q.startswith("CorpusID:"))
    assert not has_document_dates("sci/mir-multicite/dev")  # the release dates no cited paper
    with pytest.raises(ParameterError, match="carry no date"):
        ps.pipeline("pool >> date_cutoff(before='2019')", dataset="irds:sci/mir-multicite/dev")
    assert list(pt.get_dataset("irds:sci/mir-multicite/dev").get_topics().columns) == ["qid", "query"]


# ---------------------------------------------------------------------------------------------
# the cutoff's behaviour on a small dataset
# ---------------------------------------------------------------------------------------------

DOC_DATES = {"d04": "2004", "d0506": "2005-06", "d050615": "2005-06-15", "d050616": "2005-06-16", "dnone": "",
             "d06": "2006"}
QUERY_DATES = {"q1": "2005-06-15", "q2": "2005", "q3": ""}


@pytest.fixture(scope="module")
def dated():
    from pyterrier_sci.datasets.core_citations import Paper, PaperQuery
    name = "sci-test/dated"
    docs = [Paper(d, d, "", date) for d, date in DOC_DATES.items()]
    register(name, FnDocs(name, lambda: iter(docs), Paper),
             FnQueries(name, lambda: (PaperQuery(q, q) for q in QUERY_DATES), PaperQuery),
             QueryDates(lambda: iter(QUERY_DATES.items())))
    register(name + "/no-query-dates", FnDocs(name, lambda: iter(docs), Paper),
             FnQueries(name, lambda: (PaperQuery(q, q) for q in QUERY_DATES), PaperQuery))
    return "irds:" + name


def run_frame():
    rows = [(q, q, d, float(10 - i), i, f"{q}:{d}") for q in QUERY_DATES for i, d in enumerate(DOC_DATES)]
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "score", "rank", "other"])


def kept(res, qid="q1"):
    """The documents of ``qid`` in rank order."""
    return res[res["qid"] == qid].sort_values("rank", kind="stable")["docno"].tolist()


def test_a_fixed_date_keeps_what_is_known_to_be_before_it(dated):
    res = DateCutoff("2005-06-15", dated)(run_frame())
    assert kept(res) == kept(res, "q2") == ["d04"]  # 2005-06 may be after the 15th: not known to be before
    inclusive = DateCutoff("2005-06-15", dated, inclusive=True)(run_frame())
    assert kept(inclusive) == ["d04", "d0506", "d050615"]  # not later than the 15th
    keep = DateCutoff("2005-06-15", dated, inclusive=True, undated="keep")(run_frame())
    assert kept(keep) == ["d04", "d0506", "d050615", "dnone"]
    assert kept(DateCutoff("2005", dated)(run_frame())) == ["d04"]
    assert kept(DateCutoff("2006-01-01", dated)(run_frame())) == ["d04", "d0506", "d050615", "d050616"]


def test_the_query_cutoff_keeps_what_is_not_later_than_each_query_paper(dated):
    res = DateCutoff("query", dated)(run_frame())
    assert kept(res, "q1") == ["d04", "d0506", "d050615"]
    assert kept(res, "q2") == ["d04", "d0506", "d050615", "d050616"]  # the year 2005: the same year is not later
    assert kept(res, "q3") == list(DOC_DATES)  # an undated query is not cut
    for _, g in res.groupby("qid"):  # ranks renumbered from 0 in their order; scores and other columns kept
        assert g["rank"].tolist() == list(range(len(g)))
        assert g["score"].is_monotonic_decreasing and all(g["other"] == g["qid"] + ":" + g["docno"])
    strict = DateCutoff("query", dated, inclusive=False)(run_frame())
    assert kept(strict, "q1") == ["d04"] and kept(strict, "q2") == ["d04"]
    # a query_date column says each query's date
    assert kept(DateCutoff("query", dated)(run_frame().assign(query_date="2004")), "q3") == ["d04"]


def test_empty_input_pickling_and_equality(dated):
    import pickle
    empty = run_frame().iloc[:0]
    out = DateCutoff("query", dated)(empty)
    assert len(out) == 0 and list(out.columns) == list(empty.columns)
    c = DateCutoff("2005", dated)
    c(run_frame())
    again = pickle.loads(pickle.dumps(c))
    assert again == c and hash(again) == hash(c) and again._docs is None
    assert c != DateCutoff("2005", dated, inclusive=True) and c != DateCutoff("query", dated)


def test_the_component_checks_its_parameters_when_the_pipeline_is_built(dated):
    with pytest.raises(ParameterError, match="before.*'2005-13' is not a date"):
        ps.pipeline("date_cutoff(before='2005-13')", dataset=dated)
    with pytest.raises(ParameterError, match="YYYY"):
        ps.pipeline("date_cutoff(before='yesterday')", dataset=dated)
    with pytest.raises(ParameterError, match="undated"):
        ps.pipeline("date_cutoff(before='2005', undated='maybe')", dataset=dated)
    with pytest.raises(ParameterError, match="needs a dataset"):
        ps.pipeline("date_cutoff(before='2005')")
    with pytest.raises(ParameterError, match="query papers' dates"):
        ps.pipeline("date_cutoff(before='query')", dataset=dated + "/no-query-dates")
    ps.pipeline("date_cutoff(before='2005')", dataset=dated + "/no-query-dates")  # a fixed date needs none
    with pytest.raises(PipelineError, match="at most one input"):
        ps.pipeline("date_cutoff(date_cutoff(before='2005'), date_cutoff(before='2005'), before='2005')",
                    dataset=dated)
    built = ps.pipeline("date_cutoff(before='query', inclusive=False)", dataset=dated)
    assert built == DateCutoff("query", dated, inclusive=False)


class FixedRun(pt.Transformer):
    """A first stage returning :func:`run_frame`'s rows of the input's queries."""

    def transform(self, inp):
        run = run_frame().drop(columns=["query"])
        return inp[["qid", "query"]].merge(run, on="qid")


def test_wrapped_around_a_pipeline_the_cutoff_follows_its_first_stage(dated):
    cutoff = DateCutoff("query", dated)
    topics = pd.DataFrame({"qid": list(QUERY_DATES), "query": list(QUERY_DATES)})
    # reverses the first stage's order (later papers first), ranked again
    rerank = pt.apply.generic(lambda df: pt.model.add_ranks(df.assign(score=df["rank"].astype(float))))
    wrapped = cutoff.push_into(FixedRun() >> rerank % 2)
    assert list(wrapped)[1] == cutoff  # right after the first stage
    res = wrapped(topics)
    assert kept(res, "q1") == ["d050615", "d0506"] and kept(res, "q2") == ["d050616", "d050615"]  # 2 allowed each
    post = (FixedRun() >> rerank % 2 >> cutoff)(topics)  # the top 2 are later papers: nothing is left
    assert kept(post, "q1") == [] and kept(post, "q2") == []
    first = FixedRun()
    stages = list(cutoff.push_into(first))  # nothing to push into: a filter after it
    assert stages[0] is first and stages[1] == cutoff


# ---------------------------------------------------------------------------------------------
# pushdown into the dense retriever (real hep-th papers)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hepth_small():
    """300 real hep-th papers from 1992 to 2003 (every 80th by id) and 20 of them as query papers."""
    from pyterrier_sci.datasets import core_citations as C
    if not C.HEPTH.files["papers"].exists():
        pytest.skip("hep-th data not found")
    docs = sorted(C.HEPTH.papers().values(), key=lambda p: p.doc_id)[::80][:300]
    queries = docs[::15]
    name = "sci-test/hepth-dated"
    register(name, FnDocs(name, lambda: iter(docs), C.Paper),
             FnQueries(name, lambda: (C.PaperQuery(p.doc_id, p.default_text()) for p in queries), C.PaperQuery),
             QueryDates(lambda: ((p.doc_id, p.date) for p in queries)))
    return "irds:" + name


def assert_not_later(res, dataset):
    docs, queries = document_dates(dataset), query_dates(dataset)
    for q, d in zip(res["qid"], res["docno"]):
        assert docs[d] is not None and docs[d].start <= queries[q].end, (q, queries[q], d, docs[d])


def test_dense_pushdown_equals_the_post_filter_of_an_exhaustive_search(hepth_small):
    topics = pt.get_dataset(hepth_small).get_topics()
    exhaustive = ps.pipeline("dense(num_results=1000, verbose=False)", dataset=hepth_small)  # 300 documents: all
    cols = ["qid", "docno", "score", "rank"]
    for before in ("query", "1998-01-01"):
        pushed = ps.pipeline(f"date_cutoff(dense(verbose=False), before='{before}') % 10", dataset=hepth_small)
        assert "date_cutoff=DateCutoff" in repr(pushed.compile())  # one retriever, % 10 fused into it too
        got = pushed(topics)
        cutoff = DateCutoff(before, hepth_small)
        want = cutoff(exhaustive(topics))
        allowed = want.groupby("qid").size()
        want = want[want["rank"] < 10]
        pd.testing.assert_frame_equal(got.sort_values(["qid", "rank"])[cols].reset_index(drop=True),
                                      want.sort_values(["qid", "rank"])[cols].reset_index(drop=True))
        assert got.groupby("qid").size().to_dict() == allowed.clip(upper=10).to_dict()  # k come back where there are
        filtered = ps.pipeline(f"dense(verbose=False) % 10 >> date_cutoff(before='{before}')", dataset=hepth_small)
        assert len(filtered(topics)) < len(got)  # a post-filter of the top 10 returns fewer
        if before == "query":
            assert_not_later(got, hepth_small)
        else:
            assert all(document_dates(hepth_small)[d].end < D(1998, 1, 1).toordinal() for d in got["docno"])


def test_dense_rescoring_under_a_cutoff_drops_the_later_documents_of_its_input(hepth_small):
    topics = pt.get_dataset(hepth_small).get_topics()
    first = ps.pipeline("dense(verbose=False) % 30", dataset=hepth_small)(topics)
    dense = ps.pipeline("dense(verbose=False)", dataset=hepth_small)
    cutoff = DateCutoff("query", hepth_small)
    pushed = cutoff.push_into(dense)
    assert pushed is not dense and pushed.date_cutoff == cutoff and dense.__dict__.get("date_cutoff") is None
    got = pushed(first.drop(columns=["score", "rank"]))
    want = cutoff(dense(first.drop(columns=["score", "rank"])))
    cols = ["qid", "docno", "score", "rank"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols].reset_index(drop=True))
    assert cutoff.push_into(pushed) is not None
    assert pushed.sci_date_cutoff(DateCutoff("2000", hepth_small)) is None  # two cutoffs: the second one filters


# ---------------------------------------------------------------------------------------------
# the papers' pipelines
# ---------------------------------------------------------------------------------------------

@needs_data("mir-multicite")
def test_mir_training_proposals_must_not_be_later_than_the_test_proposals():
    assert later_training_query("sci/mir-multicite/dev/chrono-train", "sci/mir-multicite/dev/chrono-test") is None
    assert later_training_query("sci/mir-multicite/dev/chrono-train",
                                "sci/mir-multicite/dev/chrono-test/extended") is None
    train, train_date, test, test_date = later_training_query("sci/mir-multicite/dev/chrono-test",
                                                              "sci/mir-multicite/dev/chrono-train")
    assert train_date.start > test_date.end
    with pytest.raises(ParameterError, match="chronological"):  # refused before any training
        ps.pipeline("mir_dense(train=True, train_dataset='irds:sci/mir-multicite/dev/chrono-test')",
                    dataset="irds:sci/mir-multicite/dev/chrono-train")


@needs_data("hepth-citations")
def test_hlm_cite_pipelines_cut_the_candidates_right_after_the_pool():
    for name in ("retrieval", "HLM-Cite", "bm25_cut"):
        stages = list(ps.pipeline(name, config="hlm_cite.yaml"))
        assert type(stages[0]).__name__ == "PoolRetriever" and isinstance(stages[1], DateCutoff)
        assert stages[1].before == "query" and stages[1].inclusive
    assert not any(isinstance(t, DateCutoff) for t in ps.pipeline("retrieval_uncut", config="hlm_cite.yaml"))


# ---------------------------------------------------------------------------------------------
# no query gets a later paper (real data)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset", [pytest.param("irds:sci/hepth-core-citations/test/c100",
                                                  marks=needs_data("hepth-citations")),
                                     pytest.param("irds:sci/acl-core-citations/test/c100",
                                                  marks=needs_data("acl-fulltext"))])
def test_no_query_gets_a_later_paper(dataset):
    pool = ps.pipeline("pool", dataset=dataset)
    cut = ps.pipeline("date_cutoff(pool, before='query')", dataset=dataset)
    topics = pt.get_dataset(dataset).get_topics()
    before, after = pool(topics), cut(topics)
    assert_not_later(after, dataset)
    docs, queries = document_dates(dataset), query_dates(dataset)
    later = np.array([docs[d].start > queries[q].end for q, d in zip(before["qid"], before["docno"])])
    assert later.sum() > 0.2 * len(before)  # the candidate sets hold later papers: the test is not vacuous
    assert len(after) == len(before) - later.sum()  # and exactly those are cut
    assert set(after["qid"]) == set(before["qid"])
