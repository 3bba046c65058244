"""LLM re-rankers and agents (MIR §5.2 and B.4; HLM-Cite §3.3), one ``pt.Transformer`` each.

=======================  ===========================================  ==========================
component                transformer                                  method
=======================  ===========================================  ==========================
``mir_pointwise``        :class:`MIRPointwise`                        MIR pointwise judgement
``mir_agent``            :class:`MIRAgent`                            MIR-Agent (3 steps)
``listwise``             :class:`Listwise`                            RankGPT sliding window
``pairwise_tournament``  :class:`PairwiseTournament`                  MIR B.4 tournament
``hlm_agents``           :class:`HLMAgents`                           HLM-Cite analyzer/decider/guider
=======================  ===========================================  ==========================

All talk to the server through :class:`pyterrier_sci.llm.LLMClient` (settings from the ``llm:``
section of the pipeline config, overridable per component with ``llm={...}``), keep their prompts
in ``templates/`` (package data; pass ``template=`` a name, a path or the text itself), and count
their calls and tokens in ``component.usage``.  See ``docs/llm.md``.
"""
from __future__ import annotations

from pyterrier_sci.llm.trust import pipeline_settings
from pyterrier_sci.registry import MAX_RESULTS, PATH, Param, params

from ._base import LLMReranker, parse_permutation  # noqa: F401
from .exemplars import ExemplarSelector, load_training_set  # noqa: F401
from .hlm import EXAMPLE_FILENAME, HLMAgents, default_keep_top  # noqa: F401
from .listwise import Listwise, PairwiseTournament, swiss_pairs  # noqa: F401
from .pointwise import MIRAgent, MIRPointwise  # noqa: F401

__all__ = ["MIRPointwise", "MIRAgent", "Listwise", "PairwiseTournament", "HLMAgents", "LLMReranker",
           "parse_permutation", "mir_pointwise_component", "mir_agent_component", "listwise_component",
           "pairwise_tournament_component", "hlm_agents_component"]


_TOKENS = Param(int, min=1, max=1_000_000, optional=True)
#: ranges of the re-rankers' numeric and choice parameters (the types come from their signatures)
_RANGES = {"llm": Param(dict, optional=True), "on_error": Param(str, choices=("raise", "flag")),
           "num_shots": Param(int, min=0, max=100), "per_label": Param(int, min=1, max=100),
           "relevance_threshold": Param(int, min=0, max=10), "window": Param(int, min=2, max=1000),
           "stride": Param(int, min=1, max=1000), "passes": Param(int, min=1, max=100), "rounds": Param(int, min=1, max=100),
           "keep_top": Param(int, min=0, max=MAX_RESULTS), "example_path": Param(PATH, optional=True),
           "guider_task": Param(PATH, optional=True)}


def _declare(cls):
    """``@params`` for a factory passing its parameters on to ``cls``."""
    import inspect
    names = inspect.signature(cls.__init__).parameters
    ranges = {k: v for k, v in _RANGES.items() if k in names}
    ranges.update({k: _TOKENS for k in names if k.endswith("_tokens")})
    return params(cls, **ranges)


def _build(cls, inputs, context, params):
    """A component built by the pipeline language: its settings come from the config's ``llm:``
    section and its own ``llm={...}``, confined unless the pipeline is trusted
    (:func:`pyterrier_sci.llm.trust.pipeline_settings`)."""
    llm = pipeline_settings(context, params)
    params.pop("llm", None)
    if len(inputs) > 1:
        raise ValueError(f"{cls.component_name} takes at most one input pipeline")
    t = cls(llm, **params)
    return inputs[0] >> t if inputs else t


@_declare(MIRPointwise)
def mir_pointwise_component(*inputs, context=None, **params):
    """``mir_pointwise``: MIR's pointwise methodological-relevance judge (zero/few-shot)."""
    return _build(MIRPointwise, inputs, context, params)


@_declare(MIRAgent)
def mir_agent_component(*inputs, context=None, **params):
    """``mir_agent``: MIR-Agent - proposal analysis, paper analysis, judgement."""
    return _build(MIRAgent, inputs, context, params)


@_declare(Listwise)
def listwise_component(*inputs, context=None, **params):
    """``listwise``: RankGPT-style sliding-window listwise re-ranking (window 20, stride 10)."""
    return _build(Listwise, inputs, context, params)


@_declare(PairwiseTournament)
def pairwise_tournament_component(*inputs, context=None, **params):
    """``pairwise_tournament``: MIR B.4 tournament of pairwise comparisons over 3 rounds."""
    return _build(PairwiseTournament, inputs, context, params)


@_declare(HLMAgents)
def hlm_agents_component(*inputs, context=None, **params):
    """``hlm_agents``: HLM-Cite's analyzer, decider and guider; the top ``keep_top`` stay in place."""
    if "example_path" not in params and context is not None:
        params["example_path"] = str(context.workdir() / "llm" / EXAMPLE_FILENAME)
    return _build(HLMAgents, inputs, context, params)
