"""SciFACE's facet cross-encoders trained on CSFCube's own judgements, cross-fitted on its official folds:
``sciface_rerank(facet=method, train=True)``.

SciFACE trains its cross-encoders on 5,891 GPT-4o-mini-labelled pairs that are not released.  Offline the
only graded facet labels are CSFCube's adjudicated judgements, which are also the test set; so the model
that re-ranks fold *k*'s test queries is trained on the other fold's test queries only
(:data:`FOLDS`), ``val_seeds`` of those seeds held out for the per-epoch validation Spearman, and
:class:`FoldRouted` sends each query to the model that never saw it.  No query is in both the training and
the test side of any model.  Each fold's model is trained on first use
(:func:`~.training.train_facet_cross_encoder`: the paper's triplets, margin ranking loss, AdamW with
warm-up) and kept in the work directory, keyed by its settings (:func:`fold_model_path`).  With a
``warm_start`` (:class:`~.warm_start.WarmStartSettings`) the fold training starts from a cross-encoder
distilled from the MiniLM bi-encoder on unlabelled papers (:func:`~.warm_start.warm_start_model`, built once
and shared by both folds and facets).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

import pyterrier as pt

from pyterrier_sci.datasets import csfcube
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.registry import irds_id
from pyterrier_sci.training import FoldRouting, about_to_train, settings_key, trained_model_dir

from .cross_encoder import FacetCrossEncoder
from .training import train_facet_cross_encoder
from .triplets import FACETS, csfcube_pairs, split_seeds
from .warm_start import WarmStartSettings, warm_start_model

__all__ = ["FOLDS", "FoldSettings", "csfcube_facet_of", "fold_model_path", "fold_models", "FoldRouted",
           "transfer_model_path", "transfer_model"]

#: CSFCube's official test folds; the model for one is trained on the other's test queries
FOLDS = ("fold1", "fold2")


@dataclass(frozen=True)
class FoldSettings:
    """The training settings of a fold model (the defaults: docs/sciface.md, "CSFCube: the main-table
    structure": the paper's optimisation, 3 epochs, 10 triplets per seed and epoch, 256 word pieces)."""
    facet: str
    base_model: str = "default"
    epochs: int = 3
    triplets_per_seed: int = 10
    learning_rate: float = 2e-5
    max_length: int = 256
    val_seeds: int = 2
    seed: int = 42
    collapse: Optional[bool] = None
    warm_start: Optional[WarmStartSettings] = None

    def __post_init__(self):
        if self.facet not in FACETS:
            raise ValueError(f"facet must be one of {FACETS}, not {self.facet!r}")

    def key(self, train_split: str, legacy: bool = False) -> str:
        d = asdict(self)
        if d["warm_start"] is None:  # the keys of the models trained before warm starts were settings
            del d["warm_start"]
        return settings_key({**d, "train": train_split}, legacy=legacy)


def csfcube_facet_of(dataset: Optional[str]) -> Optional[str]:
    """The facet of a CSFCube facet dataset id (``irds:sci/csfcube/method`` -> ``method``), else None."""
    if not dataset:
        return None
    parts = irds_id(dataset).split("/")
    if len(parts) == 3 and parts[:2] == ["sci", "csfcube"] and parts[2] in FACETS:
        return parts[2]
    return None


def _other(fold: str) -> str:
    return FOLDS[1] if fold == FOLDS[0] else FOLDS[0]


def fold_model_path(fold: str, settings: FoldSettings, work: Union[None, str, Path] = None) -> Path:
    """Where the model that re-ranks ``fold``'s test queries is kept: trained on the other fold's test
    queries, ``<work>/models/sciface/sci__csfcube__<facet>-<other fold>-test-<settings key>``."""
    train = f"{_other(fold)}-test"
    return trained_model_dir("sciface", f"sci/csfcube/{settings.facet}", f"{train}-{settings.key(train)}", work,
                             legacy_key=f"{train}-{settings.key(train, legacy=True)}")


def _train_fold(fold: str, settings: FoldSettings, path: Path, work: Union[None, str, Path],
                verbose: bool) -> FacetCrossEncoder:
    train = f"{_other(fold)}-test"
    pairs = csfcube_pairs([settings.facet], split=train)
    tested = set(csfcube.splits()[settings.facet][f"{fold}_test"])
    leaked = sorted(set(pairs["seed_id"]) & tested)
    if leaked:  # the official folds are disjoint: this guards the data files
        raise ValueError(f"CSFCube's {train} queries include {fold}'s test queries {leaked[:3]}: a damaged split file")
    return _train_on(pairs, settings, path, work, verbose, train)


def _train_on(pairs, settings: FoldSettings, path: Path, work: Union[None, str, Path], verbose: bool,
              train: str) -> FacetCrossEncoder:
    """Trains ``settings``' cross-encoder on CSFCube ``pairs`` into ``path`` (``val_seeds`` of the pairs' query
    papers held out for the per-epoch validation)."""
    n_seeds = pairs["seed_id"].nunique()
    if settings.val_seeds >= n_seeds:
        raise ParameterError(f"sciface_rerank: val_seeds={settings.val_seeds} leaves no training query of the "
                             f"{n_seeds} {settings.facet} queries of {train}", component="sciface_rerank",
                             param="val_seeds")
    split = split_seeds(pairs["seed_id"], val=settings.val_seeds / n_seeds if settings.val_seeds else 0, test=0,
                        seed=settings.seed)
    part = pairs["seed_id"].map(split)
    val = pairs[part == "val"] if settings.val_seeds else None
    base = settings.base_model
    if settings.warm_start is not None:
        base = str(warm_start_model(settings.warm_start, work, verbose=verbose))
    return train_facet_cross_encoder(
        pairs[part == "train"], path, settings.facet, val_pairs=val, base_model=base,
        collapse=settings.collapse, epochs=settings.epochs, triplets_per_seed=settings.triplets_per_seed,
        learning_rate=settings.learning_rate, max_length=settings.max_length, seed=settings.seed, verbose=verbose)


def transfer_model_path(settings: FoldSettings, work: Union[None, str, Path] = None) -> Path:
    """Where the facet's cross-encoder trained on every CSFCube query of the facet (both folds) is kept:
    ``<work>/models/sciface/sci__csfcube__<facet>-all-<settings key>``."""
    return trained_model_dir("sciface", f"sci/csfcube/{settings.facet}", f"all-{settings.key('all')}", work)


def transfer_model(settings: FoldSettings, work: Union[None, str, Path] = None,
                   verbose: bool = False) -> FacetCrossEncoder:
    """The facet's cross-encoder trained on all of CSFCube's judgements of the facet, for re-ranking another
    collection (``sciface_rerank(train=True, train_dataset='irds:sci/csfcube/method')``): trained on first use
    (atomically, under the model's lock) and read back afterwards.  It has seen every CSFCube query of the
    facet, so it never re-ranks CSFCube's own facet queries (the folds' models do)."""
    path = transfer_model_path(settings, work)
    if (path / "pt_meta.json").exists():
        return FacetCrossEncoder(path)
    about_to_train(path, f"the SciFACE {settings.facet} cross-encoder on all CSFCube {settings.facet} queries")
    if verbose:
        print(f"sciface_rerank: training the {settings.facet} cross-encoder on all of CSFCube's "
              f"{settings.facet} queries into {path} (once)", flush=True)
    try:
        return _train_on(csfcube_pairs([settings.facet]), settings, path, work, verbose, "CSFCube")
    except FileExistsError:  # another process finished it between the check and the build
        return FacetCrossEncoder(path)


def fold_models(settings: FoldSettings, work: Union[None, str, Path] = None,
                verbose: bool = False) -> Dict[str, FacetCrossEncoder]:
    """``{fold: the model that re-ranks its test queries}``, each trained on first use (atomically, under
    the model's lock: a second process waits and reuses it) and read back afterwards."""
    out = {}
    for fold in FOLDS:
        path = fold_model_path(fold, settings, work)
        if (path / "pt_meta.json").exists():
            out[fold] = FacetCrossEncoder(path)
            continue
        about_to_train(path, f"the SciFACE {settings.facet} cross-encoder for {fold}")
        if verbose:
            print(f"sciface_rerank: training the {settings.facet} cross-encoder for {fold}'s test queries on "
                  f"{_other(fold)}'s into {path} (once)", flush=True)
        try:
            out[fold] = _train_fold(fold, settings, path, work, verbose)
        except FileExistsError:  # another process finished it between the check and the build
            out[fold] = FacetCrossEncoder(path)
    return out


class FoldRouted(FoldRouting, pt.Transformer):
    """Re-ranks each query with the transformer of its CSFCube test fold (``{fold: transformer}``): a
    query that is in no test fold is one :class:`ValueError` naming it (no model is known never to have
    seen it)."""

    def __init__(self, by_fold: Mapping[str, pt.Transformer]):
        self.by_fold = {fold: by_fold[fold] for fold in FOLDS if fold in by_fold}   # results joined fold by fold
        self.by_fold.update(by_fold)

    def fold_of(self, qid: str) -> Optional[str]:
        return csfcube.test_fold_of(qid)

    def unknown_message(self, unknown) -> str:
        return (f"sciface_rerank(train=True): {len(unknown)} query id(s) are in no CSFCube test fold "
                f"(e.g. {unknown[:3]}): each query is re-ranked by the model trained on the other "
                "fold, so only CSFCube's facet queries can be")

    def __repr__(self) -> str:
        return "FoldRouted(" + ", ".join(f"{f}={t!r}" for f, t in self.by_fold.items()) + ")"
