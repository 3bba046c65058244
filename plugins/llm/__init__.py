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

from ._base import LLMReranker, parse_permutation  # noqa: F401
from .exemplars import ExemplarSelector, load_training_set  # noqa: F401
from .hlm import EXAMPLE_FILENAME, HLMAgents, default_keep_top  # noqa: F401
from .listwise import Listwise, PairwiseTournament, swiss_pairs  # noqa: F401
from .pointwise import MIRAgent, MIRPointwise  # noqa: F401

__all__ = ["MIRPointwise", "MIRAgent", "Listwise", "PairwiseTournament", "HLMAgents", "LLMReranker",
           "parse_permutation", "mir_pointwise_component", "mir_agent_component", "listwise_component",
           "pairwise_tournament_component", "hlm_agents_component"]


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


def mir_pointwise_component(*inputs, context=None, **params):
    """``mir_pointwise``: MIR's pointwise methodological-relevance judge (zero/few-shot)."""
    return _build(MIRPointwise, inputs, context, params)


def mir_agent_component(*inputs, context=None, **params):
    """``mir_agent``: MIR-Agent - proposal analysis, paper analysis, judgement."""
    return _build(MIRAgent, inputs, context, params)


def listwise_component(*inputs, context=None, **params):
    """``listwise``: RankGPT-style sliding-window listwise re-ranking (window 20, stride 10)."""
    return _build(Listwise, inputs, context, params)


def pairwise_tournament_component(*inputs, context=None, **params):
    """``pairwise_tournament``: MIR B.4 tournament of pairwise comparisons over 3 rounds."""
    return _build(PairwiseTournament, inputs, context, params)


def hlm_agents_component(*inputs, context=None, **params):
    """``hlm_agents``: HLM-Cite's analyzer, decider and guider; the top ``keep_top`` stay in place."""
    if "example_path" not in params and context is not None:
        params["example_path"] = str(context.workdir() / "llm" / EXAMPLE_FILENAME)
    return _build(HLMAgents, inputs, context, params)
