"""What an int8 quantisation calibrates on: :class:`Calibration` (texts, or text pairs for a cross-encoder,
and how they were chosen: recorded in the export's ``pt_meta.json`` and part of its cache key) and
:class:`RecordedCalibration` (one known only by that record, as an index keeps it)."""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from pyterrier_sci.corpus import corpus_id, corpus_texts
from pyterrier_sci.models import BackendError

__all__ = ["CALIBRATION_SIZE", "Calibration", "RecordedCalibration", "texts_sha256", "calibration_from_corpus",
           "calibration_from_texts", "calibration_from_pairs"]

#: documents used to calibrate int8 (NNCF's default subset size is 300: on CSFCube's MiniLM, 128 without bias
#: correction gave int8 vectors as close to torch fp32 (mean cosine 0.99526 against 0.99528 on 1,000 held-out
#: abstracts) in 5 s instead of 13 s on the Intel Xeon; docs/dense.md, "Calibration")
CALIBRATION_SIZE = 128


def texts_sha256(texts: Sequence) -> str:
    """The SHA-256 a calibration record gives its texts (a text pair is hashed as its two texts joined by
    U+001F)."""
    def key(text) -> str:
        return text if isinstance(text, str) else "\x1f".join(map(str, text))
    return hashlib.sha256("\0".join(map(key, texts)).encode()).hexdigest()


@dataclass
class Calibration:
    """Texts (for a cross-encoder: text pairs) that calibrate an int8 quantisation, and how they were
    chosen (recorded in the export's ``pt_meta.json`` and part of its cache key)."""
    texts: list
    source: str
    docnos: Optional[list] = None
    fields: Optional[Sequence[str]] = None
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        rec = {"source": self.source, "documents": len(self.texts), "texts_sha256": texts_sha256(self.texts)}
        if self.docnos is not None:
            rec["selection"] = f"the first {len(self.texts)} non-empty documents in corpus order"
            rec["docnos_sha256"] = hashlib.sha256("\n".join(self.docnos).encode()).hexdigest()
            rec["first_docnos"] = list(self.docnos[:5])
        if self.fields:
            rec["fields"] = list(self.fields)
        rec.update(self.extra)
        return rec


def calibration_from_corpus(corpus: str, fields: Optional[Sequence[str]] = None,
                            size: int = CALIBRATION_SIZE) -> Calibration:
    """The first ``size`` non-empty documents of an ir_datasets corpus (streamed: nothing else is read);
    the subsets of a benchmark (``sci/csfcube/method``) calibrate on their shared corpus."""
    corpus = corpus_id(corpus)
    docs = list(itertools.islice((d for d in corpus_texts(corpus, fields) if d["text"].strip()), size))
    if not docs:
        raise BackendError(f"int8 calibration: corpus {corpus} has no non-empty documents")
    return Calibration([d["text"] for d in docs], corpus, [str(d["docno"]) for d in docs], fields)


def calibration_from_texts(texts: Sequence[str], source: str = "texts given by the caller") -> Calibration:
    texts = [str(t) for t in texts if str(t).strip()]
    if not texts:
        raise BackendError("int8 calibration needs at least one non-empty text")
    return Calibration(texts, source)


def calibration_from_pairs(pairs: Sequence, source: str = "pairs given by the caller",
                           docnos: Optional[list] = None, **extra) -> Calibration:
    """A :class:`Calibration` of text pairs ``(a, b)`` (as ``CrossEncoder.predict`` takes them);
    ``extra`` is recorded in the export's ``pt_meta.json`` (e.g. ``selection``: how they were chosen)."""
    pairs = [(str(a), str(b)) for a, b in pairs]
    if not pairs:
        raise BackendError("int8 calibration of a cross-encoder needs at least one (text, text) pair")
    return Calibration(pairs, source, docnos, extra=extra)


class RecordedCalibration:
    """The calibration of an int8 export known by its record (an index's ``pt_meta.json``): enough to find
    the cached export (its settings hash covers the record's source, count and texts' SHA-256).  Its texts
    are needed only when the export must be built again: they are read from ``texts_file`` (an index's
    ``calibration.json``) or, for a corpus selection, from the corpus itself, and checked against the
    record's SHA-256; where neither gives them, one :class:`BackendError` asks for ``calibration=``."""

    def __init__(self, record: dict, texts_file: Union[None, str, Path] = None,
                 fields: Optional[Sequence[str]] = None):
        self._record = dict(record)
        self.texts_file = None if texts_file is None else Path(texts_file)
        self.fields = list(record.get("fields") or fields or []) or None
        self.source = self._record.get("source")
        self.docnos = None
        self._texts = None

    def record(self) -> dict:
        return dict(self._record)

    def _matches(self, texts) -> bool:
        return texts_sha256(texts) == self._record.get("texts_sha256")

    @property
    def texts(self) -> list:
        if self._texts is None:
            self._texts = self._find_texts()
        return self._texts

    def _find_texts(self) -> list:
        if self.texts_file is not None and self.texts_file.exists():
            stored = json.loads(self.texts_file.read_text(encoding="utf-8")).get("texts") or []
            if self._matches(stored):
                return stored
        if self._record.get("docnos_sha256") and self.source:  # the first documents of a corpus
            try:
                found = calibration_from_corpus(self.source, self.fields, size=int(self._record["documents"]))
            except Exception:  # noqa: BLE001 - not a corpus of this machine: the error below says what to do
                found = None
            if found is not None and self._matches(found.texts):
                return found.texts
        raise BackendError(
            f"the int8 export calibrated on {self._record.get('documents')} texts of {self.source!r} (SHA-256 "
            f"{str(self._record.get('texts_sha256'))[:16]}...) is not in the work directory's cache, and those texts "
            f"are not at hand{f' (no intact {self.texts_file})' if self.texts_file else ''}: give calibration= "
            "with the same texts, or point PYTERRIER_SCI_HOME at the work directory that built it")
