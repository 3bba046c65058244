"""The ``dense`` transformer: a sentence-transformers bi-encoder that retrieves given a query frame and
re-scores a result frame (``first_stage >> dense``) with the vectors of a flat index (a
``pyterrier_dr.FlexIndex``, built on first use under the work directory, one per dataset, model and fields:
:mod:`.flat`) or of a sharded one (:mod:`.fanout`, searched shard-parallel), or, without an index, by encoding
the frame's ``text`` column.  Search is :mod:`.search`'s (exact, blocks without a per-query loop; a sharded
index returns the flat index's results) or :mod:`.ann`'s; the encoder is :func:`.encoders.load_encoder`'s.

An index this plugin wrote describes its encoder (:mod:`.index_meta`): the retriever takes from it every
setting left out and refuses one that contradicts it.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.corpus import corpus_id, corpus_size, corpus_texts, doc_texts
from pyterrier_sci.dates import use_index_dates
from pyterrier_sci.generations import index_ref
from pyterrier_sci.models import DEFAULT_MODEL, check_backend, default_backend, encoder_ref
from pyterrier_sci.progress import Estimate, announce
from pyterrier_sci.protocol import ModelRef

from .ann import ann_search, check_ann
from .calibration import (
    Calibration,
    RecordedCalibration,
    calibration_from_corpus,
    calibration_from_texts,
    texts_sha256,
)
from .encoders import ExportedEncoder, load_encoder
from .encoding import encode_stream, encode_texts
from .flat import FlatIndex, as_vector_index, open_index, write_flat_index
from .index_meta import IndexSettingsError, describe_index, encoder_record, vectors_label
from .search import (
    SCORE_ALIGN,
    aligned_scores,
    masked_search,
    merge_topk,
    prepare_queries,
    ranked,
    results_frame,
    rowwise_dot,
    topk,
)
from .shards import is_sharded

__all__ = ["DenseRetriever", "INDEX_COVERAGE", "QUERY_MEMO", "SCORE_ALIGN"]

#: a re-ranker without a built corpus index builds it when its input (with the documents it encoded
#: before) covers at least this share of the corpus; below it, only the documents it re-scores are
#: encoded (DenseRetriever's ``build_index``).  A quarter: CSFCube's facet pools (about half the
#: corpus each) build the index at once, as a first stage of 30 per query on one facet (12 %) does not
INDEX_COVERAGE = 0.25
#: query vectors a retriever keeps, by query text: an experiment asks each query on several datasets
#: (CSFCube's facets and all of them) and in several pipelines sharing the component
QUERY_MEMO = 4096
#: under a date cutoff, ANN retrieval fetches this many times k results, then filters (docs/dates.md)
ANN_OVERFETCH = 4
#: index path -> {docno: vector} of the documents re-scored before that index was built (DenseRetriever._doc_vecs)
_DOC_VECS: dict = {}


class DenseRetriever(pt.Transformer):
    """A sentence-transformers bi-encoder over a flat or a sharded index.

    An index this plugin wrote records its encoder in ``pt_meta.json`` (:mod:`.index_meta`): ``model``,
    ``backend``, ``precision``, ``fields`` and the int8 calibration left out (``None``) are the index's, and
    one given that contradicts the index is one :class:`~.index_meta.IndexSettingsError`.  Without an index,
    or over one that records nothing (written by an earlier version), they default to ``"default"``,
    ``torch``, ``fp32`` and the dataset's text.

    Args:
        model: a sentence-transformers hub id, a local path, or ``"default"`` (offline MiniLM).
        index: path of a :class:`pyterrier_dr.FlexIndex` (built from ``corpus`` on first use if missing)
            or of a :class:`~.fanout.ShardedDenseIndex` (shards searched in parallel), or either artifact.
        corpus: an ir_datasets id whose documents fill the index (when it is not built yet).
        fields: document fields joined for encoding (default: the dataset's ``default_text()``).
        num_results: results per query when retrieving.
        batch_size: encoding batch size.
        verbose: progress bars while encoding (on by default: encoding is the long part).
        device: torch device (default ``cpu``).
        rank_cutoff: results kept per query (``dense % k`` sets it: retrieval then fetches only ``k``;
            re-scoring still scores every input document, then cuts).
        ann: approximate retrieval (``"hnsw"``, ``"ivf"``, ``"voyager"``; default ``None``: exact), with
            ``ann_params`` its settings (:data:`~.ann.ANN_DEFAULTS`); re-scoring stays exact.
        backend, precision: the encoder's engine (``torch``, ``openvino``, ``onnx``) and precision
            (``fp32``, ``int8``; :mod:`.backends`, docs/dense.md); default the index's own, else
            :func:`pyterrier_sci.models.default_backend` (OpenVINO on the CPU where installed) and fp32.
        calibration: what int8 calibrates on: an ir_datasets id (its first documents), a list of texts or a
            :class:`~.backends.Calibration`; default the index's own calibration, else ``corpus``.
        build_index: when re-scoring a first stage while the corpus index is not built yet: ``None``
            (default) encodes only the documents it re-scores (their vectors kept for later calls) unless
            they cover at least :data:`INDEX_COVERAGE` of the corpus, then builds the index; ``True``
            builds the corpus index first.  Retrieval always needs the index.
        max_seq_length: word pieces each text is truncated to (sentence-transformers' ``max_seq_length``;
            default the model's own, or over an index the one its documents were encoded with, which a
            different value contradicts).
        date_cutoff: a :class:`pyterrier_sci.dates.DateCutoff` pushed into the search (``date_cutoff(dense,
            before=...)``, :meth:`sci_date_cutoff`): exact retrieval masks the later documents before its top-k,
            so k allowed documents come back; ANN over-fetches :data:`ANN_OVERFETCH` x k and filters; re-scoring
            drops the later documents of its input.
    """

    def __init__(self, model: Optional[str] = None, index=None, corpus: Optional[str] = None,
                 fields: Optional[Sequence[str]] = None, num_results: int = 1000, batch_size: int = 32,
                 verbose: bool = True, device: Optional[str] = None, rank_cutoff: Optional[int] = None,
                 ann: Optional[str] = None, ann_params: Optional[dict] = None, backend: Optional[str] = None,
                 precision: Optional[str] = None, calibration=None, build_index: Optional[bool] = None,
                 date_cutoff: Optional[pt.Transformer] = None, max_seq_length: Optional[int] = None):
        artifact = None
        if isinstance(index, pt.Artifact):
            artifact, index = index, index.path
        self.index = None if index is None else str(index)
        # what the index records about its encoder (None: no index, not built yet, or an earlier version's)
        self._record = None if self.index is None else describe_index(self.index)
        if self._record is not None:
            model, backend, precision, fields = self._record.resolve(model, backend, precision, fields)
            max_seq_length = self._record.check_max_seq_length(max_seq_length)
        self.max_seq_length = max_seq_length
        self.model = model if model is not None else DEFAULT_MODEL
        self.backend, self.precision = check_backend(backend or default_backend(device), precision or "fp32")
        self.fields = tuple(fields) if fields else None
        self.calibration = list(calibration) if isinstance(calibration, (list, tuple)) else calibration
        self.build_index = build_index
        self.corpus = corpus
        self.num_results = num_results
        self.batch_size = batch_size
        self.verbose = verbose
        self.device = device
        self.rank_cutoff = rank_cutoff
        self.ann, self.ann_params = check_ann(ann, ann_params)  # plugins/dense/ann.py
        self.date_cutoff = date_cutoff
        self._encoder = None
        self._cal = None  # the int8 calibration the encoder was loaded with
        self._flex = None
        self._query_memo = {}
        if artifact is not None:
            self._use_index(artifact)

    # -- the pieces, loaded lazily so that building a pipeline costs nothing ----------------------
    @property
    def encoder(self):
        """The ``SentenceTransformer`` (or exported encoder): the index's, where it records one."""
        if self._encoder is None:
            record = self.__dict__.get("_record")  # unpickled from an older version: none
            if record is not None:
                record.check_weights(self.model)
            self._cal = self._calibration() if self.precision == "int8" else None
            encoder = load_encoder(self.model, self.device, self.backend, self.precision, self._cal,
                                   verbose=self.verbose)
            length = self.__dict__.get("max_seq_length") or (record.max_seq_length if record is not None else None)
            if length and getattr(encoder, "max_seq_length", None) not in (None, length):
                encoder.max_seq_length = length  # the given truncation; over an index, the documents' own
            self._encoder = encoder
        return self._encoder

    def _calibration(self):
        """What int8 calibrates on: ``calibration`` as given (checked against the index's), else the
        index's own (:class:`~.backends.RecordedCalibration`: its cached export), else ``corpus``'s first
        documents; None when there is nothing (``load_encoder`` then says what to give)."""
        record = self.__dict__.get("_record")
        recorded = record.calibration if record is not None else None
        if self.calibration is None and recorded:
            return RecordedCalibration(recorded, record.calibration_file, self.fields)
        cal = self.calibration if self.calibration is not None else self.corpus
        if cal is None:
            return None
        if isinstance(cal, str):
            cal = calibration_from_corpus(cal, self.fields)
        elif not isinstance(cal, (Calibration, RecordedCalibration)):
            cal = calibration_from_texts(cal)
        if recorded and self.calibration is not None and \
                cal.record().get("texts_sha256") != recorded.get("texts_sha256"):
            raise IndexSettingsError(
                f"calibration (texts SHA-256 {cal.record().get('texts_sha256', '')[:16]}..., "
                f"{len(cal.texts)} texts of {cal.source!r}) contradicts the dense index {record.path!r}, whose int8 "
                f"vectors were encoded with calibration {recorded.get('texts_sha256', '')[:16]}... "
                f"({recorded.get('documents')} texts of {recorded.get('source')!r}); leave calibration out to use "
                "the index's")
        return cal

    def encode(self, texts: Sequence[str], desc: Optional[str] = None):
        """Embeddings (float32 rows) of ``texts``; one progress bar when ``desc`` is given and verbose."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.encoder.get_sentence_embedding_dimension()), dtype=np.float32)
        show = desc == "documents" and self.verbose and len(texts) > 10 * self.batch_size
        bar = pt.tqdm(total=len(texts), desc="encoding documents", unit="doc", disable=not show)
        try:   # each text padded to a length of its own: its vector does not depend on the other texts
            return encode_texts(self.encoder, texts, self.batch_size, bar.update)
        finally:
            bar.close()

    def _encode_docs(self, docs):
        """Adds ``doc_vec`` to a stream of ``{'docno', 'text'}`` under one progress bar that moves per
        encoded batch (:func:`.encoding.encode_stream`)."""
        encoder = self.encoder  # exported, calibrated and compiled first, each phase with its own bar
        name = corpus_id(self.corpus) if self.corpus else "documents"
        total = corpus_size(self.corpus, exact=False) if self.corpus else None  # never read the corpus for it
        announce(f"encoding {f'the {total:,} documents of ' if total else ''}{name} with {self.model} "
                 f"(backend={self.backend}, precision={self.precision}, batch size {self.batch_size})"
                 f"{f' into {self.index}' if self.index else ''}: once, on first use", self.verbose)
        bar = pt.tqdm(desc=f"encoding {name}", unit="doc", total=total, disable=not self.verbose)
        estimate = Estimate(total, f"encoding {name}", self.verbose)

        def update(n):
            bar.update(n)
            estimate.update(n)
        yield from encode_stream(encoder, docs, self.batch_size, update)
        bar.close()

    @property
    def _doc_vecs(self) -> dict:
        """docno -> vector of the documents re-scored without the corpus index, shared by every
        retriever of this process with the same index path (which names the model, backend,
        precision, corpus and fields): an experiment's datasets encode each document once.  The
        corpus index, when it is built, encodes every document itself (its vectors do not depend on
        what was re-scored before: an int8 engine's vectors differ in the last bits by batch)."""
        return _DOC_VECS.setdefault(self.index, {}) if self.index is not None else {}

    def _use_index(self, index):
        """Uses the opened ``index`` (a FlexIndex or a :class:`~.search.VectorIndex`), whose record (if this
        retriever was made before the index existed) must agree with this retriever's settings."""
        if self.__dict__.get("_record") is None:
            record = describe_index(index)
            if record is not None:
                record.resolve(self.model, self.backend, self.precision, self.fields)
                record.check_max_seq_length(self.__dict__.get("max_seq_length"))
                self._record = record
        self._flex = as_vector_index(index)

    def index_record(self) -> dict:
        """What a flat index built by this retriever records in its ``pt_meta.json`` (:mod:`.index_meta`)."""
        encoder = self.encoder
        export = encoder.meta if isinstance(encoder, ExportedEncoder) else None
        return {"encoder": encoder_record(self.model, self.backend, self.precision, export,
                                          getattr(encoder, "max_seq_length", None)),
                "fields": list(self.fields) if self.fields else None,
                "corpus": corpus_id(self.corpus) if self.corpus else None,
                "vectors": vectors_label(self.backend, self.precision, export.get("settings_hash") if export else None)}

    def flex_index(self):
        """The index: a ``pyterrier_dr.FlexIndex`` (built from ``corpus`` first if needed, atomically, with the
        record of its encoder) or a :class:`~.fanout.ShardedDenseIndex`."""
        if self.index is None:
            return None
        if self._flex is None:
            path = Path(self.index)
            if not is_sharded(path) and not (path / "pt_meta.json").exists():
                if not self.corpus:
                    raise FileNotFoundError(f"dense index not found: {path} (and no corpus given to build it)")

                def build(tmp):
                    docs = self._encode_docs(corpus_texts(self.corpus, self.fields))
                    write_flat_index(tmp, docs, lambda: (self.index_record(), self._cal))
                build_atomically(path, build)
            _DOC_VECS.pop(self.index, None)  # in the index now
            self._use_index(open_index(path))
            use_index_dates(path)   # appended documents' own dates, for date_cutoff
        return self._flex.flex if isinstance(self._flex, FlatIndex) else self._flex  # a flat index: its FlexIndex

    def _vector_index(self):
        """The index as the search asks it (:class:`~.search.VectorIndex`), opened (built) when needed."""
        if self.flex_index() is None:
            return None
        return self._flex

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"], mode="retrieve")
            v.result_frame(extra_columns=["query"], mode="rerank")
        if v.mode == "retrieve":
            cols = list(inp.columns) + [c for c in ("docno", "score", "rank") if c not in inp.columns]
            if len(inp) == 0:
                return pd.DataFrame(columns=cols)
            index = self._vector_index()
            if index is None:
                raise ValueError("dense retrieval needs an index (index=... or a dataset); "
                                 "to re-score a first stage, write first_stage >> dense")
            inp = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).reset_index(drop=True)
            qvecs = self.encode(inp["query"].astype(str).tolist(), desc="queries")
            k = self.num_results if self.rank_cutoff is None else min(self.num_results, self.rank_cutoff)
            if self.__dict__.get("date_cutoff") is not None:
                return self._search_before(index, inp, qvecs, k)
            if self.ann:
                return ann_search(index, inp, qvecs, k, self.ann, self.ann_params)
            return _search(index, inp, qvecs, k)
        if self.__dict__.get("date_cutoff") is not None and len(inp):  # later documents are not re-scored
            inp = inp[self.date_cutoff.keep_rows(inp)].reset_index(drop=True)
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        index = self._rescoring_index(inp)
        qvecs, pos = self._query_vecs(inp)
        if index is not None:
            scores = _score_with_index(index, inp, qvecs, pos)
        elif self.index is not None and self.corpus:  # a small first stage: its documents only, from the corpus
            scores = rowwise_dot(qvecs, pos, self._corpus_doc_vecs(inp["docno"].astype(str).tolist()))
        else:
            scores = rowwise_dot(qvecs, pos, self.encode(self._frame_texts(inp), desc="documents"))
        out = ranked(inp, scores)
        if self.rank_cutoff is not None:
            out = out[out["rank"] < self.rank_cutoff].reset_index(drop=True)
        return out

    def _search_before(self, index, inp: pd.DataFrame, qvecs, k: int) -> pd.DataFrame:
        """Retrieval under the date cutoff: exact search masks the documents the cutoff does not allow
        (:func:`.search.masked_search`); ANN over-fetches and filters."""
        if self.ann:
            res = ann_search(index, inp, qvecs, min(k * ANN_OVERFETCH, index.num_docs), self.ann, self.ann_params)
            res = self.date_cutoff.transform(res)
            return res[res["rank"] < k].reset_index(drop=True)
        docnos = self.__dict__.get("_all_docnos")
        if docnos is None or len(docnos) != index.num_docs:
            docnos = self._all_docnos = index.docnos_of(np.arange(index.num_docs))
        scores, ids = masked_search(index, qvecs, k, self.date_cutoff.mask_fn(inp, docnos))
        return results_frame(inp, scores, ids, index.docnos_of, padded=True)

    def sci_date_cutoff(self, cutoff) -> Optional["DenseRetriever"]:
        """The component protocol's date-cutoff pushdown (:mod:`pyterrier_sci.dates`): this retriever with
        ``cutoff`` applied inside its search; None (not pushed) when it already has another cutoff."""
        if self.__dict__.get("date_cutoff") is not None and self.date_cutoff != cutoff:
            return None
        pushed = object.__new__(type(self))  # as fuse_rank_cutoff: the loaded model and index are shared
        pushed.__dict__.update(self.__dict__)
        pushed.date_cutoff = cutoff
        return pushed

    def _rescoring_index(self, inp: pd.DataFrame):
        """The index to re-score ``inp`` with, or None to encode its documents instead: the corpus
        index is built for re-scoring only when asked (``build_index``) or when ``inp`` covers at
        least :data:`INDEX_COVERAGE` of the corpus; a built one is always used."""
        if self._flex is not None or self.index is None or self.build_index or not self.corpus:
            return self._vector_index()
        if is_sharded(self.index) or (Path(self.index) / "pt_meta.json").exists():
            return self._vector_index()
        wanted = set(inp["docno"].astype(str)) - set(self._doc_vecs)
        if len(wanted) + len(self._doc_vecs) >= INDEX_COVERAGE * corpus_size(self.corpus):
            return self._vector_index()
        return None

    def _corpus_doc_vecs(self, docnos: Sequence[str]):
        """Vectors of ``docnos`` (rows in that order), each document encoded once per retriever (its
        text from the corpus, as the corpus index would hold it)."""
        new = [d for d in dict.fromkeys(docnos) if d not in self._doc_vecs]
        if new:
            vecs = self.encode(doc_texts(self.corpus, new, self.fields), desc="documents")
            self._doc_vecs.update(zip(new, vecs))
        return np.stack([self._doc_vecs[d] for d in docnos]).astype(np.float32, copy=False)

    def _frame_texts(self, inp: pd.DataFrame) -> list:
        """Document texts of a result frame without an index: ``fields`` joined by a space (as
        in the corpus index), else the ``text`` column."""
        fields = list(self.fields) if self.fields else ["text"]
        missing = [f for f in fields if f not in inp.columns]
        if missing:
            raise ValueError(f"dense re-scoring without an index reads the column(s) {missing}, which the input lacks "
                             f"(columns: {list(inp.columns)}); add them (e.g. '>> text') or set fields=[...]")
        if len(fields) == 1:
            return inp[fields[0]].fillna("").astype(str).tolist()
        return inp[fields].fillna("").astype(str).agg(" ".join, axis=1).tolist()

    def _query_vecs(self, inp: pd.DataFrame):
        """``(vecs, pos)``: each distinct query of ``inp`` encoded once, and per row of ``inp`` the
        row of ``vecs`` holding its query."""
        codes, _ = pd.factorize(inp["qid"], sort=False)
        first = np.unique(codes, return_index=True)[1]  # the first row of each query, in code order
        texts = inp["query"].iloc[first].astype(str).tolist()
        memo = self.__dict__.setdefault("_query_memo", {})  # unpickled from an older version: none yet
        new = list(dict.fromkeys(t for t in texts if t not in memo))
        if new:
            if len(memo) + len(new) > QUERY_MEMO:
                memo.clear()
            memo.update(zip(new, self.encode(new, desc="queries")))
        if not texts:
            return self.encode([]), codes
        return np.stack([memo[t] for t in texts]), codes

    def fuse_rank_cutoff(self, k: int) -> Optional["DenseRetriever"]:
        """``dense % k`` as one transformer: retrieval fetches only ``k`` results per query (each shard
        of a sharded index too); re-scoring still scores every input document, then keeps ``k``."""
        if self.rank_cutoff is not None and self.rank_cutoff <= k:
            return self
        fused = object.__new__(type(self))  # not copy.copy: __getstate__ drops the loaded model and index
        fused.__dict__.update(self.__dict__)  # shared, not reloaded
        fused.rank_cutoff = k
        return fused

    def __repr__(self) -> str:
        cut = "" if self.rank_cutoff is None else f", rank_cutoff={self.rank_cutoff}"
        cut += "" if self.__dict__.get("date_cutoff") is None else f", date_cutoff={self.date_cutoff!r}"
        return f"DenseRetriever({self.model!r}, index={self.index!r}, num_results={self.num_results}{cut})"

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the encoder, by the name given and the
        local directory it resolves to (hashed into manifests), and the index with the generation it searched
        (:func:`pyterrier_sci.generations.index_ref`: the one it opened, else the one on disk)."""
        refs = [encoder_ref(self.model)]
        exported = self.__dict__.get("_encoder")
        if isinstance(exported, ExportedEncoder) and getattr(exported, "path", None) is not None:
            # the exported engine that encoded (OpenVINO / ONNX Runtime, fp32 or int8): its files are hashed too
            refs.append(ModelRef(name=f"{self.model} ({exported.backend} {exported.precision})", kind="dense_export",
                                 path=str(exported.path)))
        if self.index is not None:
            opened = self.__dict__.get("_flex")
            meta = opened.manifest if hasattr(opened, "manifest") else \
                opened.flex.payload(return_dvecs=False, return_docnos=False)[0] if isinstance(opened, FlatIndex) \
                else None
            refs.append(index_ref(self.index, "dense_index", meta))
        return refs

    def _key(self):
        cal = self.calibration
        if cal is not None and not isinstance(cal, str):  # texts or a Calibration: by what they hold
            cal = cal.record()["texts_sha256"] if hasattr(cal, "record") else texts_sha256(list(cal))
        return (self.model, self.index, self.corpus, self.fields, self.num_results, self.rank_cutoff, self.ann,
                tuple(sorted(self.ann_params.items())), self.backend, self.precision, cal,
                self.__dict__.get("date_cutoff"))

    def __eq__(self, other) -> bool:
        return isinstance(other, DenseRetriever) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("DenseRetriever",) + self._key())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_encoder"] = None  # reloaded where it is unpickled
        state["_cal"] = None
        state["_flex"] = None
        state["_query_memo"] = {}
        state.pop("_all_docnos", None)
        return state


def _search(index, inp: pd.DataFrame, qvecs, k: int) -> pd.DataFrame:
    """Exhaustive top-``k`` search of the index's stored vectors (its similarity function) for each
    row of the query frame ``inp`` and the result frame built without a per-query loop (the same
    results as ``FlexIndex.np_retriever()``, ties by docid).  ``index``: a :class:`~.search.VectorIndex` or
    a ``pyterrier_dr.FlexIndex`` (the benchmarks pass one)."""
    index = as_vector_index(index)
    scores, ids = index.search(qvecs, k)
    return results_frame(inp, scores, ids, index.docnos_of)


def _score_with_index(index, inp: pd.DataFrame, qvecs, pos, block: int = 65536):
    """Scores of ``inp``'s (qid, docno) rows with the index's stored vectors and similarity
    (the scores of ``FlexIndex.scorer()``): one docno lookup for the whole frame, then the stored
    rows gathered and dotted with their query's vector ``block`` rows at a time, with no per-query
    loop, progress bar or per-row vector column.  A sharded index finds each docno's shard."""
    from pyterrier_dr import SimFn
    docids = index.positions_of(inp["docno"].astype(str).to_numpy())
    if (docids < 0).any():
        missing = inp["docno"].to_numpy()[docids < 0][:5].tolist()
        raise KeyError(f"dense re-scoring: docno(s) {missing} are not in the index {index.index_path}")
    qvecs = prepare_queries(qvecs, index.sim_fn)
    cos = index.sim_fn == SimFn.cos
    scores = np.empty(len(docids), dtype=np.float32)
    for start in range(0, len(docids), block):
        d = index.vectors(docids[start:start + block])
        if cos:
            d /= np.linalg.norm(d, axis=1, keepdims=True)
        scores[start:start + block] = rowwise_dot(qvecs, pos[start:start + block], d)
    return scores


# the names the search helpers had here before :mod:`.search` (benchmarks and earlier code import them)
_topk, _merge_topk, _prepare_queries, _scores = topk, merge_topk, prepare_queries, aligned_scores
_rowwise_dot, _ranked = rowwise_dot, ranked


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "dense_component":
        return importlib.import_module(f"{__package__}.components").dense_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
