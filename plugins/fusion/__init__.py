"""Rank and score fusion: reciprocal rank fusion (the ``rrf`` component) and the fusion family (the ``fuse``
component: CombSUM, CombMNZ, CombMAX, ..., weighted sums and weighted RRF, weights tuned on training queries)."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "rrf": ("rrf_scores", "RRFusion"),
    "fuse": ("METHODS", "NORMS", "WEIGHTED_METHODS", "normalise", "fuse_scores", "Fusion", "Tuning"),
    "tuning": ("tune", "tuned_fusion", "FoldTunedFusion", "official_folds", "weight_grid", "headline_measure"),
    "components": ("rrf_component", "fuse_component"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
