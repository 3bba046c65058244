"""SciFACE: facet-aware cross-encoders (Background, Method), their training, warm start and
re-rankers (``facet_rerank``), and the LLM facet labeller (``facet_label``).  See ``docs/sciface.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "triplets": ("FACETS", "PAIR_COLUMNS", "collapse_method", "facet_scores", "check_pairs", "make_triplets",
                "sample_per_seed", "split_seeds", "csfcube_pairs"),
    "loss": ("MarginRankingLoss",),
    "cross_encoder": ("ARTIFACT_TYPE", "ARTIFACT_FORMAT", "pair_input", "FacetCrossEncoder", "score_pairs",
                     "train_facet_cross_encoder"),
    "warm_start": ("WarmStartCrossEncoder", "neighbour_pairs", "LOSSES", "distil_cross_encoder"),
    "rerank": ("PRESETS", "FacetReranker", "FacetControl", "SeedText", "facet_rerank_component"),
    "labels": ("OWNED", "parse_facet_label", "FacetLabeller", "gather_candidates", "label_pairs",
              "facet_label_component"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
