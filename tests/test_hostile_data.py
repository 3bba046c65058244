"""Damaged data files: each is one DamagedDataError naming the file (and the line), never a run on
what is left.  Real files of the data directory are linked (intact) or copied and damaged under
tmp_path; PYTERRIER_SCI_DATA points there and PYTERRIER_SCI_HOME (where verdicts are cached) too."""

import json
import os
import shutil
from pathlib import Path

import ir_datasets
import pytest
from conftest import DATA

import pyterrier_sci  # noqa: F401  (registers the datasets)
from pyterrier_sci import data as D
from pyterrier_sci.data import DamagedDataError
from pyterrier_sci.datasets import acl_fulltext, core_citations, csfcube, doris_mae, mir_multicite, scifullbench

FIXTURES = Path(__file__).parent / "fixtures"


def _clear_caches():
    for fn in (
        csfcube._docs_by_id,
        csfcube._annotations,
        csfcube._splits,
        doris_mae._release,
        doris_mae._offline_queries,
        doris_mae._birco,
        mir_multicite._read,
    ):
        fn.cache_clear()
    for source in (core_citations.HEPTH, core_citations.ACL, acl_fulltext.SOURCE, scifullbench.BENCH):
        source.clear()
    D.forget_verdicts()


class Data:
    """A data directory under tmp_path: ``link`` an intact file, ``copy`` one to damage."""

    def __init__(self, root: Path):
        self.root = root

    def link(self, *rels):
        for rel in rels:
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.symlink_to(DATA / rel)

    def copy(self, rel, src=None) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src or DATA / rel, p)
        return p


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTERRIER_SCI_OFFLINE", "1")
    monkeypatch.delenv("PYTERRIER_SCI_CHECKSUMS", raising=False)
    _clear_caches()
    yield Data(tmp_path / "data")
    _clear_caches()


# -- damage ------------------------------------------------------------------------------------


def cut_lines(p: Path, keep: float = 0.9) -> None:
    """Keeps the first ``keep`` share of the lines (a cut at a line boundary)."""
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[: int(len(lines) * keep)]))


def cut_bytes(p: Path, keep: float = 0.5) -> int:
    """Cuts the file in the middle of a line; returns that line's number."""
    b = p.read_bytes()
    n = int(len(b) * keep)
    while b[n - 1 : n] in (b"\n", b""):
        n -= 1
    p.write_bytes(b[:n])
    return b[:n].count(b"\n") + 1


def edit_line(p: Path, lineno: int, fn) -> None:
    lines = p.read_bytes().split(b"\n")
    lines[lineno - 1] = fn(lines[lineno - 1])
    p.write_bytes(b"\n".join(lines))


def no_checksums(monkeypatch):
    """What a user with another release does: the structure and cross-reference checks still run."""
    monkeypatch.setenv("PYTERRIER_SCI_CHECKSUMS", "0")


def damaged(fn, path: Path, *patterns, line=None):
    with pytest.raises(DamagedDataError) as e:
        fn()
    msg = str(e.value)
    assert str(path) in msg and e.value.path == str(path), msg
    if line is not None:
        assert f"line {line}:" in msg and e.value.line == line, msg
    for pat in patterns:
        assert pat in msg, msg
    assert "\n" not in msg
    return msg


# -- CSFCube -------------------------------------------------------------------------------------

CSF = {k: f.path for k, f in csfcube.FILES.items()}


def _csf(data, damage_key=None):
    data.link(*[rel for k, rel in CSF.items() if k != damage_key])
    return data.copy(CSF[damage_key]) if damage_key else None


def _method_qrels():
    return list(ir_datasets.load("sci/csfcube/method").qrels_iter())


def _method_pool():
    return list(ir_datasets.load("sci/csfcube/method").scoreddocs_iter())


def _method_topics():
    return list(ir_datasets.load("sci/csfcube/method").queries_iter())


def test_csfcube_intact_passes_and_the_verdict_is_cached(data, tmp_path):
    q = _csf(data, "queries")
    assert len(_method_pool()) == 2174 and len(_method_topics()) == 17
    verdicts = json.loads((tmp_path / "home" / "verified-data.json").read_text())
    assert "csfcube" in verdicts.values() and len(verdicts) == 7  # 6 checksums + the cross-reference check
    # a later process (the in-process memo forgotten) takes the cached verdict: a same-size, same-time
    # change goes unseen - the documented price of keying on path, size and modification time
    D.forget_verdicts()
    _clear_caches()
    st = q.stat()
    edit_line(q, 3, lambda b: b.replace(b"a", b"b"))
    os.utime(q, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert len(_method_topics()) == 17
    os.utime(q, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: checked again
    D.forget_verdicts()
    damaged(
        _method_topics,
        q,
        "SHA-256",
        "PYTERRIER_SCI_CHECKSUMS=0",
        "e-download it from https://raw.githubusercontent.com/iesl/CSFCube",
    )


def test_csfcube_corpus_cut_at_a_line_boundary(data, monkeypatch):
    p = _csf(data, "corpus")
    cut_lines(p)
    damaged(_method_qrels, p, "SHA-256", "rebuilt from csfcube/readable_annotations")
    no_checksums(monkeypatch)
    _clear_caches()
    damaged(_method_pool, p, "are not in it", "the corpus is incomplete")


def test_csfcube_corpus_cut_mid_line_non_utf8_malformed_and_empty(data, monkeypatch):
    no_checksums(monkeypatch)
    p = _csf(data, "corpus")
    line = cut_bytes(p)
    damaged(_method_qrels, p, "malformed JSON line", "the file is truncated", line=line)
    shutil.copyfile(DATA / CSF["corpus"], p)
    _clear_caches()
    edit_line(p, 7, lambda b: b[:40] + b"\xff" + b[41:])
    damaged(_method_qrels, p, "not UTF-8", line=7)
    shutil.copyfile(DATA / CSF["corpus"], p)
    _clear_caches()
    edit_line(p, 12, lambda b: b[:-5])
    damaged(_method_qrels, p, "malformed JSON line", line=12)
    shutil.copyfile(DATA / CSF["corpus"], p)
    _clear_caches()
    edit_line(p, 3, lambda b: b.replace(b'"paper_id"', b'"paperid"'))
    damaged(lambda: csfcube.docs(), p, "lacks the field(s) ['paper_id']", line=3)
    p.write_bytes(b"")
    _clear_caches()
    damaged(lambda: list(ir_datasets.load("sci/csfcube").docs_iter()), p, "empty")


def test_csfcube_annotations_with_fewer_grades_than_candidates(data, monkeypatch):
    p = _csf(data, "method")
    ann = json.loads(p.read_text())
    pid = next(iter(ann))
    ann[pid]["relevance_adju"] = ann[pid]["relevance_adju"][:-5]
    p.write_text(json.dumps(ann))
    damaged(_method_pool, p, "SHA-256")
    no_checksums(monkeypatch)
    _clear_caches()
    n = len(ann[pid]["cands"])
    damaged(_method_pool, p, f"query paper {pid} has {n} candidates but {n - 5} grades")


def test_csfcube_annotations_list_shaped_or_truncated(data, monkeypatch):
    no_checksums(monkeypatch)
    p = _csf(data, "background")
    p.write_text(json.dumps(list(json.loads((DATA / CSF["background"]).read_text()).values())))
    damaged(
        lambda: list(ir_datasets.load("sci/csfcube/background").queries_iter()),
        p,
        "expected an object at the top level, found a list",
    )
    cut_bytes(p, 0.6)
    _clear_caches()
    damaged(lambda: list(ir_datasets.load("sci/csfcube/background").queries_iter()), p, "malformed JSON", "truncated")


def test_csfcube_queries_csv_cut_mid_row_or_at_a_row_boundary(data, monkeypatch):
    no_checksums(monkeypatch)
    p = _csf(data, "queries")
    text = (DATA / CSF["queries"]).read_text()
    lines = text.splitlines(keepends=True)
    half = "".join(lines[: len(lines) // 2])
    p.write_text(half + lines[len(lines) // 2].split(",")[0])  # the last row keeps only its first field
    damaged(_method_topics, p, "fields, the header", "cut short", line=len(lines) // 2 + 1)
    p.write_text(half)  # rows that are all complete, but only half of them
    _clear_caches()
    damaged(_method_topics, p, "annotated queries are not in it")
    p.write_text(text.replace("pid,", "paper,", 1))
    _clear_caches()
    damaged(_method_topics, p, "lacks the column(s) ['pid']", line=1)


def test_csfcube_damaged_data_is_one_line_and_exit_2_in_the_cli(data, monkeypatch, capsys, tmp_path):
    from pyterrier_sci.cli import main

    no_checksums(monkeypatch)
    p = _csf(data, "method")
    ann = json.loads(p.read_text())
    pid = next(iter(ann))
    ann[pid]["relevance_adju"] = ann[pid]["relevance_adju"][:3]
    p.write_text(json.dumps(ann))
    run = tmp_path / "run.trec"
    run.write_text("10010426_method Q0 1 1 1.0 x\n")
    assert main(["evaluate", str(run), "--dataset", "irds:sci/csfcube/method", "--measures", "MAP"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(p) in err and "candidates but 3 grades" in err


# -- DORIS-MAE -----------------------------------------------------------------------------------

DORIS = {k: f.path for k, f in doris_mae.FILES.items() if k != "release"}


def _doris(data, damage_key=None):
    data.link(*[rel for k, rel in DORIS.items() if k != damage_key])
    return data.copy(DORIS[damage_key]) if damage_key else None


def _birco_qrels():
    return list(ir_datasets.load("sci/doris-mae/birco-dev").qrels_iter())


def test_doris_offline_intact(data):
    _doris(data)
    assert (
        len(_birco_qrels()) == 3129
        and len(list(ir_datasets.load("sci/doris-mae/subquery-2-texts").queries_iter())) == 1003
    )


def test_doris_qrels_cut_mid_row_and_corpus_cut_at_a_line_boundary(data, monkeypatch):
    p = _doris(data, "birco_qrels")
    n = len(p.read_bytes().splitlines())
    cut_bytes(p, 0.5)
    damaged(_birco_qrels, p, "SHA-256")
    no_checksums(monkeypatch)
    _clear_caches()
    damaged(_birco_qrels, p, "of the 40 queries of queries.jsonl have no judgements in it", "truncated")
    assert n > 1000
    _clear_caches()
    (data.root / DORIS["birco_qrels"]).unlink()
    data.link(DORIS["birco_qrels"])
    (data.root / DORIS["birco_corpus"]).unlink()
    c = data.copy(DORIS["birco_corpus"])
    cut_lines(c, 0.5)
    damaged(_birco_qrels, c, "abstract(s) judged in qrels.tsv are not in it")


def test_doris_queries_shape_and_subqueries(data, monkeypatch):
    no_checksums(monkeypatch)
    p = _doris(data, "queries")
    p.write_text(json.dumps({"0": json.loads((DATA / DORIS["queries"]).read_text())[0]}))
    damaged(
        lambda: list(ir_datasets.load("sci/doris-mae/queries").queries_iter()),
        p,
        "expected a list at the top level, found an object",
    )
    p.write_text(json.dumps([{"query_id": 0, "query_text": "x"}]))
    _clear_caches()
    damaged(lambda: list(ir_datasets.load("sci/doris-mae/queries").queries_iter()), p, "query entry 0 lacks 'aspects'")
    s = data.root / DORIS["subquery2"]
    s.unlink()
    s.write_text("nothing here\n")
    _clear_caches()
    shutil.copyfile(DATA / DORIS["queries"], p)
    damaged(lambda: list(ir_datasets.load("sci/doris-mae/subquery-2-texts").queries_iter()), s, "0 sub-queries")


def test_doris_release_truncated_or_pool_outside_the_corpus(data, tmp_path):
    p = data.copy("doris-mae/DORIS-MAE_dataset_v1.json", FIXTURES / "doris_mae_v1_tiny.json")
    rel = json.loads(p.read_text())
    p.write_text(json.dumps(rel, indent=1))
    cut_bytes(p, 0.7)
    damaged(lambda: list(ir_datasets.load("sci/doris-mae").queries_iter()), p, "malformed JSON", "zenodo.org")
    rel["Query"][0]["candidate_pool"].append(999999)
    p.write_text(json.dumps(rel))
    _clear_caches()
    damaged(
        lambda: list(ir_datasets.load("sci/doris-mae").scoreddocs_iter()),
        p,
        "query 0",
        "not in the Corpus (e.g. 999999)",
    )


# -- MIR-MultiCite -------------------------------------------------------------------------------

MIR_DEV = mir_multicite.FILES["dev"].path


def _mir_qrels():
    return list(ir_datasets.load("sci/mir-multicite/dev").qrels_iter())


def test_mir_intact_and_cut_at_a_row_boundary(data):
    data.link(MIR_DEV)
    assert len(_mir_qrels()) > 0
    (data.root / MIR_DEV).unlink()
    p = data.copy(MIR_DEV)
    text = p.read_text()
    p.write_text(text[: text.rindex("\n", 0, len(text) // 2) + 1])  # a CSV row may span lines: cut before one
    _clear_caches()
    damaged(_mir_qrels, p, "SHA-256", "Methodology-Inspiration-Retrieval")


def test_mir_cut_mid_row_and_non_utf8(data, monkeypatch):
    no_checksums(monkeypatch)
    p = data.copy(MIR_DEV)
    cut_bytes(p, 0.5)
    with pytest.raises(DamagedDataError) as e:
        _mir_qrels()
    assert str(p) in str(e.value) and e.value.line is not None
    b = (DATA / MIR_DEV).read_bytes()
    i = b.index(b"\n", len(b) // 3)
    p.write_bytes(b[:i] + b"\xe9" + b[i:])
    _clear_caches()
    damaged(_mir_qrels, p, "byte 0xe9 is not UTF-8", line=b[:i].count(b"\n") + 1)


# -- core citations (hep-th, ACL) --------------------------------------------------------------------


def test_hepth_edges_truncated(data, monkeypatch):
    data.link(core_citations._HEPTH["papers"].path)
    p = data.copy(core_citations._HEPTH["edges"].path)
    cut_bytes(p, 0.5)
    damaged(
        lambda: list(ir_datasets.load("sci/hepth-core-citations/test/c10").qrels_iter()),
        p,
        "SHA-256",
        "snap.stanford.edu",
    )
    no_checksums(monkeypatch)
    _clear_caches()
    damaged(lambda: core_citations.HEPTH.graph(), p, "cannot be decompressed")


def test_acl_edges_malformed_and_papers_incomplete(data, monkeypatch):
    no_checksums(monkeypatch)
    data.link(core_citations._ACL["papers"].path)
    p = data.copy(core_citations._ACL["edges"].path)
    edit_line(p, 5, lambda b: b.replace(b"\t", b" "))
    damaged(lambda: core_citations.ACL.graph(), p, "expected '<citing><TAB><cited>'", line=5)
    shutil.copyfile(DATA / core_citations._ACL["edges"].path, p)
    with open(p, "a") as f:
        f.write("A00-1020\tZ99-9999\taan\n")
    _clear_caches()
    damaged(
        lambda: core_citations.ACL.graph(),
        data.root / core_citations._ACL["papers"].path,
        "in-set links in edges_inset.tsv are not in it (e.g. Z99-9999)",
    )


# -- ACL full text (PRISM) -------------------------------------------------------------------------

ACL_FILES = {k: f.path for k, f in acl_fulltext.FILES.items()}


def test_acl_fulltext_queries_damaged(data, monkeypatch):
    data.link(ACL_FILES["papers"])
    p = data.copy(ACL_FILES["queries"])
    assert len(list(ir_datasets.load("sci/acl-fulltext/references").queries_iter())) == 949
    _clear_caches()
    edit_line(p, 9, lambda b: b[: len(b) // 2])
    load = lambda: list(ir_datasets.load("sci/acl-fulltext/references").qrels_iter())  # noqa: E731
    damaged(load, p, "SHA-256")
    no_checksums(monkeypatch)
    _clear_caches()
    damaged(load, p, "malformed JSON line", line=9)
    shutil.copyfile(DATA / ACL_FILES["queries"], p)
    edit_line(p, 2, lambda b: b.replace(b'"relevant_refs": [', b'"relevant_refs": ["X99-9999", ', 1))
    _clear_caches()
    damaged(load, data.root / ACL_FILES["papers"], "query", "(e.g. X99-9999)", "the corpus is incomplete")


# -- SciFullBench ----------------------------------------------------------------------------------


def test_scifullbench_corpus_and_query_files_damaged(data):
    root = data.root / "scifullbench"
    shutil.copytree(FIXTURES / "scifullbench", root)
    bench = scifullbench.BENCH
    assert len(bench.corpus()) == 4
    corpus = bench.corpus_file()
    text = corpus.read_text()
    corpus.write_text(json.dumps(json.loads(text), indent=1)[:300])
    bench.clear()
    damaged(bench.corpus, corpus, "malformed JSON", "Jackson0018/SciFullBench")
    corpus.write_text("[]")
    bench.clear()
    damaged(bench.corpus, corpus, "no papers")
    corpus.write_text(text)
    bench.clear()
    q = next((root / scifullbench.FINAL / "Benchmark" / "ACL" / "Direct_References").glob("*.json"))
    q.write_text(json.dumps([json.loads(q.read_text())]))
    damaged(
        lambda: list(ir_datasets.load("sci/scifullbench/acl/references").queries_iter()),
        q,
        "expected an object at the top level, found a list",
    )
    q.write_bytes(b"\xff\xfe{}")
    bench.clear()
    damaged(lambda: bench.queries("acl", "references"), q, "not UTF-8", line=1)


def test_hlm_release_table_truncated_or_misshapen(tmp_path):
    import numpy as np

    root = tmp_path / "hlm"
    root.mkdir()
    table = root / "train_table.npy"
    np.save(table, np.arange(22).reshape(2, 11))
    b = table.read_bytes()
    table.write_bytes(b[: len(b) - 40])
    damaged(lambda: core_citations.read_hlm_release(root, "train"), table, "not a readable .npy table", "H-LM")
    np.save(table, np.arange(10).reshape(2, 5))
    damaged(lambda: core_citations.read_hlm_release(root, "train"), table, "expected rows of 11 ids", "(2, 5)")
