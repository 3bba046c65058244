"""Your own papers as a corpus (pyterrier_sci.local_corpus): a collection registered as ``sci/local/NAME`` is an
ir_datasets id like a benchmark's (documents, topics, qrels, indexes, ``ps.Experiment``), an artifact keyed by its
content (the same files: nothing rebuilt; a changed file: a new version, never mixed with the old one's indexes),
written atomically, with one clear error for bad input.  The collection: 3 of CSFCube's Method queries with up to
40 papers of each pool (all judged), built from ../shared/data in the test."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci import local_corpus as L
from pyterrier_sci.cli import main
from pyterrier_sci.errors import RecordError

pytestmark = needs_data("csfcube")


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """JSONL papers, TSV topics and TREC qrels made from CSFCube's Method facet."""
    import ir_datasets

    import pyterrier_sci  # noqa: F401
    d = tmp_path_factory.mktemp("own")
    ds = ir_datasets.load("sci/csfcube/method")
    queries = {q.query_id: q for q in ds.queries_iter()}
    qrels = pd.DataFrame(ds.qrels_iter())
    keep = sorted(queries)[:3]
    judged = qrels[qrels["query_id"].isin(keep)].groupby("query_id").head(40)
    docnos = set(judged["doc_id"]) | {queries[q].query_id.split("_")[0] for q in keep}
    store = ir_datasets.load("sci/csfcube").docs_store()
    papers = [store.get(x) for x in sorted(docnos)]
    with open(d / "papers.jsonl", "w", encoding="utf-8") as f:
        for p in papers:
            f.write(json.dumps({"docno": p.doc_id, "title": p.title, "abstract": p.abstract}) + "\n")
    topics = {q: f"{store.get(q.split('_')[0]).title}" for q in keep}
    (d / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in topics.items()), encoding="utf-8")
    (d / "qrels.txt").write_text("".join(f"{r.query_id} 0 {r.doc_id} {r.relevance}\n" for r in judged.itertuples()),
                                 encoding="utf-8")
    return {"dir": d, "papers": papers, "topics": topics, "judged": judged}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    return tmp_path / "work"


def test_a_registered_collection_is_a_dataset_like_a_benchmark(collection, home):
    d = collection["dir"]
    dsid = ps.register_corpus("mine", d / "papers.jsonl", topics=d / "topics.tsv", qrels=d / "qrels.txt")
    assert dsid == "irds:sci/local/mine"
    ds = pt.get_dataset(dsid)
    docs = list(ds.get_corpus_iter(verbose=False))
    assert [x["docno"] for x in docs] == [p.doc_id for p in collection["papers"]]
    assert docs[0]["title"] == collection["papers"][0].title and docs[0]["abstract"] == collection["papers"][0].abstract
    topics, qrels = ds.get_topics(), ds.get_qrels()
    assert dict(zip(topics["qid"], topics["query"])) == collection["topics"]
    assert len(qrels) == len(collection["judged"]) and set(qrels["label"]) <= {0, 1, 2, 3}
    # the same pipelines as on a benchmark, compared with ps.Experiment on the collection's own topics and qrels
    bm25 = ps.pipeline("bm25", dataset=dsid)
    dense = ps.pipeline("dense(backend='torch')", dataset=dsid)
    rrf = ps.pipeline("rrf(bm25, dense(backend='torch'), k=60)", dataset=dsid)
    res = ps.Experiment([bm25, dense, rrf], topics, qrels, ["nDCG@10", "AP"], names=["bm25", "dense", "rrf"])
    assert len(res) == 3 and res["nDCG@10"].between(0.1, 1).all()
    import ir_measures
    run = bm25(topics).rename(columns={"qid": "query_id", "docno": "doc_id"})
    want = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels.rename(
        columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}), run)[ir_measures.nDCG @ 10]
    assert res.loc[res["name"] == "bm25", "nDCG@10"].iloc[0] == pytest.approx(want, abs=1e-9)
    # BM25 over the local corpus is PISA's own BM25 over the same papers (a reference built here, not by us)
    import pyterrier_pisa
    ref = pyterrier_pisa.PisaIndex(str(home.parent / "ref"), text_field=["title", "abstract"], threads=1)
    ref.index({"docno": p.doc_id, "title": p.title, "abstract": p.abstract} for p in collection["papers"])
    ours = bm25(topics).sort_values(["qid", "rank"]).reset_index(drop=True)
    theirs = ref.bm25(k1=0.9, b=0.4, num_results=1000)(topics).sort_values(["qid", "rank"]).reset_index(drop=True)
    assert ours["docno"].tolist()[:30] == theirs["docno"].tolist()[:30]
    assert ours["score"].tolist()[:30] == pytest.approx(theirs["score"].tolist()[:30], rel=1e-5)


def test_the_registration_is_an_artifact_keyed_by_content(collection, home, tmp_path):
    src = tmp_path / "papers.jsonl"
    src.write_bytes((collection["dir"] / "papers.jsonl").read_bytes())
    dsid = ps.register_corpus("versions", src)
    first = L.corpus_manifest("versions")
    docs = L.corpora_dir() / "versions" / first["version"] / "docs.jsonl.gz"
    mtime = docs.stat().st_mtime_ns
    assert first["documents"] == len(collection["papers"]) and first["sources"][0]["sha256"]
    assert json.loads((docs.parent / "pt_meta.json").read_text())["type"] == L.ARTIFACT_TYPE
    # the same bytes: nothing is read or written again
    assert ps.register_corpus("versions", src) == dsid and docs.stat().st_mtime_ns == mtime
    bm25 = ps.pipeline("bm25", dataset=dsid)
    before = bm25.search("sentiment")
    # a changed file: a new version, its own indexes; the old version's index is not used
    lines = src.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["title"] = "zyxwvut sentiment sentiment sentiment"
    src.write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n", encoding="utf-8")
    ps.register_corpus("versions", src)
    second = L.corpus_manifest("versions")
    assert second["version"] != first["version"] and len(list((home / "indexes").glob("sci__local__versions@*"))) == 1
    after = ps.pipeline("bm25", dataset=dsid).search("zyxwvut")
    assert after["docno"].tolist()[:1] == [record["docno"]] and len(before) > 0
    assert sorted(p.name for p in (home / "indexes").glob("sci__local__versions@*")) == \
        sorted(f"sci__local__versions@{v}" for v in (first["version"], second["version"]))


def test_a_fresh_process_finds_the_registered_collection(collection, home):
    d = collection["dir"]
    ps.register_corpus("shared", d / "papers.jsonl", topics=d / "topics.tsv", qrels=d / "qrels.txt")
    script = ("import pyterrier as pt, pyterrier_sci\n"
              "ds = pt.get_dataset('irds:sci/local/shared')\n"
              "print(len(ds.get_topics()), len(ds.get_qrels()), sum(1 for _ in ds.get_corpus_iter(verbose=False)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTERRIER_SCI_HOME": str(home)})
    assert out.stdout.split() == [str(len(collection["topics"])), str(len(collection["judged"])),
                                  str(len(collection["papers"]))]


def test_bad_input_is_one_error_naming_the_file_and_nothing_is_registered(collection, home, tmp_path):
    d = collection["dir"]
    with pytest.raises(RecordError, match="not a corpus name"):
        ps.register_corpus("../escape", d / "papers.jsonl")
    with pytest.raises(RecordError, match="no such file"):
        ps.register_corpus("x", tmp_path / "missing.jsonl")
    bad_qrels = tmp_path / "qrels.txt"
    bad_qrels.write_text(f"{next(iter(collection['topics']))} 0 not-a-paper 1\n")
    with pytest.raises(RecordError, match=r"qrels.txt: judges document 'not-a-paper', which is not a paper"):
        ps.register_corpus("x", d / "papers.jsonl", topics=d / "topics.tsv", qrels=bad_qrels)
    bad_topics = tmp_path / "topics.tsv"
    bad_topics.write_text("q1\tone\nq1\ttwo\n")
    with pytest.raises(RecordError, match="topics.tsv: query id 'q1' is given twice"):
        ps.register_corpus("x", d / "papers.jsonl", topics=bad_topics)
    assert not (L.corpora_dir() / "x").exists() or not list((L.corpora_dir() / "x").glob("[0-9a-f]*"))
    # a good version, then a source that fails half-way: the good version stays current, nothing partial is left
    good = tmp_path / "good.jsonl"
    good.write_bytes((d / "papers.jsonl").read_bytes())
    ps.register_corpus("y", good)
    kept = L.corpus_manifest("y")["version"]
    with open(good, "a", encoding="utf-8") as f:
        f.write('{"docno": "broken", "title": \n')
    with pytest.raises(RecordError, match=r"good.jsonl, line \d+"):
        ps.register_corpus("y", good)
    assert L.corpus_manifest("y")["version"] == kept
    assert sorted(p.name for p in (L.corpora_dir() / "y").iterdir()) == sorted([kept, "current.json",
                                                                                  "current.json.lock"]) or \
        sorted(p.name for p in (L.corpora_dir() / "y").iterdir() if not p.name.endswith(".lock")) == \
        sorted([kept, "current.json"])
    with gzip.open(L.corpora_dir() / "y" / kept / "docs.jsonl.gz", "rt") as f:
        assert sum(1 for _ in f) == len(collection["papers"])
    # a corpus without topics has none, as a benchmark without topics (PyTerrier's own message)
    assert not pt.get_dataset("irds:sci/local/y").irds_ref().has_queries()
    with pytest.raises(NotImplementedError, match="sci/local/y doesn't support get_topics"):
        pt.get_dataset("irds:sci/local/y").get_topics()


def test_the_command_line(collection, home, capsys):
    d = collection["dir"]
    assert main(["corpus", "add", "cli", str(d / "papers.jsonl"), "--topics", str(d / "topics.tsv"),
                 "--qrels", str(d / "qrels.txt")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"irds:sci/local/cli: {len(collection['papers'])} papers, 3 topics, "
                          f"{len(collection['judged'])} judgements (version ")
    assert main(["corpus", "list"]) == 0 and "irds:sci/local/cli" in capsys.readouterr().out
    assert main(["corpus", "show", "cli"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["documents"] == len(collection["papers"]) and shown["sources"][0]["path"].endswith("papers.jsonl")
    assert main(["run", "bm25", "--dataset", "irds:sci/local/cli", "--output", str(home.parent / "run.res")]) == 0
    capsys.readouterr()
    # a pipeline file's experiment on it, as on a benchmark
    config = home.parent / "mine.yaml"
    config.write_text("dataset: irds:sci/local/cli\ncomponents:\n  bm25: {component: bm25}\n"
                      "  minilm: {component: dense, backend: torch}\npipelines:\n  BM25: bm25\n  MiniLM: minilm\n"
                      "experiments:\n  mine:\n    datasets: [irds:sci/local/cli]\n    pipelines: [BM25, MiniLM]\n"
                      "    measures: [nDCG@10, AP]\n    baseline: BM25\n"
                      f"    save_dir: {home.parent / 'runs'}\n", encoding="utf-8")
    assert main(["experiment", str(config), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in table] == ["BM25", "MiniLM"] and all(0 <= r["nDCG@10"] <= 1 for r in table)
    assert main(["corpus", "remove", "cli"]) == 0 and not (L.corpora_dir() / "cli").exists()
    # a file of papers as --dataset is registered first; without topics there is nothing to run, and it says so
    assert main(["run", "bm25", "--dataset", str(d / "papers.jsonl"), "--output", str(home.parent / "f.res")]) == 2
    err = capsys.readouterr().err
    assert "has no topics to run or evaluate" in err and "--topics topics.tsv" in err and "internal error" not in err
    assert any(n.startswith("papers-") for n in L.local_corpora())
    assert main(["corpus", "add", "bad name", str(d / "papers.jsonl")]) == 2
    assert "not a corpus name" in capsys.readouterr().err


def _pdf(path, title, sections):
    from fpdf import FPDF
    pdf = FPDF()
    pdf.set_title(title)
    pdf.add_page()

    def para(text, size=11):
        pdf.set_font("Helvetica", size=size)
        pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
    para(title, 16)
    for heading, body in sections:
        para(heading, 12)
        para(body)
    pdf.output(str(path))


PRISM_COMPONENTS = {
    "A": {"component": "prism_query_field", "field": "text"},
    "R": {"component": "prism_query_field", "field": "research_question_query"},
    "M": {"component": "prism_query_field", "field": "method_query"},
    "E": {"component": "prism_query_field", "field": "experiment_query"},
    "papers": {"component": "prism_chunks_to_papers", "agg": "max"},
    "exclude": {"component": "prism_exclude_query_paper"},
    "sections": {"component": "prism_sections", "max_words": 256},
}


def test_prism_aspect_queries_run_on_a_folder_of_pdfs_and_abstracts(collection, home, tmp_path):
    """PDFs with sections beside abstracts: PRISM's LLM-free aspect queries come from the PDF's own sections, its
    chunk retrievers search the collection's registered chunks, and the fused ranking is of papers."""
    pytest.importorskip("fpdf")
    pytest.importorskip("pypdf")
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    topics = {"parsing": "dependency parsing with neural networks", "sentiment": "sentiment of movie reviews",
              "retrieval": "retrieval of scientific papers"}
    for name, topic in topics.items():
        _pdf(pdfs / f"{name}.pdf", f"A study of {topic}",
             [("Abstract", f"We study {topic} and report what we find."),
              ("1 Introduction", f"The research question is how {topic} behaves. " * 8),
              ("2 Method", f"Our method for {topic} trains a model on annotated data. " * 6),
              ("3 Experiments", f"Experiments on {topic} show gains over strong baselines. " * 6)])
    dsid = ps.register_corpus("library", [pdfs, collection["dir"] / "papers.jsonl"])
    paper = pt.get_dataset(dsid).irds_ref().docs_store().get("parsing")
    assert [s.heading for s in paper.sections] == ["Abstract", "1 Introduction", "2 Method", "3 Experiments"]
    assert "trains a model" in paper.full_text and paper.title == "A study of dependency parsing with neural networks"
    cfg = ps.PipelineConfig.from_dict({"components": {
        **PRISM_COMPONENTS, "bm25_A": {"component": "bm25", "dataset": dsid},
        "bm25_C": {"component": "bm25", "dataset": "irds:sci/local/library/chunks-256", "num_results": 3000}}})
    prism = ps.pipeline("prism_paper_fields >> sections >> rrf(A >> bm25_A >> exclude, R >> bm25_C >> papers >> "
                        "exclude, M >> bm25_C >> papers >> exclude, E >> bm25_C >> papers >> exclude, k=60)",
                        config=cfg, dataset=dsid)
    queries = pd.DataFrame({"qid": list(topics), "query": [""] * len(topics)})
    fields = ps.pipeline("prism_paper_fields >> sections", config=cfg, dataset=dsid)(queries)
    assert fields.set_index("qid").loc["parsing", "method_query"].startswith("Our method for dependency parsing")
    res = prism(queries)
    assert set(res["qid"]) == set(topics) and not res["docno"].str.contains("%p").any()
    assert not (res["qid"] == res["docno"]).any()        # the query paper is excluded
    top = res.sort_values(["qid", "rank"]).groupby("qid").head(1).set_index("qid")["docno"]
    assert top["parsing"] != top["sentiment"]


def test_a_file_or_dataframe_of_papers_is_a_dataset_argument(collection, home):
    """ps.pipeline(..., dataset=FILE or DataFrame) registers the papers first (sci/local/<stem>-<hash>): two files
    of one name are two corpora; the same file again is the same corpus, not read again."""
    d = collection["dir"]
    bm25 = ps.pipeline("bm25", dataset=str(d / "papers.jsonl"))
    res = bm25.search("sentiment analysis")
    assert len(res) > 0 and set(res["docno"]) <= {p.doc_id for p in collection["papers"]}
    names = list(L.local_corpora())
    assert len(names) == 1 and names[0].startswith("papers-")
    ps.pipeline("bm25", dataset=d / "papers.jsonl")
    assert list(L.local_corpora()) == names
    other = d / "other"
    other.mkdir(exist_ok=True)
    (other / "papers.jsonl").write_bytes((d / "papers.jsonl").read_bytes())
    ps.pipeline("bm25", dataset=other / "papers.jsonl")
    assert len(L.local_corpora()) == 2
    df = pd.DataFrame([{"docno": p.doc_id, "title": p.title, "abstract": p.abstract} for p in collection["papers"]])
    dense = ps.pipeline("dense(backend='torch')", dataset=df)
    assert dense.search("sentiment analysis")["docno"].iloc[0] in set(df["docno"])
    assert any(n.startswith("dataframe-") for n in L.local_corpora())
    # an id that is neither registered nor a file is still an unknown dataset
    with pytest.raises(Exception, match="unknown dataset|no-such"):
        ps.pipeline("bm25", dataset="no-such.jsonl").search("x")


def test_a_local_corpus_is_served(collection, home, tmp_path):
    """pyterrier-sci serve on a local corpus: its search API answers as the pipeline in-process, with the papers'
    titles from the corpus."""
    import signal

    from serve_helpers import request, start_cli
    dsid = ps.register_corpus("served", collection["dir"] / "papers.jsonl")
    config = tmp_path / "served.yaml"
    config.write_text(f"dataset: {dsid}\ncomponents:\n  bm25: {{component: bm25}}\npipelines:\n  BM25: bm25\n")
    want = ps.pipeline("bm25", dataset=dsid).search("sentiment analysis of movie reviews")
    proc, url = start_cli(str(config), "--pipelines", "BM25", "--log-level", "warning",
                          env={"PYTERRIER_SCI_HOME": str(home)})
    try:
        status, _, got = request(url + "/v1/search", "POST", {"query": "sentiment analysis of movie reviews", "k": 5,
                                                               "pipeline": "BM25"})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert status == 200, got
    assert [h["docno"] for h in got["results"]] == want["docno"].tolist()[:5]
    titles = {p.doc_id: p.title for p in collection["papers"]}
    assert [h["title"] for h in got["results"]] == [titles[d] for d in want["docno"].tolist()[:5]]


@needs_data("mir-multicite")
def test_models_trained_on_a_benchmark_apply_to_a_local_corpus(collection, home):
    """SciFACE's facet cross-encoder trained on all of CSFCube's Method judgements and MIR's encoder trained on
    MIR-MultiCite's earlier proposals re-rank / retrieve a local corpus; each is an artifact in the work directory,
    trained once, that applies to any collection by its path; the comparison runs in ps.Experiment."""
    from pyterrier_sci.plugins.sciface import FacetCrossEncoder
    from pyterrier_sci.training import trainings
    d = collection["dir"]
    dsid = ps.register_corpus("mine", d / "papers.jsonl", topics=d / "topics.tsv", qrels=d / "qrels.txt")
    ds = pt.get_dataset(dsid)
    topics = ds.get_topics()
    facet = ("sciface_rerank(train=True, train_dataset='irds:sci/csfcube/method', epochs=1, triplets_per_seed=2, "
             "max_length=64, val_seeds=0, seed=0)")
    mir = ("mir_dense(train=True, train_dataset='irds:sci/mir-multicite/dev/chrono-train', max_steps=1, batch_size=2, "
           "sampling=False, triplets='T1', max_seq_length=32)")
    since = len(trainings())
    sciface = ps.pipeline(f"bm25 % 30 >> {facet}", dataset=dsid)
    trained = trainings(since)
    assert [t["model"].split("-all-")[0] for t in trained] == ["sci__csfcube__method"]
    path = home / "models" / "sciface" / trained[0]["model"]
    model = FacetCrossEncoder(path)
    assert model.facet == "method"
    res = sciface(topics)
    assert set(res["qid"]) == set(topics["qid"]) and res.groupby("qid").size().max() == 30
    # the seed is the query's paper (CSFCube's qid convention) and the score is the model's on (seed, candidate)
    row = res.sort_values(["qid", "rank"]).iloc[0]
    store = ds.irds_ref().docs_store()
    seed, cand = store.get(row["qid"].split("_")[0]), store.get(row["docno"])
    direct = model.score([(seed.title, seed.abstract)], [(cand.title, cand.abstract)])
    assert abs(float(direct[0]) - row["score"]) < 1e-4
    # built again: the artifact is reused, not trained again; by its path it re-ranks the same way
    ps.pipeline(f"bm25 % 30 >> {facet}", dataset=dsid)
    assert len(trainings(since)) == 1
    by_path = ps.pipeline(f"bm25 % 30 >> sciface_rerank(model='{path}')", dataset=dsid)(topics)
    pd.testing.assert_frame_equal(by_path[["qid", "docno", "rank"]], res[["qid", "docno", "rank"]])
    # trained on every CSFCube Method query, it cannot re-rank them
    with pytest.raises(ps.PipelineError, match="cross-fits them"):
        ps.pipeline(f"bm25 % 30 >> {facet}", dataset="irds:sci/csfcube/method")
    with pytest.raises(ps.PipelineError, match="train_dataset need train=True"):
        ps.pipeline("sciface_rerank(train_dataset='irds:sci/csfcube/method')", dataset=dsid)
    with pytest.raises(ps.PipelineError, match="CSFCube facet's judgements"):
        ps.pipeline("sciface_rerank(train=True, train_dataset='irds:sci/doris-mae')", dataset=dsid)

    dense_mir = ps.pipeline(mir, dataset=dsid)
    got = dense_mir(topics)
    assert set(got["docno"]) <= {p.doc_id for p in collection["papers"]} and got.groupby("qid").size().min() > 0
    mir_path = [t for t in trainings(since) if "mir" in t["what"].lower()]
    assert len(mir_path) == 1
    again = ps.pipeline(f"mir_dense(model='{home / 'models' / 'mir' / mir_path[0]['model']}')", dataset=dsid)(topics)
    pd.testing.assert_frame_equal(again[["qid", "docno", "rank"]], got[["qid", "docno", "rank"]])
    table = ps.Experiment([ps.pipeline("bm25", dataset=dsid), sciface, dense_mir], topics, ds.get_qrels(),
                          ["nDCG@10"], names=["BM25", "SciFACE", "MIR"])
    assert list(table["name"]) == ["BM25", "SciFACE", "MIR"] and table["nDCG@10"].between(0, 1).all()


def _scores(res):
    return {(r.qid, r.docno): r.score for r in res.itertuples()}


def test_appending_and_retracting_papers_carries_the_indexes_over(collection, home, tmp_path, capsys):
    """A corpus grows by a new version (append=True, retract=...): the previous version's Lucene and dense indexes
    are carried over by appending and retracting the papers that differ, equal to the indexes of the same papers
    registered afresh; topics and qrels are kept, a retracted paper's judgements dropped."""
    d = collection["dir"]
    lines = (d / "papers.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "first.jsonl").write_text("".join(lines[:-5]), encoding="utf-8")
    (tmp_path / "more.jsonl").write_text("".join(lines[-5:]), encoding="utf-8")
    dsid = ps.register_corpus("growing", tmp_path / "first.jsonl")
    systems = ["bm25(backend='lucene')", "dense(backend='torch')"]
    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["sentiment of online arguments", "neural parsing"]})
    for s in systems:
        ps.pipeline(s, dataset=dsid)(topics)
    first = L.corpus_manifest("growing")["version"]

    dsid = ps.register_corpus("growing", tmp_path / "more.jsonl", append=True)
    m = L.corpus_manifest("growing")
    assert m["version"] != first and m["documents"] == len(lines)
    assert m["grown_from"] == {"version": first, "appended": 5, "retracted": 0}
    carried = home / "indexes" / f"sci__local__growing@{m['version']}"
    metas = {p.name: json.loads((p / "pt_meta.json").read_text()) for p in carried.iterdir() if p.is_dir()}
    assert len(metas) == 2 and all(x["generation"] == 1 and x["history"][-1]["op"] == "append"
                                   and x["docs"]["count"] == len(lines) for x in metas.values())
    fresh = ps.register_corpus("fresh", d / "papers.jsonl")
    for s in systems:
        got, want = ps.pipeline(s, dataset=dsid)(topics), ps.pipeline(s, dataset=fresh)(topics)
        assert list(got["docno"]) == list(want["docno"]), s
        assert all(abs(a - want_s) < 1e-4 for a, want_s in zip(got["score"], want["score"])), s
    # the same docnos' hash as the fresh corpus's indexes: the carried index holds the same collection
    fresh_dir = home / "indexes" / f"sci__local__fresh@{L.corpus_manifest('fresh')['version']}"
    for name, meta in metas.items():
        assert meta["docs"]["hash"] == json.loads((fresh_dir / name / "pt_meta.json").read_text())["docs"]["hash"]

    # retract two papers from the command line: a third version, its indexes carried over again
    gone = [json.loads(x)["docno"] for x in lines[:2]]
    (tmp_path / "gone.txt").write_text("\n".join(gone) + "\n", encoding="utf-8")
    assert main(["corpus", "add", "growing", "--retract", str(tmp_path / "gone.txt")]) == 0
    assert "2 retracted" in capsys.readouterr().out
    m3 = L.corpus_manifest("growing")
    again = home / "indexes" / f"sci__local__growing@{m3['version']}"
    for s in systems:
        res = ps.pipeline(s, dataset=dsid)(topics)
        assert not set(gone) & set(res["docno"]) and len(res) > 0
    assert all(json.loads((p / "pt_meta.json").read_text())["docs"]["count"] == len(lines) - 2
               for p in again.iterdir() if p.is_dir())
    # errors: appending a docno the corpus holds; retracting one it does not; nothing registered then
    with pytest.raises(RecordError, match="already in the corpus"):
        ps.register_corpus("growing", tmp_path / "more.jsonl", append=True)
    with pytest.raises(RecordError, match="not in the corpus"):
        ps.register_corpus("growing", None, retract=["no-such-paper"])
    with pytest.raises(RecordError, match="no corpus 'nothing' is registered"):
        ps.register_corpus("nothing", tmp_path / "more.jsonl", append=True)
    assert L.corpus_manifest("growing")["version"] == m3["version"]


def test_judgements_of_a_retracted_paper_are_dropped(collection, home):
    d = collection["dir"]
    dsid = ps.register_corpus("judged", d / "papers.jsonl", topics=d / "topics.tsv", qrels=d / "qrels.txt")
    judged = collection["judged"]
    gone = judged["doc_id"].iloc[0]
    ps.register_corpus("judged", None, retract=[gone])
    m = L.corpus_manifest("judged")
    assert m["judgements_dropped"] == (judged["doc_id"] == gone).sum() and m["topics"] == 3
    qrels = pt.get_dataset(dsid).get_qrels()
    assert len(qrels) == len(judged) - m["judgements_dropped"] and gone not in set(qrels["docno"])


def test_the_sharded_ray_index_takes_a_local_corpus(collection, home, capsys):
    """pyterrier-sci index irds:sci/local/NAME --shards 2: Ray's workers find the corpus (registered in the work
    directory they are given), and the sharded index answers as the flat index of the same papers."""
    pytest.importorskip("ray")
    import ray
    dsid = ps.register_corpus("sharded", collection["dir"] / "papers.jsonl")
    try:
        assert main(["index", dsid, "--shards", "2", "--workers", "2", "--quiet"]) == 0
    finally:
        if ray.is_initialized():
            ray.shutdown()
    path = capsys.readouterr().out.strip().splitlines()[-1]
    meta = json.loads((Path(path) / "pt_meta.json").read_text())
    assert sum(s["end"] - s["start"] for s in meta["shards"]) == len(collection["papers"])
    assert f"sci__local__sharded@{L.corpus_manifest('sharded')['version']}" in path
    query = "sentiment of online arguments"
    got = ps.pipeline(f"dense(index='{path}')", dataset=dsid).search(query)
    want = ps.pipeline("dense(backend='torch')", dataset=dsid).search(query)
    assert list(got["docno"][:10]) == list(want["docno"][:10])
    assert np.allclose(got["score"][:10], want["score"][:10], atol=1e-5)


@needs_data("hepth-citations")
def test_a_corpus_with_citations_has_core_citation_sets_equal_to_the_benchmarks(home, tmp_path):
    """hep-th's papers and citation links registered as a local corpus (papers without an abstract as records
    without text): its core-citation sets (HLM-Cite, Eq. 1) are sci/hepth-core-citations' own, query for query and
    grade for grade; a corpus without citations has none."""
    import ir_datasets

    from pyterrier_sci.datasets.core_citations import HEPTH
    graph, papers = HEPTH.graph(), HEPTH.papers()
    ids = set(papers) | set(graph.references) | set(graph.cited_by)
    with open(tmp_path / "hepth.jsonl", "w", encoding="utf-8") as f:
        for d in sorted(ids):
            p = papers.get(d)
            f.write(json.dumps({"docno": d, "title": p.title if p else "", "abstract": p.abstract if p else "",
                                "citations": sorted(graph.references.get(d, ()))}) + "\n")
    ps.register_corpus("hepth", tmp_path / "hepth.jsonl")
    for split in ("test", "test/c10", "train/c10"):
        ours = ir_datasets.load(f"sci/local/hepth/core-citations/{split}")
        theirs = ir_datasets.load(f"sci/hepth-core-citations/{split}")
        assert [q.query_id for q in ours.queries_iter()] == [q.query_id for q in theirs.queries_iter()], split
        assert sorted(ours.qrels_iter()) == sorted(theirs.qrels_iter()), split
    assert len(list(ir_datasets.load("sci/local/hepth/core-citations/test").queries_iter())) > 100
    # and the ids use the corpus's documents (its version keys their indexes)
    assert pt.get_dataset("irds:sci/local/hepth/core-citations/test").irds_ref().docs_handler().sci_version() == \
        L.corpus_manifest("hepth")["version"]
    ps.register_corpus("plain", pd.DataFrame([{"docno": "a", "title": "x"}, {"docno": "b", "title": "y"}]))
    assert list(ir_datasets.load("sci/local/plain/core-citations/test").queries_iter()) == []
