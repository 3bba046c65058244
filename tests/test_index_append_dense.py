"""Dense indexes that grow (issue 35, plugins/dense/growth.py): after appends and retractions a flat and a
sharded index return what an index rebuilt on the final collection returns (docnos and scores identical),
each change is a new generation recorded with the hash of the documents held, a rerun of a completed change
does nothing, and a bad change changes nothing.  The vectors are random (the index is under test, not the
encoder); one test appends texts through the index's own encoder (MiniLM)."""
import json
import re
import sys

import numpy as np
import pyterrier as pt
import pytest

from pyterrier_sci.generations import DocSet, IndexUpdateError
from pyterrier_sci.plugins.dense.fanout import ShardedDenseIndex, write_sharded_flex
from pyterrier_sci.plugins.dense.flat import open_index
from pyterrier_sci.plugins.dense.growth import append_documents, open_growing, retract_documents, update_index

DIM = 32


def _vecs(n, seed):
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _docs(prefix, vecs, start=0):
    return [{"docno": f"{prefix}{start + i}", "doc_vec": v} for i, v in enumerate(vecs)]


def _flat(path, docs):
    from pyterrier_dr import FlexIndex
    FlexIndex(str(path), verbose=False).indexer().index(docs)
    return path


def _results(index, queries, k):
    index = open_index(index) if not isinstance(index, ShardedDenseIndex) else index
    scores, pos = index.search(queries, k)
    return scores, index.docnos_of(pos)


def _same(a, b, queries, k=50):
    sa, da = _results(a, queries, k)
    sb, db = _results(b, queries, k)
    assert da.tolist() == db.tolist()
    assert np.array_equal(sa, sb)  # identical, not close


@pytest.fixture
def collection():
    base = _docs("d", _vecs(3000, 0))
    new = _docs("n", _vecs(60, 1))
    # near-ties: a few documents repeat a base vector (ties are broken by position, as in a rebuild)
    for i in range(0, 60, 15):
        new[i]["doc_vec"] = base[i * 7]["doc_vec"].copy()
    gone = ["d5", "d1024", "d2999", "n3", "n30"]
    final = [d for d in base + new if d["docno"] not in gone]
    return base, new, gone, final


def test_flat_append_retract_equals_rebuild(tmp_path, collection):
    base, new, gone, final = collection
    path = _flat(tmp_path / "flat", base)
    meta = append_documents(path, new[:40])
    assert meta["generation"] == 1 and meta["docs"] == DocSet.of(d["docno"] for d in base + new[:40]).record()
    append_documents(path, iter(new[40:]))  # a generator: streamed
    meta = retract_documents(path, gone)
    assert meta["generation"] == 3 and meta["doc_count"] == len(final)
    assert [h["op"] for h in meta["history"]] == ["append", "append", "retract"]
    rebuilt = _flat(tmp_path / "rebuilt", final)
    assert meta["docs"] == DocSet.of(d["docno"] for d in final).record()
    # the same files as a rebuild: the same rows in the same order
    assert (path / "vecs.f4").read_bytes() == (rebuilt / "vecs.f4").read_bytes()
    queries = _vecs(25, 2)
    _same(path, rebuilt, queries)
    _same(path, rebuilt, queries, k=len(final))
    # pyterrier_dr reads the grown index as its own FlexIndex
    flex = pt.Artifact.load(str(path))
    assert len(flex) == len(final)


def test_sharded_append_retract_equals_rebuild(tmp_path, collection):
    base, new, gone, final = collection
    idx = write_sharded_flex(tmp_path / "sharded", [d["docno"] for d in base], np.stack([d["doc_vec"] for d in base]),
                             3, model="random")
    appender = idx.indexer(mode="append")
    assert isinstance(appender, pt.Indexer)
    appender.index(new[:30])
    grown = appender.index(new[30:])
    assert grown.generation == 2
    idx = pt.Artifact.load(str(tmp_path / "sharded"))
    assert idx.generation == 2 and idx.num_shards == 5 and idx.num_docs == len(base) + len(new)
    idx = idx.retract(gone)
    assert idx.generation == 3 and idx.num_docs == len(final)
    # only the shards holding a retracted document were written again; superseded ones are gone
    names = sorted(p.name for p in (tmp_path / "sharded").glob("shard-*"))
    assert names == sorted(s["name"] for s in idx.manifest["shards"])
    assert idx.manifest["docs"] == DocSet.of(d["docno"] for d in final).record()
    queries = _vecs(25, 2)
    flat = _flat(tmp_path / "rebuilt-flat", final)
    rebuilt = write_sharded_flex(tmp_path / "rebuilt", [d["docno"] for d in final],
                                 np.stack([d["doc_vec"] for d in final]), 4, model="random")
    _same(idx, flat, queries)
    _same(idx, rebuilt, queries)
    _same(idx, flat, queries, k=len(final))
    # re-scoring by docno reads the live documents only
    assert (idx.positions_of(np.array(gone)) == -1).all()
    pos = idx.positions_of(np.array(["n59", "d0"]))
    assert idx.docnos_of(pos).tolist() == ["n59", "d0"]


def test_retracting_a_whole_shard_drops_it(tmp_path):
    base = _docs("d", _vecs(90, 3))
    idx = write_sharded_flex(tmp_path / "s", [d["docno"] for d in base], np.stack([d["doc_vec"] for d in base]), 3,
                             model="random")
    idx = idx.retract([f"d{i}" for i in range(30, 60)])
    assert idx.num_shards == 2 and idx.num_docs == 60
    idx.indexer().index(_docs("n", _vecs(5, 4)))
    idx = ShardedDenseIndex(tmp_path / "s")
    final = [d for d in base if not 30 <= int(d["docno"][1:]) < 60] + _docs("n", _vecs(5, 4))
    _same(idx, _flat(tmp_path / "f", final), _vecs(10, 5), k=65)


@pytest.mark.parametrize("kind", ["flat", "sharded"])
def test_rerun_does_nothing_and_bad_changes_change_nothing(tmp_path, kind):
    base = _docs("d", _vecs(200, 6))
    path = tmp_path / kind
    if kind == "flat":
        _flat(path, base)
    else:
        write_sharded_flex(path, [d["docno"] for d in base], np.stack([d["doc_vec"] for d in base]), 2, model="r")
    new = _docs("n", _vecs(10, 7))
    g1 = append_documents(path, new)
    before = (path / "pt_meta.json").read_text()
    assert append_documents(path, new)["generation"] == g1["generation"] == 1  # a rerun: nothing to do
    with pytest.raises(IndexUpdateError, match=r"'d3'.*already in"):
        append_documents(path, _docs("x", _vecs(3, 8)) + [base[3]])
    with pytest.raises(IndexUpdateError, match="given twice"):
        append_documents(path, [new[0] | {"docno": "y"}, new[1] | {"docno": "y"}])
    with pytest.raises(IndexUpdateError, match=r"'nope'.*not in"):
        retract_documents(path, ["d1", "nope"])
    with pytest.raises(IndexUpdateError, match="empty"):
        retract_documents(path, [d["docno"] for d in base + new])
    assert (path / "pt_meta.json").read_text() == before
    retract_documents(path, ["d1"])
    assert retract_documents(path, ["d1"])["generation"] == 2  # a rerun of the retraction
    assert sorted(p.name for p in tmp_path.iterdir()) == [kind]  # no partial directory, no lock left


def test_update_index_reads_files(tmp_path):
    path = _flat(tmp_path / "flat", _docs("d", _vecs(50, 9)))
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n\nd2\n")
    docs = tmp_path / "new.jsonl"
    docs.write_text("\n".join(json.dumps({"docno": f"n{i}", "text": "unused"}) for i in range(2)))
    with pytest.raises(IndexUpdateError, match="no field"):
        update_index(path, append=docs, fields=["title"])
    meta = update_index(path, retract=ids)
    assert meta["generation"] == 1 and meta["doc_count"] == 48
    with pytest.raises(IndexUpdateError, match="not a dense index|holds nothing"):
        update_index(tmp_path / "missing", retract=ids)


def test_append_text_with_the_index_encoder(tmp_path):
    """Texts appended to an index are encoded with the encoder it records (MiniLM here), and the grown index
    retrieves as one built from every text at once."""
    from pyterrier_sci.plugins.dense import DenseRetriever
    from pyterrier_sci.plugins.dense.flat import write_flat_index
    from pyterrier_sci.plugins.dense.index_meta import encoder_record

    texts = {f"t{i}": t for i, t in enumerate([
        "dense retrieval with sentence embeddings", "bm25 is a strong lexical baseline",
        "citation recommendation for scientific papers", "graph neural networks for molecules",
        "late interaction retrieval with colbert", "retracting papers from an index"])}
    enc = DenseRetriever("default", index=None, verbose=False)

    def build(path, names):
        vecs = enc.encode([texts[n] for n in names])
        record = {"encoder": encoder_record("default", "torch", "fp32", None, enc.encoder.max_seq_length),
                  "fields": None, "corpus": None, "vectors": "fp32"}
        write_flat_index(path, ({"docno": n, "doc_vec": v} for n, v in zip(names, vecs)), lambda: (record, None))
        return path

    grown = build(tmp_path / "grown", ["t0", "t1", "t2"])
    idx = open_growing(grown)
    idx.indexer(mode="append").index([{"docno": n, "text": texts[n]} for n in ("t3", "t4", "t5")])
    idx.retract(["t1"])
    assert idx.generation == 2
    rebuilt = build(tmp_path / "rebuilt", ["t0", "t2", "t3", "t4", "t5"])
    topics = pt.new.queries(["colbert late interaction", "removing retracted papers"], qid=["1", "2"])
    a = DenseRetriever(index=str(grown), verbose=False)(topics)
    b = DenseRetriever(index=str(rebuilt), verbose=False)(topics)
    assert a["docno"].tolist() == b["docno"].tolist()
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-5)
    with pytest.raises(IndexUpdateError, match="mode='append'"):
        idx.indexer(mode="overwrite")


def test_cli_appends_and_retracts_any_index(tmp_path, capsys, monkeypatch):
    """``pyterrier-sci index DATASET --output PATH --append DOCS --retract IDS`` on a sharded dense index (and
    the error for what it cannot update)."""
    from pyterrier_sci.cli import main
    base = _docs("d", _vecs(120, 11))
    path = tmp_path / "sharded"
    write_sharded_flex(path, [d["docno"] for d in base], np.stack([d["doc_vec"] for d in base]), 2, model="random")
    docs = tmp_path / "new.jsonl"
    new = _docs("n", _vecs(7, 12))
    docs.write_text("".join(json.dumps({"docno": d["docno"], "doc_vec": d["doc_vec"].tolist()}) + "\n" for d in new))
    ids = tmp_path / "ids.txt"
    ids.write_text("d0\nd119\n")
    # as the command (its arguments from sys.argv): it says what starting the command cost before the change
    monkeypatch.setattr(sys, "argv", ["pyterrier-sci", "index", "irds:sci/csfcube", "--output", str(path), "--append",
                                      str(docs), "--retract", str(ids), "--quiet"])
    rc = main()
    assert rc == 0
    out = capsys.readouterr()
    final = [d for d in base if d["docno"] not in ("d0", "d119")] + new
    assert out.out.strip() == str(path)
    assert f"generation 2, {len(final)} documents" in out.err
    # issue 55, item 7: the CLI says what the change cost and what starting the command cost before it
    took = re.search(r"the change took ([\d.]+) s; starting the command \(Python, imports\) ([\d.]+) s before it",
                     out.err)
    assert took and float(took.group(1)) > 0 and float(took.group(2)) > 0, out.err
    idx = ShardedDenseIndex(path)
    assert idx.manifest["docs"] == DocSet.of(d["docno"] for d in final).record()
    _same(idx, _flat(tmp_path / "flat", final), _vecs(5, 13), k=len(final))
    assert main(["index", "irds:sci/csfcube", "--output", str(tmp_path / "none"), "--retract", str(ids)]) == 2
    assert "no index at" in capsys.readouterr().err
    # one paper appended: a shard of one document (npids wrote it unreadable before pyterrier_sci.upstream);
    # the DATASET is not needed to update the index at --output
    one = _docs("one", _vecs(1, 15))
    docs.write_text(json.dumps({"docno": one[0]["docno"], "doc_vec": one[0]["doc_vec"].tolist()}) + "\n")
    assert main(["index", "--output", str(path), "--append", str(docs), "--quiet"]) == 0
    # called by a program with arguments of its own: the process's age is no command's start, and is not printed
    err = capsys.readouterr().err
    assert "the change took" in err and "starting the command" not in err
    assert "generation 3" in err
    _same(ShardedDenseIndex(path), _flat(tmp_path / "flat3", final + one), _vecs(5, 16), k=len(final) + 1)
    assert main(["index", "--shards", "2"]) == 2
    assert "give the DATASET" in capsys.readouterr().err


def test_run_manifest_records_the_generation_searched(tmp_path):
    """Experiments record the generation they ran on: the retriever declares its index (component protocol), and
    the run manifest's ``models`` lists it with the generation it opened and the documents' hash."""
    from pyterrier_sci.manifest import model_entries
    from pyterrier_sci.plugins.dense import DenseRetriever
    path = _flat(tmp_path / "flat", _docs("d", _vecs(40, 14)))
    retract_documents(path, ["d3"])
    r = DenseRetriever("default", index=str(path), verbose=False)
    r.flex_index()  # opened: generation 1
    retract_documents(path, ["d4"])  # the index moves on; the retriever searched generation 1
    entry = model_entries([r])[f"index:{path}"]
    want = DocSet.of(f"d{i}" for i in range(40) if i != 3)
    assert entry["kind"] == "dense_index" and entry["note"] == f"generation 1; 39 documents; docs {want.hash}"


@pytest.mark.parametrize("ann", ["hnsw", "ivf"])
def test_ann_structures_are_carried_into_an_append(tmp_path, ann):
    """An append adds the new vectors to a flat index's HNSW graph / IVF posting lists (not built again); a
    retraction leaves the structure to be built again.  The carried structure finds the exact top-100 about as
    well as one built on the final collection (docs/indexes.md has the figures on real vectors)."""
    import faiss

    from pyterrier_sci.plugins.dense.ann import check_ann
    vecs = _vecs(3000, 20)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    base, new = _docs("d", vecs[:2700]), _docs("n", vecs[2700:])
    path = _flat(tmp_path / "flat", base)
    _, settings = check_ann(ann, {"n_list": 32} if ann == "ivf" else None)
    queries = _vecs(50, 21)
    open_index(path).ann_search(ann, settings, queries, 100)  # builds the structure
    (name,) = [p.name for p in path.glob("*.faiss")]
    append_documents(path, new)
    assert (path / name).exists()  # carried, not rebuilt
    carried = faiss.read_index(str(path / name), faiss.IO_FLAG_SKIP_STORAGE if ann == "hnsw" else 0)
    assert carried.ntotal == 3000
    grown = open_index(path)
    _, exact = grown.search(queries, 100)
    _, found = grown.ann_search(ann, settings, queries, 100)
    rebuilt = open_index(_flat(tmp_path / "rebuilt", base + new))
    _, found_rebuilt = rebuilt.ann_search(ann, settings, queries, 100)

    def recall(got):
        return np.mean([len(set(g) & set(e)) / 100 for g, e in zip(got, exact)])
    assert recall(found) >= recall(found_rebuilt) - 0.05 and recall(found) > 0.5
    retract_documents(path, ["d1"])
    assert not (path / name).exists()
