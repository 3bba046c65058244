"""PRISM: chunking (pyterrier_sci.text), chunk->paper aggregation, aspect fusion, the query paper
exclusion, the section-based optimiser and the whole pipeline on a tiny full-paper corpus."""

import conftest
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.plugins.prism import (
    AspectScoreFusion,
    ChunkToPaper,
    ExcludeQueryPaper,
    PaperFields,
    QueryField,
    SectionAspectQueries,
    classify_sections,
    prism_pipeline,
)
from pyterrier_sci.text import ChunkDoc, chunk_documents, default_stride, paper_docno, register_chunk_corpus

# ----------------------------------------------------------------------------------------------
# chunking
# ----------------------------------------------------------------------------------------------


def _words(n, prefix="w"):
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_chunk_windows_overlap_and_cover_the_tail():
    docs = [{"docno": "P1", "title": "A Title", "text": _words(23)}]
    chunks = list(chunk_documents(docs, unit=10, stride=6))
    # pt.text.sliding gives windows at 0, 6, 12 (ending at 22); the tail window 13..22 is added
    assert [c.doc_id for c in chunks] == ["P1%p0", "P1%p1", "P1%p2", "P1%p3"]
    assert [c.body.split()[0] for c in chunks] == ["w0", "w6", "w12", "w13"]
    assert all(len(c.body.split()) == 10 for c in chunks)
    assert chunks[-1].body.split()[-1] == "w22"
    covered = {w for c in chunks for w in c.body.split()}
    assert covered == set(_words(23).split())
    assert chunks[0].text == "A Title " + chunks[0].body and chunks[0].paper_id == "P1" and chunks[0].title == "A Title"
    assert all(paper_docno(c.doc_id) == "P1" for c in chunks)


def test_chunk_exact_fit_short_and_empty_documents():
    docs = pd.DataFrame(
        [
            {"docno": "a", "title": "T", "text": _words(16)},  # 10 + 6: no tail window
            {"docno": "b", "title": "Short", "text": "  only   three words "},
            {"docno": "c", "title": "No body", "text": ""},
        ]
    )
    chunks = list(chunk_documents(docs, unit=10, stride=6))
    assert [c.doc_id for c in chunks] == ["a%p0", "a%p1", "b%p0", "c%p0"]
    assert chunks[2].body == "only three words"
    assert chunks[3].body == "" and chunks[3].text == "No body"


def test_chunk_default_stride_and_errors():
    assert default_stride(256) == 192 and default_stride(3000) == 2250
    chunks = list(chunk_documents([{"doc_id": "x", "title": "", "text": _words(20)}], unit=8))
    assert [c.body.split()[0] for c in chunks] == ["w0", "w6", "w12"]  # stride 6; 12..19 ends at the last word
    with pytest.raises(ValueError, match="stride"):
        list(chunk_documents([], unit=10, stride=11))
    with pytest.raises(ValueError, match="unit"):
        list(chunk_documents([], unit=0))
    with pytest.raises(ValueError, match="no field 'body'"):
        list(chunk_documents([{"docno": "x", "text": "a b"}], unit=4, text_field="body"))
    with pytest.raises(TypeError):
        list(chunk_documents([{"docno": "x", "text": "a"}], unit=4, tokenizer=3))


class _CharTokenizer:
    """A tokenizer in the Hugging Face API: one token per character (so units are characters)."""

    def tokenize(self, text):
        return list(text)

    def convert_tokens_to_string(self, toks):
        return "".join(toks)


def test_chunk_with_a_tokenizer_object():
    chunks = list(
        chunk_documents(
            [{"docno": "d", "title": None, "text": "abcdefghij"}], unit=4, stride=3, tokenizer=_CharTokenizer()
        )
    )
    assert [c.body for c in chunks] == ["abcd", "defg", "ghij"]
    assert chunks[0].text == "abcd"  # no title


def test_register_chunk_corpus_is_an_ir_datasets_corpus():
    import ir_datasets

    papers = [{"docno": "p1", "title": "One", "text": _words(30)}, {"docno": "p2", "title": "Two", "text": _words(5)}]
    name = register_chunk_corpus("sci-test/chunk-src", unit=12, docs_fn=lambda: iter(papers))
    assert name == "sci-test/chunk-src/chunks-12"
    ds = ir_datasets.load(name)
    docs = list(ds.docs_iter())
    assert [d.doc_id for d in docs] == ["p1%p0", "p1%p1", "p1%p2", "p2%p0"]
    assert ds.docs_cls() is ChunkDoc and docs[0].default_text() == docs[0].text
    assert ds.docs_store().get("p1%p1").body.split()[0] == "w9"
    assert "windows of 12 tokens, stride 9" in ds.documentation()["desc"]


# ----------------------------------------------------------------------------------------------
# chunk -> paper, exclusion, fusion
# ----------------------------------------------------------------------------------------------

CHUNKS = pd.DataFrame(
    {
        "qid": ["q1"] * 6 + ["q2"] * 2,
        "query": ["x"] * 6 + ["y"] * 2,
        "docno": ["A%p0", "B%p3", "A%p2", "C%p0", "B%p1", "A%p5", "A%p1", "q2%p0"],
        "score": [0.9, 0.8, 0.7, 0.6, 0.5, 0.1, 0.4, 0.95],
        "rank": [0, 1, 2, 3, 4, 5, 1, 0],
        "text": ["t"] * 8,
    }
)


@pytest.mark.parametrize(
    "agg, expected",
    [
        ("max", {"A": 0.9, "B": 0.8, "C": 0.6}),
        ("mean", {"A": (0.9 + 0.7 + 0.1) / 3, "B": 0.65, "C": 0.6}),
        ("sum", {"A": 1.7, "B": 1.3, "C": 0.6}),
        ("kmaxavg", {"A": 0.8, "B": 0.65, "C": 0.6}),
    ],
)
def test_chunk_to_paper_aggregations(agg, expected):
    out = ChunkToPaper(agg, k=2)(CHUNKS)
    q1 = out[out.qid == "q1"]
    assert dict(zip(q1.docno, q1.score)) == pytest.approx(expected)
    assert list(q1["rank"]) == [0, 1, 2] and list(q1.score) == sorted(q1.score, reverse=True)
    assert "text" not in out.columns and list(out.columns) == ["qid", "query", "docno", "score", "rank"]


def test_chunk_to_paper_count_and_max_matches_max_passage():
    out = ChunkToPaper("count")(CHUNKS)
    assert list(out[out.qid == "q1"].docno) == ["A", "B", "C"]  # 3, 2, 1 chunks retrieved
    mine = ChunkToPaper("max")(CHUNKS)
    theirs = pt.text.max_passage()(CHUNKS.drop(columns=["text"]))
    m = mine.merge(theirs[["qid", "docno", "score"]], on=["qid", "docno"], suffixes=("", "_pt"))
    assert len(m) == len(mine) == len(theirs)
    assert np.allclose(m.score, m.score_pt)
    with pytest.raises(ValueError, match="unknown chunk aggregation"):
        ChunkToPaper("median")


def test_exclude_query_paper_drops_the_query_and_its_chunks():
    out = ExcludeQueryPaper()(CHUNKS)
    assert "q2%p0" not in set(out.docno) and len(out) == 7
    assert list(out[out.qid == "q2"]["rank"]) == [0]  # A%p1 moves up
    papers = ExcludeQueryPaper()(ChunkToPaper()(CHUNKS))
    assert set(papers[papers.qid == "q2"].docno) == {"A"}
    by_col = ExcludeQueryPaper(column="own")(CHUNKS.assign(own=["B"] * 6 + ["none"] * 2))
    assert "B" not in {paper_docno(d) for d in by_col[by_col.qid == "q1"].docno}
    empty = ExcludeQueryPaper()(CHUNKS.iloc[:0])
    assert len(empty) == 0 and "rank" in empty.columns


def test_aspect_score_fusion_maxsim_and_sum():
    r1 = pt.Transformer.from_df(CHUNKS[CHUNKS.qid == "q1"].drop(columns=["query", "text"]), uniform=True)
    r2 = pt.Transformer.from_df(
        pd.DataFrame(
            {"qid": ["q1"] * 3, "docno": ["C%p1", "C%p2", "B%p0"], "score": [0.9, 0.3, 0.2], "rank": [0, 1, 2]}
        ),
        uniform=True,
    )
    topics = pd.DataFrame({"qid": ["q1"], "query": ["x"]})
    maxsim = AspectScoreFusion(r1, r2, method="maxsim")(topics)
    assert dict(zip(maxsim.docno, maxsim.score)) == pytest.approx({"A": 0.9, "B": 1.0, "C": 1.5})
    assert list(maxsim.docno) == ["C", "B", "A"] and list(maxsim["rank"]) == [0, 1, 2]
    naive = AspectScoreFusion(r1, r2, method="sum")(topics)
    assert dict(zip(naive.docno, naive.score)) == pytest.approx({"A": 1.7, "B": 1.5, "C": 1.8})
    with pytest.raises(ValueError, match="unknown fusion"):
        AspectScoreFusion(r1, method="mean")


# ----------------------------------------------------------------------------------------------
# the section-based optimiser
# ----------------------------------------------------------------------------------------------


def test_classify_sections_by_heading_and_position():
    heads = [
        "",
        "2 Related Work",
        "3 Our Approach",
        "3.1 CRF tagging",
        "4 Experimental Setup",
        "4.2 Results",
        "5.",
        "6 Conclusions and Future Work",
    ]
    assert classify_sections(heads) == [
        "research_question",
        "research_question",
        "method",
        "method",
        "experiment",
        "experiment",
        "experiment",
        "research_question",
    ]
    # without experiment headings the last 40% of the paper counts as experiments
    assert classify_sections(["Introduction", "2.", "3.", "4.", "5."]) == [
        "research_question",
        "method",
        "method",
        "experiment",
        "experiment",
    ]


def test_section_queries_share_words_and_fall_back():
    sections = [
        ("1 Introduction", _words(300, "i")),
        ("2 Model", _words(50, "m")),
        ("3 Training", _words(10, "t")),
        ("4 Evaluation", _words(20, "e")),
        ("5 Conclusion", _words(100, "c")),
    ]
    frame = pd.DataFrame(
        {"qid": ["1", "2"], "query": ["q", "q"], "abstract": ["the abstract", "abs two"], "sections": [sections, []]}
    )
    out = SectionAspectQueries(max_words=40)(frame)
    rq = out.loc[0, "research_question_query"].split()
    assert len(rq) == 40 and rq[:20] == _words(20, "i").split() and rq[20:] == _words(20, "c").split()
    assert out.loc[0, "method_query"].split() == _words(30, "m").split() + _words(10, "t").split()
    assert out.loc[0, "experiment_query"] == _words(20, "e")
    assert out.loc[0, "aspect_fallback"] == ""
    assert (
        out.loc[1, "method_query"] == "abs two"
        and out.loc[1, "aspect_fallback"] == "research_question,method,experiment"
    )
    assert out.loc[0, "query"] == "q"  # the query itself is not touched
    assert "sections" not in out.columns and "abstract" in out.columns  # the full paper is not passed on
    assert "sections" in SectionAspectQueries(drop=())(frame).columns
    dicts = SectionAspectQueries(aspects=["method"]).queries_for([{"heading": "Method", "text": "we do x"}])
    assert dicts == {"method": "we do x"}


def test_query_field_pushes_and_falls_back():
    frame = pd.DataFrame({"qid": ["1", "2"], "query": ["old", "old"], "text": ["t1", "t2"], "full_text": ["f1", ""]})
    out = QueryField("full_text", fallback=["text"])(frame)
    assert list(out["query"]) == ["f1", "t2"] and list(out["query_0"]) == ["old", "old"]
    assert list(out.columns) == ["qid", "query_0", "query"]  # the paper's text columns are not carried on
    kept = QueryField("full_text", fallback=["text"], drop=())(frame)
    assert "full_text" in kept.columns and "text" in kept.columns
    with pytest.raises(ValueError, match="empty query field"):
        QueryField("full_text")(frame)


# ----------------------------------------------------------------------------------------------
# the whole pipeline on a tiny corpus (real MiniLM, real indexes)
# ----------------------------------------------------------------------------------------------

TOPICS = {
    "parse": (
        "Dependency parsing with transition systems",
        "We present a transition-based dependency parser for syntactic analysis of sentences.",
        [
            ("1 Introduction", "Syntactic dependency parsing recovers head modifier relations between words."),
            (
                "2 Transition system",
                "An arc-eager shift reduce transition system builds the dependency tree with a stack and a buffer.",
            ),
            ("3 Experiments", "We evaluate attachment scores on the Penn Treebank and CoNLL dependency treebanks."),
        ],
    ),
    "mt": (
        "Phrase-based statistical machine translation",
        "We describe a phrase-based translation model trained on parallel corpora.",
        [
            ("1 Introduction", "Machine translation maps sentences of a source language into a target language."),
            (
                "2 Phrase model",
                "Phrase pairs are extracted from word alignments and scored with a log-linear model and a language model.",  # noqa: E501
            ),
            ("3 Evaluation", "BLEU scores on the Europarl German English translation task improve over the baseline."),
        ],
    ),
    "ner": (
        "Named entity recognition with conditional random fields",
        "A CRF tagger labels person, organisation and location names in newswire text.",
        [
            ("1 Introduction", "Named entity recognition finds names of people, organisations and places."),
            (
                "2 CRF model",
                "A linear-chain conditional random field with word shape and gazetteer features tags each token.",
            ),
            ("3 Results", "F1 on the CoNLL 2003 English named entity data is reported."),
        ],
    ),
}


@pytest.fixture(scope="module")
def tiny_fulltext():
    """``sci-test/prism-tiny``: six papers (two per topic), each topic's first paper a query whose
    relevant paper is the topic's second; chunk corpus ``sci-test/prism-tiny/chunks-24``."""
    import ir_datasets

    from pyterrier_sci.datasets.acl_fulltext import FullPaper, FullPaperQuery, Section, body_text
    from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, register

    papers, queries, qrels = [], [], []
    for topic, (title, abstract, sections) in TOPICS.items():
        for i in (1, 2):
            secs = tuple(Section(h, t if i == 1 else t.replace(" the ", " our ")) for h, t in sections)
            p = FullPaper(f"{topic}{i}", f"{title} {abstract}", title, abstract, body_text(abstract, secs), secs)
            papers.append(p)
        q = papers[-2]
        queries.append(FullPaperQuery(q.doc_id, q.text, q.title, q.abstract, q.full_text, q.sections))
        qrels.append(ir_datasets.formats.GenericQrel(q.doc_id, f"{topic}2", 1))
    name = "sci-test/prism-tiny"
    register(
        name,
        FnDocs(name, lambda: iter(papers), FullPaper),
        FnQueries(name, lambda: iter(queries), FullPaperQuery),
        FnQrels(lambda: iter(qrels), {1: "relevant"}),
    )
    register_chunk_corpus(name, unit=24, stride=16, text_field="full_text", docs_fn=lambda: iter(papers))
    return name


def test_paper_fields_from_queries_and_documents(tiny_fulltext):
    t = PaperFields(tiny_fulltext)(pd.DataFrame({"qid": ["parse1", "mt2"], "query": ["", ""]}))
    assert t.loc[0, "title"] == TOPICS["parse"][0]
    assert t.loc[1, "abstract"] == TOPICS["mt"][1]  # mt2 is no query: read from the documents
    assert [s.heading for s in t.loc[0, "sections"]] == ["1 Introduction", "2 Transition system", "3 Experiments"]
    assert t.loc[0, "full_text"].startswith(TOPICS["parse"][1])
    with pytest.raises(KeyError, match="nope"):
        PaperFields(tiny_fulltext)(pd.DataFrame({"qid": ["nope"]}))


def test_prism_pipeline_end_to_end(tiny_fulltext):
    import ir_datasets

    dense_a = ps.pipeline("dense", dataset=tiny_fulltext)
    dense_c = ps.pipeline("dense(num_results=100)", dataset=tiny_fulltext + "/chunks-24")
    prism = prism_pipeline(SectionAspectQueries(), dense_a, dense_c, paper_fields=PaperFields(tiny_fulltext))
    topics = pd.DataFrame({"qid": [q.query_id for q in ir_datasets.load(tiny_fulltext).queries_iter()], "query": "x"})
    res = prism(topics)
    assert set(res.qid) == {"parse1", "mt1", "ner1"}
    for q in res.qid.unique():
        r = res[res.qid == q].sort_values("rank")
        assert q not in set(r.docno)  # never its own candidate
        assert r.docno.iloc[0] == q[:-1] + "2"  # the topic's twin first
        assert len(r) == 5 and list(r["rank"]) == list(range(5))
    # RRF k=60 over four branches: the twin, first in all four, scores 4 / 61
    top = res[res["rank"] == 0]
    assert top.score.to_numpy() == pytest.approx([4 / 61] * 3)
    ev = pt.Experiment(
        [prism],
        topics,
        pt.get_dataset("irds:" + tiny_fulltext).get_qrels(),
        ps.measures.parse(["Recall@50", "MRR@50"], dataset="sci/acl-fulltext"),
    )
    assert ev.loc[0, "R@50"] == 1.0 and ev.loc[0, "RR@50"] == 1.0


def test_prism_yaml_builds_every_pipeline():
    from pyterrier_sci.pipeline import build_all, load_config

    cfg = load_config("pipelines/prism.yaml")
    systems = build_all(cfg)  # building is lazy: no index is touched
    assert {"A2A", "F2F", "A2C", "F2C", "PRISM", "PRISM_agents", "PRISM_single", "PRISM_noA2A_maxsim"} <= set(systems)
    assert all(isinstance(s, pt.Transformer) for s in systems.values())
    whole = ps.pipeline(
        "prism_paper_fields >> prism(prism_sections, dense, dense(dataset='sci/acl-fulltext/chunks-256'), k=60)",
        dataset="irds:sci/acl-fulltext/references",
    )
    assert isinstance(whole, pt.Transformer)
    with pytest.raises(ps.PipelineError, match="three input pipelines"):
        ps.pipeline("prism(prism_sections, dense)", dataset="irds:sci/acl-fulltext/references")


class TestChunkToPaperConventions(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return ChunkToPaper()


class TestExcludeConventions(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return ExcludeQueryPaper()


class TestSectionQueriesConventions(conftest.TransformerTestCase):
    @staticmethod
    def get_transformer():
        return SectionAspectQueries()
