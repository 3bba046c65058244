"""The fusion plugin's pipeline components: ``rrf`` (reciprocal rank fusion of the input pipelines) and ``fuse``
(the fusion family: CombSUM, CombMNZ, CombMAX, ..., weighted sums and weighted RRF, with ranx's normalisations and
weights tuned on training queries)."""
from __future__ import annotations

from typing import Optional, Sequence

import pyterrier as pt

from pyterrier_sci.errors import ParameterError
from pyterrier_sci.registry import MAX_RESULTS, Param, params

from .fuse import METHODS, NORMS, WEIGHTED_METHODS, Fusion
from .rrf import RRFusion
from .tuning import DEFAULT_KS, OTHER_FOLD, tuned_fusion, weight_grid

__all__ = ["rrf_component", "fuse_component"]


@params(k=Param(float, min=0, max=1e6), weights=Param(list, item=Param(float, min=-1e6, max=1e6), optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS, optional=True), rank_base=Param(int, min=0, max=1))
def rrf_component(*inputs: pt.Transformer, context=None, k: float = 60, weights: Optional[Sequence[float]] = None,
                  num_results: Optional[int] = 1000, rank_base: int = 1) -> RRFusion:
    """``rrf(a, b, ...)``: reciprocal rank fusion of the input pipelines (k=60, 1-based ranks)."""
    if not inputs:
        raise ValueError("rrf needs the pipelines to fuse as arguments, e.g. rrf(bm25, dense)")
    return RRFusion(*inputs, k=k, weights=weights, num_results=num_results, rank_base=rank_base)


def _fail(message: str, param: str) -> ParameterError:
    return ParameterError(f"component 'fuse': {message}", component="fuse", param=param)


@params(method=Param(str, choices=METHODS), norm=Param(str, choices=NORMS, optional=True,
                                                        note="None: minmax, or none for rrf"),
        weights=Param(list, item=Param(float, min=0, max=1e6), optional=True, min_len=1, max_len=100),
        k=Param(float, min=0, max=1e6, optional=True, note="None: 60, or tuned with tune_on"),
        tune_on=Param(str, optional=True, max_len=1000, note=f"'{OTHER_FOLD}' or the dataset id of training queries"),
        tune_measure=Param(str, optional=True, max_len=200, note="None: the dataset's headline measure"),
        tune_step=Param(float, min=0.01, max=1),
        tune_k=Param(list, item=Param(float, min=0, max=1e6), min_len=1, max_len=1000, optional=True,
                     note="None: 10, 20, ..., 100"),
        num_results=Param(int, min=1, max=MAX_RESULTS, optional=True))
def fuse_component(*inputs: pt.Transformer, context=None, method: str = "combsum", norm: Optional[str] = None,
                   weights: Optional[Sequence[float]] = None, k: Optional[float] = None,
                   tune_on: Optional[str] = None, tune_measure: Optional[str] = None, tune_step: float = 0.1,
                   tune_k: Optional[Sequence[float]] = None, num_results: Optional[int] = 1000) -> pt.Transformer:
    """``fuse(a, b, ..., method=..., norm=..., weights=...)``: score fusion of the input pipelines (CombSUM,
    CombMNZ, CombMAX, CombMIN, CombMED, CombANZ, weighted sum, weighted RRF) after per-query min-max, z-score,
    rank, sum or max normalisation, as ranx defines them; ``tune_on='other-fold'`` or a training dataset id tunes
    the weights (and RRF's k) on queries other than those it scores (docs/fusion.md)."""
    if not inputs:
        raise _fail("give the pipelines to fuse as arguments, e.g. fuse(pool >> bm25, pool >> dense)", "inputs")
    if k is not None and method != "rrf":
        raise _fail(f"k is RRF's constant: method {method!r} does not use it", "k")
    if method == "rrf" and norm not in (None, "none"):
        raise _fail(f"rrf fuses ranks: norm={norm!r} does not apply (leave norm out)", "norm")
    if weights is not None:
        if method not in WEIGHTED_METHODS:
            raise _fail(f"method {method!r} takes no weights (weighted methods: {', '.join(WEIGHTED_METHODS)})",
                        "weights")
        if len(weights) != len(inputs):
            raise _fail(f"{len(inputs)} pipelines to fuse but {len(weights)} weights", "weights")
        if not any(weights):
            raise _fail("the weights are all 0", "weights")
        if tune_on is not None:
            raise _fail("weights are either given or tuned: drop weights= or tune_on=", "weights")
    if tune_on is None:
        for name, value, default in (("tune_measure", tune_measure, None), ("tune_k", tune_k, None),
                                     ("tune_step", tune_step, 0.1)):
            if value != default:
                raise _fail(f"{name} applies only with tune_on", name)
        return Fusion(*inputs, method=method, norm=norm, weights=weights, k=60 if k is None else k,
                      num_results=num_results)
    try:
        weight_grid(1, tune_step)
    except ValueError as e:
        raise _fail(str(e), "tune_step") from None
    if tune_k is not None and (method != "rrf" or k is not None):
        raise _fail("tune_k applies only to method='rrf' without a fixed k", "tune_k")
    dataset = context.dataset if context is not None else None
    return tuned_fusion(*inputs, method=method, norm=norm, k=k, tune_on=tune_on, tune_measure=tune_measure,
                        tune_step=tune_step, tune_k=tune_k or DEFAULT_KS, num_results=num_results, dataset=dataset)
