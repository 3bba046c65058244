"""DORIS-MAE's sentence-level multi-vector scorer (Eq. 4) with the aspect query modes of §5.2 /
appendix C.3: :class:`MaxSimScorer` (the ``doris_maxsim`` component) re-scores a first stage with any
sentence-transformers model, run by any encoder backend and precision
(:func:`pyterrier_sci.plugins.dense.backends.load_encoder`).  See ``docs/doris-mae.md``.
"""
from __future__ import annotations

import hashlib
import importlib
import re
import threading
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.datasets import doris_mae
from pyterrier_sci.models import encoder_ref
from pyterrier_sci.plugins.dense.backends import Calibration, calibration_from_corpus, load_encoder
from pyterrier_sci.plugins.dense.models import (
    DEFAULT_MODEL,
    BackendError,
    check_backend,
    resolve_model,
)

QUERY_MODES = ("whole", "sentences", "aspects", "aspects_concat")
DOC_MODES = ("whole", "sentences")

# ------------------------------------------------------------------------------------------------
# sentences
# ------------------------------------------------------------------------------------------------

_ABBREVIATIONS = {"e.g", "i.e", "et al", "al", "etc", "vs", "fig", "figs", "eq", "eqs", "cf", "resp", "approx",
                  "no", "sec", "ref", "refs", "dr", "mr", "ms", "prof", "viz", "ca", "incl", "tab", "ch", "vol"}
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> List[str]:
    """Sentences of a query or an abstract: a break after ``.``, ``!`` or ``?`` followed by a capital
    letter or a digit, except after common abbreviations (``e.g.``, ``et al.``, ``Fig.``) and initials.
    Line breaks are treated as spaces (arXiv abstracts are hard-wrapped).  Never empty: a text
    without a break is one sentence (an empty text gives ``[""]``)."""
    text = re.sub(r"\s+", " ", str(text or "")).strip()
    if not text:
        return [""]
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        piece = text[start:m.end()].strip()
        word = re.search(r"(\S+?)[.!?]+[\"')\]]*$", piece)
        w = word.group(1).lower().lstrip("(\"'[") if word else ""
        if w in _ABBREVIATIONS or (len(w) == 1 and w.isalpha()) or w.endswith(("e.g", "i.e")):
            continue
        out.append(piece)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out or [text]


# ------------------------------------------------------------------------------------------------
# encoding with a cache shared by every scorer of the same model
# ------------------------------------------------------------------------------------------------

#: what an int8 encoder calibrates on: an ir_datasets id (its corpus's first documents), the texts
#: themselves, or a :class:`~pyterrier_sci.plugins.dense.backends.Calibration`
CalibrationSpec = Union[None, str, Sequence[str], Calibration]


def _calibration_key(calibration: CalibrationSpec, fields: Optional[Sequence[str]]) -> Optional[tuple]:
    """A hashable name of what an int8 encoder calibrates on (part of the encoder cache key)."""
    if calibration is None:
        return None
    if isinstance(calibration, str):
        return ("corpus", irds_id(calibration), tuple(fields) if fields else None)
    if isinstance(calibration, Calibration):
        return ("texts", calibration.record()["texts_sha256"])
    return ("texts", hashlib.sha256("\0".join(map(str, calibration)).encode()).hexdigest())


class SentenceEncoder:
    """A sentence-transformers model with an in-memory cache of unit-length vectors by text: the
    whole-text, sentence and aspect rows of an experiment encode each distinct text once.

    ``backend`` / ``precision`` pick the engine (:func:`~pyterrier_sci.plugins.dense.backends.load_encoder`);
    int8 calibrates on ``calibration`` (an ir_datasets id: the first documents of its corpus, joined
    ``fields``; or a list of texts) and is one :class:`BackendError` without it.  ``max_seq_length``
    truncates every backend's input alike (the exports take any length)."""

    def __init__(self, model: str = DEFAULT_MODEL, device: Optional[str] = None, batch_size: int = 32,
                 max_seq_length: Optional[int] = None, backend: str = "torch", precision: str = "fp32",
                 calibration: CalibrationSpec = None, fields: Optional[Sequence[str]] = None):
        self.model_name = model
        self.device = device or "cpu"
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.backend, self.precision = check_backend(backend, precision)
        if self.precision == "int8" and calibration is None:
            raise BackendError("precision 'int8' calibrates on documents: give calibration= (an ir_datasets id whose "
                               "first documents are used, or a list of texts) or a dataset")
        self.calibration = calibration if self.precision == "int8" else None
        self.fields = tuple(fields) if fields else None
        self._model = None
        self._cache: Dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def model(self):
        """The encoder: a ``SentenceTransformer`` (torch) or an exported one, loaded on first use."""
        if self._model is None:
            cal = self.calibration
            if isinstance(cal, str):
                cal = calibration_from_corpus(cal, self.fields)
            model = load_encoder(self.model_name, self.device, self.backend, self.precision, cal)
            if self.max_seq_length:
                model.max_seq_length = int(self.max_seq_length)  # a SentenceTransformer or an export
            self._model = model
        return self._model

    def encode(self, texts: Sequence[str], verbose: bool = False) -> np.ndarray:
        """Unit-length float32 rows, one per text (cached by text)."""
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vecs = self.model.encode(missing, batch_size=self.batch_size, convert_to_numpy=True,
                                     show_progress_bar=verbose and len(missing) > 10 * self.batch_size)
            vecs = np.asarray(vecs, dtype=np.float32)
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = vecs / np.where(norms == 0, 1.0, norms)
            with self._lock:
                for t, v in zip(missing, vecs):
                    self._cache[t] = v
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])

    def clear(self) -> None:
        self._cache.clear()


_ENCODERS: Dict[Tuple, SentenceEncoder] = {}


def shared_encoder(model: str = DEFAULT_MODEL, device: Optional[str] = None, batch_size: int = 32,
                   max_seq_length: Optional[int] = None, backend: str = "torch", precision: str = "fp32",
                   calibration: CalibrationSpec = None, fields: Optional[Sequence[str]] = None) -> SentenceEncoder:
    """One :class:`SentenceEncoder` per (resolved model, device, max_seq_length, backend, precision and,
    for int8, calibration) in the process: vectors of one precision are never reused for another."""
    check_backend(backend, precision)
    cal_key = _calibration_key(calibration, fields) if precision == "int8" else None
    key = (resolve_model(model), device or "cpu", max_seq_length, backend, precision, cal_key)
    if key not in _ENCODERS:
        _ENCODERS[key] = SentenceEncoder(model, device, batch_size, max_seq_length, backend, precision,
                                         calibration, fields)
    return _ENCODERS[key]


# ------------------------------------------------------------------------------------------------
# Eq. 4
# ------------------------------------------------------------------------------------------------

def maxsim(query_vecs: np.ndarray, doc_vecs: np.ndarray) -> float:
    """Eq. 4 on unit-length rows: the mean over query vectors of the max cosine over document vectors."""
    return float((query_vecs @ doc_vecs.T).max(axis=1).mean())


class MaxSimScorer(pt.Transformer):
    """Re-scores a result frame with Eq. 4, ``Rel(p|Q) = 1/n sum_i max_j cos(Q_i, p_j)``, query and
    document each encoded as a list of vectors.  Query units: ``whole`` (one vector, the
    single-vector baseline), ``sentences``, ``aspects`` (one per aspect, C.3 approach 2) or
    ``aspects_concat`` (the aspects joined into one text, C.3 approach 1); document units: ``whole``
    or ``sentences``.  With one unit on each side the score is the plain cosine.

    Args:
        model: a sentence-transformers hub id, a local path (e.g. a :class:`ContrastiveModel`), or
            ``"default"`` (the offline all-MiniLM-L6-v2).
        query_mode: ``whole``, ``sentences``, ``aspects`` or ``aspects_concat``.
        doc_mode: ``whole`` or ``sentences``.
        dataset: an ir_datasets id whose docstore gives the document text when the input has no
            ``text_field`` column, and (for a ``sci/doris-mae`` id) the aspects when the input has no
            ``aspects`` column.
        text_field: the input column with the document text (default ``text``).
        doc_field: the document field read from the docstore (default: the document's ``default_text()``).
        batch_size, device, max_seq_length: encoding settings (``max_seq_length`` applies to every backend).
        verbose: a progress bar while encoding many texts.
        backend, precision: the encoder's engine (``torch``, ``openvino``, ``onnx``) and precision
            (``fp32``, ``int8``; docs/dense.md).  Vectors are cached per backend and precision.
        calibration: what int8 calibrates on: an ir_datasets id (the first documents of its corpus,
            ``doc_field`` or the documents' default text) or a list of texts; default ``dataset``.
            int8 with neither is one :class:`~pyterrier_sci.models.BackendError` (the texts being
            scored are not used: an export must not depend on which frame came first).

    The aspect modes read the query's aspects from an ``aspects`` column (a tuple of texts, as
    :func:`pyterrier_sci.datasets.doris_mae.aspect_topics` gives) or from ``dataset``.
    """

    def __init__(self, model: str = DEFAULT_MODEL, query_mode: str = "sentences", doc_mode: str = "sentences",
                 dataset: Optional[str] = None, text_field: str = "text", doc_field: Optional[str] = None,
                 batch_size: int = 32, device: Optional[str] = None, max_seq_length: Optional[int] = None,
                 verbose: bool = False, backend: str = "torch", precision: str = "fp32",
                 calibration: CalibrationSpec = None):
        if query_mode not in QUERY_MODES:
            raise ValueError(f"query_mode must be one of {QUERY_MODES}, not {query_mode!r}")
        if doc_mode not in DOC_MODES:
            raise ValueError(f"doc_mode must be one of {DOC_MODES}, not {doc_mode!r}")
        self.model = model
        self.query_mode = query_mode
        self.doc_mode = doc_mode
        self.dataset = dataset
        self.text_field = text_field
        self.doc_field = doc_field
        self.batch_size = batch_size
        self.device = device
        self.max_seq_length = max_seq_length
        self.verbose = verbose
        self.backend, self.precision = check_backend(backend, precision)
        if backend != "torch" and device not in (None, "cpu"):
            raise BackendError(f"backend {backend!r} runs on the CPU; device {device!r} needs backend='torch'")
        self.calibration = calibration
        if self.precision == "int8" and self._calibration() is None:
            raise BackendError("precision 'int8' calibrates on documents: give dataset= (its corpus's first documents "
                               "are used) or calibration= (an ir_datasets id or a list of texts)")
        self._aspects: Optional[Dict[str, Tuple[str, ...]]] = None

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the sentence encoder."""
        return [encoder_ref(self.model)]

    def _calibration(self) -> CalibrationSpec:
        if self.precision != "int8":
            return None
        return self.calibration if self.calibration is not None else self.dataset

    @property
    def encoder(self) -> SentenceEncoder:
        return shared_encoder(self.model, self.device, self.batch_size, self.max_seq_length, self.backend,
                              self.precision, self._calibration(), [self.doc_field] if self.doc_field else None)

    # -- units ------------------------------------------------------------------------------
    def query_units(self, qid: str, query: str, aspects: Optional[Sequence[str]] = None) -> List[str]:
        if self.query_mode == "whole":
            return [str(query)]
        if self.query_mode == "sentences":
            return split_sentences(query)
        if aspects is None:
            aspects = self._dataset_aspects().get(str(qid))
        if not aspects:
            raise ValueError(f"query mode {self.query_mode!r} needs the aspects of query {qid!r}: give an 'aspects' "
                             "column (pyterrier_sci.datasets.doris_mae.aspect_topics) or a sci/doris-mae dataset")
        aspects = [str(a) for a in aspects]
        return aspects if self.query_mode == "aspects" else [" ".join(aspects)]

    def doc_units(self, text: str) -> List[str]:
        return [str(text)] if self.doc_mode == "whole" else split_sentences(text)

    def _dataset_aspects(self) -> Dict[str, Tuple[str, ...]]:
        if self._aspects is None:
            if not self.dataset:
                self._aspects = {}
            else:
                self._aspects = {q: tuple(a.aspect_texts()) for q, a in doris_mae.aspect_queries(self.dataset).items()}
        return self._aspects

    def _texts(self, inp: pd.DataFrame) -> List[str]:
        if self.text_field in inp.columns:
            return inp[self.text_field].astype(str).tolist()
        if not self.dataset:
            raise ValueError(f"MaxSimScorer needs a {self.text_field!r} column or a dataset to read the documents from")
        import ir_datasets
        store = ir_datasets.load(irds_id(self.dataset)).docs_store()
        docs = store.get_many(list(dict.fromkeys(inp["docno"].astype(str))))
        def text(d):
            doc = docs.get(d)
            if doc is None:
                raise KeyError(f"document {d!r} is not in {self.dataset}")
            return str(getattr(doc, self.doc_field)) if self.doc_field else doc.default_text()
        return [text(d) for d in inp["docno"].astype(str)]

    # -- transform --------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query"])
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        inp = inp.reset_index(drop=True)
        texts = self._texts(inp)
        has_aspects = "aspects" in inp.columns
        q_units: Dict[str, List[str]] = {}
        for row in inp.drop_duplicates("qid").itertuples(index=False):
            aspects = getattr(row, "aspects", None) if has_aspects else None
            q_units[str(row.qid)] = self.query_units(str(row.qid), row.query, aspects)
        d_units = [self.doc_units(t) for t in texts]
        all_texts = [u for us in q_units.values() for u in us] + [u for us in d_units for u in us]
        self.encoder.encode(list(dict.fromkeys(all_texts)), verbose=self.verbose)
        scores = np.empty(len(inp), dtype=np.float64)
        for qid, idx in inp.groupby("qid", sort=False).indices.items():
            qv = self.encoder.encode(q_units[str(qid)])
            units = [d_units[i] for i in idx]
            dv = self.encoder.encode([u for us in units for u in us])
            sims = qv @ dv.T                                   # (query units) x (all doc units of the query)
            starts = np.cumsum([0] + [len(us) for us in units[:-1]])
            scores[idx] = np.maximum.reduceat(sims, starts, axis=1).mean(axis=0)
        out = inp.assign(score=scores)
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable").reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def __repr__(self) -> str:
        fast = "" if self.backend == "torch" else f", backend={self.backend!r}, precision={self.precision!r}"
        return f"MaxSimScorer({self.model!r}, query_mode={self.query_mode!r}, doc_mode={self.doc_mode!r}{fast})"

    def _key(self):
        cal = self._calibration()
        return (self.model, self.query_mode, self.doc_mode, self.dataset, self.text_field, self.doc_field,
                self.max_seq_length, self.backend, self.precision,
                _calibration_key(cal, [self.doc_field] if self.doc_field else None))

    def __eq__(self, other) -> bool:
        return isinstance(other, MaxSimScorer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("MaxSimScorer",) + self._key())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_aspects"] = None
        return state


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "maxsim_component":
        return importlib.import_module(f"{__package__}.components").maxsim_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
