"""HLM-Cite's pipeline component: ``hlm_agents`` (the analyzer, decider and guider of §3.3)."""
from __future__ import annotations

from pyterrier_sci.plugins.llm.components import build_llm_component, declare_llm_params
from pyterrier_sci.registry import MAX_RESULTS, PATH, Param

from .agents import EXAMPLE_FILENAME, HLMAgents

__all__ = ["hlm_agents_component"]


@declare_llm_params(HLMAgents, keep_top=Param(int, min=0, max=MAX_RESULTS), example_path=Param(PATH, optional=True),
                    guider_task=Param(PATH, optional=True))
def hlm_agents_component(*inputs, context=None, **params):
    """``hlm_agents``: HLM-Cite's analyzer, decider and guider; the top ``keep_top`` stay in place."""
    if "example_path" not in params and context is not None:
        params["example_path"] = str(context.workdir() / "llm" / EXAMPLE_FILENAME)
    return build_llm_component(HLMAgents, inputs, context, params)
