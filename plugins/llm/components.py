"""The pipeline components of the generic LLM re-rankers (``listwise``, ``pairwise_tournament``) and
the two helpers every LLM component factory uses (:func:`declare_llm_params`,
:func:`build_llm_component`).  See ``docs/llm.md``.
"""
from __future__ import annotations

import inspect

from pyterrier_sci.llm.trust import pipeline_settings
from pyterrier_sci.registry import Param, params

from .listwise import Listwise, PairwiseTournament

__all__ = ["declare_llm_params", "build_llm_component", "listwise_component", "pairwise_tournament_component"]


_TOKENS = Param(int, min=1, max=1_000_000, optional=True)
#: ranges of the parameters every LLM re-ranker may take (the types come from their signatures); a
#: paper's own parameters are declared by its plugin (``declare_llm_params(cls, name=Param(...))``)
_RANGES = {"llm": Param(dict, optional=True), "on_error": Param(str, choices=("raise", "flag")),
           "window": Param(int, min=2, max=1000), "stride": Param(int, min=1, max=1000),
           "passes": Param(int, min=1, max=100), "rounds": Param(int, min=1, max=100)}


def declare_llm_params(cls, **ranges: Param):
    """``@params`` for a factory passing its parameters on to ``cls``: the generic re-rankers' ranges
    (``window``, ``on_error``, ..., every ``*_tokens`` a positive count) for the parameters ``cls`` takes, and
    ``ranges``, the ranges of ``cls``'s own parameters (a name ``cls`` does not take is an error)."""
    names = inspect.signature(cls.__init__).parameters
    unknown = sorted(set(ranges) - set(names))
    if unknown:
        raise TypeError(f"declare_llm_params: {cls.__name__} takes no parameter {', '.join(unknown)}")
    declared = {k: v for k, v in _RANGES.items() if k in names}
    declared.update({k: _TOKENS for k in names if k.endswith("_tokens")})
    declared.update(ranges)
    return params(cls, **declared)


def build_llm_component(cls, inputs, context, params):
    """A component built by the pipeline language: its settings come from the config's ``llm:``
    section and its own ``llm={...}``, confined unless the pipeline is trusted
    (:func:`pyterrier_sci.llm.trust.pipeline_settings`)."""
    llm = pipeline_settings(context, params)
    params.pop("llm", None)
    if len(inputs) > 1:
        raise ValueError(f"{cls.component_name} takes at most one input pipeline")
    t = cls(llm, **params)
    return inputs[0] >> t if inputs else t


@declare_llm_params(Listwise)
def listwise_component(*inputs, context=None, **params):
    """``listwise``: RankGPT-style sliding-window listwise re-ranking (window 20, stride 10)."""
    return build_llm_component(Listwise, inputs, context, params)


@declare_llm_params(PairwiseTournament)
def pairwise_tournament_component(*inputs, context=None, **params):
    """``pairwise_tournament``: MIR B.4 tournament of pairwise comparisons over 3 rounds."""
    return build_llm_component(PairwiseTournament, inputs, context, params)
