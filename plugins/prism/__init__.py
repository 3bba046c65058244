"""PRISM: aspect queries from LLM agents, chunked full-text retrieval, chunk-to-paper aggregation
and aspect fusion (``prism`` and its parts).  See ``docs/prism.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "components": ("prism_pipeline", "paper_fields_component", "query_field_component", "prism_sections_component",
                  "prism_agents_component", "prism_single_agent_component", "chunks_to_papers_component",
                  "exclude_query_paper_component", "aspect_fusion_component", "prism_component"),
    "aggregate": ("AGGREGATIONS", "FUSIONS", "ChunkToPaper", "ExcludeQueryPaper", "AspectScoreFusion"),
    "optimisers": ("ASPECTS", "ASPECT_COLUMNS", "ASPECT_NAMES", "FALLBACK_COLUMN", "PAPER_FIELDS", "PaperFields",
                  "PAPER_COLUMNS", "QueryField", "normalise_sections", "classify_sections", "CONSUMED",
                  "AspectOptimiser", "SectionAspectQueries", "clean_answer", "AspectAgents", "SINGLE_AGENT_KEYS",
                  "parse_single_agent", "SingleAgent"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
