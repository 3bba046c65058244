"""Streaming BM25 indexing: :func:`index_corpus` indexes any iterable of ``{'docno', <text>}``
documents (an ir_datasets ``docs_iter``, a generator) with PISA or Lucene in bounded memory.

Documents flow from the iterator to the indexer one batch at a time and are never collected: PISA
reads them through a FIFO (at most one write batch in Python, ``batch_size`` documents in PISA's
parser), Lucene gets ``batch_size`` documents per call with a capped indexing RAM buffer.  Every
document is checked on the way: bad input (a missing or malformed docno, a text that is not a string,
an iterator that fails midway) raises one :class:`CorpusError` naming the document, and nothing is
left at the index path (pyterrier_pisa alone would index the documents before the failure and report
success).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, Union

from pyterrier_pisa import PisaIndex, PisaIndexer

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.generations import DocSet
from pyterrier_sci.quiet import quiet_native

from .lucene import RAM_BUFFER_MB as LUCENE_RAM_BUFFER_MB  # Lucene's indexing buffer (MB); no JVM needed
from .lucene import LuceneIndex, LuceneIndexer

__all__ = ["index_corpus", "CorpusError", "checked_docs", "PISA_BATCH_SIZE", "LUCENE_BATCH_SIZE",
           "LUCENE_RAM_BUFFER_MB"]

BACKENDS = ("pisa", "lucene")
#: documents PISA parses (and holds) per batch while indexing (pyterrier_pisa's default)
PISA_BATCH_SIZE = 100_000
#: documents handed to Lucene per call
LUCENE_BATCH_SIZE = 1_000
_WRITE_BATCH = 1_000  # documents per write into PISA's FIFO


class CorpusError(ValueError):
    """A document that cannot be indexed, or an iterator that failed while indexing; nothing was
    written at the index path."""


def _describe(doc: Any) -> str:
    return f"{doc!r:.200}"


def checked_docs(docs: Iterable[dict], text_field: Union[str, Sequence[str]] = "text",
                 backend: str = "pisa") -> Iterator[Tuple[str, str]]:
    """``(docno, text)`` for each document of ``docs``, lazily, checked for ``backend``.

    ``text`` joins ``text_field`` (one field or several, with spaces); a missing or ``None``/NaN
    field counts as empty.  Raises :class:`CorpusError` naming the document (its position and docno)
    for a non-mapping item, a missing/empty/non-string docno, a docno with whitespace (PISA's input
    format splits on it), a text field that is not a string, or an exception of the iterator itself.
    """
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    if not fields or not all(isinstance(f, str) and f for f in fields):
        raise ValueError(f"text_field must be a field name or a non-empty list of field names, not {text_field!r}")
    single = fields[0] if len(fields) == 1 else None
    pos = -1
    it = iter(docs)
    while True:
        try:
            doc = next(it)
        except StopIteration:
            return
        except CorpusError:
            raise
        except Exception as e:
            raise CorpusError(f"the document iterator failed after {pos + 1} documents: "
                              f"{type(e).__name__}: {e}") from e
        pos += 1
        if not hasattr(doc, "get"):
            raise CorpusError(f"document {pos} is a {type(doc).__name__}, not a dict with 'docno' and "
                              f"{fields}: {_describe(doc)}")
        docno = doc.get("docno")
        if not isinstance(docno, str) or not docno:
            raise CorpusError(f"document {pos} has no docno (a non-empty string): {_describe(doc)}")
        if not docno.isascii():
            try:
                docno.encode("utf-8")
            except UnicodeEncodeError:
                raise CorpusError(f"document {pos} has docno {docno!r} with a lone surrogate") from None
        if not docno.isprintable() or (backend == "pisa" and len(docno.split()) != 1) or docno != docno.strip():
            raise CorpusError(f"document {pos} has docno {docno!r} with whitespace or control characters"
                              + (" (PISA's input format cannot hold it; backend='lucene' can hold inner spaces)"
                                 if backend == "pisa" else ""))
        if single is not None:
            text = _field(doc, single, pos, docno)
        else:
            text = " ".join(_field(doc, f, pos, docno) for f in fields)
        yield docno, text


def _field(doc, field: str, pos: int, docno: str) -> str:
    v = doc.get(field)
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    raise CorpusError(f"document {pos} ({docno!r}) has a {type(v).__name__} in text field {field!r}, "
                      f"not a string: {v!r:.100}")


def index_corpus(docs: Iterable[dict], path: Union[str, Path], backend: str = "pisa", *,
                 text_field: Union[str, Sequence[str]] = "text", threads: int = 1, batch_size: Optional[int] = None,
                 ram_buffer_mb: float = LUCENE_RAM_BUFFER_MB, overwrite: bool = False, verbose: bool = False,
                 record: Optional[dict] = None):
    """Indexes ``docs`` (dicts with ``docno`` and ``text_field``) into a BM25 index at ``path`` and
    returns the index artifact (:class:`pyterrier_pisa.PisaIndex` or :class:`~.lucene.LuceneIndex`).

    The documents are streamed: memory stays bounded whatever the corpus size (``batch_size``
    documents at a time: default :data:`PISA_BATCH_SIZE` for PISA, :data:`LUCENE_BATCH_SIZE` for
    Lucene, plus Lucene's ``ram_buffer_mb`` of buffered postings).  The build is atomic and locked
    (:func:`~pyterrier_sci.artifacts.build_atomically`): an index already at ``path`` is returned
    without reading ``docs`` (``overwrite=True`` rebuilds it), and a failed or interrupted build
    leaves nothing at ``path``.  Bad documents raise :class:`CorpusError` (see :func:`checked_docs`).

    Args:
        docs: any iterable of documents, e.g. ``dataset.get_corpus_iter()`` or a generator.
        path: the index directory.
        backend: ``"pisa"`` (default) or ``"lucene"``.
        text_field: the field indexed, or several joined with spaces.
        threads: indexing threads.
        batch_size: documents per batch (see above).
        ram_buffer_mb: Lucene's indexing buffer in MB.
        overwrite: replace an existing index.
        verbose: show the backend's progress output.
        record: keys added to the index's ``pt_meta.json`` (e.g. ``source``, the corpus it was built from,
            which a PISA index needs to take appended documents: :mod:`.growth`).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if isinstance(docs, (str, bytes, dict)) or not hasattr(docs, "__iter__"):
        raise TypeError(f"docs must be an iterable of dicts, not a {type(docs).__name__}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, not {threads!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
    if not ram_buffer_mb > 0:
        raise ValueError(f"ram_buffer_mb must be positive, not {ram_buffer_mb!r}")
    held = DocSet()  # the documents' count and hash, recorded as generation 0 (pyterrier_sci.generations)
    checked = _counted(checked_docs(docs, text_field, backend), held)
    record = dict(record or {})
    path = Path(path)
    if backend == "pisa":
        def build_pisa(tmp: Path) -> None:
            _build_pisa(checked, tmp, threads, batch_size or PISA_BATCH_SIZE, verbose)
            _add_record(tmp, record, held)
        build_atomically(path, build_pisa, overwrite=overwrite, what=f"the PISA index {path}")
        return PisaIndex(str(path), threads=threads)

    def build(tmp: Path) -> None:
        LuceneIndexer(tmp, text_field="text", threads=threads, batch_size=batch_size or LUCENE_BATCH_SIZE,
                      ram_buffer_mb=ram_buffer_mb).index({"docno": d, "text": t} for d, t in _nonempty(checked))
        _add_record(tmp, record, held)
    build_atomically(path, build, overwrite=overwrite, what=f"the Lucene index {path}")
    return LuceneIndex(str(path))


def _counted(checked: Iterator[Tuple[str, str]], held: DocSet) -> Iterator[Tuple[str, str]]:
    for docno, text in checked:
        held.add((docno,))
        yield docno, text


def _add_record(directory: Path, record: dict, held: DocSet) -> None:
    """Adds ``record``'s keys, generation 0 and the count and hash of the documents indexed to the
    ``pt_meta.json`` a build wrote (inside the build: before its rename)."""
    meta = json.loads((directory / "pt_meta.json").read_text(encoding="utf-8"))
    write_pt_meta(directory, **{**meta, **record, "generation": 0, "docs": held.record()})


def _nonempty(checked: Iterator[Tuple[str, str]]) -> Iterator[Tuple[str, str]]:
    first = next(checked, None)
    if first is None:
        raise CorpusError("no documents to index")
    yield first
    yield from checked


def _build_pisa(checked: Iterator[Tuple[str, str]], tmp: Path, threads: int, batch_size: int, verbose: bool) -> None:
    writer = PisaStreamIndexer(_nonempty(checked), tmp, threads=threads, batch_size=batch_size)
    with quiet_native(not verbose):
        writer.index(None)
    if writer.error is not None:  # PISA indexed the documents before the failure: discard them
        err = writer.error
        if isinstance(err, CorpusError):
            raise err
        raise CorpusError(f"indexing stopped after {writer.written} documents: {type(err).__name__}: {err}") from err
    n = PisaIndex(str(tmp)).num_docs()
    if n != writer.written:
        raise RuntimeError(f"PISA indexed {n} documents of the {writer.written} written to it")


class PisaStreamIndexer(PisaIndexer):
    """pyterrier_pisa's indexer with a FIFO writer that keeps (rather than swallows) the error of
    the document stream, counts the documents written, cleans texts for PISA's line format (line
    breaks become spaces) and writes UTF-8 whatever the locale, a batch of lines per write."""

    def __init__(self, checked: Iterator[Tuple[str, str]], path: Path, threads: int, batch_size: int):
        super().__init__(path, text_field="text", threads=threads, batch_size=batch_size)
        self._checked = checked
        self.error: Optional[BaseException] = None
        self.written = 0

    def index(self, it=None):
        return super().index(self._checked)

    def _write_fifo(self, it, fifo, text_field):
        try:
            with open(fifo, "wt", encoding="utf-8", errors="replace", newline="\n") as out:
                lines = []
                for docno, text in it:
                    if "\n" in text or "\r" in text:
                        text = text.replace("\n", " ").replace("\r", " ")
                    lines.append(f"{docno} {text}\n")
                    if len(lines) >= _WRITE_BATCH:
                        out.write("".join(lines))
                        self.written += len(lines)
                        lines = []
                if lines:
                    out.write("".join(lines))
                    self.written += len(lines)
        except BaseException as e:  # closing the FIFO ends PISA's input; the caller raises this
            self.error = e
