"""ColBERT late interaction with a PLAID index (colbert-ai, run in a worker process): the
``colbert`` component and the ``multi_vector_index.plaid`` artifact."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "plaid": ("ColBERTIndex", "ColBERTIndexer", "ColBERTRetriever", "build_checkpoint", "resolve_checkpoint",
              "ColBERTError", "ColBERTTimeoutError", "ColBERTWorkerError", "CheckpointNotFoundError", "COLBERTV2",
              "DEFAULT_CHECKPOINT"),
    "components": ("colbert_component",),
    "checkpoint": ("PROVENANCE_FILE", "default_checkpoint_path", "is_default", "checkpoint_slug"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
