"""SciFACE's re-rankers over a result frame: :class:`FacetReranker` (one facet model, component
``facet_rerank``), :class:`FacetControl` (the controllable weighted sum of the z-normalised
Background and Method scores, ``facet_rerank(weights=...)``) and :class:`SeedText` (the seed
paper's title and abstract from a docstore).  All take the facet models' ``backend`` and
``precision`` (docs/sciface.md, "Backends")."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import dataset_of, irds_id, pt_dataset_id, sorted_results
from pyterrier_sci.models import BACKENDS, PRECISIONS, BackendError, check_backend
from pyterrier_sci.registry import DATASET, PATH, Param, params

from .cross_encoder import FacetCrossEncoder
from .triplets import FACETS

PRESETS: Dict[str, Dict[str, float]] = {
    "same_method_different_problem": {"method": 1.0, "background": -0.5},
    "same_problem_different_method": {"background": 1.0, "method": -0.5},
    "both": {"background": 1.0, "method": 1.0},
    "background": {"background": 1.0, "method": 0.0},
    "method": {"background": 0.0, "method": 1.0},
}


# ----------------------------------------------------------------------------------------------
# transformers
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

    def _validate(self, inp: pd.DataFrame) -> None:
        if self.seed_abstract_field in inp.columns:
            pta.validate.result_frame(inp, extra_columns=[self.abstract_field])
        else:
            pta.validate.result_frame(inp, extra_columns=["query", self.abstract_field])

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            cols = list(inp.columns) + [c for c in ("score", "rank", self.score_column) if c not in inp.columns]
            return pd.DataFrame(columns=cols)
        df = inp.copy()
        s = self.facet_scores(df)
        df[self.score_column] = s
        df["score"] = s
        return _ranked(df)

    def __repr__(self) -> str:
        on = "" if self.backend == "torch" else f", backend={self.backend!r}, precision={self.precision!r}"
        return f"FacetReranker({str(self.model.path)!r}, facet={self.facet!r}{on})"

    def _key(self):
        return (self.model, self.title_field, self.abstract_field, self.seed_title_field, self.seed_abstract_field)

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetReranker) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetReranker",) + self._key())


def _ranked(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=["rank"], errors="ignore")
    return sorted_results(pt.model.add_ranks(df)).reset_index(drop=True)


def _zscore(s: pd.Series, groups: pd.Series) -> pd.Series:
    g = s.groupby(groups)
    sd = g.transform("std", ddof=0).replace(0.0, 1.0).fillna(1.0)
    return (s - g.transform("mean")) / sd


class FacetControl(pt.Transformer):
    """The controllable mode: ``score = sum_f weights[f] * z_f`` where ``z_f`` is facet f's score
    z-normalised within each query (the two models' scales differ; ``normalise="none"`` uses the raw
    scores).  ``weights`` is a dict or a preset name (:data:`PRESETS`, e.g.
    ``"same_method_different_problem"`` = method 1, background -0.5).  Keeps ``background_score``
    and ``method_score`` (raw) as columns.  ``backend`` / ``precision`` / ``calibration`` / ``work``:
    both models' engine (:class:`FacetReranker`)."""

    def __init__(self, background, method, weights: Union[str, Mapping[str, float]] = "both",
                 normalise: str = "zscore", batch_size: int = 32, verbose: bool = False,
                 backend: Optional[str] = None, precision: Optional[str] = None, calibration=None, work=None,
                 **fields):
        engine = dict(backend=backend, precision=precision, calibration=calibration, work=work)

        def reranker(m):
            if not isinstance(m, FacetReranker):
                return FacetReranker(m, batch_size=batch_size, verbose=verbose, **engine, **fields)
            if m.model.on_backend(**engine) is m.model:
                return m
            return FacetReranker(m.model, m.batch_size, m.title_field, m.abstract_field, m.seed_title_field,
                                 m.seed_abstract_field, m.verbose, **engine)
        self.background, self.method = reranker(background), reranker(method)
        if self.background.facet != "background" or self.method.facet != "method":
            raise ValueError(f"FacetControl needs a background and a method model, got "
                             f"{self.background.facet!r} and {self.method.facet!r}")
        if isinstance(weights, str):
            if weights not in PRESETS:
                raise ValueError(f"unknown preset {weights!r}; known: {sorted(PRESETS)}")
            weights = PRESETS[weights]
        unknown = set(weights) - set(FACETS)
        if unknown:
            raise ValueError(f"weights name unknown facets {sorted(unknown)}; facets are {FACETS}")
        if normalise not in ("zscore", "none"):
            raise ValueError("normalise must be 'zscore' or 'none'")
        self.weights = {f: float(weights.get(f, 0.0)) for f in FACETS}
        self.normalise = normalise
        self.batch_size = batch_size
        self.verbose = verbose
        self.backend, self.precision, self.calibration, self.work = backend, precision, calibration, work

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self.background._validate(inp)
        cols = ("score", "rank", "background_score", "method_score")
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in cols if c not in inp.columns])
        df = inp.copy()
        total = np.zeros(len(df))
        for name, rr in (("background", self.background), ("method", self.method)):
            s = pd.Series(rr.facet_scores(df), index=df.index)
            df[f"{name}_score"] = s.to_numpy()
            z = _zscore(s, df["qid"]) if self.normalise == "zscore" else s
            total += self.weights[name] * z.to_numpy()
        df["score"] = total
        return _ranked(df)

    def __repr__(self) -> str:
        return f"FacetControl(weights={self.weights})"

    def _key(self):
        return (self.background, self.method, tuple(sorted(self.weights.items())), self.normalise)

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetControl) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetControl",) + self._key())


class SeedText(pt.Transformer):
    """Adds the seed paper's ``query_title`` and ``query_abstract`` from a dataset's docstore.

    The seed's docno is the ``seed_docno`` column when present, else ``seed_id(qid)`` (default:
    CSFCube's convention, ``"10014168_method"`` -> ``"10014168"``).  Unknown seeds raise."""

    def __init__(self, dataset: str, seed_id=None, title_field: str = "title", abstract_field: str = "abstract"):
        self.dataset = dataset
        self.seed_id = seed_id
        self.title_field = title_field
        self.abstract_field = abstract_field

    def _seed(self, qid: str) -> str:
        return self.seed_id(qid) if self.seed_id is not None else str(qid).rsplit("_", 1)[0]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # a re-ranking step: it reads the results' qid and passes their docno on to the text loader
        pt.validate.result_frame(inp)
        if len(inp) == 0:
            added = [c for c in ("query_title", "query_abstract") if c not in inp.columns]
            return pd.DataFrame(columns=list(inp.columns) + added)
        import ir_datasets
        ds = ir_datasets.load(irds_id(self.dataset))
        ids = inp["seed_docno"] if "seed_docno" in inp.columns else inp["qid"].map(self._seed)
        wanted = sorted(set(map(str, ids)))
        docs = ds.docs_store().get_many(wanted)
        missing = [d for d in wanted if d not in docs]
        if missing:
            raise KeyError(f"seed papers {missing[:5]} are not in {self.dataset}'s corpus")
        df = inp.copy()
        df["query_title"] = [getattr(docs[str(i)], self.title_field, "") for i in ids]
        df["query_abstract"] = [getattr(docs[str(i)], self.abstract_field) for i in ids]
        return df

    def __repr__(self) -> str:
        return f"SeedText({self.dataset!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, SeedText) and (other.dataset, other.seed_id) == (self.dataset, self.seed_id)

    def __hash__(self) -> int:
        return hash(("SeedText", self.dataset))


@params(facet=Param(str, choices=FACETS, optional=True), model=Param(PATH, optional=True),
        background_model=Param(PATH, optional=True), method_model=Param(PATH, optional=True),
        weights=Param(str, dict, item=Param(float, min=-1e6, max=1e6), optional=True),
        dataset=Param(DATASET, optional=True),
        batch_size=Param(int, min=1, max=65536),
        backend=Param(str, choices=BACKENDS), precision=Param(str, choices=PRECISIONS))
def facet_rerank_component(*inputs, context=None, facet: Optional[str] = None, model: Optional[str] = None,
                           background_model: Optional[str] = None, method_model: Optional[str] = None,
                           weights: Union[None, str, Mapping[str, float]] = None, normalise: str = "zscore",
                           dataset: Optional[str] = None, add_text: bool = True, batch_size: int = 32,
                           verbose: bool = False, backend: str = "torch", precision: str = "fp32") -> pt.Transformer:
    """``facet_rerank(facet=method, model=PATH)``: SciFACE facet re-ranking of the input's results.
    ``facet_rerank(weights=same_method_different_problem, background_model=P1, method_model=P2)``:
    the controllable mode.  ``facet`` defaults to ``model``'s own facet (and to ``method`` without
    ``model``); a ``facet`` that differs from the model's is an error.  Without model paths the
    artifacts are looked up under the work directory at ``facet/<facet>``.  With a dataset (the
    pipeline's, or ``dataset=``) and ``add_text``, the seed's and candidates' titles and abstracts are
    added first.  ``backend`` / ``precision``: the models' engine (torch, openvino, onnx; fp32, int8;
    exports cached under the work directory); int8 calibrates on the first pairs of the dataset's
    corpus (:func:`~pyterrier_sci.plugins.sciface.cross_encoder.calibration_pairs`)."""
    check_backend(backend, precision)
    dataset = dataset_of(dataset, context, "facet_rerank", required=False)
    if precision == "int8" and not dataset:
        raise BackendError("facet_rerank(precision='int8') calibrates on (seed, candidate) pairs of the dataset's "
                           "corpus: give the pipeline a dataset, or dataset='irds:...'")
    engine = dict(backend=backend, precision=precision, calibration=dataset if precision == "int8" else None,
                  work=context.workdir() if context is not None else None)

    def default_path(f):
        if context is None:
            raise ValueError(f"facet_rerank needs the {f} model's path (model=... / {f}_model=...)")
        p = Path(context.workdir()) / "facet" / f
        if not p.exists():
            raise FileNotFoundError(f"no {f} facet model at {p}; pass {f}_model=PATH or train one "
                                    "(pyterrier_sci.plugins.sciface.train_facet_cross_encoder)")
        return str(p)

    if weights is None:
        if facet is not None and facet not in FACETS:
            raise ValueError(f"facet must be one of {FACETS}, not {facet!r}")
        want = facet or "method"
        m = model or (method_model if want == "method" else background_model) or default_path(want)
        rr: pt.Transformer = FacetReranker(m, batch_size=batch_size, verbose=verbose, **engine)
        if facet is not None and rr.facet != facet:
            raise ValueError(f"model {m} is a {rr.facet} model, not {facet}")
    else:
        rr = FacetControl(background_model or default_path("background"), method_model or default_path("method"),
                          weights=weights, normalise=normalise, batch_size=batch_size, verbose=verbose, **engine)
    if dataset and add_text:
        ds = pt.get_dataset(pt_dataset_id(dataset))
        rr = SeedText(dataset) >> pt.text.get_text(ds, ["title", "abstract"]) >> rr
    if len(inputs) > 1:
        raise ValueError("facet_rerank takes at most one input pipeline")
    return inputs[0] >> rr if inputs else rr
