"""SciFACE: facet-aware cross-encoders (Background, Method), their training, warm start and
re-rankers (``sciface_rerank``), and the LLM facet labeller (``sciface_label``).  See ``docs/sciface.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "triplets": ("FACETS", "PAIR_COLUMNS", "collapse_method", "facet_scores", "check_pairs", "make_triplets",
                "sample_per_seed", "split_seeds", "csfcube_pairs"),
    "loss": ("MarginRankingLoss",),
    "cross_encoder": ("ARTIFACT_TYPE", "ARTIFACT_FORMAT", "pair_input", "open_cross_encoder", "FacetCrossEncoder",
                      "score_pairs", "calibration_pairs", "FacetReranker"),
    "training": ("train_facet_cross_encoder",),
    "warm_start": ("WarmStartCrossEncoder", "WarmStartSettings", "neighbour_pairs", "LOSSES", "distil_cross_encoder",
                   "distillation_corpus", "warm_start_model"),
    "rerank": ("PRESETS", "FacetControl", "SeedText"),
    "labels": ("OWNED", "parse_facet_label", "FacetLabeller", "gather_candidates", "label_pairs"),
    "components": ("facet_rerank_component", "facet_label_component"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
