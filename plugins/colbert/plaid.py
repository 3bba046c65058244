"""ColBERT late-interaction retrieval over a PLAID index (``colbert-ai``), on CPU: the
:class:`ColBERTIndex` artifact (``multi_vector_index`` / ``plaid``) with its indexer (one supervised
worker process, atomic) and retriever (PLAID search, or exact MaxSim re-scoring of a result frame),
and the ``colbert`` pipeline component.  Details: ``docs/colbert.md``.
"""
from __future__ import annotations

import importlib
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import atomic_write_text, build_atomically, write_pt_meta
from pyterrier_sci.corpus import corpus_texts, repeat_rows, sorted_results
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
from pyterrier_sci.hashing import FileHasher, weights_digest
from pyterrier_sci.protocol import ModelRef
from pyterrier_sci.training import about_to_train
from pyterrier_sci.upstream import fix_npids_multi_block_lookup, fix_npids_single_docno_blocks

from ._compat import (
    ColBERTError,
    ColBERTTimeoutError,
    ColBERTWorkerError,
    ensure_extensions,
    import_colbert,
    output_tail,
    quiet,
    worker_env,
)
from ._worker import sample_size
from .checkpoint import (
    COLBERTV2,
    DEFAULT_CHECKPOINT,
    CheckpointNotFoundError,
    build_checkpoint,
    resolve_checkpoint,
)

__all__ = ["ColBERTIndex", "ColBERTIndexer", "ColBERTAppender", "retract_colbert", "update_index", "ColBERTRetriever",
           "build_checkpoint",
           "resolve_checkpoint", "ColBERTError", "ColBERTTimeoutError", "ColBERTWorkerError",
           "CheckpointNotFoundError", "COLBERTV2", "DEFAULT_CHECKPOINT"]

PLAID_DIR = "plaid"
#: where the partitions appended to a PLAID index live, one ColBERT index each (``segments/g00001``)
SEGMENTS_DIR = "segments"
# loaded searchers, shared by every ColBERTIndex object of the same index and checkpoint (a pipeline that
# names `colbert` several times loads the index and the query encoder once); the lock serialises
# searches, which set the shared searcher's settings per call
_SEARCHERS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_LOCK = threading.RLock()


class ColBERTIndex(pta.Artifact, pt.Indexer):
    """A ColBERT PLAID index directory: ``pt_meta.json``, ``docnos.npids`` (docno of each passage id)
    and colbert-ai's own files under ``plaid/``.  Passage texts are not stored.

    Args:
        path: the index directory.
        checkpoint: the ColBERT checkpoint that encodes documents and queries (``"default"``, a hub id
            such as ``"colbert-ir/colbertv2.0"``, or a local checkpoint directory).  For a built index
            the one recorded at indexing time is used unless another is given.
        verbose: progress bars (indexing).
    """
    ARTIFACT_TYPE = "multi_vector_index"
    ARTIFACT_FORMAT = "plaid"
    ARTIFACT_PACKAGE_HINT = "pyterrier-sci[colbert]"

    def __init__(self, path: Union[str, Path], checkpoint: Optional[str] = None, verbose: bool = True):
        super().__init__(path)
        self._checkpoint = None if checkpoint is None else str(checkpoint)
        self.verbose = verbose
        self._searcher = None
        self._docnos = None

    # --- state
    def built(self) -> bool:
        """Whether a complete index exists at :attr:`path`."""
        return (Path(self.path) / "pt_meta.json").exists()

    def metadata(self) -> Dict[str, Any]:
        if not self.built():
            raise FileNotFoundError(f"no ColBERT index at {self.path}")
        with open(Path(self.path) / "pt_meta.json", "rt") as f:
            return json.load(f)

    @property
    def checkpoint(self) -> str:
        if self._checkpoint is not None:
            return self._checkpoint
        if self.built():
            return self.metadata()["checkpoint"]
        return DEFAULT_CHECKPOINT

    def __len__(self) -> int:
        meta = self.metadata()
        return int(meta.get("num_docs", meta["doc_count"]))

    def __repr__(self) -> str:
        return f"ColBERTIndex({str(self.path)!r}, checkpoint={self.checkpoint!r})"

    # --- growth (docs/indexes.md): appended partitions and retracted documents
    @property
    def generation(self) -> int:
        """The generation of the index (0: as built; each append or retraction adds one)."""
        return generation_of(self.metadata())

    def parts(self) -> List[tuple]:
        """``[(name, ColBERTIndex), ...]``: the index as built (name ``""``), then each partition appended to it
        (a ColBERT index of its own under ``segments/``), oldest first."""
        meta = self.metadata()
        out = [("", self)]
        for seg in meta.get("segments") or []:
            out.append((seg["name"], ColBERTIndex(Path(self.path) / seg["name"], checkpoint=self.checkpoint,
                                                  verbose=self.verbose)))
        return out

    def retracted(self) -> frozenset:
        """``{(part name, docno)}`` of the documents retracted (still stored in their part, never returned)."""
        meta = self.metadata()
        name = meta.get("retracted")
        if not name:
            return frozenset()
        pairs = (line.split("\t", 1) for line in (Path(self.path) / name).read_text(encoding="utf-8").splitlines())
        return frozenset((p[0], p[1]) for p in pairs if len(p) == 2)

    def locate(self, docnos: Sequence[str]) -> List[tuple]:
        """For each docno, ``(part index, passage id)`` of its live copy (the newest part holding it and not
        retracted), or ``(-1, -1)``."""
        parts, gone = self.parts(), self.retracted()
        out = [(-1, -1)] * len(docnos)
        arr = np.asarray([str(d) for d in docnos], dtype=str)
        fix_npids_multi_block_lookup()   # pyterrier_sci.upstream: numbered blocks after the first
        for i in reversed(range(len(parts))):
            name, part = parts[i]
            pids = np.asarray(part.docnos().inv[arr], dtype=np.int64) if len(arr) else np.zeros(0, dtype=np.int64)
            for j, (d, pid) in enumerate(zip(arr, pids)):
                if out[j][0] < 0 and pid >= 0 and (name, d) not in gone:
                    out[j] = (i, int(pid))
        return out

    def retract(self, docnos) -> "ColBERTIndex":
        """Retracts ``docnos`` (a list or a file of them) as a new generation: they are never returned again (their
        stored embeddings stay until the index is rebuilt); returns the index."""
        retract_colbert(self.path, docnos)
        return ColBERTIndex(self.path, checkpoint=self._checkpoint, verbose=self.verbose)

    def docnos(self):
        """The ``npids.Lookup`` of passage id <-> docno."""
        if self._docnos is None:
            from npids import Lookup
            self.metadata()
            self._docnos = Lookup(Path(self.path) / "docnos.npids")
        return self._docnos

    # --- indexing
    def indexer(self, text_field: Union[str, Sequence[str]] = "text", doc_maxlen: int = 300, nbits: int = 2,
                kmeans_niters: int = 4, index_bsize: int = 64, threads: Optional[int] = None,
                timeout: Optional[float] = None, overwrite: bool = False, resume: bool = True,
                verbose: Optional[bool] = None, mode: Optional[str] = None) -> "ColBERTIndexer":
        """An indexer writing this index; see :class:`ColBERTIndexer`.  ``mode='append'`` (PyTerrier's
        convention): an indexer appending documents to this built index as a new partition
        (:class:`ColBERTAppender`; the index's own text field, passage length and compression are used);
        ``'overwrite'`` is ``overwrite=True``."""
        mode = str(getattr(mode, "value", mode)) if mode is not None else None
        if mode == APPEND:
            return ColBERTAppender(self, kmeans_niters=kmeans_niters, index_bsize=index_bsize, threads=threads,
                                   timeout=timeout, verbose=self.verbose if verbose is None else verbose)
        if mode not in (None, "create", "overwrite"):
            raise ValueError(f"mode must be 'create', 'overwrite' or 'append', not {mode!r}")
        return ColBERTIndexer(self, text_field=text_field, doc_maxlen=doc_maxlen, nbits=nbits,
                              kmeans_niters=kmeans_niters, index_bsize=index_bsize, threads=threads,
                              timeout=timeout, overwrite=overwrite or mode == "overwrite", resume=resume,
                              verbose=self.verbose if verbose is None else verbose)

    def index(self, it: Iterable[Dict[str, Any]]) -> "ColBERTIndex":
        return self.indexer().index(it)

    # --- retrieval
    def retriever(self, num_results: int = 1000, query_maxlen: int = 32, ncells: Optional[int] = None,
                  centroid_score_threshold: Optional[float] = None, ndocs: Optional[int] = None,
                  verbose: bool = False) -> "ColBERTRetriever":
        """A retriever over this index; see :class:`ColBERTRetriever`."""
        return ColBERTRetriever(self, num_results=num_results, query_maxlen=query_maxlen, ncells=ncells,
                                centroid_score_threshold=centroid_score_threshold, ndocs=ndocs, verbose=verbose)

    def searcher(self):
        """colbert-ai's ``Searcher`` over this index (loaded once; the C++ extensions are built first
        when missing)."""
        with _LOCK:
            if self._searcher is None:
                meta = self.metadata()
                key = (str(Path(self.path).resolve()), self.checkpoint,
                       os.stat(Path(self.path) / "pt_meta.json").st_mtime_ns)
                if key in _SEARCHERS:
                    self._searcher = _SEARCHERS[key]
                    return self._searcher
                import_colbert()
                ensure_extensions()
                from colbert import Searcher
                from colbert.data import Collection
                ckpt = resolve_checkpoint(self.checkpoint)
                with quiet():
                    # the searcher never reads passage texts (they are not stored): a placeholder collection
                    searcher = Searcher(index=str(Path(self.path).resolve() / PLAID_DIR), checkpoint=ckpt,
                                        collection=Collection(data=[""]), verbose=0)
                if not (meta["doc_count"] == len(self.docnos()) == len(searcher.ranker.doclens)):
                    raise ColBERTError(f"the ColBERT index at {self.path} is inconsistent: {meta['doc_count']} "
                                       f"documents, {len(self.docnos())} docnos, "
                                       f"{len(searcher.ranker.doclens)} passages")
                self._searcher = _SEARCHERS[key] = searcher
            return self._searcher

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_searcher"] = None  # reloaded where unpickled
        state["_docnos"] = None
        return state


class ColBERTIndexer(pt.Indexer):
    """Builds a :class:`ColBERTIndex` from dicts with ``docno`` and the text field(s).

    Args:
        index: the target :class:`ColBERTIndex` (or its path).
        text_field: field, or fields joined with a space, that is encoded.
        doc_maxlen: passage length in word pieces; longer passages are truncated (chunk long texts
            first, e.g. with ``pt.text.sliding``).
        nbits: bits per dimension of PLAID's residual compression (2 is ColBERTv2's setting).
        kmeans_niters: k-means iterations for the centroids.
        index_bsize: encoding batch size.
        threads: torch threads in the worker (default: torch's default).
        timeout: seconds after which the build is stopped with :class:`ColBERTTimeoutError` (default:
            no limit; a dead worker is reported at once either way).
        overwrite: replace an existing index (otherwise an existing index is an error).
        resume: take up what an interrupted build of the same documents with the same settings kept
            (default); ``False`` discards it and starts over.
        verbose: progress bar.

    The index is built in a partial directory beside the target and renamed into place at the end,
    so an interrupted or failed build leaves nothing at the target path; builders of the same index
    in several processes take a lock, the second waits and keeps the first one's index
    (:func:`pyterrier_sci.artifacts.build_atomically`).  What colbert-ai has written meanwhile (the
    k-means sample's encoding, the centroids, each chunk of the index pass) stays in ``.<name>.resume``
    beside the target until the build ends, so a build that was interrupted (killed, timed out, failed)
    resumes there instead of starting over (:func:`resume_directory`;
    :func:`~pyterrier_sci.plugins.colbert._worker.install_resume`).
    """

    def __init__(self, index: Union[ColBERTIndex, str, Path], text_field: Union[str, Sequence[str]] = "text",
                 doc_maxlen: int = 300, nbits: int = 2, kmeans_niters: int = 4, index_bsize: int = 64,
                 threads: Optional[int] = None, timeout: Optional[float] = None, overwrite: bool = False,
                 resume: bool = True, verbose: bool = True):
        self.index_ref = index if isinstance(index, ColBERTIndex) else ColBERTIndex(index)
        self.resume = resume
        self.text_field = text_field
        self.doc_maxlen = doc_maxlen
        self.nbits = nbits
        self.kmeans_niters = kmeans_niters
        self.index_bsize = index_bsize
        self.threads = threads
        self.timeout = timeout
        self.overwrite = overwrite
        self.verbose = verbose
        if nbits not in (1, 2, 4, 8):
            raise ValueError(f"nbits must be 1, 2, 4 or 8, not {nbits!r}")
        if doc_maxlen < 8:
            raise ValueError(f"doc_maxlen must be at least 8 word pieces, not {doc_maxlen!r}")

    def index_inputs(self):
        fields = [self.text_field] if isinstance(self.text_field, str) else list(self.text_field)
        return [["docno"] + fields]

    def index(self, it: Iterable[Dict[str, Any]]) -> ColBERTIndex:
        target = Path(self.index_ref.path)
        if target.exists() and (not target.is_dir() or any(target.iterdir())) and not self.overwrite:
            raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
        checkpoint = self.index_ref.checkpoint
        checkpoint_dir = resolve_checkpoint(checkpoint)
        ensure_extensions()
        hasher = FileHasher()

        def build(tmp: Path) -> None:
            tmp.mkdir()
            n = self._write_inputs(it, tmp)
            if n == 0:
                raise ValueError("no documents to index")
            resume = resume_directory(target, {
                "checkpoint": checkpoint_dir,
                "checkpoint_sha256": weights_digest(Path(checkpoint_dir), hasher)["sha256"],
                "collection_sha256": hasher(tmp / "collection.txt"), "passages": n, "doc_maxlen": self.doc_maxlen,
                "nbits": self.nbits, "kmeans_niters": self.kmeans_niters, "index_bsize": self.index_bsize,
                "colbert_ai": _colbert_version()}, keep=self.resume)
            hasher.save()
            args = {"checkpoint": checkpoint_dir, "collection": str(tmp / "collection.txt"),
                    "index_path": str(resume / PLAID_DIR), "resume_dir": str(resume), "root": str(tmp / "colbert-run"),
                    "doc_maxlen": self.doc_maxlen, "nbits": self.nbits, "kmeans_niters": self.kmeans_niters,
                    "index_bsize": self.index_bsize, "threads": self.threads}
            started = time.perf_counter()
            timings = _run_worker(args, tmp, n, sample_size(n), desc=f"ColBERT indexing {target.name}",
                                  timeout=self.timeout, verbose=self.verbose, resume=resume)
            os.rename(resume / PLAID_DIR, tmp / PLAID_DIR)
            shutil.rmtree(resume)  # the build is whole: what it kept for a resumption goes
            plaid_meta = json.loads((tmp / PLAID_DIR / "metadata.json").read_text())
            for scratch in ("collection.txt", "colbert-run", "worker-args.json", "colbert.log"):
                p = tmp / scratch
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            write_pt_meta(
                tmp, ColBERTIndex,
                checkpoint=checkpoint, doc_count=n, text_field=self.text_field,
                doc_maxlen=self.doc_maxlen, nbits=self.nbits, dim=plaid_meta["config"]["dim"],
                num_embeddings=plaid_meta["num_embeddings"], num_partitions=plaid_meta["num_partitions"],
                build_seconds=round(time.perf_counter() - started, 3), build_timings=timings,
                colbert_ai=_colbert_version())

        # locked: a second process building the same index waits and keeps the first one's index
        build_atomically(target, build, overwrite=self.overwrite, what=f"the ColBERT index {target}")
        return ColBERTIndex(target, checkpoint=self.index_ref._checkpoint, verbose=self.index_ref.verbose)

    def _write_inputs(self, it: Iterable[Dict[str, Any]], tmp: Path) -> int:
        """Writes the passages (one a line) for the worker and the docno lookup; returns their count."""

        from npids import Lookup
        fields = [self.text_field] if isinstance(self.text_field, str) else list(self.text_field)
        it = iter(it)
        first = next(it, None)
        if first is None:
            return 0
        it = itertools.chain([first], it)
        n = 0
        fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
        with open(tmp / "collection.txt", "w", encoding="utf-8") as out, \
                Lookup.builder(tmp / "docnos.npids") as docnos:
            for doc in it:
                try:
                    docno = doc["docno"]
                    text = " ".join(str(doc[f]) for f in fields)
                except KeyError as e:
                    raise ValueError(f"ColBERT indexing needs 'docno' and {fields} in every document; "
                                     f"document {doc.get('docno', n)!r} has no {e.args[0]!r}") from None
                out.write(" ".join(text.split()) + "\n")
                docnos.add(str(docno))
                n += 1
        return n


class ColBERTAppender(pt.Indexer):
    """``ColBERTIndex.indexer(mode='append')``: appends documents to a built PLAID index as a new *partition*
    (issue 35): a ColBERT index of the new documents alone (its own centroids, trained on them; the index's
    checkpoint, text field, passage length and compression) under ``segments/g<generation>``, searched beside
    the others and merged by score.  The documents already indexed are not touched (the cost is that of indexing
    the new ones); the index's ``pt_meta.json``, written last, is the commit, so an append killed midway leaves
    the previous generation as it was.  Retrieval is approximate as PLAID's is: recall@100 against an index
    rebuilt on the final collection is in docs/indexes.md."""

    def __init__(self, index: "ColBERTIndex", kmeans_niters: int = 4, index_bsize: int = 64,
                 threads: Optional[int] = None, timeout: Optional[float] = None, verbose: bool = True):
        self.index_ref = index
        self.kmeans_niters = kmeans_niters
        self.index_bsize = index_bsize
        self.threads = threads
        self.timeout = timeout
        self.verbose = verbose

    def index_inputs(self):
        field = self.index_ref.metadata().get("text_field", "text")
        return [["docno"] + ([field] if isinstance(field, str) else list(field))]

    def index(self, it: Iterable[Dict[str, Any]]) -> "ColBERTIndex":
        if hasattr(it, "to_dict"):
            it = it.to_dict(orient="records")
        path = Path(self.index_ref.path)
        with update_lock(path):
            index = ColBERTIndex(path, checkpoint=self.index_ref._checkpoint, verbose=self.verbose)
            meta = index.metadata()
            g = generation_of(meta) + 1
            name = f"{SEGMENTS_DIR}/g{g:05d}"
            target = path / name
            referenced = {seg["name"] for seg in meta.get("segments") or []}
            for left in sorted((path / SEGMENTS_DIR).glob("g*")) if (path / SEGMENTS_DIR).is_dir() else []:
                if f"{SEGMENTS_DIR}/{left.name}" not in referenced and not left.is_symlink():
                    shutil.rmtree(left)  # what an append killed before its commit left
            batch, held = DocSet(), []

            def checked():
                seen = set()
                for chunk in iter(lambda: list(itertools.islice(source, 1024)), []):
                    names = [str(d["docno"]) for d in chunk]
                    for d in names:
                        if d in seen:
                            raise IndexUpdateError(f"docno {d!r} is given twice in the documents to append")
                        seen.add(d)
                    held.extend(d for d, (part, _) in zip(names, index.locate(names)) if part >= 0)
                    if held and not rerun:  # a rerun of the last append holds them all: read on to tell
                        raise IndexUpdateError(f"docno(s) {held[:5]} are already in the ColBERT index {path}: "
                                               "retract them first to replace them")
                    batch.add(names)
                    yield from chunk
            source = iter(it)
            last = (meta.get("history") or [{}])[-1]
            rerun = isinstance(last, dict) and last.get("op") == APPEND
            seg = ColBERTIndex(target, checkpoint=index.checkpoint, verbose=self.verbose)
            try:
                ColBERTIndexer(seg, text_field=meta.get("text_field", "text"), doc_maxlen=meta.get("doc_maxlen", 300),
                               nbits=meta.get("nbits", 2), kmeans_niters=self.kmeans_niters,
                               index_bsize=self.index_bsize, threads=self.threads, timeout=self.timeout,
                               verbose=self.verbose).index(checked())
            except ValueError as e:
                if batch.count == 0 and "no documents" in str(e):
                    return index
                raise
            if held:
                shutil.rmtree(target, ignore_errors=True)
                if already_applied(meta, APPEND, batch):
                    return index
                raise IndexUpdateError(f"docno(s) {held[:5]} are already in the ColBERT index {path}: retract them "
                                       "first to replace them")
            docs = (DocSet.from_record(docs_record(meta)) or _docset(index)) + batch
            segments = list(meta.get("segments") or []) + [{"name": name, "doc_count": batch.count, "generation": g}]
            write_pt_meta(path, **next_generation_meta(meta, APPEND, batch, docs, segments=segments,
                                                       num_docs=docs.count))  # the commit
        return ColBERTIndex(path, checkpoint=self.index_ref._checkpoint, verbose=self.index_ref.verbose)


def _docset(index: "ColBERTIndex") -> DocSet:
    """The live documents of an index that records none yet (read once from its docno lookups)."""
    gone = index.retracted()
    out = DocSet()
    for name, part in index.parts():
        lookup = part.docnos()
        for d in lookup.fwd[np.arange(len(lookup))]:
            if (name, str(d)) not in gone:
                out.add((str(d),))
    return out


def retract_colbert(path: Union[str, Path], docnos) -> dict:
    """Retracts ``docnos`` (a list, or a file of them) from the ColBERT index at ``path`` as a new generation:
    the retracted ``(partition, docno)`` pairs are written to a new ``retracted.g<generation>.tsv`` named by the
    ``pt_meta.json`` (the commit); search drops them (it fetches as many more).  Returns the new metadata."""
    path = Path(path)
    names = read_docnos(docnos)
    if len(set(names)) != len(names):
        raise IndexUpdateError("a docno is given twice in the documents to retract")
    with update_lock(path):
        index = ColBERTIndex(path)
        meta = index.metadata()
        if not names:
            return meta
        batch = DocSet.of(names)
        where = index.locate(names)
        missing = [d for d, (part, _) in zip(names, where) if part < 0]
        if missing:
            if len(missing) == len(names) and already_applied(meta, RETRACT, batch):
                return meta  # a rerun of this very retraction
            raise IndexUpdateError(f"docno(s) {missing[:5]} are not in the ColBERT index {path}: nothing retracted")
        current = DocSet.from_record(docs_record(meta)) or _docset(index)
        if len(names) >= current.count:
            raise IndexUpdateError(f"retracting {len(names)} documents would leave the ColBERT index {path} empty")
        parts = index.parts()
        gone = sorted(index.retracted() | {(parts[p][0], d) for d, (p, _) in zip(names, where)})
        g = generation_of(meta) + 1
        name = f"retracted.g{g:05d}.tsv"
        atomic_write_text(path / name, "".join(f"{part}\t{d}\n" for part, d in gone), what=str(path / name))
        docs = current.without(names)
        old = meta.get("retracted")
        new = next_generation_meta(meta, RETRACT, batch, docs, retracted=name, num_retracted=len(gone),
                                   num_docs=docs.count)
        write_pt_meta(path, **new)  # the commit
        if old and old != name:
            (path / old).unlink(missing_ok=True)
        return new


def update_index(path: Union[str, Path], append: Optional[Union[str, Path]] = None,
                 retract: Optional[Union[str, Path, Sequence[str]]] = None, *, fields: Optional[Sequence[str]] = None,
                 verbose: bool = False, **kwargs) -> dict:
    """``pyterrier-sci index --append DOCS --retract IDS`` on a ColBERT/PLAID index: the retraction first, then
    the append as a new partition (each its own generation); returns the final ``pt_meta.json``.  The appended
    records carry the index's own text field (``text_field`` of its metadata), or ``--fields`` joined into it."""
    path = Path(path)
    index = ColBERTIndex(path, verbose=verbose)
    meta = index.metadata()
    if retract is not None:
        meta = retract_colbert(path, retract)
    if append is not None:
        field = meta.get("text_field", "text")
        docs = read_docs(append, fields)
        if fields and isinstance(field, str) and field != "text":
            docs = ({**d, field: d["text"]} for d in docs)
        ColBERTIndex(path, verbose=verbose).indexer(mode=APPEND).index(docs)
        meta = ColBERTIndex(path).metadata()
    return meta


#: token vectors decompressed and scored at once (PLAID's last stage, exact re-scoring): 8,192 vectors
#: of 128 dimensions are 4 MiB of float32, which stays in the CPU's cache
EXACT_BLOCK = 8192
#: centroid ids per block in the centroid interaction (rows of query-vector scores gathered per id)
FILTER_BLOCK = 16384


def _maxsim(ranker, qvec, pids, block: int = EXACT_BLOCK):
    """MaxSim of one encoded query against the passages ``pids`` (an int32 tensor of passage ids) over
    their stored vectors: decompressed (colbert-ai's ``decompress_residuals``), L2-normalised, multiplied
    with the query's vectors and max-reduced per passage (colbert-ai's ``segmented_maxsim``) - what
    colbert-ai's ``IndexScorer.score_pids`` computes on CPU, with the same kernels and the same
    arithmetic, but ``block`` token vectors at a time instead of all of them at once.  colbert-ai
    materialises every candidate's vectors in fresh float32 buffers (1,024 passages of 259 vectors:
    136 MiB decompressed, 136 MiB normalised, 68 MiB of scores per query), which made this stage
    about 2.5 times slower than it is in blocks that stay in the cache (``docs/colbert.md``).  Returns
    float32 scores in ``pids`` order."""
    import torch
    from colbert.modeling.colbert import ColBERT
    codec = ranker.codec
    q = qvec.reshape(-1, qvec.shape[-1]).to(torch.float32)
    qt = q.T.contiguous()
    lengths = ranker.doclens[pids.long()]
    out = torch.empty(len(pids), dtype=torch.float32)
    if len(pids) == 0:
        return out
    # blocks of whole passages of about `block` vectors (a longer passage is a block of its own)
    ends = np.cumsum(lengths.numpy())
    cuts = _blocks(lengths.numpy(), block)
    rows = int((ends[cuts[1:] - 1] - (ends - lengths.numpy())[cuts[:-1]]).max())
    buf = torch.empty((rows, q.shape[0]), dtype=torch.float32)  # the scores of a block, reused
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        d = ranker.decompress_residuals(pids[a:b], ranker.doclens, ranker.offsets, codec.bucket_weights,
                                        codec.reversed_bit_map, codec.decompression_lookup_table,
                                        ranker.embeddings.residuals, ranker.embeddings.codes, codec.centroids,
                                        codec.dim, codec.nbits)
        # torch.nn.functional.normalize(d, p=2, dim=-1), in place
        d.div_(torch.linalg.vector_norm(d, ord=2, dim=-1, keepdim=True).clamp_min_(1e-12))
        scores = torch.mm(d, qt, out=buf[:d.shape[0]])
        out[a:b] = ColBERT.segmented_maxsim(scores, lengths[a:b])
    return out


def _blocks(lengths: np.ndarray, block: int) -> np.ndarray:
    """Cut points of consecutive passages (``lengths``: their numbers of vectors) into blocks of about
    ``block`` vectors; a passage longer than that is a block of its own."""
    ends = np.cumsum(lengths)
    firsts = ends - lengths
    cuts = [0]
    while cuts[-1] < len(lengths):
        c = cuts[-1]
        cuts.append(max(c + 1, int(np.searchsorted(ends, firsts[c] + block, side="right"))))
    return np.asarray(cuts)


def _centroid_interaction(ranker, pids, table, block: int = FILTER_BLOCK):
    """Per passage, the sum over the query vectors of the best ``table`` row among the passage's
    centroid ids (``table``: centroids x query vectors, non-negative), in blocks of ``block`` vectors."""
    import torch
    from colbert.modeling.colbert import ColBERT
    lengths = ranker.doclens[pids.long()]
    starts = ranker.offsets[pids.long()]
    out = torch.empty(len(pids), dtype=torch.float32)
    cuts = _blocks(lengths.numpy(), block)
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lens, first = lengths[a:b], starts[a:b]
        eids = torch.repeat_interleave(first - (torch.cumsum(lens, 0) - lens), lens) + \
            torch.arange(int(lens.sum()), dtype=torch.int64)
        rows = table.index_select(0, ranker.embeddings.codes.index_select(0, eids).long())
        out[a:b] = ColBERT.segmented_maxsim(rows, lens)
    return out


def _filter(ranker, pids, centroid_scores, threshold: float, ndocs: int, block: Optional[int] = None):
    """PLAID's centroid interaction (colbert-ai's ``filter_pids``): of the candidates ``pids``, the best
    ``ndocs`` by the approximate score over the centroids scoring at least ``threshold`` with some
    query vector (a passage with none of them last), then of those the best ``ndocs // 4`` by the
    approximate score over all their centroids.  The approximate score of a passage is MaxSim with
    each of its vectors replaced by its centroid (``centroid_scores``: centroids x query vectors).

    The same scores and order as colbert-ai's C++ loop (which de-duplicates each passage's centroid
    ids in a hash set, then takes maxima one scalar at a time), computed as row gathers and
    colbert-ai's ``segmented_maxsim`` over blocks: scores shifted by +2 (cosines are at least -1), so
    that its clipping at 0 never applies, and pruned centroids' rows 0, so that a passage without a
    kept centroid comes after every other; up to the order of float32 additions.  The first pass is
    skipped when it would keep every candidate."""
    import torch
    block = block or FILTER_BLOCK
    table = centroid_scores + 2
    if len(pids) > ndocs:
        keep = centroid_scores.max(-1).values >= threshold
        pruned = torch.where(keep.unsqueeze(1), table, torch.zeros((), dtype=table.dtype))
        approx = _centroid_interaction(ranker, pids, pruned, block)
        pids = pids[torch.topk(approx, ndocs, sorted=False).indices.sort().values]
    if len(pids) > ndocs // 4:
        approx = _centroid_interaction(ranker, pids, table, block)
        pids = pids[torch.topk(approx, ndocs // 4, sorted=False).indices]
    return pids


def _fast_path(searcher) -> bool:
    """Whether :func:`plaid_search` can run its own last stage: colbert-ai's CPU index in memory (not its
    GPU or memory-mapped variants, which then go through colbert-ai's own ``dense_search``)."""
    ranker = searcher.ranker
    return not ranker.use_gpu and not getattr(ranker, "load_index_with_mmap", False) and \
        hasattr(type(ranker), "decompress_residuals")


def plaid_search(searcher, qvec, k: int, exhaustive: bool = False, block: int = EXACT_BLOCK):
    """PLAID search of one encoded query (``1 x query_maxlen x dim``) with the searcher's configured
    ``ncells``, ``centroid_score_threshold`` and ``ndocs``: colbert-ai's candidate generation
    (``IndexScorer.retrieve``), centroid interaction that keeps the best ``ndocs // 4`` candidates
    (:func:`_filter`, colbert-ai's ``filter_pids`` vectorised), then exact MaxSim of those over their
    decompressed vectors (:func:`_maxsim`).  The same passages and scores as colbert-ai's
    ``Searcher.dense_search`` (up to ties and float32 rounding in the centroid interaction).
    ``exhaustive``: exact MaxSim of every passage instead (no candidate generation).
    Returns (passage ids, scores) of the top ``k``, best first, as numpy arrays."""
    import torch
    if not _fast_path(searcher):
        if exhaustive:
            pids = np.arange(len(searcher.ranker.doclens))
            scores = exact_maxsim(searcher, qvec, pids)
            order = np.argsort(-scores, kind="stable")[:k]
            return pids[order], scores[order].astype(np.float32)
        pids, _, scores = searcher.dense_search(qvec, k=k)
        return np.asarray(pids, dtype=np.int64), np.asarray(scores, dtype=np.float32)
    ranker, config = searcher.ranker, searcher.config
    with torch.inference_mode():
        if exhaustive:
            pids = torch.arange(len(ranker.doclens), dtype=torch.int32)
        else:
            pids, centroid_scores = ranker.retrieve(config, qvec)
            pids = _filter(ranker, pids, centroid_scores, config.centroid_score_threshold, config.ndocs)
        scores = _maxsim(ranker, qvec, pids, block)
        top = torch.topk(scores, k=min(k, len(scores)), sorted=True)
    return pids[top.indices].numpy().astype(np.int64), top.values.numpy()


def _search_all(searcher, qvecs, k: int, exhaustive: bool = False, verbose: bool = False) -> List[tuple]:
    """:func:`plaid_search` of every query (``qvecs``: ``n x query_maxlen x dim``), in order.

    Several queries run in parallel, one per torch thread (``torch.get_num_threads()``), each on one
    thread; torch's thread count is set back afterwards.  A PLAID search is a chain of small steps
    (candidate generation, two filter passes, a few dozen blocks of decompression, matrix products and
    max-reductions), each a parallel region of its own when a query runs on several threads: every
    step waits for all threads, and on a busy machine for one that is not running.  One query per
    thread has no such waits (its C++ and torch steps release the GIL)."""
    import torch
    n = len(qvecs)
    threads = torch.get_num_threads()
    workers = min(threads, n) if _fast_path(searcher) else 1
    bar = pt.tqdm(total=n, desc="ColBERT", unit="q", disable=not verbose)
    if workers <= 1:
        out, fast = [], _fast_path(searcher)
        for i in range(n):
            with quiet(enabled=not fast):  # colbert-ai's dense_search prints
                out.append(plaid_search(searcher, qvecs[i:i + 1], k, exhaustive))
            bar.update(1)
        bar.close()
        return out

    def one(i):
        torch.set_num_threads(1)  # this thread's torch and colbert-ai's C++ steps: one thread
        result = plaid_search(searcher, qvecs[i:i + 1], k, exhaustive)
        bar.update(1)
        return result

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="plaid") as pool:
            return list(pool.map(one, range(n)))
    finally:
        torch.set_num_threads(threads)
        bar.close()


def plaid_settings(k: int, num_docs: int, ncells: Optional[int] = None,
                   centroid_score_threshold: Optional[float] = None, ndocs: Optional[int] = None) -> Dict[str, Any]:
    """The search settings for the top ``k`` of an index of ``num_docs`` passages: PLAID's
    ``ncells``, ``centroid_score_threshold`` and ``ndocs`` (those given, else colbert-ai's defaults
    for ``k``), and ``exhaustive``, whether to skip PLAID and score every passage exactly.

    PLAID scores exactly (decompressed vectors, MaxSim) only ``ndocs // 4`` passages, the best of its
    candidates (passages with a vector in one of the ``ncells`` centroids nearest each query vector)
    by centroid interaction (two passes over the candidates' centroid ids;
    ``centroid_score_threshold`` prunes centroids in the first).  So ``ndocs // 4`` must be at least
    ``k`` for ``k`` results (colbert-ai's defaults: ``k <= 10``: 1, 0.5, 256; ``k <= 100``: 2, 0.45,
    1024; else 4, 0.4, ``max(4 k, 4096)``, i.e. 1,024 passages scored for ``k = 1000``), and on a small
    index that is most of it: then PLAID saves little and loses some of the exact top ``k``.  Measured
    (2,244 chunks, ``k = 1000``): candidate generation and centroid interaction cost about a tenth of
    exact scoring per passage, so scoring every passage exactly is as fast as PLAID when PLAID would
    score 90% of the index or more: ``exhaustive`` is true when ``10 (ndocs // 4) >= 9 num_docs``
    (``k = 1000``: indexes of up to 1,137 passages; ``k = 100``: 284; ``k = 10``: 71)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    defaults = (1, 0.5, 256) if k <= 10 else (2, 0.45, 1024) if k <= 100 else (4, 0.4, max(4 * k, 4096))
    given = (ncells, centroid_score_threshold, ndocs)
    ncells, centroid_score_threshold, ndocs = (d if g is None else g for g, d in zip(given, defaults))
    return {"ncells": int(ncells), "centroid_score_threshold": float(centroid_score_threshold), "ndocs": int(ndocs),
            "exhaustive": bool(10 * (ndocs // 4) >= 9 * num_docs)}


def exact_maxsim(searcher, qvec, pids: np.ndarray, block: int = EXACT_BLOCK) -> np.ndarray:
    """Exact MaxSim of one encoded query ``qvec`` (``1 x query_maxlen x dim``) against the passages
    ``pids`` (any number: they are scored ``block`` token vectors at a time); the scores PLAID's last
    stage gives them.  Returns float64 scores in ``pids`` order."""
    import torch
    pids = np.asarray(pids, dtype=np.int64)
    if not _fast_path(searcher):  # colbert-ai's own scorer, in batches of passages
        out = np.empty(len(pids), dtype=np.float64)
        for start in range(0, len(pids), 1024):
            part = pids[start:start + 1024]
            ranked, ranked_scores = searcher.ranker.rank(searcher.config, qvec, pids=part.tolist())
            by_pid = dict(zip(ranked, ranked_scores))
            out[start:start + 1024] = [by_pid[p] for p in part.tolist()]
        return out
    with torch.inference_mode():
        scores = _maxsim(searcher.ranker, qvec, torch.from_numpy(pids.astype(np.int32)), block)
    return scores.numpy().astype(np.float64)


def _colbert_version() -> str:
    return version("colbert-ai")


#: the settings an interrupted build's kept state belongs to, in its resume directory
RESUME_STATE = "build.json"


def resume_directory(target: Path, settings: Dict[str, Any], keep: bool = True) -> Path:
    """``.<name>.resume`` beside ``target``: where a build of ``target`` lets colbert-ai write, so that an
    interrupted build resumes (:func:`~pyterrier_sci.plugins.colbert._worker.install_resume`).  What is there
    is kept only for the same ``settings`` (checkpoint and its weights, the passages' SHA-256, passage length,
    compression, k-means iterations, batch size, colbert-ai's version: ``build.json`` in it); anything else in
    its place (another build's state, a file, a link: the link itself is removed, never what it names) is
    removed first, as is any link inside a directory that is kept; with ``keep=False`` the directory starts
    empty.  Call it holding the target's lock."""
    d = target.with_name(f".{target.name}.resume")
    want = json.loads(json.dumps(settings, sort_keys=True))
    if os.path.lexists(d):
        real_dir = d.is_dir() and not d.is_symlink()
        try:
            same = keep and real_dir and json.loads((d / RESUME_STATE).read_text(encoding="utf-8")) == want
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(d) if real_dir else d.unlink()
        else:  # colbert-ai writes into it: no link inside may lead its writes elsewhere
            for root, dirs, files in os.walk(d):
                for name in dirs + files:
                    if os.path.islink(os.path.join(root, name)):
                        os.unlink(os.path.join(root, name))
    if not d.exists():
        d.mkdir()
        atomic_write_text(d / RESUME_STATE, json.dumps(want, sort_keys=True, indent=1) + "\n",
                          "the ColBERT build's resume state")
    return d


def _run_worker(args: Dict[str, Any], tmp: Path, n: int, sample: int, desc: str, timeout: Optional[float],
                verbose: bool, resume: Optional[Path] = None) -> Dict[str, float]:
    """Runs the indexing worker and supervises it: progress events to a bar, a dead worker or an
    error event to :class:`ColBERTWorkerError`, the timeout to :class:`ColBERTTimeoutError`.
    Returns the worker's wall-clock time, split into k-means and the rest (encoding, writing), the
    number of passage encodings (:func:`~pyterrier_sci.plugins.colbert._worker.reuse_sample_encoding`)
    and what was taken up from an interrupted build (``resumed``: the sample's passages, the codec,
    the chunks).  ``resume``: the build's resume directory, named in the errors."""
    kept = "" if resume is None else (f"; what it wrote is kept in {resume}, and the next build of this index "
                                      "with the same documents and settings resumes there")
    rfd, wfd = os.pipe()
    args = dict(args, progress_fd=wfd, parent_pid=os.getpid())  # the worker ends when this process dies
    (tmp / "worker-args.json").write_text(json.dumps(args))
    log_path = tmp / "colbert.log"
    cmd = [sys.executable, "-m", "pyterrier_sci.plugins.colbert._worker", "index", str(tmp / "worker-args.json")]
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    pass_fds=(wfd,), cwd=str(tmp), env=worker_env(), start_new_session=True)
    finally:
        os.close(wfd)
    bar = pt.tqdm(total=sample + n, desc=desc, unit="passage", disable=not verbose)
    bar.set_postfix_str("sample for k-means")
    deadline = None if timeout is None else time.monotonic() + timeout
    buf, events, eof, done = b"", [], False, 0
    timings = {"start": time.monotonic()}
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise ColBERTTimeoutError(f"building the ColBERT index took longer than timeout={timeout} s and was "
                                          f"stopped ({done:,} of {sample + n:,} passage encodings done){kept}")
            if not eof:
                ready, _, _ = select.select([rfd], [], [], 0.25)
                if ready:
                    chunk = os.read(rfd, 1 << 16)
                    eof = not chunk
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        event = json.loads(line)
                        if event["event"] == "advance":
                            done += event["n"]
                            bar.update(event["n"])
                        elif event["event"] == "kmeans":
                            timings[f"kmeans_{event['state']}"] = time.monotonic()
                            bar.set_postfix_str("k-means" if event["state"] == "start" else "whole collection")
                        else:
                            events.append(event)
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.1)
            if proc.poll() is not None and not eof and not select.select([rfd], [], [], 0)[0]:
                eof = True  # the worker is gone and nothing is left to read
    except BaseException:
        _kill(proc)
        raise
    finally:
        os.close(rfd)
        bar.close()
    errors = [e for e in events if e["event"] == "error"]
    if errors:
        e = errors[0]
        raise ColBERTWorkerError(f"building the ColBERT index failed: {e['type']}: {e['message']}{kept}\n"
                                 f"{output_tail(e.get('traceback'), 1500)}")
    if proc.returncode != 0 or not any(e["event"] == "done" for e in events):
        code = proc.returncode
        oom = " (often the out-of-memory killer)" if code == -9 else ""
        how = (f"was killed by {signal.Signals(-code).name}{oom}" if code is not None and code < 0
               else f"exited with status {code}")
        raise ColBERTWorkerError(f"the ColBERT indexing worker {how} before finishing{kept}; the end of its log:\n"
                                 f"{output_tail(log_path.read_bytes() if log_path.exists() else None)}")
    total = time.monotonic() - timings["start"]
    kmeans = timings.get("kmeans_end", 0.0) - timings.get("kmeans_start", 0.0)
    reused = sum(e["n"] for e in events if e["event"] == "reused")
    out = {"worker_s": round(total, 3), "kmeans_s": round(kmeans, 3), "encode_and_write_s": round(total - kmeans, 3),
           "passages_encoded": sample + n - reused}  # k-means sample and collection, less the reused sample
    for e in events:
        if e["event"] == "codes":  # nearest-centroid codes (part of k-means' residual estimate and of the index pass)
            out.update(codes_by=e["method"], codes_s=e["seconds"], code_vectors=e["vectors"])
    resumed = {e["stage"]: e for e in events if e["event"] == "resumed"}
    if resumed:  # taken up from an interrupted build: neither encoded nor computed again
        sample_kept = resumed.get("sample", {}).get("n", 0)
        chunks = resumed.get("chunks", {})
        out["resumed"] = {"sample_passages": sample_kept, "codec": "codec" in resumed,
                          "chunks": chunks.get("n", 0), "chunk_passages": chunks.get("passages", 0)}
        out["passages_encoded"] -= sample_kept + chunks.get("passages", 0)
    return out


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
        except ProcessLookupError:
            pass
    proc.wait()


class ColBERTRetriever(pt.Transformer):
    """ColBERT retrieval (PLAID) over a :class:`ColBERTIndex`.

    Given a query frame it retrieves the top ``num_results`` passages of each query; given a result
    frame (``docno`` present) it re-scores exactly those documents with exact MaxSim over their stored
    (decompressed) embeddings and re-ranks them.  Input columns are kept; ranks are 0-based.

    Args:
        index: a :class:`ColBERTIndex` (or its path).
        num_results: results per query when retrieving.
        query_maxlen: query length in word pieces (ColBERTv2: 32; longer queries are truncated,
            shorter ones padded with [MASK] query augmentation).
        ncells, centroid_score_threshold, ndocs: PLAID's search settings (default: colbert-ai's, chosen
            from ``num_results``).
        corpus, fields, index_options: when the index is not built yet, build it on first use from the
            documents of this ir_datasets id (``fields`` joined, default the dataset's
            ``default_text()``), with these :meth:`ColBERTIndex.indexer` options.
        verbose: progress bar over queries.
    """

    def __init__(self, index: Union[ColBERTIndex, str, Path], num_results: int = 1000, query_maxlen: int = 32,
                 ncells: Optional[int] = None, centroid_score_threshold: Optional[float] = None,
                 ndocs: Optional[int] = None, corpus: Optional[str] = None, fields: Optional[Sequence[str]] = None,
                 index_options: Optional[Dict[str, Any]] = None, verbose: bool = False):
        self.index = index if isinstance(index, ColBERTIndex) else ColBERTIndex(index)
        self.num_results = num_results
        self.query_maxlen = query_maxlen
        self.ncells = ncells
        self.centroid_score_threshold = centroid_score_threshold
        self.ndocs = ndocs
        self.corpus = corpus
        self.fields = tuple(fields) if fields else None
        self.index_options = dict(index_options or {})
        self.verbose = verbose

    def built_index(self) -> ColBERTIndex:
        """The index, built from ``corpus`` first when it does not exist yet."""
        if not self.index.built():
            if not self.corpus:
                raise FileNotFoundError(f"no ColBERT index at {self.index.path} (and no corpus to build it from)")
            opts = dict(self.index_options)
            about_to_train(self.index.path, f"the ColBERT index of {self.corpus} (its k-means centroids and passages)")
            self.index.indexer(text_field="text", **opts).index(corpus_texts(self.corpus, self.fields))
        return self.index

    def search_settings(self) -> Dict[str, Any]:
        """The settings a search uses (:func:`plaid_settings` of ``num_results``, the index size and the
        PLAID settings given to the retriever)."""
        return plaid_settings(self.num_results, len(self.built_index()), ncells=self.ncells,
                              centroid_score_threshold=self.centroid_score_threshold, ndocs=self.ndocs)

    def _encode(self, searcher, queries: List[str]):
        return searcher.checkpoint.queryFromText(queries, bsize=128, to_cpu=True)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"], mode="retrieve")
            v.result_frame(extra_columns=["query"], mode="rerank")
        if v.mode == "retrieve":
            return self._retrieve(inp)
        return self._rescore(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols = list(inp.columns) + [c for c in ("docno", "score", "rank") if c not in inp.columns]
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        index = self.built_index()
        parts, gone = index.parts(), index.retracted()
        inp = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).reset_index(drop=True)
        found = []  # per part: (docnos per query, scores per query)
        with _LOCK:
            qvecs = None
            for name, part in parts:
                searcher = part.searcher()
                dropped = sum(1 for p, _ in gone if p == name)
                k = self.num_results + dropped  # as many more as the part has retracted documents
                # set on every call: the searcher is shared, and dense_search keeps the first values it sees
                settings = plaid_settings(k, len(part.docnos()), ncells=self.ncells,
                                          centroid_score_threshold=self.centroid_score_threshold, ndocs=self.ndocs)
                searcher.configure(ncells=settings["ncells"],
                                   centroid_score_threshold=settings["centroid_score_threshold"],
                                   ndocs=settings["ndocs"], query_maxlen=self.query_maxlen)
                searcher.checkpoint.query_tokenizer.query_maxlen = self.query_maxlen
                if qvecs is None:  # every part has the index's checkpoint: the queries are encoded once
                    with quiet():  # all queries in one batch
                        qvecs = self._encode(searcher, inp["query"].astype(str).tolist())
                results = _search_all(searcher, qvecs, k, settings["exhaustive"], self.verbose)
                lookup = part.docnos()
                per_query = []
                for pids, scores in results:
                    names = np.asarray(lookup.fwd.lookup(pids), dtype=object) if len(pids) else np.array([], object)
                    if dropped:
                        keep = np.asarray([(name, d) not in gone for d in names], dtype=bool)
                        names, scores = names[keep], np.asarray(scores)[keep]
                    per_query.append((names, np.asarray(scores, dtype=np.float64)))
                found.append(per_query)
        if len(found) == 1 and not gone:
            per_query = found[0]
        else:  # the parts' lists merged by score (ties by docno), cut to num_results
            per_query = []
            for q in range(len(inp)):
                names = np.concatenate([f[q][0] for f in found])
                scores = np.concatenate([f[q][1] for f in found])
                order = np.lexsort((names.astype(str), -scores))[:self.num_results]
                per_query.append((names[order], scores[order]))
        counts = np.asarray([len(n) for n, _ in per_query])
        out = repeat_rows(inp, counts)
        out["docno"] = np.concatenate([n for n, _ in per_query]) if counts.sum() else np.array([], dtype=object)
        out["score"] = np.concatenate([sc for _, sc in per_query]).astype(np.float64) if len(counts) else []
        out["rank"] = np.concatenate([np.arange(c) for c in counts]) if len(counts) else np.array([], dtype=int)
        return out[cols]

    def _rescore(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        index = self.built_index()
        parts = index.parts()
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]).reset_index(drop=True)
        docnos = out["docno"].astype(str).to_numpy()
        uniq, inverse = np.unique(docnos, return_inverse=True)
        where = np.asarray(index.locate(list(uniq)), dtype=np.int64).reshape(-1, 2)[inverse]
        missing = sorted(set(docnos[where[:, 0] < 0]))
        if missing:
            raise ValueError(f"ColBERT re-scoring needs documents of the index; {len(missing)} docno(s) are not in "
                             f"{index.path}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        scores = np.empty(len(out), dtype=np.float64)
        groups = out.groupby("qid", sort=False).indices
        firsts = [idx[0] for idx in groups.values()]
        with _LOCK, quiet():
            qvecs = None
            for p, (_, part) in enumerate(parts):
                rows_of_part = where[:, 0] == p
                if not rows_of_part.any() and qvecs is not None:
                    continue
                searcher = part.searcher()
                searcher.configure(query_maxlen=self.query_maxlen)
                searcher.checkpoint.query_tokenizer.query_maxlen = self.query_maxlen
                if qvecs is None:
                    qvecs = self._encode(searcher, out["query"].astype(str).to_numpy()[firsts].tolist())
                for qi, idx in enumerate(groups.values()):
                    idx = idx[rows_of_part[idx]]
                    if not len(idx):
                        continue
                    pids = where[idx, 1]
                    unique = np.unique(pids)
                    scores[idx] = exact_maxsim(searcher, qvecs[qi:qi + 1], unique)[np.searchsorted(unique, pids)]
        out["score"] = scores
        out = sorted_results(out).reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def fuse_rank_cutoff(self, k: int) -> Optional["ColBERTRetriever"]:
        # re-scoring must score every input document, so a cutoff cannot be pushed into num_results
        return None

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the index's ColBERT checkpoint."""
        ckpt = self.index.checkpoint
        local = Path(ckpt).expanduser()
        return [ModelRef(str(ckpt), "colbert", str(local) if local.exists() else None,
                         None if local.exists() else "not a local path (a hub id, or the default checkpoint "
                         "before it is built)")]

    def __repr__(self) -> str:
        return f"ColBERTRetriever({str(self.index.path)!r}, num_results={self.num_results})"

    def _key(self):
        return (str(self.index.path), self.index.checkpoint, self.num_results, self.query_maxlen, self.ncells,
                self.centroid_score_threshold, self.ndocs)

    def __eq__(self, other) -> bool:
        return isinstance(other, ColBERTRetriever) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("ColBERTRetriever",) + self._key())


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "colbert_component":
        return importlib.import_module(f"{__package__}.components").colbert_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
