"""Rank fusion: reciprocal rank fusion (the ``rrf`` component)."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "rrf": ("rrf_scores", "RRFusion"),
    "components": ("rrf_component",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
