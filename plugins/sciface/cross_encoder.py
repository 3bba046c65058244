"""SciFACE's facet cross-encoders (Background, Method): the :class:`FacetCrossEncoder` artifact and
the :class:`FacetReranker` it hands out (``.scorer()``), the pairs' input format, loading and scoring.
Training is :func:`~.training.train_facet_cross_encoder`; the other re-rankers (:class:`~.rerank.FacetControl`,
:class:`~.rerank.SeedText`) live in :mod:`.rerank`.  The input format and training are described in
``docs/sciface.md``.  A facet model runs on torch or, exported, on OpenVINO / ONNX Runtime in fp32
or int8 (``backend``, ``precision``; :func:`pyterrier_sci.plugins.dense.backends.load_cross_encoder`);
int8 calibrates on :func:`calibration_pairs` of a dataset's corpus.
"""
from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import ir_datasets
import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import corpus_id, irds_id, sorted_results
from pyterrier_sci.models import BackendError, check_backend
from pyterrier_sci.plugins.dense.backends import calibration_from_pairs, load_cross_encoder
from pyterrier_sci.protocol import ModelRef

from .triplets import (  # noqa: F401
    FACETS,
    PAIR_COLUMNS,
    check_pairs,
    collapse_method,
    csfcube_pairs,
    facet_scores,
    make_triplets,
    sample_per_seed,
    split_seeds,
)

ARTIFACT_TYPE = "facet_cross_encoder"
ARTIFACT_FORMAT = "sentence-transformers"
#: (seed, candidate) pairs that calibrate an int8 facet model (:func:`calibration_pairs`)
CALIBRATION_PAIRS = 128


def _clean(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return str(v).strip()


def pair_input(seed_title, seed_abstract, cand_title, cand_abstract, sep: str = "[SEP]") -> Tuple[str, str]:
    """The two segments given to the tokenizer (``sep`` is the tokenizer's separator token)."""
    a = f"{_clean(seed_title)} {sep} {_clean(seed_abstract)}" if _clean(seed_title) else _clean(seed_abstract)
    b = f"{_clean(cand_title)} {sep} {_clean(cand_abstract)}" if _clean(cand_title) else _clean(cand_abstract)
    return a, b


@contextlib.contextmanager
def quiet_transformers():
    """Keeps loading and training silent at the Python level: transformers' load report of a new
    classification head, its progress bars and sentence-transformers' evaluator log lines.  These go
    through Python's logging, so :func:`pyterrier_sci.quiet.quiet_native` (which closes the process's
    stdout/stderr file descriptors, for native code) is not the tool: it would also swallow errors."""
    import transformers
    level = transformers.logging.get_verbosity()
    st_logger = logging.getLogger("sentence_transformers")
    st_level = st_logger.level
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    st_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if bars:
            transformers.utils.logging.enable_progress_bar()
        st_logger.setLevel(st_level)


def open_cross_encoder(path: str, max_length: int, device: Optional[str] = None):
    """The sentence-transformers ``CrossEncoder`` at ``path`` (a model directory or hub id) with one
    output label, loaded quietly (a new classification head is added to a model without one)."""
    from sentence_transformers import CrossEncoder
    with quiet_transformers():
        return CrossEncoder(str(path), num_labels=1, max_length=max_length, device=device)


_load_cross_encoder = open_cross_encoder  # its name before issue 32 (benchmarks/bench_facet.py uses it)


Paper = Tuple[str, str]  # (title, abstract)


def calibration_pairs(dataset: str, size: int = CALIBRATION_PAIRS, title_field: str = "title",
                      abstract_field: str = "abstract") -> Tuple[List[Tuple[Paper, Paper]], List[str]]:
    """The int8 calibration pairs of a facet model on ``dataset``: its corpus's first ``2 * size``
    documents with a non-empty abstract, in corpus order, paired in turn (document 2i is the seed,
    2i+1 the candidate), as ``((seed title, seed abstract), (cand title, cand abstract))``; and their
    docnos in that order.  Deterministic, streamed (nothing else is read), the same for every subset
    of a benchmark (they share a corpus), and it reads no query, pool or judgement of the benchmark."""
    corpus = corpus_id(irds_id(dataset))
    ds = ir_datasets.load(corpus)
    if not ds.has_docs():
        raise BackendError(f"int8 calibration: dataset {dataset} has no documents")
    docs = ((str(d.doc_id), _clean(getattr(d, title_field, "")), _clean(getattr(d, abstract_field, None)))
            for d in ds.docs_iter())
    docs = list(itertools.islice((d for d in docs if d[2]), 2 * size))
    if len(docs) < 2:
        raise BackendError(f"int8 calibration: the corpus of {dataset} has fewer than two documents with "
                           f"a {abstract_field!r}")
    pairs = [((a[1], a[2]), (b[1], b[2])) for a, b in zip(docs[::2], docs[1::2])]
    return pairs, [d[0] for d in docs[:2 * len(pairs)]]


# ----------------------------------------------------------------------------------------------
# the artifact
# ----------------------------------------------------------------------------------------------
class FacetCrossEncoder(pt.Artifact):
    """A trained SciFACE facet model (directory with ``pt_meta.json`` and ``model/``).

    ``FacetCrossEncoder(path)`` or ``pt.Artifact.load(path)`` opens it; ``.scorer()`` hands out a
    :class:`FacetReranker`; ``.score(seeds, cands)`` scores pairs of ``(title, abstract)``.

    ``backend`` (``torch``, ``openvino``, ``onnx``) and ``precision`` (``fp32``, ``int8``): the engine
    the model runs on; the exports are built on first use and cached under ``<work>/models``
    (``work``: default the work directory).  int8 needs ``calibration``: a dataset id (its
    :func:`calibration_pairs`) or a list of ``((seed title, seed abstract), (cand title, cand
    abstract))``; an int8 export that does not keep the torch model's scores is refused with a
    :class:`~pyterrier_sci.models.BackendError` (docs/sciface.md, "Backends")."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT

    def __init__(self, path: Union[str, Path], device: Optional[str] = None, backend: str = "torch",
                 precision: str = "fp32", calibration: Union[None, str, Sequence] = None,
                 work: Union[None, str, Path] = None):
        super().__init__(path)
        self.device = device
        self.backend, self.precision = check_backend(backend, precision)
        if backend != "torch" and device not in (None, "cpu"):
            raise BackendError(f"backend {backend!r} runs on the CPU; device {device!r} needs backend='torch'")
        if precision == "int8" and calibration is None:
            raise BackendError("precision 'int8' calibrates on (seed, candidate) pairs: give calibration= a dataset "
                               f"(the first {CALIBRATION_PAIRS} pairs of its corpus) or a list of pairs")
        self.calibration = calibration if calibration is None or isinstance(calibration, str) \
            else tuple((tuple(a), tuple(b)) for a, b in calibration)
        self.work = work
        meta_path = Path(self.path) / "pt_meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.path} is not a facet cross-encoder artifact (no pt_meta.json); "
                                    "train one with pyterrier_sci.plugins.sciface.train_facet_cross_encoder")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("type") != ARTIFACT_TYPE:
            raise ValueError(f"{self.path} holds a {self.meta.get('type')!r} artifact, not {ARTIFACT_TYPE!r}")
        self.facet: str = self.meta["facet"]
        self.max_length: int = int(self.meta.get("max_length", 512))
        self._model = None

    @property
    def model(self):
        """The sentence-transformers CrossEncoder, or its export on ``backend`` (both have ``predict``
        and ``tokenizer``)."""
        if self._model is None:
            ce = open_cross_encoder(str(Path(self.path) / "model"), self.max_length, self.device)
            if self.backend != "torch":
                ce = load_cross_encoder(ce, self.backend, self.precision, self._calibration(ce), work=self.work)
            self._model = ce
        return self._model

    def _calibration(self, ce):
        if self.precision != "int8":
            return None
        sep = ce.tokenizer.sep_token or "[SEP]"
        if isinstance(self.calibration, str):
            pairs, docnos = calibration_pairs(self.calibration, CALIBRATION_PAIRS)
            source, extra = corpus_id(irds_id(self.calibration)), {  # the subsets of a benchmark share it
                "selection": f"the first {2 * len(pairs)} documents with an abstract in corpus order, paired in "
                             "turn (document 2i the seed, 2i+1 the candidate)",
                "first_docnos": docnos[:6]}
        else:
            pairs, docnos, source, extra = self.calibration, None, "pairs given by the caller", {}
        texts = [pair_input(s[0], s[1], c[0], c[1], sep) for s, c in pairs]
        return calibration_from_pairs(texts, source, docnos, **extra)

    def _key(self):
        return (str(Path(self.path).resolve()), self.backend, self.precision,
                self.calibration if self.precision == "int8" else None)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_model"] = None
        return state

    def __repr__(self) -> str:
        on = "" if self.backend == "torch" else f", backend={self.backend!r}, precision={self.precision!r}"
        return f"FacetCrossEncoder({str(self.path)!r}, facet={self.facet!r}{on})"

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetCrossEncoder) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetCrossEncoder",) + self._key())

    def on_backend(self, backend: Optional[str] = None, precision: Optional[str] = None,
                   calibration: Union[None, str, Sequence] = None,
                   work: Union[None, str, Path] = None) -> "FacetCrossEncoder":
        """This model on another backend / precision (None: keep this one's; ``backend='torch'`` alone
        means fp32); ``self`` when nothing changes."""
        precision = precision or ("fp32" if backend == "torch" else self.precision)
        backend = backend or self.backend
        calibration = self.calibration if calibration is None else calibration
        work = self.work if work is None else work
        if (backend, precision, calibration, work) == (self.backend, self.precision, self.calibration, self.work):
            return self
        return FacetCrossEncoder(self.path, self.device, backend, precision, calibration, work)

    def score(self, seeds: Sequence[Tuple[str, str]], cands: Sequence[Tuple[str, str]], batch_size: int = 32,
              show_progress_bar: bool = False) -> np.ndarray:
        """Raw scores (logits, no sigmoid) of ``(seed title, seed abstract)`` x ``(cand title, cand abstract)``."""
        return score_pairs(self.model, seeds, cands, batch_size=batch_size, show_progress_bar=show_progress_bar)

    def scorer(self, **kwargs) -> "FacetReranker":
        """A :class:`FacetReranker` with this model."""
        return FacetReranker(self, **kwargs)


def score_pairs(model, seeds, cands, batch_size: int = 32, show_progress_bar: bool = False) -> np.ndarray:
    import torch
    sep = model.tokenizer.sep_token or "[SEP]"
    inputs = [pair_input(s[0], s[1], c[0], c[1], sep) for s, c in zip(seeds, cands)]
    if not inputs:
        return np.zeros(0, dtype=float)
    out = model.predict(inputs, batch_size=batch_size, activation_fn=torch.nn.Identity(),
                        show_progress_bar=show_progress_bar, convert_to_numpy=True)
    return np.asarray(out, dtype=float).reshape(-1)


# ----------------------------------------------------------------------------------------------
# the re-ranker the artifact hands out
# ----------------------------------------------------------------------------------------------
def _as_model(model, backend: Optional[str] = None, precision: Optional[str] = None, calibration=None,
              work=None) -> FacetCrossEncoder:
    if isinstance(model, FacetCrossEncoder):
        return model.on_backend(backend, precision, calibration, work)
    if model is None:
        raise ValueError("a facet model is needed: the path of a FacetCrossEncoder artifact "
                         "(train one with pyterrier_sci.plugins.sciface.train_facet_cross_encoder)")
    return FacetCrossEncoder(model, backend=backend or "torch", precision=precision or "fp32",
                             calibration=calibration, work=work)


class FacetReranker(pt.Transformer):
    """Re-scores a result frame with one SciFACE facet cross-encoder.

    Needs the candidate's ``title`` / ``abstract`` columns and the seed's ``query_title`` /
    ``query_abstract`` (:class:`SeedText` adds them); without seed columns the ``query`` text is
    the seed (no title split).  Sets ``score`` (the raw facet score) and 0-based ``rank``, and keeps
    the score as ``<facet>_score``; other input columns are kept.

    ``backend`` / ``precision`` / ``calibration`` / ``work``: the model's engine (None: an artifact's
    own, else torch fp32; see :class:`FacetCrossEncoder`).
    """

    def __init__(self, model, batch_size: int = 32, title_field: str = "title", abstract_field: str = "abstract",
                 seed_title_field: str = "query_title", seed_abstract_field: str = "query_abstract",
                 verbose: bool = False, backend: Optional[str] = None, precision: Optional[str] = None,
                 calibration=None, work=None):
        self.model = _as_model(model, backend, precision, calibration, work)
        self.backend, self.precision = self.model.backend, self.model.precision
        self.calibration, self.work = self.model.calibration, self.model.work
        self.batch_size = batch_size
        self.title_field = title_field
        self.abstract_field = abstract_field
        self.seed_title_field = seed_title_field
        self.seed_abstract_field = seed_abstract_field
        self.verbose = verbose

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the facet cross-encoder's directory."""
        return [ModelRef(str(self.model.path), type(self.model).__name__, str(self.model.path))]

    @property
    def facet(self) -> str:
        return self.model.facet

    @property
    def score_column(self) -> str:
        return f"{self.facet}_score"

    def _seeds(self, df: pd.DataFrame) -> List[Tuple[str, str]]:
        if self.seed_abstract_field in df.columns:
            titles = df[self.seed_title_field] if self.seed_title_field in df.columns else [""] * len(df)
            return list(zip(titles, df[self.seed_abstract_field]))
        return [("", q) for q in df["query"]]

    def facet_scores(self, df: pd.DataFrame) -> np.ndarray:
        cands = list(zip(df[self.title_field] if self.title_field in df.columns else [""] * len(df),
                         df[self.abstract_field]))
        return self.model.score(self._seeds(df), cands, batch_size=self.batch_size, show_progress_bar=self.verbose)

    def validate_input(self, inp: pd.DataFrame) -> None:
        """``pta.validate.result_frame`` with the columns this re-ranker reads (the seed's abstract, or
        the query, and the candidate's abstract)."""
        if self.seed_abstract_field in inp.columns:
            pta.validate.result_frame(inp, extra_columns=[self.abstract_field])
        else:
            pta.validate.result_frame(inp, extra_columns=["query", self.abstract_field])

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self.validate_input(inp)
        if len(inp) == 0:
            cols = list(inp.columns) + [c for c in ("score", "rank", self.score_column) if c not in inp.columns]
            return pd.DataFrame(columns=cols)
        df = inp.copy()
        s = self.facet_scores(df)
        df[self.score_column] = s
        df["score"] = s
        return rank_by_score(df)

    def __repr__(self) -> str:
        on = "" if self.backend == "torch" else f", backend={self.backend!r}, precision={self.precision!r}"
        return f"FacetReranker({str(self.model.path)!r}, facet={self.facet!r}{on})"

    def _key(self):
        return (self.model, self.title_field, self.abstract_field, self.seed_title_field, self.seed_abstract_field)

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetReranker) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetReranker",) + self._key())


def rank_by_score(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` ranked by ``score`` (0-based ``rank`` per query), sorted as PyTerrier sorts results."""
    df = df.drop(columns=["rank"], errors="ignore")
    return sorted_results(pt.model.add_ranks(df)).reset_index(drop=True)



def __getattr__(name: str):  # PEP 562: moved to .training (which imports this module); the old import path works
    if name == "train_facet_cross_encoder":
        return importlib.import_module(f"{__package__}.training").train_facet_cross_encoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
