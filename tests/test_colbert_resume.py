"""An interrupted ColBERT (PLAID) build resumes: the k-means sample's encoding, the codec and the written chunks
that colbert-ai left in ``.<name>.resume`` are taken up by the next build of the same documents with the same
settings, and the index it writes is the index an uninterrupted build writes.

The end-to-end test kills a real build (its parent process, as a user's Ctrl-C or a lost machine would) once
the sample is kept, then builds again; the others check the pieces (the kept state's settings, a chunk written
in part, walking past written chunks) on real and hand-made files."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

from pyterrier_sci.plugins.colbert._compat import import_colbert

try:    # through the plugin, which undoes colbert-ai's import side effects (its 'spawn' start method)
    import_colbert()
except ImportError as e:
    pytest.skip(f"colbert-ai is not installed ({e})", allow_module_level=True)
torch = pytest.importorskip("torch")

from pyterrier_sci.plugins.colbert import ColBERTIndex  # noqa: E402
from pyterrier_sci.plugins.colbert._worker import (  # noqa: E402
    CODEC_DONE,
    SAMPLE_KEPT,
    SAMPLE_STATE,
    SampleReuse,
    chunk_complete,
    unwritten_chunks,
)
from pyterrier_sci.plugins.colbert.plaid import PLAID_DIR, RESUME_STATE, resume_directory  # noqa: E402

N_DOCS = 40
#: colbert-ai's files that make the index (written by both builds; the chunk metadata and plan name paths)
INDEX_TENSORS = ["centroids.pt", "buckets.pt", "avg_residual.pt", "0.codes.pt", "0.residuals.pt", "ivf.pid.pt"]


@pytest.fixture(scope="module")
def docs():
    from pyterrier_sci.datasets import csfcube
    if not (conftest.DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {conftest.DATA}")
    return [{"docno": d.doc_id, "text": d.default_text()}
            for d in sorted(csfcube.docs().values(), key=lambda d: d.doc_id)[:N_DOCS]]


@pytest.fixture(scope="module")
def reference(docs, tmp_path_factory):
    """An index built without interruption."""
    return ColBERTIndex(tmp_path_factory.mktemp("ref") / "idx").indexer(verbose=False).index(docs)


def _tensors(index_dir: Path) -> dict:
    out = {}
    for name in INDEX_TENSORS:
        t = torch.load(index_dir / PLAID_DIR / name)
        out[name] = [x.clone() for x in t] if isinstance(t, (tuple, list)) else t.clone()
    out["doclens"] = json.loads((index_dir / PLAID_DIR / "doclens.0.json").read_text())
    return out


def _assert_same_index(a: Path, b: Path) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert ta["doclens"] == tb["doclens"]
    for name in INDEX_TENSORS:
        x, y = ta[name], tb[name]
        if isinstance(x, list):
            assert len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y)), name
        else:
            assert torch.equal(x, y), name


def _descendants(pid: int) -> list:
    """The processes under ``pid`` (through /proc), deepest last."""
    children = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker through /proc")
def test_a_build_killed_after_its_sample_resumes_at_each_stage_to_the_same_index(docs, reference, tmp_path):
    target = tmp_path / "idx"
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    script = ("import json, sys\nfrom pyterrier_sci.plugins.colbert import ColBERTIndex\n"
              "ColBERTIndex(sys.argv[1]).indexer(verbose=False).index(json.load(open(sys.argv[2])))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(target), str(docs_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resume = tmp_path / ".idx.resume"
    deadline = time.monotonic() + 600
    try:
        while not (resume / SAMPLE_STATE).exists():
            assert proc.poll() is None, "the build ended before its sample was kept"
            assert time.monotonic() < deadline, "no sample kept within 10 minutes"
            time.sleep(0.02)
        # freeze the worker at once (k-means and the index pass take longer than this), then kill both, parent
        # first: what is on disk is what an interruption at this point leaves
        for pid in _descendants(proc.pid):
            os.kill(pid, signal.SIGSTOP)
        workers = _descendants(proc.pid)
        proc.kill()
        proc.wait()
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not target.exists()
    assert (resume / SAMPLE_KEPT).is_file() and (resume / RESUME_STATE).is_file()
    kept = json.loads((resume / SAMPLE_STATE).read_text())
    assert len(kept["pids"]) == N_DOCS and len(kept["doclens"]) == N_DOCS  # below 30K passages: all of them

    # the same interruption later on: after k-means (the codec saved), and after the index pass's chunk
    left = tmp_path / "left"
    shutil.move(resume, left)
    ref_plaid = Path(reference.path) / PLAID_DIR
    for stage in ("sample", "codec", "chunks"):
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(left, resume)
        if stage in ("codec", "chunks"):
            for name in ("centroids.pt", "buckets.pt", "avg_residual.pt"):
                shutil.copy(ref_plaid / name, resume / PLAID_DIR / name)
            (resume / CODEC_DONE).write_text("saved")
        if stage == "chunks":
            for name in ("0.codes.pt", "0.residuals.pt", "doclens.0.json", "0.metadata.json"):
                shutil.copy(ref_plaid / name, resume / PLAID_DIR / name)
        index = ColBERTIndex(target).indexer(verbose=False).index(docs)
        timings = index.metadata()["build_timings"]
        # the sample is not encoded again, and the index pass serves every passage from it: nothing is encoded
        assert timings["resumed"]["sample_passages"] == N_DOCS, stage
        assert timings["passages_encoded"] == 0, stage
        assert timings["resumed"]["codec"] == (stage != "sample"), stage
        assert (timings["kmeans_s"] == 0) == (stage != "sample"), stage
        assert timings["resumed"]["chunks"] == (1 if stage == "chunks" else 0), stage
        assert not resume.exists(), stage  # a whole build keeps nothing for a resumption
        assert not (target / PLAID_DIR / "sample.0.pt").exists()
        _assert_same_index(Path(reference.path), target)

    # what is kept belongs to its documents: a resume directory of other documents is not taken up
    changed = [dict(d, text=d["text"] + " changed") for d in docs]
    other = tmp_path / "other"
    other_resume = tmp_path / ".other.resume"
    resume_directory(other, {"not": "these settings"})
    (other_resume / SAMPLE_STATE).write_text(json.dumps(kept))
    (other_resume / SAMPLE_KEPT).write_bytes((Path(reference.path) / PLAID_DIR / "centroids.pt").read_bytes())
    built = ColBERTIndex(other).indexer(verbose=False).index(changed)
    assert "resumed" not in built.metadata()["build_timings"]
    assert built.metadata()["build_timings"]["passages_encoded"] == N_DOCS
    assert not other_resume.exists()


def test_the_resume_directory_is_kept_only_for_the_same_settings(tmp_path):
    target = tmp_path / "idx"
    settings = {"collection_sha256": "a" * 64, "nbits": 2}
    d = resume_directory(target, settings)
    assert d == tmp_path / ".idx.resume" and d.is_dir()
    (d / "kept").write_text("from the interrupted build")
    assert (resume_directory(target, dict(settings)) / "kept").exists()          # same settings: kept
    assert not (resume_directory(target, dict(settings, nbits=1)) / "kept").exists()  # other settings: emptied
    (d / "kept").write_text("x")
    assert not (resume_directory(target, dict(settings, nbits=1), keep=False) / "kept").exists()
    assert json.loads((d / RESUME_STATE).read_text()) == dict(settings, nbits=1)
    # damaged state: started over
    (d / "kept").write_text("x")
    (d / RESUME_STATE).write_text("{trunc")
    assert not (resume_directory(target, dict(settings, nbits=1)) / "kept").exists()


def test_a_link_in_place_of_the_resume_directory_is_removed_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / RESUME_STATE).write_text(json.dumps({"nbits": 2}))
    (elsewhere / "precious").write_text("not the build's")
    (tmp_path / ".idx.resume").symlink_to(elsewhere)
    d = resume_directory(tmp_path / "idx", {"nbits": 2})
    assert d.is_dir() and not d.is_symlink() and not (d / "precious").exists()
    assert (elsewhere / "precious").read_text() == "not the build's"
    assert json.loads((elsewhere / RESUME_STATE).read_text()) == {"nbits": 2}
    # a link planted inside a directory that is kept (a file colbert-ai would write through) is removed
    (d / PLAID_DIR).mkdir()
    (d / PLAID_DIR / "0.codes.pt").symlink_to(elsewhere / "precious")
    kept = resume_directory(tmp_path / "idx", {"nbits": 2})
    assert (kept / PLAID_DIR).is_dir() and not os.path.lexists(kept / PLAID_DIR / "0.codes.pt")
    assert (elsewhere / "precious").read_text() == "not the build's"


def test_a_written_chunk_is_complete_and_a_damaged_one_is_not(reference, tmp_path):
    plaid = tmp_path / PLAID_DIR
    shutil.copytree(Path(reference.path) / PLAID_DIR, plaid)
    n = json.loads((plaid / "0.metadata.json").read_text())["num_passages"]
    assert n == N_DOCS
    assert chunk_complete(str(plaid), 0, 0, N_DOCS)
    assert not chunk_complete(str(plaid), 0, 0, N_DOCS - 1)   # another chunking
    assert not chunk_complete(str(plaid), 0, 5, N_DOCS)       # another offset
    assert not chunk_complete(str(plaid), 1, 0, N_DOCS)       # not written
    meta = (plaid / "0.metadata.json").read_text()
    (plaid / "0.metadata.json").write_text(meta[: len(meta) // 2])   # killed while writing it
    assert not chunk_complete(str(plaid), 0, 0, N_DOCS)
    (plaid / "0.metadata.json").write_text(meta)
    doclens = json.loads((plaid / "doclens.0.json").read_text())
    (plaid / "doclens.0.json").write_text(json.dumps(doclens[:-1]))
    assert not chunk_complete(str(plaid), 0, 0, N_DOCS)
    (plaid / "doclens.0.json").write_text(json.dumps(doclens))
    (plaid / "0.residuals.pt").write_bytes(b"")
    assert not chunk_complete(str(plaid), 0, 0, N_DOCS)


def _write_chunk(plaid: Path, idx: int, offset: int, doclens: list) -> None:
    for kind in ("codes", "residuals"):
        (plaid / f"{idx}.{kind}.pt").write_bytes(b"tensor")
    (plaid / f"doclens.{idx}.json").write_text(json.dumps(doclens))
    (plaid / f"{idx}.metadata.json").write_text(json.dumps(
        {"passage_offset": offset, "num_passages": len(doclens), "num_embeddings": sum(doclens)}))


def test_written_chunks_are_walked_past_and_a_partial_one_is_rewritten(tmp_path):
    """Chunks 0 and 1 were written to the end, chunk 2 in part (codes only): 0 and 1 are skipped, and the
    kept sample's passages in them are passed over, so chunk 2's sampled passages are still served from it."""
    plaid = tmp_path / PLAID_DIR
    plaid.mkdir()
    collection = [f"passage {i}" for i in range(9)]
    batches = [(0, 0, collection[0:3]), (1, 3, collection[3:6]), (2, 6, collection[6:9])]
    _write_chunk(plaid, 0, 0, [1, 1, 1])
    _write_chunk(plaid, 1, 3, [2, 2, 2])
    (plaid / "2.codes.pt").write_bytes(b"half")
    (plaid / "9.codes.pt").write_bytes(b"another chunk")
    reuse = SampleReuse(max_bytes=1 << 20)
    sample = [collection[i] for i in (1, 4, 7, 8)]
    reuse.seed(sample, torch.arange(8, dtype=torch.float32).reshape(4, 2), [1, 1, 1, 1])
    skipped = []
    left = list(unwritten_chunks(iter(batches), str(plaid), reuse, skipped.append))
    assert left == [batches[2]]
    assert skipped == [collection[0:3], collection[3:6]]
    assert not (plaid / "2.codes.pt").exists() and (plaid / "9.codes.pt").exists()
    assert (plaid / "0.codes.pt").exists() and (plaid / "1.metadata.json").exists()
    # the sample's next passage is chunk 2's first sampled one (7): what encode_passages serves next
    assert reuse.state["next"] == 2 and reuse.state["passages"][2] == collection[7]


def test_the_index_pass_after_skipped_chunks_serves_the_sample(monkeypatch):
    """With colbert-ai's encoder: after chunks walked past, the next chunk's sampled passages get the kept
    embeddings and only the others are encoded."""
    from colbert.indexing.collection_encoder import CollectionEncoder

    from pyterrier_sci.plugins.colbert._worker import reuse_sample_encoding
    calls = []

    def encode_passages(self, passages):
        calls.append(list(passages))
        rows = [[float(len(p)), float(sum(map(ord, p)) % 97)] for p in passages]
        return torch.tensor(rows), [1] * len(passages)

    monkeypatch.setattr(CollectionEncoder, "encode_passages", encode_passages)
    events = []
    reuse = reuse_sample_encoding(lambda **e: events.append(e))
    enc = SimpleNamespace(use_gpu=False)
    collection = [f"passage {i}" * (1 + i % 3) for i in range(9)]
    sample = [collection[i] for i in (1, 4, 7, 8)]
    reuse.seed(sample, encode_passages(enc, sample)[0], [1, 1, 1, 1])   # as install_resume seeds it
    calls.clear()
    reuse.skip(collection[0:3])
    reuse.skip(collection[3:6])
    embs, doclens = CollectionEncoder.encode_passages(enc, collection[6:9])
    assert calls == [[collection[6]]]                 # 7 and 8 come from the sample
    assert torch.equal(embs, encode_passages(enc, collection[6:9])[0]) and doclens == [1, 1, 1]
    assert [e["n"] for e in events if e["event"] == "reused"] == [2]
    assert reuse.state == {}                          # the whole sample handed out or passed over
