"""Writers that must not lose or overwrite data (issue 31, items 1-4): no writer follows a symbolic
link planted at its target, its temporary, its checksum record or its lock; two pipelines never
share a saved run; two processes building one docstore build it once; a rebuilt CSFCube corpus is
the released file (or recognised as the toolkit's own rebuild)."""
import hashlib
import json
import multiprocessing
import os
import shutil
import time
import warnings
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest
from conftest import DATA, needs_data

import pyterrier_sci  # noqa: F401  (registers the datasets)
from pyterrier_sci import artifacts
from pyterrier_sci.artifacts import LinkReplacedWarning
from pyterrier_sci.experiment import experiment_outcome, pipeline_key, run_path, write_run

RESULTS = pd.DataFrame({"qid": ["1", "1", "2"], "docno": ["a", "b", "a"], "score": [2.0, 1.0, 3.0],
                        "rank": [0, 1, 0]})


@pytest.fixture
def victim(tmp_path):
    """A file the user owns outside the place the writer was told to write to."""
    p = tmp_path / "elsewhere" / "precious.txt"
    p.parent.mkdir()
    p.write_text("precious\n")
    return p


def _untouched(victim: Path):
    assert victim.read_text() == "precious\n" and not victim.is_symlink()


# ------------------------------------------------------------------------ 1. links, writer by writer

def test_run_output_link_is_replaced_not_followed(tmp_path, victim):
    out = tmp_path / "out" / "run.trec"
    out.parent.mkdir()
    out.symlink_to(victim)
    with pytest.warns(LinkReplacedWarning, match="precious.txt"):
        write_run(RESULTS, out)
    _untouched(victim)
    assert not out.is_symlink() and len(pt.io.read_results(str(out))) == 3


def test_a_link_at_the_temporary_name_or_the_checksum_record_is_not_followed(tmp_path, victim):
    out = tmp_path / "run.res.gz"
    planted = artifacts._temporary(out)  # the name a writer of this process uses beside the target
    planted.symlink_to(victim)
    (tmp_path / "run.res.gz.sha256").symlink_to(victim)
    with pytest.warns(LinkReplacedWarning):
        write_run(RESULTS, out, checksum=True)
    _untouched(victim)
    assert artifacts.verify_checksum(out) is True and not (tmp_path / "run.res.gz.sha256").is_symlink()
    assert not os.path.lexists(planted)


def test_a_link_at_the_lock_file_is_removed_not_truncated(tmp_path, victim):
    target = tmp_path / "index"
    artifacts._lock_path(target).symlink_to(victim)
    with artifacts.lock(target):
        assert not artifacts._lock_path(target).is_symlink()
    _untouched(victim)


def test_pt_meta_and_manifest_links_are_replaced(tmp_path, victim):
    from pyterrier_sci.manifest import write_manifest
    d = tmp_path / "artifact"
    d.mkdir()
    (d / "pt_meta.json").symlink_to(victim)
    with pytest.warns(LinkReplacedWarning):
        artifacts.write_pt_meta(d, type="t", format="f")
    assert json.loads((d / "pt_meta.json").read_text())["type"] == "t"
    m = tmp_path / "exp.manifest.json"
    m.symlink_to(victim)
    with pytest.warns(LinkReplacedWarning):
        write_manifest({"kind": "experiment"}, m)
    assert json.loads(m.read_text()) == {"kind": "experiment"}
    _untouched(victim)


def test_an_artifact_path_that_is_a_link_is_replaced_on_overwrite(tmp_path):
    """``build_atomically(overwrite=True)`` over a link to a directory: the link is moved aside and
    removed, the directory it named keeps its files."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("keep\n")
    index = tmp_path / "work" / "index"
    index.parent.mkdir()
    index.symlink_to(theirs, target_is_directory=True)

    def build(tmp):
        tmp.mkdir()
        (tmp / "data").write_text("new\n")
    artifacts.build_atomically(index, build, overwrite=True)
    assert not index.is_symlink() and (index / "data").read_text() == "new\n"
    assert sorted(p.name for p in theirs.iterdir()) == ["keep.txt"] and (theirs / "keep.txt").read_text() == "keep\n"


def test_verdict_cache_link_is_replaced(tmp_path, monkeypatch, victim):
    from pyterrier_sci import data as D
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "verified-data.json").symlink_to(victim)
    f = tmp_path / "file.txt"
    f.write_text("x\n")
    D.forget_verdicts()
    with pytest.warns(LinkReplacedWarning):
        D.verified_once("a check", [f], lambda: None)
    _untouched(victim)


@needs_data("csfcube")
def test_report_files_that_are_links_are_replaced(tmp_path, csfcube, victim):
    """The issue's case: report.html / results.tex / perquery.csv links in the report directory."""
    from pyterrier_sci.report import write_report
    cfg = {"dataset": "irds:sci/csfcube", "pipelines": {"BM25": "pool >> bm25"},
           "experiments": {"e": {"dataset": "irds:sci/csfcube/method", "measures": ["MAP"]}}}
    outcome = experiment_outcome(cfg, write_manifest=False)
    report = tmp_path / "report"
    report.mkdir()
    for name in ("report.html", "results.tex", "perquery.csv"):
        (report / name).symlink_to(victim)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = write_report(outcome, report, manifest={})
    assert sum(issubclass(w.category, LinkReplacedWarning) for w in caught) == 3
    _untouched(victim)
    for name, path in written.items():
        assert not path.is_symlink() and path.stat().st_size > 100, name


# --------------------------------------------------------------------- 2. one saved run per system

def test_names_that_read_alike_on_disk_get_their_own_runs(tmp_path):
    from pyterrier_sci.pipeline import PipelineConfig
    cfg = PipelineConfig.from_dict({"pipelines": {"x<y": "pool >> bm25", "x>y": "pool >> bm25 % 3"}})
    a, b = (run_path(tmp_path, "irds:sci/csfcube/method", n, cfg) for n in ("x<y", "x>y"))
    assert a != b and a.parent == b.parent and a.name.startswith("x_y-") and b.name.startswith("x_y-")
    # the expression is in the key: a changed pipeline is not read back from the old run
    changed = PipelineConfig.from_dict({"pipelines": {"x<y": "pool >> bm25 % 5", "x>y": "pool >> bm25 % 3"}})
    assert run_path(tmp_path, "d", "x<y", changed) != run_path(tmp_path, "d", "x<y", cfg)
    # so are the settings of the components it uses, also through another named pipeline
    base = {"components": {"bm25": {"k1": 0.9}}, "pipelines": {"first": "pool >> bm25", "x": "first % 3"}}
    tuned = {"components": {"bm25": {"k1": 1.2}}, "pipelines": {"first": "pool >> bm25", "x": "first % 3"}}
    assert pipeline_key(PipelineConfig.from_dict(base), "x") != pipeline_key(PipelineConfig.from_dict(tuned), "x")
    assert pipeline_key(PipelineConfig.from_dict(base), "x") == pipeline_key(PipelineConfig.from_dict(base), "x")


@needs_data("csfcube")
def test_experiment_with_names_that_collide_as_files_scores_each_system(tmp_path, csfcube):
    """The issue's case: ``x<y`` (pool >> bm25) and ``x>y`` (pool >> bm25 % 3) both gave MAP 0.2227."""
    cfg = {"dataset": "irds:sci/csfcube",
           "pipelines": {"x<y": "pool >> bm25", "x>y": "pool >> bm25 % 3"},
           "experiments": {"e": {"dataset": "irds:sci/csfcube/method", "measures": ["MAP"],
                                 "save_dir": str(tmp_path / "runs")}}}
    table = experiment_outcome(cfg, write_manifest=False).table.set_index("name")
    assert table.loc["x<y", "MAP"] == pytest.approx(0.2227, abs=1e-4)
    assert table.loc["x>y", "MAP"] != pytest.approx(0.2227, abs=1e-3)
    saved = {p: pt.io.read_results(str(p)) for p in (tmp_path / "runs").rglob("*.res.gz")}
    assert sorted(r.groupby("qid").size().max() for r in saved.values()) == [3, 253]  # bm25 % 3; the largest pool
    again = experiment_outcome(cfg, write_manifest=False).table.set_index("name")  # read back, each its own
    pd.testing.assert_frame_equal(again, table)


def test_a_pipeline_listed_twice_is_one_error(tmp_path):
    from pyterrier_sci.experiment import _plan
    from pyterrier_sci.pipeline import PipelineError
    cfg = {"dataset": "irds:sci/csfcube", "pipelines": {"a": "pool >> bm25"},
           "experiments": {"e": {"dataset": "irds:sci/csfcube/method", "measures": ["MAP"], "pipelines": ["a", "a"],
                                 "save_dir": str(tmp_path)}}}
    with pytest.raises(PipelineError, match="'a' listed more than once"):
        _plan(cfg, None, None)


# ------------------------------------------------------------------- 3. one docstore, two builders

def _docs_module():
    from typing import NamedTuple

    class Doc(NamedTuple):
        doc_id: str
        text: str
    return Doc


_SLOW = {"delay": 0.0}


def _slow_docs():
    Doc = _DOC
    for i in range(400):
        if _SLOW["delay"]:
            time.sleep(_SLOW["delay"])
        yield Doc(str(i), f"document number {i} " * 5)


_DOC = _docs_module()


def _count_in_process(home: str, delay: float, queue):
    os.environ["PYTERRIER_SCI_HOME"] = home
    from pyterrier_sci.irds import FnDocs
    _SLOW["delay"] = delay
    store = FnDocs("test/two-builders", _slow_docs, _DOC, count_hint=400).docs_store()
    queue.put((store.count(), store.get("399").text))


def test_two_processes_building_one_docstore_build_it_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_count_in_process, args=(str(tmp_path), 0.002, queue)) for _ in range(2)]
    for p in procs:
        p.start()
        time.sleep(0.1)
    for p in procs:
        p.join(120)
    got = [queue.get(timeout=5) for _ in procs]
    assert got == [(400, "document number 399 " * 5)] * 2
    store_dir = tmp_path / "irds" / "test" / "two-builders" / "docs.pklz4"
    files = json.loads((store_dir / "files.json").read_text())
    assert files["bin"]["bytes"] == (store_dir / "bin").stat().st_size
    # the size of one build (the issue: twice the size, count 8,410 of 4,205, then "Invalid size")
    single = tmp_path / "single"
    q2 = ctx.Queue()
    p = ctx.Process(target=_count_in_process, args=(str(single), 0.0, q2))
    p.start()
    p.join(120)
    assert q2.get(timeout=5)[0] == 400
    assert (store_dir / "bin").stat().st_size == (single / "irds" / "test" / "two-builders" / "docs.pklz4" /
                                                  "bin").stat().st_size
    assert [d.doc_id for d in _store(tmp_path)] == [str(i) for i in range(400)]


def _store(home: Path):
    os.environ["PYTERRIER_SCI_HOME"] = str(home)
    from pyterrier_sci.irds import FnDocs
    return FnDocs("test/two-builders", _slow_docs, _DOC, count_hint=400).docs_store()


@pytest.mark.parametrize("damage", ["truncated", "same-size", "no-record"])
def test_a_damaged_docstore_is_built_again(tmp_path, monkeypatch, damage):
    from pyterrier_sci.data import forget_verdicts
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    assert _store(tmp_path).count() == 400
    d = tmp_path / "irds" / "test" / "two-builders" / "docs.pklz4"
    data = (d / "bin").read_bytes()
    if damage == "truncated":
        (d / "bin").write_bytes(data[: len(data) // 3])
    elif damage == "same-size":
        (d / "bin").write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        (d / "files.json").unlink()
    forget_verdicts()
    with pytest.warns(artifacts.DamagedFileWarning, match="docs.pklz4"):
        store = _store(tmp_path)
    assert store.count() == 400 and store.get("123").text.startswith("document number 123 ")
    assert (d / "bin").read_bytes() == data


def test_a_docstore_damaged_while_in_use_is_one_error_naming_it(tmp_path, monkeypatch):
    from pyterrier_sci.data import DamagedDataError
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    store = _store(tmp_path)
    assert store.count() == 400
    d = Path(store.path)
    data = (d / "bin").read_bytes()
    (d / "bin").write_bytes(data[: len(data) // 2])
    store = type(store)(path=str(d), init_iter_fn=_slow_docs, data_cls=_DOC, lookup_field="doc_id",
                        index_fields=["doc_id"])
    with pytest.raises(DamagedDataError, match=r"(?i)docs\.pklz4.*cannot be read.*delete the directory"):
        list(store)


# --------------------------------------------------------------------- 4. the rebuilt CSFCube corpus

@pytest.fixture
def csf_copy(tmp_path, monkeypatch):
    """A data directory with CSFCube's files linked, its corpus absent, its annotations copied."""
    from pyterrier_sci.data import forget_verdicts
    from pyterrier_sci.datasets import csfcube
    root = tmp_path / "data" / "csfcube"
    root.mkdir(parents=True)
    for p in (DATA / "csfcube").iterdir():
        if p.name == "readable_annotations":
            shutil.copytree(p, root / p.name)
        elif p.name != "abstracts-csfcube-reconstructed.jsonl":
            (root / p.name).symlink_to(p)
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    forget_verdicts()
    csfcube._docs_by_id.cache_clear()
    csfcube._said.clear()
    yield root
    forget_verdicts()
    csfcube._docs_by_id.cache_clear()


@needs_data("csfcube")
def test_a_deleted_corpus_is_rebuilt_byte_for_byte(csf_copy, caplog):
    from pyterrier_sci.datasets import csfcube
    with caplog.at_level("WARNING"):
        path = csfcube._corpus_path()
    released = DATA / "csfcube" / "abstracts-csfcube-reconstructed.jsonl"
    assert path.read_bytes() == released.read_bytes()
    assert "byte for byte the released file" in caplog.text
    assert len(csfcube.docs()) == 4205
    # and every later run reads it as the released file
    csfcube._docs_by_id.cache_clear()
    assert csfcube._corpus_path() == path and not Path(str(path) + ".sha256").exists()


@needs_data("csfcube")
def test_a_rebuild_from_other_annotations_is_the_toolkits_own(csf_copy, caplog):
    from pyterrier_sci.data import DamagedDataError, forget_verdicts
    from pyterrier_sci.datasets import csfcube
    f = sorted((csf_copy / "readable_annotations").glob("*.txt"))[0]
    text = f.read_text(encoding="utf-8")
    f.write_text(text.replace("TITLE: ", "TITLE: Revised: ", 1), encoding="utf-8")
    with caplog.at_level("WARNING"):
        path = csfcube._corpus_path()
    assert "not the released file's bytes" in caplog.text
    record = Path(str(path) + ".sha256").read_text()
    assert record.split()[0] == hashlib.sha256(path.read_bytes()).hexdigest()
    forget_verdicts()
    assert csfcube._corpus_path() == path   # accepted later too: it matches its own record
    assert any(d.title.startswith("Revised: ") for d in csfcube.docs().values())
    # altered after the rebuild: neither the release nor the recorded rebuild
    path.write_bytes(path.read_bytes().replace(b"Revised: ", b"Changed: ", 1))
    forget_verdicts()
    with pytest.raises(DamagedDataError, match="SHA-256"):
        csfcube._corpus_path()


@pytest.mark.parametrize("name", ["responses.sqlite3", "responses.sqlite3-wal", "responses.sqlite3-journal"])
def test_llm_cache_refuses_a_link_at_its_files(tmp_path, victim, name):
    from pyterrier_sci.llm.cache import ResponseCache
    from pyterrier_sci.llm.errors import LLMCacheError
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / name).symlink_to(victim)
    with pytest.raises(LLMCacheError, match=rf"{name} is a symbolic link .*precious.txt.*never written through"):
        ResponseCache(cache_dir).put("k", {"a": 1})
    _untouched(victim)


def test_a_full_disk_while_writing_names_the_file_and_leaves_nothing(tmp_path):
    import errno
    out = tmp_path / "run.res.gz"
    out.write_text("old\n")
    with pytest.raises(OSError, match=r"No space left on device \(writing --output .*run.res.gz\)") as info:
        with artifacts.atomic_file(out, "--output"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(out)
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["run.res.gz"]
