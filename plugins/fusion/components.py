"""The fusion plugin's pipeline component: ``rrf`` (reciprocal rank fusion of the input pipelines)."""
from __future__ import annotations

from typing import Optional, Sequence

import pyterrier as pt

from pyterrier_sci.registry import MAX_RESULTS, Param, params

from .rrf import RRFusion

__all__ = ["rrf_component"]


@params(k=Param(float, min=0, max=1e6), weights=Param(list, item=Param(float, min=-1e6, max=1e6), optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS, optional=True), rank_base=Param(int, min=0, max=1))
def rrf_component(*inputs: pt.Transformer, context=None, k: float = 60, weights: Optional[Sequence[float]] = None,
                  num_results: Optional[int] = 1000, rank_base: int = 1) -> RRFusion:
    """``rrf(a, b, ...)``: reciprocal rank fusion of the input pipelines (k=60, 1-based ranks)."""
    if not inputs:
        raise ValueError("rrf needs the pipelines to fuse as arguments, e.g. rrf(bm25, dense)")
    return RRFusion(*inputs, k=k, weights=weights, num_results=num_results, rank_base=rank_base)
