"""SciFACE's pipeline components: ``sciface_rerank`` (a facet model's re-ranking, or the controllable
weighted mode) and ``sciface_label`` (the LLM facet labeller).  See ``docs/sciface.md``."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Union

import pyterrier as pt

from pyterrier_sci.corpus import dataset_of, pt_dataset_id
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.llm.trust import pipeline_settings
from pyterrier_sci.models import BACKENDS, PRECISIONS, BackendError, check_backend
from pyterrier_sci.registry import DATASET, PATH, Param, params

from .cross_encoder import FacetReranker
from .folds import FoldRouted, FoldSettings, csfcube_facet_of, fold_models, transfer_model
from .labels import FacetLabeller
from .rerank import FacetControl, SeedText
from .triplets import FACETS
from .warm_start import CORPORA, LOSSES, WarmStartSettings

__all__ = ["facet_rerank_component", "facet_label_component"]


@params(facet=Param(str, choices=FACETS, optional=True), model=Param(PATH, optional=True),
        background_model=Param(PATH, optional=True), method_model=Param(PATH, optional=True),
        weights=Param(str, dict, item=Param(float, min=-1e6, max=1e6), optional=True),
        dataset=Param(DATASET, optional=True), train_dataset=Param(DATASET, optional=True),
        batch_size=Param(int, min=1, max=65536),
        backend=Param(str, choices=BACKENDS), precision=Param(str, choices=PRECISIONS),
        train=Param(bool), base_model=Param(str, optional=True), epochs=Param(int, min=0, max=1000, optional=True),
        triplets_per_seed=Param(int, min=1, max=1_000_000, optional=True),
        learning_rate=Param(float, min=1e-9, max=1.0, optional=True),
        max_length=Param(int, min=8, max=8192, optional=True), val_seeds=Param(int, min=0, max=1000, optional=True),
        seed=Param(int, min=0, max=2**32 - 1, optional=True), collapse=Param(bool, optional=True),
        warm_loss=Param(str, choices=LOSSES, optional=True), warm_seeds=Param(int, min=1, max=1_000_000, optional=True),
        warm_corpus=Param(str, choices=tuple(CORPORA), optional=True),
        warm_epochs=Param(int, min=1, max=1000, optional=True),
        warm_docs=Param(int, min=2, max=100_000_000, optional=True))
def facet_rerank_component(*inputs, context=None, facet: Optional[str] = None, model: Optional[str] = None,
                           background_model: Optional[str] = None, method_model: Optional[str] = None,
                           weights: Union[None, str, Mapping[str, float]] = None, normalise: str = "zscore",
                           dataset: Optional[str] = None, add_text: bool = True, batch_size: int = 32,
                           verbose: bool = False, backend: str = "torch", precision: str = "fp32",
                           train: bool = False, train_dataset: Optional[str] = None,
                           base_model: Optional[str] = None, epochs: Optional[int] = None,
                           triplets_per_seed: Optional[int] = None, learning_rate: Optional[float] = None,
                           max_length: Optional[int] = None, val_seeds: Optional[int] = None,
                           seed: Optional[int] = None, collapse: Optional[bool] = None,
                           warm_loss: Optional[str] = None, warm_seeds: Optional[int] = None,
                           warm_corpus: Optional[str] = None, warm_epochs: Optional[int] = None,
                           warm_docs: Optional[int] = None) -> pt.Transformer:
    """``sciface_rerank(facet=method, model=PATH)``: SciFACE facet re-ranking of the input's results.
    ``sciface_rerank(weights=same_method_different_problem, background_model=P1, method_model=P2)``:
    the controllable mode.  ``facet`` defaults to ``model``'s own facet (and to ``method`` without
    ``model``); a ``facet`` that differs from the model's is an error.  Without model paths the
    artifacts are looked up under the work directory at ``facet/<facet>``.  With a dataset (the
    pipeline's, or ``dataset=``) and ``add_text``, the seed's and candidates' titles and abstracts are
    added first.  ``backend`` / ``precision``: the models' engine (torch, openvino, onnx; fp32, int8;
    exports cached under the work directory); int8 calibrates on the first pairs of the dataset's
    corpus (:func:`~pyterrier_sci.plugins.sciface.cross_encoder.calibration_pairs`).

    ``train=True`` (on a CSFCube facet dataset, ``irds:sci/csfcube/method`` or ``.../background``): the
    facet's cross-encoders are trained on CSFCube's own judgements, cross-fitted on its official folds
    (:mod:`~pyterrier_sci.plugins.sciface.folds`: each query is re-ranked by the model trained on the other
    fold's test queries), on first use, with ``base_model``, ``epochs``, ``triplets_per_seed``,
    ``learning_rate``, ``max_length``, ``val_seeds``, ``seed`` and ``collapse`` (unset:
    :class:`~pyterrier_sci.plugins.sciface.folds.FoldSettings`' defaults), and kept in the work directory
    keyed by them.  ``warm_loss`` (``mse`` or ``margin_mse``) starts that training from a cross-encoder
    distilled from the MiniLM bi-encoder on unlabelled papers, not from a fresh head (not in SciFACE:
    :func:`~pyterrier_sci.plugins.sciface.warm_start.warm_start_model`), with ``warm_seeds`` (1,000),
    ``warm_corpus`` (``acl``, or ``csfcube`` without its query papers), ``warm_epochs`` (1) and
    ``warm_docs`` (the corpus's first N papers only; all when unset); ``base_model`` and ``max_length``
    are the distillation's too.  ``epochs=0`` with ``warm_loss``: no facet training, the distilled student
    alone re-ranks both folds (it has seen no CSFCube label).

    ``train=True, train_dataset='irds:sci/csfcube/method'`` (or ``.../background``): one cross-encoder of that
    facet trained on all of CSFCube's judgements of it (both folds; the same settings), kept in the work
    directory, re-ranks any other collection (a registered corpus of your own papers, docs/corpora.md); CSFCube's
    own facet queries, which it has seen, are refused (``train=True`` alone cross-fits them)."""
    check_backend(backend, precision)
    dataset = dataset_of(dataset, context, "sciface_rerank", required=False)
    given = dict(base_model=base_model, epochs=epochs, triplets_per_seed=triplets_per_seed,
                 learning_rate=learning_rate, max_length=max_length, val_seeds=val_seeds, seed=seed, collapse=collapse)
    training = {k: v for k, v in given.items() if v is not None}
    warm = {k: v for k, v in dict(loss=warm_loss, seeds=warm_seeds, corpus=warm_corpus, epochs=warm_epochs,
                                  docs=warm_docs).items() if v is not None}
    if warm and warm_loss is None:
        raise ParameterError(f"sciface_rerank: {', '.join('warm_' + k for k in sorted(warm))} need warm_loss "
                             f"(one of {', '.join(LOSSES)})", component="sciface_rerank",
                             param="warm_" + sorted(warm)[0])
    if warm:
        training["warm_start"] = WarmStartSettings(max_length=max_length or FoldSettings.max_length,
                                                   base_model=base_model or FoldSettings.base_model, **warm)
    if epochs == 0 and not warm:
        raise ParameterError("sciface_rerank: epochs=0 re-ranks with the starting model untrained, which only a "
                             "warm start (warm_loss=...) makes a scorer; a fresh head is random",
                             component="sciface_rerank", param="epochs")
    if (training or train_dataset) and not train:
        named = sorted(training) or ["train_dataset"]
        raise ParameterError(f"sciface_rerank: {', '.join(named)} need train=True",
                             component="sciface_rerank", param=named[0])
    engine = dict(backend=backend, precision=precision, calibration=dataset if precision == "int8" else None,
                  work=context.workdir() if context is not None else None)
    if train and train_dataset:
        rr = _transfer_trained(facet, dataset, train_dataset, model, background_model, method_model, weights,
                               training, context, batch_size, verbose, engine)
    elif train:
        rr = _fold_trained(facet, dataset, model, background_model, method_model, weights, training, context,
                           batch_size, verbose, engine)
    else:
        if precision == "int8" and not dataset:
            raise BackendError("sciface_rerank(precision='int8') calibrates on (seed, candidate) pairs of the "
                               "dataset's corpus: give the pipeline a dataset, or dataset='irds:...'")
        rr = _trained_elsewhere(facet, model, background_model, method_model, weights, normalise, context,
                                batch_size, verbose, engine)
    if dataset and add_text:
        ds = pt.get_dataset(pt_dataset_id(dataset))
        rr = SeedText(dataset) >> pt.text.get_text(ds, ["title", "abstract"]) >> rr
    if len(inputs) > 1:
        raise ValueError("sciface_rerank takes at most one input pipeline")
    return inputs[0] >> rr if inputs else rr


def _default_model_path(context, facet: str) -> str:
    """The facet model under the work directory (``facet/<facet>``), for a pipeline that names none."""
    if context is None:
        raise ValueError(f"sciface_rerank needs the {facet} model's path (model=... / {facet}_model=...)")
    p = Path(context.workdir()) / "facet" / facet
    if not p.exists():
        raise FileNotFoundError(f"no {facet} facet model at {p}; pass {facet}_model=PATH or train one "
                                "(pyterrier_sci.plugins.sciface.train_facet_cross_encoder)")
    return str(p)


def _trained_elsewhere(facet, model, background_model, method_model, weights, normalise, context, batch_size,
                       verbose, engine) -> pt.Transformer:
    """``sciface_rerank`` over given (or work-directory) models: one facet's re-ranker, or with ``weights`` the
    controllable mode over both facets."""
    if weights is not None:
        return FacetControl(background_model or _default_model_path(context, "background"),
                            method_model or _default_model_path(context, "method"), weights=weights,
                            normalise=normalise, batch_size=batch_size, verbose=verbose, **engine)
    if facet is not None and facet not in FACETS:
        raise ValueError(f"facet must be one of {FACETS}, not {facet!r}")
    want = facet or "method"
    m = model or (method_model if want == "method" else background_model) or _default_model_path(context, want)
    rr = FacetReranker(m, batch_size=batch_size, verbose=verbose, **engine)
    if facet is not None and rr.facet != facet:
        raise ValueError(f"model {m} is a {rr.facet} model, not {facet}")
    return rr


def _no_models_given(model, background_model, method_model, weights) -> None:
    given = [n for n, v in (("model", model), ("background_model", background_model),
                            ("method_model", method_model), ("weights", weights)) if v is not None]
    if given:
        raise ParameterError(f"sciface_rerank(train=True) trains its own models: {', '.join(given)} cannot be "
                             "given with it", component="sciface_rerank", param=given[0])


def _transfer_trained(facet, dataset, train_dataset, model, background_model, method_model, weights, training,
                      context, batch_size, verbose, engine) -> pt.Transformer:
    """``sciface_rerank(train=True, train_dataset=CSFCube facet)``: the facet's model trained on all of CSFCube's
    judgements of it, re-ranking another collection."""
    own = csfcube_facet_of(train_dataset)
    if own is None:
        raise ParameterError(f"sciface_rerank(train_dataset=...) trains on a CSFCube facet's judgements "
                             f"(irds:sci/csfcube/method or .../background), not {train_dataset}",
                             component="sciface_rerank", param="train_dataset")
    if facet is not None and facet != own:
        raise ParameterError(f"sciface_rerank: facet={facet!r} with train_dataset={train_dataset}, whose "
                             f"judgements are {own} judgements", component="sciface_rerank", param="facet")
    if csfcube_facet_of(dataset) is not None:
        raise ParameterError(f"sciface_rerank(train_dataset={train_dataset}) is trained on every CSFCube "
                             f"{own} query, so it cannot re-rank {dataset}'s queries; train=True without "
                             "train_dataset cross-fits them on the official folds",
                             component="sciface_rerank", param="train_dataset")
    _no_models_given(model, background_model, method_model, weights)
    settings = FoldSettings(facet=own, **training)
    return FacetReranker(transfer_model(settings, engine["work"], verbose=verbose), batch_size=batch_size,
                         verbose=verbose, **engine)


def _fold_trained(facet, dataset, model, background_model, method_model, weights, training, context, batch_size,
                  verbose, engine) -> pt.Transformer:
    """``sciface_rerank(train=True)``: the fold models of the dataset's facet, each query routed to the one
    trained on the other fold."""
    own = csfcube_facet_of(dataset)
    if own is None:
        raise ParameterError(f"sciface_rerank(train=True) trains on CSFCube's folds and re-ranks a CSFCube facet "
                             f"dataset (irds:sci/csfcube/method or .../background), not {dataset or 'no dataset'}",
                             component="sciface_rerank", param="train")
    if facet is not None and facet != own:
        raise ParameterError(f"sciface_rerank: facet={facet!r} on {dataset}, whose queries are {own} queries",
                             component="sciface_rerank", param="facet")
    _no_models_given(model, background_model, method_model, weights)
    settings = FoldSettings(facet=own, **training)
    models = fold_models(settings, engine["work"], verbose=verbose)
    return FoldRouted({fold: FacetReranker(m, batch_size=batch_size, verbose=verbose, **engine)
                       for fold, m in models.items()})


@params(FacetLabeller, llm=Param(dict, optional=True), on_error=Param(str, choices=("raise", "flag")),
        max_abstract_tokens=Param(int, min=1, max=1_000_000), max_tokens=Param(int, min=1, max=1_000_000))
def facet_label_component(*inputs, context=None, llm: Optional[dict] = None, **params) -> pt.Transformer:
    """``sciface_label``: LLM facet labels (SciFACE) of the input's (seed, candidate) rows; the
    ``llm`` section of the config is the client's settings (a component's ``llm=`` overrides)."""
    t = FacetLabeller(llm=pipeline_settings(context, {"llm": llm}), **params)
    if len(inputs) > 1:
        raise ValueError("sciface_label takes at most one input pipeline")
    return inputs[0] >> t if inputs else t
