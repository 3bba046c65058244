"""Dense bi-encoder retrieval with sentence-transformers models over a ``pyterrier_dr.FlexIndex``
(built on first use under the work directory, one per dataset, model and fields): the ``dense``
component retrieves given a query frame and re-scores a result frame (``first_stage >> dense``) with
the stored vectors, or, without an index, by encoding the frame's ``text`` column.

Search and re-scoring read the index through pyterrier_dr's public API (``payload()``, ``docnos()``,
``sim_fn``) and do the numpy work here in blocks, without a per-query loop: the results of
``FlexIndex.np_retriever()`` / ``scorer()``, faster on many queries.  The same code searches each
shard of a sharded index (:mod:`.fanout`, in parallel) and merges them exactly: ties go to the lower
global position in both, so a sharded index returns the flat index's results.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.corpus import corpus_id, corpus_size, corpus_texts, dataset_of, doc_texts, index_path
from pyterrier_sci.data import work_dir
from pyterrier_sci.progress import Estimate, announce
from pyterrier_sci.protocol import ModelRef
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields, params

from .ann import ANN_METHODS, ann_search, check_ann
from .backends import (
    Calibration,
    ExportedEncoder,
    RecordedCalibration,
    calibration_from_corpus,
    calibration_from_texts,
    load_encoder,
)
from .encoding import encode_stream
from .fanout import ShardedDenseIndex, is_sharded
from .index_meta import (
    IndexSettingsError,
    describe_index,
    encoder_record,
    read_pt_meta,
    texts_sha256,
    vectors_label,
    write_calibration_texts,
)
from .models import BACKENDS, DEFAULT_MODEL, PRECISIONS, ModelNotFoundError, check_backend, model_slug, resolve_model

#: a re-ranker without a built corpus index builds it when its input (with the documents it encoded
#: before) covers at least this share of the corpus; below it, only the documents it re-scores are
#: encoded (DenseRetriever's ``build_index``).  A quarter: CSFCube's facet pools (about half the
#: corpus each) build the index at once, as a first stage of 30 per query on one facet (12 %) does not
INDEX_COVERAGE = 0.25
#: query vectors a retriever keeps, by query text: an experiment asks each query on several datasets
#: (CSFCube's facets and all of them) and in several pipelines sharing the component
QUERY_MEMO = 4096
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
            (``fp32``, ``int8``; :mod:`.backends`, docs/dense.md).
        calibration: what int8 calibrates on: an ir_datasets id (its first documents), a list of texts or a
            :class:`~.backends.Calibration`; default the index's own calibration, else ``corpus``.
        build_index: when re-scoring a first stage while the corpus index is not built yet: ``None``
            (default) encodes only the documents it re-scores (their vectors kept for later calls) unless
            they cover at least :data:`INDEX_COVERAGE` of the corpus, then builds the index; ``True``
            builds the corpus index first.  Retrieval always needs the index.
    """

    def __init__(self, model: Optional[str] = None, index=None, corpus: Optional[str] = None,
                 fields: Optional[Sequence[str]] = None, num_results: int = 1000, batch_size: int = 32,
                 verbose: bool = True, device: Optional[str] = None, rank_cutoff: Optional[int] = None,
                 ann: Optional[str] = None, ann_params: Optional[dict] = None, backend: Optional[str] = None,
                 precision: Optional[str] = None, calibration=None, build_index: Optional[bool] = None):
        artifact = None
        if isinstance(index, pt.Artifact):
            artifact, index = index, index.path
        self.index = None if index is None else str(index)
        # what the index records about its encoder (None: no index, not built yet, or an earlier version's)
        self._record = None if self.index is None else describe_index(self.index)
        if self._record is not None:
            model, backend, precision, fields = self._record.resolve(model, backend, precision, fields)
        self.model = model if model is not None else DEFAULT_MODEL
        self.backend, self.precision = check_backend(backend or "torch", precision or "fp32")
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
            if record is not None and record.max_seq_length and \
                    getattr(encoder, "max_seq_length", None) not in (None, record.max_seq_length):
                encoder.max_seq_length = record.max_seq_length  # truncate queries as the documents were
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
        import numpy as np
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.encoder.get_sentence_embedding_dimension()), dtype=np.float32)
        show = desc == "documents" and self.verbose and len(texts) > 10 * self.batch_size
        return self.encoder.encode(texts, batch_size=self.batch_size, show_progress_bar=show,
                                   convert_to_numpy=True).astype(np.float32, copy=False)

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
        """Uses the opened ``index``, whose record (if this retriever was made before it existed) must
        agree with this retriever's settings."""
        if self.__dict__.get("_record") is None:
            record = describe_index(index)
            if record is not None:
                record.resolve(self.model, self.backend, self.precision, self.fields)
                self._record = record
        self._flex = index

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
        """The index: a FlexIndex (built from ``corpus`` first if needed, atomically) or a
        :class:`~.fanout.ShardedDenseIndex`."""
        if self.index is None:
            return None
        if self._flex is None and is_sharded(self.index):
            self._use_index(ShardedDenseIndex(self.index))
        if self._flex is None:
            from pyterrier_dr import FlexIndex
            path = Path(self.index)
            if not (path / "pt_meta.json").exists():
                if not self.corpus:
                    raise FileNotFoundError(f"dense index not found: {path} (and no corpus given to build it)")

                def build(tmp):
                    docs = self._encode_docs(corpus_texts(self.corpus, self.fields))
                    FlexIndex(str(tmp), verbose=False).indexer().index(docs)
                    meta = read_pt_meta(tmp)
                    meta.update(self.index_record())  # self-describing: the encoder, its settings, the fields
                    write_pt_meta(tmp, **meta)
                    if self.precision == "int8":
                        write_calibration_texts(tmp, self._cal)
                build_atomically(path, build)
            _DOC_VECS.pop(self.index, None)  # in the index now
            self._use_index(FlexIndex(str(path), verbose=False))
        return self._flex

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"], mode="retrieve")
            v.result_frame(extra_columns=["query"], mode="rerank")
        if v.mode == "retrieve":
            cols = list(inp.columns) + [c for c in ("docno", "score", "rank") if c not in inp.columns]
            if len(inp) == 0:
                return pd.DataFrame(columns=cols)
            flex = self.flex_index()
            if flex is None:
                raise ValueError("dense retrieval needs an index (index=... or a dataset); "
                                 "to re-score a first stage, write first_stage >> dense")
            inp = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).reset_index(drop=True)
            qvecs = self.encode(inp["query"].astype(str).tolist(), desc="queries")
            k = self.num_results if self.rank_cutoff is None else min(self.num_results, self.rank_cutoff)
            if self.ann:
                return ann_search(flex, inp, qvecs, k, self.ann, self.ann_params)
            return _search(flex, inp, qvecs, k)
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        flex = self._rescoring_index(inp)
        qvecs, pos = self._query_vecs(inp)
        if flex is not None:
            scores = _score_with_index(flex, inp, qvecs, pos)
        elif self.index is not None and self.corpus:  # a small first stage: its documents only, from the corpus
            scores = _rowwise_dot(qvecs, pos, self._corpus_doc_vecs(inp["docno"].astype(str).tolist()))
        else:
            scores = _rowwise_dot(qvecs, pos, self.encode(self._frame_texts(inp), desc="documents"))
        out = _ranked(inp, scores)
        if self.rank_cutoff is not None:
            out = out[out["rank"] < self.rank_cutoff].reset_index(drop=True)
        return out

    def _rescoring_index(self, inp: pd.DataFrame):
        """The index to re-score ``inp`` with, or None to encode its documents instead: the corpus
        index is built for re-scoring only when asked (``build_index``) or when ``inp`` covers at
        least :data:`INDEX_COVERAGE` of the corpus; a built one is always used."""
        if self._flex is not None or self.index is None or self.build_index or not self.corpus:
            return self.flex_index()
        if is_sharded(self.index) or (Path(self.index) / "pt_meta.json").exists():
            return self.flex_index()
        wanted = set(inp["docno"].astype(str)) - set(self._doc_vecs)
        if len(wanted) + len(self._doc_vecs) >= INDEX_COVERAGE * corpus_size(self.corpus):
            return self.flex_index()
        return None

    def _corpus_doc_vecs(self, docnos: Sequence[str]):
        """Vectors of ``docnos`` (rows in that order), each document encoded once per retriever (its
        text from the corpus, as the corpus index would hold it)."""
        import numpy as np
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
        import numpy as np
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
        return f"DenseRetriever({self.model!r}, index={self.index!r}, num_results={self.num_results}{cut})"

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the encoder, by the name given and the
        local directory it resolves to (hashed into manifests)."""
        try:
            path = resolve_model(self.model)
        except ModelNotFoundError:
            path = None
        local = path is not None and Path(path).exists()
        return [ModelRef(str(self.model), "encoder", path if local else None,
                         None if local else "not a local path (a hub id: its weights are those of the hub's "
                         "revision at download time)")]

    def _key(self):
        cal = self.calibration
        if cal is not None and not isinstance(cal, str):  # texts or a Calibration: by what they hold
            cal = cal.record()["texts_sha256"] if hasattr(cal, "record") else texts_sha256(list(cal))
        return (self.model, self.index, self.corpus, self.fields, self.num_results, self.rank_cutoff, self.ann,
                tuple(sorted(self.ann_params.items())), self.backend, self.precision, cal)

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
        return state


def _prepare_queries(qvecs, sim_fn):
    """Query vectors as float32, normalised for cosine similarity."""
    import numpy as np
    from pyterrier_dr import SimFn
    qvecs = np.asarray(qvecs, dtype=np.float32)
    if SimFn(sim_fn) == SimFn.cos:
        qvecs = qvecs / np.linalg.norm(qvecs, axis=1, keepdims=True)
    return qvecs


def _select(s, i, k: int):
    """Per row the ``k`` largest scores of ``s`` (ids ``i``), equal scores by lower id: argpartition,
    then an exact sort of the (rare) rows where ties straddle the cut."""
    import numpy as np
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    ts, ti = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    kth = ts.min(axis=1, keepdims=True)
    split = (s == kth).sum(axis=1) > (ts == kth).sum(axis=1)
    for r in np.flatnonzero(split):
        order = np.lexsort((i[r], -s[r]))[:k]
        ts[r], ti[r] = s[r, order], i[r, order]
    return ts, ti


#: rows of one matrix product in exact search, at global positions aligned to multiples of it (see _scores)
SCORE_ALIGN = 1024


def _scores(qvecs, dvecs, lo: int, hi: int, offset: int = 0, cos: bool = False):
    """Scores (``len(qvecs) x (hi - lo)``, float32) of rows ``lo:hi`` of ``dvecs`` (global positions
    ``offset + row``), the same bit for bit however an index is cut into shards.

    A BLAS matrix product's value for one (query, document) pair depends on the product's shape and
    on where the pair falls in it (OpenBLAS splits the work into tiles and threads by shape, and
    edge tiles accumulate in another order): with blocks starting at each shard's first row, 2-4 %
    of the scores differed from a flat index's in the last bits, enough to swap near-ties (the
    fan-out tests failed on a Zen 5 CPU with OPENBLAS_CORETYPE=Haswell).  So every product here
    covers :data:`SCORE_ALIGN` rows at global positions ``[j A, (j + 1) A)``; rows of such a block
    outside ``lo:hi`` (the edges of a shard, the end of the index) are zeros, and their scores are
    dropped.  Every pair is then computed by the same product shape at the same place in it, in a
    flat index and in every sharding of it (for the same queries)."""
    import numpy as np
    nq, dim = qvecs.shape[0], qvecs.shape[1]
    out = np.empty((nq, hi - lo), dtype=np.float32)
    a_glob = offset + lo
    start = (a_glob // SCORE_ALIGN) * SCORE_ALIGN
    while start < offset + hi:
        a, b = max(start, a_glob), min(start + SCORE_ALIGN, offset + hi)  # global rows of this block
        rows = np.asarray(dvecs[a - offset:b - offset], dtype=np.float32)
        if cos:
            rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        if b - a < SCORE_ALIGN:
            block = np.zeros((SCORE_ALIGN, dim), dtype=np.float32)
            block[a - start:b - start] = rows
            out[:, a - a_glob:b - a_glob] = (qvecs @ block.T)[:, a - start:b - start]
        else:
            out[:, a - a_glob:b - a_glob] = qvecs @ rows.T
        start += SCORE_ALIGN
    return out


def _topk(dvecs, qvecs, k: int, offset: int = 0, cos: bool = False, batch_size: int = 8192):
    """``(scores, ids)`` of the top-``k`` rows of ``dvecs`` for each (prepared) query, ``batch_size``
    rows scored (:func:`_scores`) and selected at a time; ids are ``offset`` + row, ordered by score
    (descending) then id (ascending): a flat index and the shards of a sharded one (``offset`` = a
    shard's start) give the same scores and order ties alike, so their results are identical."""
    import numpy as np
    n, nq = dvecs.shape[0], qvecs.shape[0]
    k = min(k, n)
    qvecs = np.ascontiguousarray(qvecs, dtype=np.float32)
    best_s = np.empty((nq, 0), dtype=np.float32)
    best_i = np.empty((nq, 0), dtype=np.int64)
    for start in range(0, n, batch_size):
        end = min(start + batch_size, n)
        s = np.concatenate([best_s, _scores(qvecs, dvecs, start, end, offset, cos)], axis=1)
        ids = np.broadcast_to(np.arange(offset + start, offset + end), (nq, end - start))
        i = np.concatenate([best_i, ids], axis=1)
        if s.shape[1] > k:
            s, i = _select(s, i, k)
        best_s, best_i = s, i
    order = np.lexsort((best_i, -best_s), axis=1)
    return np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)


def _merge_topk(scores: list, ids: list, k: int):
    """The exact top-``k`` of per-shard top-k lists (each ordered), by score then id."""
    import numpy as np
    s, i = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    if s.shape[1] > k:
        s, i = _select(s, i, k)
    order = np.lexsort((i, -s), axis=1)
    return np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1)


def _search(index, inp: pd.DataFrame, qvecs, k: int) -> pd.DataFrame:
    """Exhaustive top-``k`` search of the index's stored vectors (its similarity function) for each
    row of the query frame ``inp`` and the result frame built without a per-query loop (the same
    results as ``FlexIndex.np_retriever()``, ties by docid).  ``index`` is a FlexIndex or a
    :class:`~.fanout.ShardedDenseIndex` (its shards searched in parallel, merged exactly)."""
    import numpy as np
    from pyterrier_dr import SimFn
    nq = len(qvecs)
    if isinstance(index, ShardedDenseIndex):
        best_s, best_i = index.search(qvecs, k)
        docno_of = index.docnos_of
    else:
        docnos, dvecs, _ = index.payload()
        best_s, best_i = _topk(dvecs, _prepare_queries(qvecs, index.sim_fn), k, cos=index.sim_fn == SimFn.cos)

        def docno_of(ids):
            return np.asarray(docnos.fwd[ids], dtype=object)
    k = best_s.shape[1]
    out = inp.iloc[np.repeat(np.arange(nq), k)].reset_index(drop=True)
    uniq, inverse = np.unique(best_i.ravel(), return_inverse=True)  # docno lookups are per element
    out["docno"] = docno_of(uniq)[inverse]
    out["score"] = best_s.ravel()
    out["rank"] = np.tile(np.arange(k), nq)
    return out


def _score_with_index(index, inp: pd.DataFrame, qvecs, pos, block: int = 65536):
    """Scores of ``inp``'s (qid, docno) rows with the index's stored vectors and similarity
    (the scores of ``FlexIndex.scorer()``): one docno lookup for the whole frame, then the stored
    rows gathered and dotted with their query's vector ``block`` rows at a time, with no per-query
    loop, progress bar or per-row vector column.  A sharded index finds each docno's shard."""
    import numpy as np
    from pyterrier_dr import SimFn
    sharded = isinstance(index, ShardedDenseIndex)
    docnos = inp["docno"].astype(str).to_numpy()
    if sharded:
        docids = index.positions_of(docnos)
    else:
        docids = np.asarray(index.docnos().inv[docnos], dtype=np.int64)
    if (docids < 0).any():
        missing = inp["docno"].to_numpy()[docids < 0][:5].tolist()
        raise KeyError(f"dense re-scoring: docno(s) {missing} are not in the index {index.index_path}")
    qvecs = _prepare_queries(qvecs, index.sim_fn)
    cos = index.sim_fn == SimFn.cos
    if not sharded:
        dvecs, _ = index.payload(return_docnos=False)
    scores = np.empty(len(docids), dtype=np.float32)
    for start in range(0, len(docids), block):
        ids = docids[start:start + block]
        if sharded:
            d = index.vectors(ids)
        else:
            order = np.argsort(ids, kind="stable")  # gathers from the memory map in file order
            d = np.empty((len(ids), qvecs.shape[1]), dtype=np.float32)
            d[order] = dvecs[ids[order]]
        if cos:
            d /= np.linalg.norm(d, axis=1, keepdims=True)
        scores[start:start + block] = _rowwise_dot(qvecs, pos[start:start + block], d)
    return scores


def _rowwise_dot(qvecs, pos, dvecs):
    """Per row i, ``qvecs[pos[i]] . dvecs[i]``."""
    import numpy as np
    return np.einsum("ij,ij->i", np.asarray(qvecs, dtype=np.float32)[pos], dvecs).astype(np.float32, copy=False)


def _ranked(inp: pd.DataFrame, scores) -> pd.DataFrame:
    """``inp`` with ``score``, sorted by qid then score (descending, ties in input order), ranked per qid."""
    import numpy as np
    qid_codes, _ = pd.factorize(inp["qid"], sort=True)
    order = np.lexsort((-np.asarray(scores, dtype=np.float64), qid_codes))  # lexsort is stable
    out = inp.iloc[order].reset_index(drop=True)
    out["score"] = np.asarray(scores)[order]
    starts = np.r_[0, np.flatnonzero(np.diff(qid_codes[order])) + 1]
    out["rank"] = np.arange(len(out)) - np.repeat(starts, np.diff(np.r_[starts, len(out)]))
    return out


@params(model=Param(str, min_len=1, optional=True), index=Param(bool, PATH, optional=True),
        dataset=Param(DATASET, optional=True), fields=Param(list, item=str, min_len=1, optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS), batch_size=Param(int, min=1, max=65536),
        device=Param(str, min_len=1, optional=True), ann=Param(str, choices=ANN_METHODS, optional=True),
        ann_params=Param(dict, optional=True), backend=Param(str, choices=BACKENDS, optional=True),
        precision=Param(str, choices=PRECISIONS, optional=True))
def dense_component(*, context=None, model: Optional[str] = None, index: Union[None, bool, str] = None,
                    dataset: Optional[str] = None, fields: Optional[Sequence[str]] = None, num_results: int = 1000,
                    batch_size: int = 32, verbose: bool = True, device: Optional[str] = None,
                    ann: Optional[str] = None, ann_params: Optional[dict] = None, backend: Optional[str] = None,
                    precision: Optional[str] = None) -> DenseRetriever:
    """``dense``: a sentence-transformers bi-encoder (default: offline all-MiniLM-L6-v2) over a flat index
    or a sharded one (``pyterrier-sci index --shards N``; searched shard-parallel).

    ``index``: a FlexIndex or sharded index path (built there when needed); by default the dataset's corpus
    index, built on first retrieval, or when re-scoring a first stage that covers a quarter of the corpus
    (a smaller one, ``pool % 30 >> dense``, has only its own documents encoded, each once); ``true``: the
    corpus index is built on first use either way; ``false``: no index, the input's ``text`` column is
    encoded.  ``backend`` / ``precision``: the encoder's engine and precision (docs/dense.md; default
    ``torch``, ``fp32``); int8 calibrates on the dataset's first documents and gets its own corpus index.
    An index path that holds an index takes ``model``, ``backend``, ``precision``, ``fields`` and the int8
    calibration from its ``pt_meta.json`` where they are left out; one that contradicts it is one
    :class:`~.index_meta.IndexSettingsError`."""
    corpus = dataset_of(dataset, context, "dense", required=False)
    common = dict(num_results=num_results, batch_size=batch_size, verbose=verbose, device=device, ann=ann,
                  ann_params=ann_params)
    if isinstance(index, str):  # an index there (its settings where left out), or built there on first use
        if is_sharded(index):  # a finished sharded index (opened: checked against its shards) or an unfinished build
            index = ShardedDenseIndex(index)
        else:
            check_artifact(index, {"dense_index": ["flex", "sharded_flex"]}, "dense", must_exist=False)
        return DenseRetriever(model, index=index, corpus=corpus, fields=fields, backend=backend, precision=precision,
                              build_index=True, **common)
    model, backend = model or DEFAULT_MODEL, backend or "torch"
    check_backend(backend, precision or "fp32")
    precision = precision or "fp32"
    if fields and index is not False:
        check_fields(corpus, fields, "dense")
    fast = dict(backend=backend, precision=precision, calibration=corpus)
    if index is False:
        return DenseRetriever(model, index=None, corpus=None, fields=fields, **common, **fast)
    build_index = True if index is True else None  # asked for: built when needed
    if corpus:
        work = context.workdir() if context is not None else None
        kind = "dense-" + model_slug(model) + (f"-{backend}-int8" if precision == "int8" else "")  # fp32 exports match
        index = str(index_path(work or work_dir(), corpus, kind, fields))
    else:
        index = None
    return DenseRetriever(model, index=index, corpus=corpus, fields=fields, build_index=build_index, **common, **fast)
