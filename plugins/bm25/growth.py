"""BM25 indexes that grow (issue 35): documents appended and retracted as new generations
(:mod:`pyterrier_sci.generations`), BM25 scores equal to those of an index rebuilt on the final collection.

* **Lucene** appends natively.  A change is made in a copy of the index whose files are hard links (Lucene
  never rewrites a file it has written: a commit writes new segment files and a new ``segments_N``): Anserini's
  ``SimpleIndexer`` opens the copy in append mode, deletes the retracted documents by their ``id`` term, adds
  the new ones as a new segment, and after a retraction expunges the deleted documents
  (``forceMergeDeletes``) so that the collection statistics BM25 uses (document count, average length,
  document frequencies) are those of the final collection; the copy then replaces the index with one rename
  (:func:`pyterrier_sci.artifacts.build_atomically`).  The cost is that of indexing the new documents (plus,
  after a retraction, rewriting the segments that held the retracted ones).
* **PISA** has no way to add a document to an index (pyterrier_pisa's indexer modes are ``create`` and
  ``overwrite``), and its scorer reads the statistics of one index, so segments scored with the statistics
  of the whole collection are not possible through it.  A change to a PISA index is therefore a *rebuild*
  of the final collection, streamed: the corpus the index records (``source``: an ir_datasets id and fields;
  :func:`~.retriever.corpus_index` records it) without the retracted documents, the documents appended
  before (kept in the index directory, ``appended.jsonl.gz``) and the new ones.  It is exact and crash-safe
  like the Lucene path, but costs a full indexing run (docs/indexes.md has the figures); use
  ``backend='lucene'`` for a collection that changes often.

Both record in ``pt_meta.json`` the generation, the count and hash of the documents held and the history of
changes, take the index's update lock (a second appender waits) and treat a rerun of a completed change as
done.
"""
from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import pyterrier as pt

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.corpus import corpus_texts
from pyterrier_sci.dates import record_dates, write_appended_dates
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
from pyterrier_sci.quiet import quiet_native

from .indexing import PISA_BATCH_SIZE, PisaStreamIndexer, checked_docs, index_corpus
from .lucene import RAM_BUFFER_MB, LuceneIndex, set_ram_buffer, start_jvm

__all__ = ["append_documents", "retract_documents", "update_index", "warm_up", "BM25Appender", "GrowingBM25Index",
           "open_growing", "APPENDED_LOG", "RETRACTED_LOG", "ID_FIELD"]

#: the file of a grown PISA index holding the documents appended to its corpus (``{'docno', 'text'}`` lines)
APPENDED_LOG = "appended.jsonl.gz"
#: the file of a grown PISA index holding the docnos of its corpus that were retracted (one a line)
RETRACTED_LOG = "retracted.txt"
#: Anserini's field holding a document's docno (a term: what a retraction deletes by)
ID_FIELD = "id"
_NOT_LINKED = ("write.lock", "pt_meta.json", "manifest.json")
_CHECK = 1024  # documents checked against the index per lookup


class _NothingToDoError(Exception):
    """Raised inside a build to abandon it: the change is already in the index (a rerun)."""


def _meta(path: Path) -> dict:
    try:
        meta = json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or meta.get("type") != "sparse_index" or meta.get("format") not in ("lucene", "pisa"):
        what = "nothing readable" if not isinstance(meta, dict) else f"a {meta.get('type')}/{meta.get('format')} index"
        raise IndexUpdateError(f"{path} holds {what}, not a BM25 index (PISA or Lucene) to update")
    return meta



# ------------------------------------------------------------------------------------------ Lucene

_WRITER = []


def _deleting_writer():
    """A pyjnius view of Lucene's ``IndexWriter`` with ``deleteDocuments(Term...)`` bound to its own signature
    (pyjnius cannot choose between it and ``deleteDocuments(Query...)``).  pyjnius registers it as *the*
    class of ``IndexWriter`` for later casts, so it declares every method this plugin calls on one
    (:func:`~.lucene.set_ram_buffer`'s ``getConfig`` too)."""
    if not _WRITER:
        from jnius import JavaClass, JavaMethod, MetaJavaClass

        class DeletingIndexWriter(JavaClass, metaclass=MetaJavaClass):
            __javaclass__ = "org/apache/lucene/index/IndexWriter"
            deleteDocuments = JavaMethod("([Lorg/apache/lucene/index/Term;)J", varargs=True)  # noqa: N815 - Java
            forceMergeDeletes = JavaMethod("(Z)V")  # noqa: N815 - Java
            getConfig = JavaMethod("()Lorg/apache/lucene/index/LiveIndexWriterConfig;")  # noqa: N815 - Java
        _WRITER.append(DeletingIndexWriter)
    return _WRITER[0]


class _LuceneReader:
    """A reader of the current generation: which docnos it holds, and all of them."""

    def __init__(self, path: Path):
        java = start_jvm()
        self.java = java
        directory = java.autoclass("org.apache.lucene.store.FSDirectory").open(
            java.autoclass("java.io.File")(os.path.abspath(path)).toPath())
        self.reader = java.autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        self.term = java.autoclass("org.apache.lucene.index.Term")

    def held(self, docnos: Sequence[str]) -> List[bool]:
        # document frequency of the id term: every generation here has its deletions expunged
        return [self.reader.docFreq(self.term(ID_FIELD, d)) > 0 for d in docnos]

    def docnos(self) -> Iterator[str]:
        live = self.java.autoclass("org.apache.lucene.index.MultiBits").getLiveDocs(self.reader)
        stored = self.reader.storedFields()
        for i in range(self.reader.maxDoc()):
            if live is None or live.get(i):
                yield stored.document(i).get(ID_FIELD)

    def close(self) -> None:
        self.reader.close()


def _lucene_update(path: Path, meta: dict, docs: Optional[Iterable[dict]], retract: Sequence[str], op: str,
                   threads: int, batch_size: int, ram_buffer_mb: float, dates: Optional[Dict[str, str]] = None) -> dict:
    _check_lucene_settings(path, meta)
    java = start_jvm()
    reader = _LuceneReader(path)
    try:
        current = DocSet.from_record(docs_record(meta)) or DocSet.of(reader.docnos())
        held_now = int(reader.reader.numDocs())
        if current.count != held_now or (meta.get("num_docs") is not None and int(meta["num_docs"]) != held_now):
            raise IndexUpdateError(f"{path / 'pt_meta.json'} records {current.count} documents, the index holds "
                                   f"{held_now}: its record was changed or damaged; rebuild the index (nothing was "
                                   "changed)")
        batch = DocSet.of(retract) if op == RETRACT else DocSet()
        if op == RETRACT:
            _check_retract(path, meta, retract, reader.held(list(retract)), batch)
        out = {}

        def build(tmp: Path) -> None:
            tmp.mkdir()
            for f in path.iterdir():  # hard links: Lucene never changes a file it has written
                if f.is_file() and not f.is_symlink() and f.name not in _NOT_LINKED and not f.name.startswith("."):
                    os.link(f, tmp / f.name)
            writer = java.SimpleIndexer(os.path.abspath(tmp), True, int(threads))
            try:
                set_ram_buffer(java, writer, float(ram_buffer_mb))
                field_utils = java.autoclass("org.apache.commons.lang3.reflect.FieldUtils")
                from jnius import cast
                index_writer = cast(_deleting_writer(), field_utils.readField(writer, "writer", True))
                if op == RETRACT:
                    term = java.autoclass("org.apache.lucene.index.Term")
                    for i in range(0, len(retract), _CHECK):
                        index_writer.deleteDocuments(*[term(ID_FIELD, d) for d in retract[i:i + _CHECK]])
                    _expunge_all(java, index_writer)
                else:
                    _lucene_add(java, writer, docs, reader, batch, batch_size, path, meta)
            except BaseException:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass
                raise
            writer.close()
            docs_now = current + batch if op == APPEND else current.without(retract)
            out["meta"] = next_generation_meta(meta, op, batch, docs_now, num_docs=docs_now.count)
            write_appended_dates(tmp, path, dates or {}, retract)   # a new file, not the hard link's
            write_pt_meta(tmp, **out["meta"])

        try:
            build_atomically(path, build, overwrite=True, what=f"generation {generation_of(meta) + 1} of {path}",
                             manifest=lambda tmp: {"generation": out["meta"]["generation"],
                                                   "docs": out["meta"]["docs"]})
        except _NothingToDoError:
            return meta
        return out["meta"]
    finally:
        reader.close()


def _expunge_all(java, index_writer) -> None:
    """Merges away every deleted document (Lucene's merge policy leaves segments with under 10 % deletions as
    they are by default), so that the collection statistics BM25 uses are those of the live documents."""
    from jnius import cast
    policy = index_writer.getConfig().getMergePolicy()
    try:
        cast("org.apache.lucene.index.TieredMergePolicy", policy).setForceMergeDeletesPctAllowed(0.0)
    except Exception as e:  # noqa: BLE001 - another policy: say so, the scores would differ from a rebuild
        raise IndexUpdateError(f"Lucene's merge policy {policy.getClass().getName()} cannot be told to expunge every "
                               f"deleted document ({e})") from None
    index_writer.forceMergeDeletes(True)


#: what every Lucene index of the toolkit is built with (lucene.py), and what an append analyses new documents with
LUCENE_SETTINGS = {"analyzer": "DefaultEnglishAnalyzer", "stemmer": "porter", "stopwords": "lucene-english",
                   "contents_field": "contents"}


def _check_lucene_settings(path: Path, meta: dict) -> None:
    """An append analyses its documents as the index was analysed: the settings the index records must be those
    the appender uses (:data:`LUCENE_SETTINGS`), else one :class:`IndexUpdateError` naming them."""
    other = {k: meta.get(k) for k, v in LUCENE_SETTINGS.items() if meta.get(k, v) != v}
    if other:
        used = {k: LUCENE_SETTINGS[k] for k in other}
        raise IndexUpdateError(f"{path / 'pt_meta.json'} records {other}, but appended documents are analysed with "
                               f"{used}: the new segment would not match the index; rebuild it with the documents "
                               "added (nothing was changed)")


def _lucene_add(java, writer, docs: Iterable[dict], reader: _LuceneReader, batch: DocSet, batch_size: int,
                path: Path, meta: dict) -> None:
    """Adds the checked documents a batch at a time; a docno the index holds is an error unless the whole
    change is a rerun of the last append (then :class:`_NothingToDoError`)."""
    from_doc = java.JsonDocument.fromFields
    seen, held = set(), []
    it = iter(checked_docs(docs, "text", "lucene"))
    while True:
        chunk = list(itertools.islice(it, max(1, min(batch_size, _CHECK))))
        if not chunk:
            break
        names = [d for d, _ in chunk]
        for d in names:
            if d in seen:
                raise IndexUpdateError(f"docno {d!r} is given twice in the documents to append")
            seen.add(d)
        held += [d for d, h in zip(names, reader.held(names)) if h]
        batch.add(names)
        if not held:
            writer.addJsonDocuments([from_doc(d, t) for d, t in chunk])
    if batch.count == 0 or (held and already_applied(meta, APPEND, batch)):
        raise _NothingToDoError()
    if held:
        raise IndexUpdateError(f"docno(s) {held[:5]} are already in the BM25 index {path}: retract them first to "
                               "replace them")


def _check_retract(path: Path, meta: dict, retract: Sequence[str], held: Sequence[bool], batch: DocSet) -> None:
    if len(set(retract)) != len(retract):
        raise IndexUpdateError("a docno is given twice in the documents to retract")
    if not retract:
        raise _NothingToDoError()
    missing = [d for d, h in zip(retract, held) if not h]
    if missing:
        if len(missing) == len(retract) and already_applied(meta, RETRACT, batch):
            raise _NothingToDoError()
        raise IndexUpdateError(f"docno(s) {missing[:5]} are not in the BM25 index {path}: nothing retracted")
    if meta.get("num_docs") is not None and len(retract) >= int(meta["num_docs"]):
        raise IndexUpdateError(f"retracting {len(retract)} documents would leave the BM25 index {path} empty")


# -------------------------------------------------------------------------------------------- PISA

def _read_log(path: Path) -> Iterator[dict]:
    log = path / APPENDED_LOG
    if log.exists():
        with gzip.open(log, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def _pisa_update(path: Path, meta: dict, docs: Optional[Iterable[dict]], retract: Sequence[str], op: str,
                 threads: int, verbose: bool, dates: Optional[Dict[str, str]] = None) -> dict:
    source = meta.get("source") if isinstance(meta.get("source"), dict) else None
    if not source or not source.get("dataset"):
        raise IndexUpdateError(
            f"the PISA index {path} cannot take documents in place (PISA has no append), and it does not record "
            "the corpus it was built from, which a rebuild of the final collection would read; build it with "
            "backend='lucene' (appends natively), or through the bm25 component of a dataset (which records its "
            "corpus)")
    retracted = set((path / RETRACTED_LOG).read_text(encoding="utf-8").split()) \
        if (path / RETRACTED_LOG).exists() else set()
    gone = set(retract)
    if len(gone) != len(retract):
        raise IndexUpdateError("a docno is given twice in the documents to retract")
    if op == RETRACT and gone:   # PISA cannot hold an empty collection (its indexer aborts the process)
        current = DocSet.from_record(docs_record(meta))
        left = current.count - len(gone) if current is not None else \
            sum(1 for d in _final_docnos(source, retracted | gone, path) if d["docno"] not in gone)
        if left <= 0:
            raise IndexUpdateError(f"retracting {len(gone)} documents would leave the BM25 index {path} empty")
    batch = DocSet.of(retract) if op == RETRACT else DocSet()
    out: Dict[str, Any] = {}

    def build(tmp: Path) -> None:
        tmp.mkdir()
        new_names: set = set()
        with gzip.open(tmp / APPENDED_LOG, "wt", encoding="utf-8") as log:
            for d in _read_log(path):  # the earlier appends, less those retracted now
                if d["docno"] not in gone:
                    log.write(json.dumps({"docno": d["docno"], "text": d["text"]}) + "\n")
                else:
                    gone.discard(d["docno"])
                    found.append(d["docno"])
            if op == APPEND:  # the new documents, checked, kept beside the index for the next rebuild
                for docno, text in checked_docs(docs, "text", "pisa"):
                    if docno in new_names:
                        raise IndexUpdateError(f"docno {docno!r} is given twice in the documents to append")
                    new_names.add(docno)
                    log.write(json.dumps({"docno": docno, "text": text}) + "\n")
                batch.add(new_names)
        if op == APPEND and not new_names:
            raise _NothingToDoError()
        held: List[str] = []

        def stream() -> Iterator[dict]:
            for d in corpus_texts(source["dataset"], source.get("fields")):
                if d["docno"] in retracted:
                    continue
                if d["docno"] in gone:
                    gone.discard(d["docno"])
                    found.append(d["docno"])
                    continue
                if d["docno"] in new_names:
                    held.append(d["docno"])
                yield d
            yield from _read_log(tmp)

        for d in _read_log(path):
            if d["docno"] in new_names:
                held.append(d["docno"])
        streamed = DocSet()   # the final collection's documents, as the rebuild reads them: nothing trusted

        def counted() -> Iterator[dict]:
            for d in stream():
                streamed.add([d["docno"]])
                yield d
        writer = PisaStreamIndexer(checked_docs(counted(), "text", "pisa"), tmp, threads=threads,
                                    batch_size=PISA_BATCH_SIZE)
        if held and already_applied(meta, APPEND, batch):
            raise _NothingToDoError()
        with quiet_native(not verbose):
            writer.index(None)
        if writer.error is not None:
            raise writer.error
        if held:
            if already_applied(meta, APPEND, batch):
                raise _NothingToDoError()
            raise IndexUpdateError(f"docno(s) {sorted(set(held))[:5]} are already in the BM25 index {path}: retract "
                                   "them first to replace them")
        if op == RETRACT and gone:
            if not found and already_applied(meta, RETRACT, batch):
                raise _NothingToDoError()
            raise IndexUpdateError(f"docno(s) {sorted(gone)[:5]} are not in the BM25 index {path}: nothing retracted")
        now_retracted = retracted | {d for d in found if d not in new_names}
        (tmp / RETRACTED_LOG).write_text("".join(f"{d}\n" for d in sorted(now_retracted)), encoding="utf-8")
        current = DocSet.from_record(docs_record(meta))
        written = json.loads((tmp / "pt_meta.json").read_text(encoding="utf-8"))
        if current is None:
            docs_now = DocSet.of(d["docno"] for d in _final_docnos(source, now_retracted, tmp))
        elif op == APPEND:
            docs_now = current + batch
        else:
            docs_now = current.without(retract)
        if writer.written != docs_now.count or streamed != docs_now:
            raise IndexUpdateError(f"the rebuilt PISA index holds {writer.written} documents (hash "
                                   f"{streamed.hash[:26]}...), its record {docs_now.count} (hash "
                                   f"{docs_now.hash[:26]}...): the corpus or {path / 'pt_meta.json'} was changed; "
                                   "rebuild the index (nothing was changed)")
        out["meta"] = next_generation_meta({**meta, **written}, op, batch, docs_now, source=source,
                                           num_docs=docs_now.count)
        write_appended_dates(tmp, path, dates or {}, retract)
        write_pt_meta(tmp, **out["meta"])

    found: List[str] = []
    if op == RETRACT and not retract:
        return meta
    try:
        build_atomically(path, build, overwrite=True, what=f"generation {generation_of(meta) + 1} of {path}",
                         manifest=lambda tmp: {"generation": out["meta"]["generation"], "docs": out["meta"]["docs"]})
    except _NothingToDoError:
        return meta
    return out["meta"]


def _final_docnos(source: dict, retracted: set, directory: Path) -> Iterator[dict]:
    for d in corpus_texts(source["dataset"], source.get("fields")):
        if d["docno"] not in retracted:
            yield d
    yield from _read_log(directory)


# --------------------------------------------------------------------------------------------- API

def append_documents(path: Union[str, Path], docs: Iterable[dict], *, threads: int = 1, batch_size: int = 1000,
                     ram_buffer_mb: float = RAM_BUFFER_MB, verbose: bool = False) -> dict:
    """Appends ``docs`` (``{'docno', 'text'}``) to the BM25 index at ``path`` as a new generation (Lucene: a new
    segment; PISA: a rebuild of the final collection); returns its ``pt_meta.json``.  A docno the index holds
    is one :class:`~pyterrier_sci.generations.IndexUpdateError` (nothing changes) unless the change is a rerun
    of the last one (then nothing is done)."""
    path = Path(path)
    dates: Dict[str, str] = {}   # the documents' own dates (the dataset does not know them): for before=
    with update_lock(path):
        meta = _meta(path)
        if meta["format"] == "lucene":
            return _lucene_update(path, meta, record_dates(docs, dates), (), APPEND, threads, batch_size,
                                  ram_buffer_mb, dates)
        return _pisa_update(path, meta, record_dates(docs, dates), (), APPEND, threads, verbose, dates)


def retract_documents(path: Union[str, Path], docnos: Union[str, Path, Sequence[str]], *, threads: int = 1,
                      verbose: bool = False) -> dict:
    """Retracts ``docnos`` (a list, or a file of them) from the BM25 index at ``path`` as a new generation;
    returns its ``pt_meta.json``."""
    path = Path(path)
    names = read_docnos(docnos)
    with update_lock(path):
        meta = _meta(path)
        if meta["format"] == "lucene":
            try:
                return _lucene_update(path, meta, None, names, RETRACT, threads, 1000, RAM_BUFFER_MB)
            except _NothingToDoError:
                return meta
        return _pisa_update(path, meta, None, names, RETRACT, threads, verbose)


def update_index(path: Union[str, Path], append: Optional[Union[str, Path]] = None,
                 retract: Optional[Union[str, Path, Sequence[str]]] = None, *, fields: Optional[Sequence[str]] = None,
                 verbose: bool = False, **kwargs) -> dict:
    """``pyterrier-sci index --append DOCS --retract IDS`` on a BM25 index: the retraction first, then the append
    (each its own generation); returns the final ``pt_meta.json``."""
    meta = _meta(Path(path))
    if retract is not None:
        meta = retract_documents(path, retract, verbose=verbose)
    if append is not None:
        meta = append_documents(path, read_docs(append, fields or ("text",)), verbose=verbose)
    return meta


def warm_up(path: Union[str, Path]) -> None:
    """What a resident appender (:mod:`pyterrier_sci.resident`) loads before its first change: for a Lucene index,
    the JVM and Lucene's indexing classes (one document indexed into a scratch index, removed); a PISA change is a
    rebuild, which loads nothing ahead."""
    if _meta(Path(path)).get("format") == "lucene":
        start_jvm()
        with tempfile.TemporaryDirectory(prefix="warm-up-") as scratch:
            index_corpus([{"docno": "warm-up", "text": "warm up"}], Path(scratch) / "index", "lucene")


class GrowingBM25Index:
    """A BM25 index (PISA or Lucene) opened for updates: ``indexer(mode='append')`` (a ``pt.Indexer`` of
    ``{'docno', 'text'}``) and ``retract(docnos)``; ``generation`` and ``docs`` of the current generation."""

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

    def indexer(self, mode: str = APPEND, threads: int = 1, verbose: bool = False) -> "BM25Appender":
        if str(getattr(mode, "value", mode)) != APPEND:
            raise IndexUpdateError(f"an existing BM25 index takes mode='append' (not {mode!r}); build a new one with "
                                   "index_corpus(..., overwrite=True)")
        return BM25Appender(self.path, threads=threads, verbose=verbose)

    def retract(self, docnos) -> "GrowingBM25Index":
        retract_documents(self.path, docnos)
        return self

    def __repr__(self) -> str:
        return f"GrowingBM25Index({str(self.path)!r}, generation={self.generation})"


class BM25Appender(pt.Indexer):
    """``index.indexer(mode='append')`` of a BM25 index: appends ``{'docno', 'text'}`` as one new generation."""

    def __init__(self, path: Union[str, Path], threads: int = 1, verbose: bool = False):
        self.path = Path(path)
        self.threads = threads
        self.verbose = verbose

    def index_inputs(self):
        return [["docno", "text"]]

    def index(self, it) -> GrowingBM25Index:
        if hasattr(it, "to_dict"):
            it = it.to_dict(orient="records")
        append_documents(self.path, it, threads=self.threads, verbose=self.verbose)
        return GrowingBM25Index(self.path)


def open_growing(path: Union[str, Path]) -> GrowingBM25Index:
    """The BM25 index at ``path`` opened for appends and retractions."""
    return GrowingBM25Index(path)


def lucene_index(path: Union[str, Path]) -> LuceneIndex:
    """The Lucene index at ``path`` (after an update: its new generation)."""
    return LuceneIndex(str(path))
