"""SciFACE's re-rankers over a result frame: :class:`FacetControl` (the controllable weighted sum of
the z-normalised Background and Method scores, ``sciface_rerank(weights=...)``) and :class:`SeedText`
(the seed paper's title and abstract from a docstore); :class:`FacetReranker` (one facet model) is
the scorer a :class:`~.cross_encoder.FacetCrossEncoder` hands out and lives beside it.  All take the
facet models' ``backend`` and ``precision`` (docs/sciface.md, "Backends"); the ``sciface_rerank``
component is built in :mod:`.components`."""
from __future__ import annotations

import importlib
from typing import Dict, Mapping, Optional, Union

import ir_datasets
import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci.corpus import irds_id

from .cross_encoder import FacetReranker, rank_by_score  # noqa: F401  (FacetReranker: re-exported)
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
        self.background.validate_input(inp)
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
        return rank_by_score(df)

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

    The seed's docno is the ``seed_docno`` column when present, else ``seed_id(qid)``; by default the
    ``qid`` itself when the corpus holds a paper of that docno (a collection of your own whose topics are
    its papers), else CSFCube's convention (``"10014168_method"`` -> ``"10014168"``).  Unknown seeds raise."""

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
        ds = ir_datasets.load(irds_id(self.dataset))
        store = ds.docs_store()
        if "seed_docno" in inp.columns:
            ids = inp["seed_docno"]
        elif self.seed_id is not None:
            ids = inp["qid"].map(self.seed_id)
        else:   # the qid when it is a paper of the corpus, else CSFCube's convention
            qids = sorted(set(map(str, inp["qid"])))
            held = store.get_many(qids)
            ids = inp["qid"].map(lambda q: str(q) if str(q) in held else self._seed(q))
        wanted = sorted(set(map(str, ids)))
        docs = store.get_many(wanted)
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


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "facet_rerank_component":
        return importlib.import_module(f"{__package__}.components").facet_rerank_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
