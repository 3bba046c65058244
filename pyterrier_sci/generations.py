"""Indexes that grow: the generation an index is at and the hash of the set of documents it holds, shared by
every index type that appends and retracts documents (BM25, dense, ColBERT; docs/indexes.md).

Each change (an append, a retraction) makes a new *generation* of the index, committed by one atomic
write (a rename); the index's ``pt_meta.json`` records::

    "generation": 3,
    "docs": {"count": 1234, "hash": "sumsha256:<64 hex digits>"},
    "history": [{"generation": 1, "op": "append", "count": 12, "batch": "sumsha256:..."}, ...]

The documents' hash is the sum, modulo 2**256, of the SHA-256 of each docno (:class:`DocSet`): it does
not depend on the order of the documents, it is updated by an append or a retraction without reading the
index (memory bounded by the batch, not the index), and an index rebuilt from the final collection has
the same hash.  Writers of one index take :func:`update_lock`.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

from pyterrier_sci.artifacts import lock
from pyterrier_sci.errors import IndexUpdateError  # noqa: F401 - defined there, re-exported
from pyterrier_sci.protocol import ModelRef

__all__ = ["UPDATES_GROUP", "IndexUpdateError", "DocSet", "HASH_PREFIX", "generation_of", "docs_record",
           "history_entry", "next_generation_meta", "already_applied", "update_lock", "read_docnos", "read_docs",
           "jsonl_record", "describe_generation", "index_ref", "APPEND", "RETRACT", "MODES"]

#: the entry-point group naming, per ``<type>.<format>`` of an index's ``pt_meta.json``, the function that appends
#: to and retracts from it: ``update(path, append=DOCS, retract=IDS, fields=..., verbose=...) -> pt_meta``
UPDATES_GROUP = "pyterrier_sci.index_updates"

HASH_PREFIX = "sumsha256:"
_MOD = 1 << 256
#: the indexing modes of a growing index's ``indexer(mode=...)`` (PyTerrier's ``create`` / ``overwrite`` and
#: the one added here)
APPEND, RETRACT = "append", "retract"
MODES = ("create", "overwrite", APPEND)


def _digest(docno: str) -> int:
    return int.from_bytes(hashlib.sha256(str(docno).encode("utf-8", "surrogatepass")).digest(), "big")


class DocSet:
    """The count and order-free hash of a set of docnos (:data:`HASH_PREFIX` + the sum of their SHA-256
    modulo 2**256), updated document by document."""

    def __init__(self, count: int = 0, value: int = 0):
        self.count, self.value = int(count), int(value) % _MOD

    @classmethod
    def of(cls, docnos: Iterable[str]) -> "DocSet":
        out = cls()
        out.add(docnos)
        return out

    @classmethod
    def from_record(cls, record: Optional[dict]) -> Optional["DocSet"]:
        """The set a ``docs`` record describes (None when there is none or it is not one of these)."""
        if not isinstance(record, dict) or not str(record.get("hash", "")).startswith(HASH_PREFIX):
            return None
        return cls(record.get("count", 0), int(record["hash"][len(HASH_PREFIX):], 16))

    def add(self, docnos: Iterable[str]) -> "DocSet":
        for d in docnos:
            self.value = (self.value + _digest(d)) % _MOD
            self.count += 1
        return self

    def remove(self, docnos: Iterable[str]) -> "DocSet":
        for d in docnos:
            self.value = (self.value - _digest(d)) % _MOD
            self.count -= 1
        return self

    def without(self, docnos: Iterable[str]) -> "DocSet":
        """A new set: this one less ``docnos`` (an index's documents after a retraction); this one is kept."""
        return DocSet(self.count, self.value).remove(docnos)

    def __add__(self, other: "DocSet") -> "DocSet":
        """The union of two disjoint sets (an index's documents and the batch appended to it)."""
        return DocSet(self.count + other.count, self.value + other.value)

    @property
    def hash(self) -> str:
        return f"{HASH_PREFIX}{self.value:064x}"

    def record(self) -> dict:
        return {"count": self.count, "hash": self.hash}

    def __eq__(self, other) -> bool:
        return isinstance(other, DocSet) and (self.count, self.value) == (other.count, other.value)

    def __repr__(self) -> str:
        return f"DocSet(count={self.count}, hash={self.hash[:26]}...)"


def generation_of(meta: Optional[dict]) -> int:
    """The generation a ``pt_meta.json`` records (0: as built, never changed)."""
    return int((meta or {}).get("generation", 0) or 0)


def docs_record(meta: Optional[dict]) -> Optional[dict]:
    """The ``docs`` record (count and hash) of a ``pt_meta.json``, or None (an index built before it existed)."""
    rec = (meta or {}).get("docs")
    return rec if isinstance(rec, dict) else None


def describe_generation(meta: Optional[dict]) -> str:
    """``generation 3; 1234 documents; docs sumsha256:...`` (what a run manifest records of an index)."""
    if meta is None:
        return "not built yet"
    docs = docs_record(meta)
    count = docs.get("count") if docs else meta.get("num_docs", meta.get("doc_count"))
    text = f"generation {generation_of(meta)}"
    if count is not None:
        text += f"; {count} documents"
    return text + (f"; docs {docs['hash']}" if docs else "; docs hash not recorded (never updated)")


def index_ref(path: Union[str, Path], kind: str, meta: Optional[dict] = None) -> ModelRef:
    """The component-protocol entry of an index a component searches (``sci_models()``; run manifests list it
    under ``models``, as ``index:<path>``): its generation and the documents it holds in the note - ``meta``, the
    ``pt_meta.json`` the component loaded (else the one on disk now).  Its files are not hashed (an index can
    be large; the documents' hash names what it holds)."""
    if meta is None:
        try:
            meta = json.loads((Path(path) / "pt_meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = None
    return ModelRef(f"index:{path}", kind, None, describe_generation(meta if isinstance(meta, dict) else None))


def history_entry(generation: int, op: str, batch: DocSet) -> dict:
    return {"generation": generation, "op": op, "count": batch.count, "batch": batch.hash}


def next_generation_meta(meta: dict, op: str, batch: DocSet, docs: DocSet, **extra) -> dict:
    """``meta`` as the next generation records it: ``op`` of ``batch`` appended to the history, ``docs`` the
    documents it then holds, and any ``extra`` entries (the index's own, such as ``num_docs``)."""
    g = generation_of(meta) + 1
    history = list(meta.get("history") or []) + [history_entry(g, op, batch)]
    return dict(meta, **extra, generation=g, docs=docs.record(), history=history)


def already_applied(meta: Optional[dict], op: str, batch: DocSet) -> bool:
    """Whether the last change the index records is this very change (``op`` of the same documents): a
    rerun of an update that had completed, which then has nothing to do."""
    history = (meta or {}).get("history") or []
    last = history[-1] if history else None
    return isinstance(last, dict) and last.get("op") == op and last.get("batch") == batch.hash \
        and last.get("count") == batch.count


@contextlib.contextmanager
def update_lock(path: Union[str, Path]) -> Iterator[None]:
    """The lock every writer of the index ``path`` takes for a whole update (read the current generation,
    write the next, commit): ``.<name>.update.lock`` beside it (:func:`pyterrier_sci.artifacts.lock`;
    released by the operating system when its holder dies).  A second appender waits."""
    path = Path(path)
    with lock(path.with_name(path.name + ".update"), what=f"an update of the index {path}"):
        yield


def read_docnos(source: Union[str, Path, Sequence[str]]) -> list:
    """The docnos to retract: a list as given, or a file (``.jsonl`` / ``.jsonl.gz``: each line's ``docno``
    or ``doc_id``; otherwise one docno per line), blank lines skipped; one :class:`IndexUpdateError` naming
    the file when it cannot be read."""
    if not isinstance(source, (str, Path)):
        return [str(d) for d in source]
    p = Path(source)
    try:
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except OSError as e:
        raise IndexUpdateError(f"cannot read the docnos to retract from {p}: {e.strerror or e}") from None
    jsonl = p.name.endswith((".jsonl", ".jsonl.gz"))
    out = []
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        if jsonl:
            try:
                rec = json.loads(line)
                out.append(str(rec.get("docno", rec.get("doc_id"))) if isinstance(rec, dict) else None)
            except ValueError:
                out.append(None)
            if out[-1] in (None, "None"):
                raise IndexUpdateError(f"{p}, line {n}: not a JSON object with a docno (or doc_id)")
        else:
            out.append(line)
    return out


def jsonl_record(line: str, lineno, path, fields: Sequence[str], error: type = IndexUpdateError,
                 hint: str = "") -> tuple:
    """``(record, docno)`` of one line of a JSONL document file, checked: one ``error`` naming the file and line
    for a line that is not JSON, a record without ``docno`` (or ``doc_id``), or one without a field of
    ``fields`` (``hint`` added to that message)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise error(f"{path}, line {lineno}: not JSON ({e.msg})") from None
    docno = rec.get("docno", rec.get("doc_id")) if isinstance(rec, dict) else None
    if docno is None:
        raise error(f"{path}, line {lineno}: no 'docno' (or 'doc_id') field")
    missing = [k for k in fields if k not in rec]
    if missing:
        raise error(f"{path}, line {lineno}: no field(s) {missing}{hint}")
    return rec, str(docno)


def read_docs(path: Union[str, Path], fields: Optional[Sequence[str]] = None) -> Iterator[dict]:
    """The documents of a ``.jsonl`` / ``.jsonl.gz`` file, streamed: each record with ``docno`` and, when
    ``fields`` are given, ``text`` the ``fields`` joined by a space (without: the record as it is, for an index
    that knows its own fields); one :class:`IndexUpdateError` naming the file and line for a record without a
    docno or a field."""
    p = Path(path)
    if not p.is_file():
        raise IndexUpdateError(f"the documents to append, {p}, are not a file (give a .jsonl or .jsonl.gz file)")
    fields = list(fields or ())
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec, docno = jsonl_record(line, n, p, fields, IndexUpdateError)
            if fields:
                rec = {**rec, "text": " ".join(str(rec[k] or "") for k in fields)}
            yield {**rec, "docno": str(docno)}
