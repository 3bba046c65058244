"""MIR's pipeline components: ``mir_dense`` (the fine-tuned retriever), ``mir_pointwise`` and
``mir_agent`` (the LLM judges of MIR §5.2)."""
from __future__ import annotations

from pyterrier_sci.plugins.llm.components import build_llm_component, declare_llm_params
from pyterrier_sci.registry import Param

from .judges import MIRAgent, MIRPointwise
from .training import mir_dense_component

__all__ = ["mir_dense_component", "mir_pointwise_component", "mir_agent_component"]


@declare_llm_params(MIRPointwise, num_shots=Param(int, min=0, max=100), per_label=Param(int, min=1, max=100),
                    relevance_threshold=Param(int, min=0, max=10))
def mir_pointwise_component(*inputs, context=None, **params):
    """``mir_pointwise``: MIR's pointwise methodological-relevance judge (zero/few-shot)."""
    return build_llm_component(MIRPointwise, inputs, context, params)


@declare_llm_params(MIRAgent)
def mir_agent_component(*inputs, context=None, **params):
    """``mir_agent``: MIR-Agent - proposal analysis, paper analysis, judgement."""
    return build_llm_component(MIRAgent, inputs, context, params)
