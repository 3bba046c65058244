"""Generic LLM re-rankers (RankGPT-style listwise, the pairwise tournament, setwise, the pointwise base)
and the helpers every LLM component factory uses.  See ``docs/llm.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "base": ("ON_ERROR", "DEFAULT_TEXT_FIELD", "TEXT_FALLBACK", "Failed", "LLMReranker", "order_relevant_first",
            "parse_permutation", "is_repaired"),
    "pointwise": ("DEFAULT_ANSWER_TEMPLATES", "JUDGEMENT_COLUMNS", "PointwiseJudge"),
    "listwise": ("Listwise", "swiss_pairs", "PairwiseTournament"),
    "setwise": ("Setwise", "LABELS", "METHODS", "STAND_IN", "setwise_order", "max_calls", "setwise_component"),
    "components": ("declare_llm_params", "build_llm_component", "listwise_component", "pairwise_tournament_component"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
