"""Dense indexes that grow (issue 35): documents appended and retracted without a rebuild, each change a new
generation (:mod:`pyterrier_sci.generations`), results equal to a rebuild on the final collection.

* A **flat** index (a ``pyterrier_dr.FlexIndex`` directory) is written again for each change: its stored
  vectors are copied in file order (a chunk at a time), the retracted rows skipped, the new documents encoded
  (a batch at a time) and added at the end, in a partial directory that then replaces the index with one
  rename (:func:`pyterrier_sci.artifacts.build_atomically`).  Only the new documents are encoded: copying a
  vector costs about a thousandth of encoding it.  The result is the FlexIndex a rebuild on the final
  collection writes (the same rows in the same order), so every consumer, pyterrier_dr's too, reads it.
* A **sharded** index gets a new shard for each append (the other shards are not touched; an ANN structure
  is built for the new shard only), and a retraction writes again only the shards holding a retracted
  document.  New shard directories carry the generation in their name (``shard-00003.g00002``) and are never
  changed; the manifest (``pt_meta.json``, written atomically, last) is the commit: an update killed before
  it leaves the previous generation as it was, and its rerun reuses the shards it had finished.

Both record in ``pt_meta.json`` the generation, the count and hash of the documents held and the history
of changes, take the index's update lock (a second appender waits), and treat a rerun of a completed change
as done.  :func:`open_growing` gives the Python API (``index.indexer(mode='append')``, ``index.retract(ids)``);
:func:`update_index` is what ``pyterrier-sci index --append/--retract`` calls.
"""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np
import pyterrier as pt

from pyterrier_sci.artifacts import atomic_file, build_atomically, write_pt_meta
from pyterrier_sci.dates import record_dates, write_appended_dates
from pyterrier_sci.filesums import record_files
from pyterrier_sci.generations import (
    APPEND,
    RETRACT,
    DocSet,
    IndexUpdateError,
    already_applied,
    docs_record,
    generation_of,
    next_generation_meta,
    read_docnos,
    read_docs,
    update_lock,
)
from pyterrier_sci.upstream import fix_npids_single_docno_blocks

from .encoding import encode_stream
from .flat import open_index
from .index_meta import CALIBRATION_FILE, read_pt_meta
from .retriever import DenseRetriever
from .shards import ARTIFACT_FORMAT, SHARD_FILE, shard_name

__all__ = ["warm_up", "GrowingDenseIndex", "DenseAppender", "open_growing", "append_documents", "retract_documents",
           "update_index", "generation_name", "carry_ann", "COPY_CHUNK"]

#: stored vectors copied per read when a flat index or a shard is written again
COPY_CHUNK = 8192


class _NothingToDoError(Exception):
    """Raised inside a build to abandon it: the change is already in the index (a rerun)."""


def generation_name(position: int, generation: int) -> str:
    """The directory of a shard written by generation ``generation`` at position ``position``."""
    return f"{shard_name(position)}.g{generation:05d}"


# ------------------------------------------------------------------------------------------- helpers

def _meta(path: Path) -> dict:
    meta = read_pt_meta(path)
    if meta is None or meta.get("type") != "dense_index" or meta.get("format") not in ("flex", ARTIFACT_FORMAT):
        what = "nothing" if meta is None else f"a {meta.get('type')}/{meta.get('format')} artifact"
        raise IndexUpdateError(f"{path} holds {what}, not a dense index (flex or sharded_flex) to update")
    return meta


def _stored_docnos(index) -> Iterator[str]:
    """Every docno the index (a :class:`~.search.VectorIndex`) holds, a chunk at a time."""
    for start in range(0, index.num_docs, COPY_CHUNK):
        yield from (str(d) for d in index.docnos_of(np.arange(start, min(start + COPY_CHUNK, index.num_docs))))


def _current_docs(index, meta: dict, full: bool = True) -> DocSet:
    """The documents' set of the index, not trusted from its record: the count always checked against the
    documents it holds, and with ``full`` (an update that reads every row anyway: a flat index is written
    again) the hash computed from its docnos.  A record that disagrees is one :class:`IndexUpdateError` naming
    ``pt_meta.json`` (the record was changed or damaged: nothing is carried forward)."""
    recorded = DocSet.from_record(docs_record(meta))
    if recorded is not None and recorded.count != index.num_docs:
        raise IndexUpdateError(f"{Path(index.index_path) / 'pt_meta.json'} records {recorded.count} documents, the "
                               f"index holds {index.num_docs}: its record was changed or damaged; rebuild the index "
                               "(nothing was changed)")
    if recorded is not None and not full:
        return recorded
    computed = DocSet.of(_stored_docnos(index))
    if recorded is not None and computed != recorded:
        raise IndexUpdateError(f"{Path(index.index_path) / 'pt_meta.json'} records the documents' hash "
                               f"{recorded.hash[:26]}..., its docnos give {computed.hash[:26]}...: its record was "
                               "changed or damaged; rebuild the index (nothing was changed)")
    return computed


def _rows(flex, skip: Optional[np.ndarray] = None, start: int = 0, end: Optional[int] = None) -> Iterator[dict]:
    """``{'docno', 'doc_vec'}`` of a FlexIndex's rows ``[start, end)`` in order, without the positions in
    ``skip`` (sorted), read :data:`COPY_CHUNK` rows at a time."""
    docnos, dvecs, _ = flex.payload()
    end = len(dvecs) if end is None else end
    for lo in range(start, end, COPY_CHUNK):
        hi = min(lo + COPY_CHUNK, end)
        keep = np.arange(lo, hi)
        if skip is not None and len(skip):
            keep = keep[~np.isin(keep, skip)]
        if not len(keep):
            continue
        vecs = np.asarray(dvecs[keep[0]:keep[-1] + 1], dtype=np.float32)[keep - keep[0]]
        for docno, vec in zip(docnos.fwd[keep], vecs):
            yield {"docno": str(docno), "doc_vec": vec}


class _Checked:
    """The documents to append, checked a chunk at a time: each docno given once and not in the index
    (``index.positions_of``); counts them into :attr:`batch`.  Docnos the index already holds are noted
    (:attr:`held`, the first five) rather than raised at once: a rerun of a completed append holds them all."""

    def __init__(self, index, docs: Iterable[dict], check: int = 1024):
        self.index, self.docs, self.check = index, docs, check
        self.batch, self.held, self.any_held, self.seen = DocSet(), [], False, set()

    def __iter__(self) -> Iterator[dict]:
        it = iter(self.docs)
        while True:
            chunk = list(itertools.islice(it, self.check))
            if not chunk:
                return
            names = [checked_docno(d, len(self.seen) + i) for i, d in enumerate(chunk)]
            for d in names:
                if d in self.seen:
                    raise IndexUpdateError(f"docno {d!r} is given twice in the documents to append")
                self.seen.add(d)
            pos = self.index.positions_of(np.asarray(names, dtype=str))
            if (pos >= 0).any():
                self.any_held = True
                self.held += [d for d, p in zip(names, pos) if p >= 0][:max(0, 5 - len(self.held))]
            self.batch.add(names)
            for doc, name in zip(chunk, names):
                yield dict(doc, docno=name)


def checked_docno(doc: Any, position: int) -> str:
    """The docno of the ``position``-th document to append: a non-empty string without control characters (what
    BM25's appends require too); one :class:`IndexUpdateError` naming the document otherwise."""
    if not isinstance(doc, dict):
        raise IndexUpdateError(f"document {position} is a {type(doc).__name__}, not a mapping with 'docno'")
    docno = doc.get("docno")
    if not isinstance(docno, str) or not docno.strip():
        raise IndexUpdateError(f"document {position} has docno {docno!r}: a docno is a non-empty string")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in docno):
        raise IndexUpdateError(f"document {position} has docno {docno!r}, with a control character")
    return docno


def _same_kind(docs: Iterator[dict], with_vectors: bool) -> Iterator[dict]:
    """``docs``, each checked to give a ``doc_vec`` when the first does, and none when it does not."""
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise IndexUpdateError(f"document {i} is a {type(d).__name__}, not a mapping with 'docno'")
        if ("doc_vec" in d) != with_vectors:
            raise IndexUpdateError(f"document {i} ({d.get('docno')!r}) " + (
                "has no doc_vec, while the first document gives one" if with_vectors else
                "gives a doc_vec, while the first document gives text to encode") +
                ": give vectors for every document to append or for none")
        yield d


def _with_vectors(path: Path, docs: Iterable[dict], batch_size: int, verbose: bool) -> Iterator[dict]:
    """``docs`` with ``doc_vec``: as given when the first document has one, else encoded with the encoder
    the index records (its model, backend, precision, calibration; its fields joined where the documents
    have them, else their ``text``), ``batch_size`` documents at a time."""
    it = iter(docs)
    first = next(it, None)
    if first is None:
        return
    with_vectors = isinstance(first, dict) and "doc_vec" in first
    it = _same_kind(itertools.chain([first], it), with_vectors)
    if with_vectors:
        yield from it
        return
    retriever = DenseRetriever(index=str(path), batch_size=batch_size, verbose=verbose)
    fields = list(retriever.fields) if retriever.fields else None

    def texts():
        for d in it:
            if fields:   # the index encodes these fields joined: another field (its text) would be another input
                missing = [f for f in fields if f not in d]
                if missing:
                    raise IndexUpdateError(f"document {d.get('docno')!r} lacks the field(s) {missing} that the dense "
                                           f"index {path} encodes (its fields: {fields}); give them, or vectors")
                text = " ".join(str(d[f] or "") for f in fields)
            elif "text" in d:
                text = str(d["text"] or "")
            else:
                raise IndexUpdateError(f"document {d.get('docno')!r} has neither doc_vec nor text")
            yield {"docno": d["docno"], "text": text}
    bar = pt.tqdm(desc=f"encoding the documents appended to {path.name}", unit="doc", disable=not verbose)
    yield from encode_stream(retriever.encoder, texts(), batch_size, bar.update)
    bar.close()



# ------------------------------------------------------------------------------------------ flat

def _flat_update(path: Path, meta: dict, new_docs: Optional[Iterable[dict]], retract: Sequence[str],
                 op: str, dates: Optional[Dict[str, str]] = None) -> dict:
    """A flat index written again: its rows but ``retract``'s, then ``new_docs``; returns its new meta."""
    from pyterrier_dr import FlexIndex
    index = open_index(path)
    current = _current_docs(index, meta)
    skip, batch, checked = None, DocSet(), None
    if op == RETRACT:
        batch = DocSet.of(retract)
        skip = _retract_positions(index, retract, meta, batch)
        if len(skip) >= index.num_docs:
            raise IndexUpdateError(f"retracting {len(skip)} documents would leave the dense index {path} empty")
        skip = np.sort(skip)
    else:
        checked = _Checked(index, new_docs)
    out = {}

    def build(tmp: Path) -> None:
        rows = _rows(index.flex, skip)
        if checked is not None:
            rows = itertools.chain(rows, _vectors_checked(checked))
        fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
        FlexIndex(str(tmp), verbose=False).indexer().index(rows)
        if checked is not None:
            _check_appended(path, meta, checked)
            out["batch"] = checked.batch
        written = json.loads((tmp / "pt_meta.json").read_text(encoding="utf-8"))
        kept = {k: v for k, v in meta.items() if k not in ("vec_size", "doc_count")}
        if checked is not None:
            docs = current + checked.batch
        else:
            docs = current.without(retract)
        new = next_generation_meta({**kept, **written}, op, out.get("batch", batch), docs)
        if new["doc_count"] != docs.count:
            raise IndexUpdateError(f"the new generation of {path} holds {new['doc_count']} documents, its record "
                                   f"{docs.count} (was the index changed meanwhile?)")
        write_pt_meta(tmp, **new)
        if (path / CALIBRATION_FILE).exists():
            shutil.copyfile(path / CALIBRATION_FILE, tmp / CALIBRATION_FILE)
        if checked is not None:
            carry_ann(path, tmp, index.num_docs)
        write_appended_dates(tmp, path, dates or {}, retract)
        out["meta"] = new

    try:
        build_atomically(path, build, overwrite=True, what=f"generation {generation_of(meta) + 1} of {path}",
                         manifest=lambda tmp: {"generation": out["meta"]["generation"], "docs": out["meta"]["docs"]})
    except _NothingToDoError:
        return meta
    return out["meta"]


def carry_ann(old: Path, new: Path, old_count: int) -> List[str]:
    """The FAISS structures (:mod:`.ann`) of the flat index ``old`` carried into its appended generation ``new``
    (whose first ``old_count`` rows are ``old``'s): the new rows added to an HNSW graph (each inserted as HNSW
    inserts, the graph of the others kept) and to the posting lists of an IVF index (its centroids kept);
    written atomically into ``new``.  Returns the names carried.  A Voyager structure, and every structure after
    a retraction (positions move), is not carried: it is built again on first use.  The recall@100 of carried
    structures against rebuilt ones is in docs/indexes.md."""
    names = sorted(p.name for p in old.glob("pyterrier_sci-hnsw_*.faiss")) + \
        sorted(p.name for p in old.glob("ivf_nlist-*_train-*.faiss"))
    if not names:
        return []
    import faiss
    from pyterrier_dr import FlexIndex
    dvecs = FlexIndex(str(new), verbose=False).payload(return_docnos=False)[0]
    added = np.ascontiguousarray(dvecs[old_count:], dtype=np.float32)
    for name in names:
        if name.startswith("ivf_"):
            native = faiss.read_index(str(old / name))
            native.add(added)
        else:  # the graph without storage: the storage is the index's own vectors
            native = faiss.read_index(str(old / name), faiss.IO_FLAG_SKIP_STORAGE)
            storage = faiss.IndexFlatIP(dvecs.shape[1])
            for lo in range(0, old_count, COPY_CHUNK):
                storage.add(np.ascontiguousarray(dvecs[lo:min(lo + COPY_CHUNK, old_count)], dtype=np.float32))
            native.storage = storage
            native.add(added)
        with atomic_file(new / name, f"the carried {name} of {new}") as tmp:
            faiss.write_index(native, str(tmp), *([] if name.startswith("ivf_") else [faiss.IO_FLAG_SKIP_STORAGE]))
        if not name.startswith("ivf_"):
            del native, storage
    return names


def _vectors_checked(checked: "_Checked") -> Iterator[dict]:
    """The checked documents' vectors: each a finite float32 vector of the index's dimension."""
    dim = _index_dim(checked.index)
    for d in checked:
        try:
            vec = np.asarray(d["doc_vec"], dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise IndexUpdateError(f"document {d['docno']!r}: its doc_vec is not a vector of numbers ({e})") from None
        if vec.ndim != 1 or (dim is not None and vec.shape[0] != dim):
            raise IndexUpdateError(f"document {d['docno']!r}: its doc_vec has shape {vec.shape}; the index holds "
                                   f"vectors of {dim} dimensions")
        if not np.isfinite(vec).all():
            raise IndexUpdateError(f"document {d['docno']!r}: its doc_vec holds NaN or infinite values")
        yield {"docno": d["docno"], "doc_vec": vec}


def _index_dim(index) -> Optional[int]:
    """The dimension of the vectors ``index`` holds (None when it cannot tell)."""
    try:
        return int(index.vectors(np.zeros(1, dtype=np.int64)).shape[1]) if index.num_docs else None
    except Exception:  # noqa: BLE001 - an index that cannot give a vector: the build's own checks decide
        return None


def _check_appended(path: Path, meta: dict, checked: "_Checked") -> None:
    """After the documents to append were read: nothing to do for a rerun of the last append (``_NothingToDoError``),
    one error for a docno the index already holds."""
    if checked.batch.count == 0:
        raise _NothingToDoError()
    if checked.any_held:
        if already_applied(meta, APPEND, checked.batch):
            raise _NothingToDoError()
        raise IndexUpdateError(f"docno(s) {checked.held} are already in the dense index {path}: retract them first "
                               "to replace them")


def _retract_positions(index, retract: Sequence[str], meta: dict, batch: DocSet) -> np.ndarray:
    names = [str(d) for d in retract]
    if len(set(names)) != len(names):
        raise IndexUpdateError("a docno is given twice in the documents to retract")
    if not names:
        raise _NothingToDoError()
    pos = index.positions_of(np.asarray(names, dtype=str))
    if (pos < 0).any():
        if (pos < 0).all() and already_applied(meta, RETRACT, batch):
            raise _NothingToDoError()
        missing = [d for d, p in zip(names, pos) if p < 0][:5]
        raise IndexUpdateError(f"docno(s) {missing} are not in the dense index {index.index_path}: nothing retracted")
    return pos.astype(np.int64)


# --------------------------------------------------------------------------------------- sharded

def _entries(meta: dict) -> List[dict]:
    """The manifest's shard entries, each with ``built``: what its ``shard.json`` records (for entries of
    the first build, their position, the build's shard count and corpus and their range)."""
    out = []
    for i, s in enumerate(meta["shards"]):
        built = s.get("built") or {"shard": i, "num_shards": meta["num_shards"], "corpus": meta.get("corpus"),
                                   "start": s["start"], "end": s["end"]}
        out.append(dict(s, built=built))
    return out


def _renumber(entries: List[dict]) -> List[dict]:
    pos = 0
    for e in entries:
        e["start"], e["end"] = pos, pos + e["num_docs"]
        pos = e["end"]
    return entries


def _shard_info(meta: dict, position: int, num_shards: int, start: int, end: int, generation: int,
                batch: DocSet, dim: int) -> dict:
    enc = meta.get("encoder") or {}
    return {"shard": position, "num_shards": num_shards, "model": meta["model"], "model_id": meta.get("model_id"),
            "dim": dim, "corpus": meta.get("corpus"), "fields": meta.get("fields"), "start": start, "end": end,
            "num_docs": end - start, "vectors": meta.get("vectors", "fp32"), "backend": meta.get("backend"),
            "precision": meta.get("precision"), "max_seq_length": enc.get("max_seq_length"),
            "generation": generation, "batch": batch.hash}


def _write_shard(index_path: Path, name: str, rows: Iterable[dict], info_of) -> dict:
    """The shard directory ``name`` (a FlexIndex of ``rows`` and its ``shard.json``: ``info_of(count, dim)``,
    called once every row is written), built atomically.  A directory of that name is what an update killed
    before its commit left (names carry the uncommitted generation): it is removed first.  Returns its
    shard.json."""
    from pyterrier_dr import FlexIndex
    target = index_path / name
    if target.exists():
        shutil.rmtree(target)
    made = {}

    def build(tmp: Path) -> None:
        fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
        FlexIndex(str(tmp), verbose=False).indexer().index(rows)
        written = json.loads((tmp / "pt_meta.json").read_text(encoding="utf-8"))
        info = info_of(written["doc_count"], written["vec_size"])
        info["files"] = record_files(tmp)
        (tmp / SHARD_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
        made.update(info)
    build_atomically(target, build, what=f"{name} of {index_path}")
    return made


def _remove_unreferenced(path: Path, meta: dict, keep: Sequence[str] = ()) -> None:
    """Removes shard directories of this index that its manifest does not name (superseded by a
    retraction, or left by an update that failed before its commit)."""
    named = {s["name"] for s in meta["shards"]} | set(keep)
    for d in path.glob("shard-*"):
        if d.is_dir() and not d.is_symlink() and ".partial-" not in d.name and ".replaced-" not in d.name \
                and d.name not in named:
            shutil.rmtree(d, ignore_errors=True)


def _sharded_append(path: Path, meta: dict, new_docs: Iterable[dict], dates: Dict[str, str]) -> dict:
    index = open_index(path)
    current = _current_docs(index, meta, full=False)   # a new shard only: the count checked, the hash kept
    g = generation_of(meta) + 1
    entries = _entries(meta)
    position, start = len(entries), int(meta["num_docs"])
    name = generation_name(position, g)
    checked = _Checked(index, new_docs)
    info = _write_shard(path, name, _vectors_checked(checked), lambda n, dim: _shard_info(
        meta, position, position + 1, start, start + n, g, checked.batch, dim))
    try:
        _check_appended(path, meta, checked)
    except (_NothingToDoError, IndexUpdateError):
        shutil.rmtree(path / name, ignore_errors=True)
        raise
    entries.append({"name": name, "num_docs": info["num_docs"], "generation": g,
                    "built": {k: info[k] for k in ("shard", "num_shards", "corpus", "start", "end")}})
    docs = current + checked.batch
    return _commit_sharded(path, meta, entries, APPEND, checked.batch, docs, dates)


def _sharded_retract(path: Path, meta: dict, retract: Sequence[str]) -> dict:
    index = open_index(path)
    current = _current_docs(index, meta, full=False)
    batch = DocSet.of(retract)
    pos = _retract_positions(index, retract, meta, batch)
    if len(pos) >= index.num_docs:
        raise IndexUpdateError(f"retracting {len(pos)} documents would leave the dense index {path} empty")
    g = generation_of(meta) + 1
    entries, out = _entries(meta), []
    for i, e in enumerate(entries):
        drop = np.sort(pos[(pos >= e["start"]) & (pos < e["end"])]) - e["start"]
        if not len(drop):
            out.append(e)
            continue
        if len(drop) == e["num_docs"]:
            continue  # the whole shard is retracted: it leaves the manifest
        position = len(out)
        name = generation_name(position, g)
        info = _write_shard(path, name, _rows(index.shards[i], drop), lambda n, dim, position=position: _shard_info(
            meta, position, len(entries), 0, n, g, batch, dim))
        out.append({"name": name, "num_docs": info["num_docs"], "generation": g,
                    "built": {k: info[k] for k in ("shard", "num_shards", "corpus", "start", "end")}})
    docs = current.without(retract)
    return _commit_sharded(path, meta, out, RETRACT, batch, docs, removed=retract)


def _commit_sharded(path: Path, meta: dict, entries: List[dict], op: str, batch: DocSet, docs: DocSet,
                    dates: Optional[Dict[str, str]] = None, removed: Sequence[str] = ()) -> dict:
    entries = _renumber(entries)
    if entries[-1]["end"] != docs.count:
        raise IndexUpdateError(f"the new generation of {path} holds {entries[-1]['end']} documents, its record "
                               f"{docs.count} (was the index changed meanwhile?)")
    new = next_generation_meta(meta, op, batch, docs)
    new.update(shards=entries, num_shards=len(entries), num_docs=entries[-1]["end"])
    # the appended documents' own dates, before the commit (a kill between them leaves dates of documents the
    # index does not hold, which nothing looks up, and the rerun writes them again)
    write_appended_dates(path, path, dates or {}, removed)
    write_pt_meta(path, **new)  # the commit
    _remove_unreferenced(path, new)
    return new


# --------------------------------------------------------------------------------------------- API

def append_documents(path: Union[str, Path], docs: Iterable[dict], *, batch_size: int = 32,
                     verbose: bool = False) -> dict:
    """Appends ``docs`` (``{'docno', 'doc_vec'}``, or ``{'docno', 'text'}`` / the index's fields, encoded with
    the index's encoder) to the dense index at ``path`` as a new generation; returns its ``pt_meta.json``.
    A docno the index holds is one :class:`~pyterrier_sci.generations.IndexUpdateError` (nothing changes),
    unless this is a rerun of the last change (then nothing is done)."""
    path = Path(path)
    with update_lock(path):
        meta = _meta(path)
        dates: Dict[str, str] = {}   # the documents' own dates (the dataset does not know them): for before=
        docs = _with_vectors(path, record_dates(docs, dates), batch_size, verbose)
        try:
            if meta["format"] == ARTIFACT_FORMAT:
                return _sharded_append(path, meta, docs, dates)
            return _flat_update(path, meta, docs, (), APPEND, dates)
        except _NothingToDoError:
            return meta


def retract_documents(path: Union[str, Path], docnos: Union[str, Path, Sequence[str]]) -> dict:
    """Retracts ``docnos`` (a list, or a file of them: :func:`~pyterrier_sci.generations.read_docnos`) from the
    dense index at ``path`` as a new generation; returns its ``pt_meta.json``.  A docno the index does not
    hold is one :class:`~pyterrier_sci.generations.IndexUpdateError` (nothing changes), unless this is a rerun
    of the last change."""
    path = Path(path)
    names = read_docnos(docnos)
    with update_lock(path):
        meta = _meta(path)
        try:
            if meta["format"] == ARTIFACT_FORMAT:
                return _sharded_retract(path, meta, names)
            return _flat_update(path, meta, None, names, RETRACT)
        except _NothingToDoError:
            return meta


class GrowingDenseIndex:
    """A dense index (flat or sharded) opened for updates: ``indexer(mode='append')`` (a ``pt.Indexer``:
    ``encoder >> index.indexer(mode='append')`` or documents with text) and ``retract(docnos)``, in
    PyTerrier's convention; ``generation`` and ``docs`` (count and hash) are those of the current
    generation; ``retriever(**kw)`` searches it."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        _meta(self.path)

    @property
    def meta(self) -> dict:
        return _meta(self.path)

    @property
    def generation(self) -> int:
        return generation_of(self.meta)

    @property
    def docs(self) -> Optional[dict]:
        return docs_record(self.meta)

    def indexer(self, mode: str = APPEND, batch_size: int = 32, verbose: bool = False) -> "DenseAppender":
        if str(getattr(mode, "value", mode)) != APPEND:
            raise IndexUpdateError(f"an existing dense index takes mode='append' (not {mode!r}); build a new one "
                                   "with pyterrier_dr's FlexIndex(...).indexer(mode='overwrite') or 'pyterrier-sci "
                                   "index'")
        return DenseAppender(self.path, batch_size=batch_size, verbose=verbose)

    def retract(self, docnos) -> "GrowingDenseIndex":
        retract_documents(self.path, docnos)
        return self

    def retriever(self, **kwargs) -> DenseRetriever:
        return DenseRetriever(index=open_index(self.path), **kwargs)

    def __repr__(self) -> str:
        return f"GrowingDenseIndex({str(self.path)!r}, generation={self.generation})"


class DenseAppender(pt.Indexer):
    """``index.indexer(mode='append')``: appends the documents it is given (``doc_vec``, or text encoded with
    the index's encoder) as one new generation."""

    def __init__(self, path: Union[str, Path], batch_size: int = 32, verbose: bool = False):
        self.path = Path(path)
        self.batch_size = batch_size
        self.verbose = verbose

    def index_inputs(self):
        return [["docno", "doc_vec"], ["docno", "text"]]

    def index(self, it) -> GrowingDenseIndex:
        if hasattr(it, "to_dict"):
            it = it.to_dict(orient="records")
        append_documents(self.path, it, batch_size=self.batch_size, verbose=self.verbose)
        return GrowingDenseIndex(self.path)

    def __repr__(self) -> str:
        return f"DenseAppender({str(self.path)!r})"


def open_growing(path: Union[str, Path]) -> GrowingDenseIndex:
    """The dense index at ``path`` opened for appends and retractions."""
    return GrowingDenseIndex(path)


def warm_up(path: Union[str, Path]) -> None:
    """What a resident appender (:mod:`pyterrier_sci.resident`) loads before its first change: the index's encoder
    once (its libraries imported, its files read; each change that encodes documents loads it again, a fraction of
    a second)."""
    DenseRetriever(index=str(path), verbose=False).encoder


def update_index(path: Union[str, Path], append: Optional[Union[str, Path]] = None,
                 retract: Optional[Union[str, Path, Sequence[str]]] = None, *, batch_size: int = 32,
                 verbose: bool = False, fields: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``pyterrier-sci index --append DOCS --retract IDS`` on a dense index: the retraction first, then the
    append (each its own generation); returns the final ``pt_meta.json``."""
    meta = _meta(Path(path))
    if retract is not None:
        meta = retract_documents(path, retract)
    if append is not None:  # the fields given, else those the index was encoded from, else the records' text
        meta = append_documents(path, read_docs(append, fields), batch_size=batch_size, verbose=verbose)
    return meta
