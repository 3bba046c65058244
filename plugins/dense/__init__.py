"""Dense bi-encoder retrieval with sentence-transformers models on pyterrier_dr (the ``dense``
component), model loading and the fine-tuned model artifact, and the NeuralNDCG loss."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "models": ("DEFAULT_MODEL", "ModelNotFoundError", "resolve_model", "load_sentence_transformer", "model_slug",
              "ARTIFACT_TYPE", "ARTIFACT_FORMAT", "LEGACY_TRAINING_FILES", "SentenceTransformerModel"),
    "retriever": ("DenseRetriever", "dense_component"),
    "backends": ("BACKENDS", "PRECISIONS", "BackendError", "check_backend", "INT8_MIN_COSINE", "CALIBRATION_SIZE",
                 "Calibration", "calibration_from_corpus", "calibration_from_texts", "encoder_path", "load_encoder",
                 "ExportedEncoder"),
    "fanout": ("ShardedDenseIndex", "write_sharded_flex"),
    "ann": ("ANN_METHODS", "ANN_DEFAULTS", "check_ann", "ann_index"),
    "sharded": ("ShardedIndexError", "build_sharded_index", "default_index_path", "shard_bounds", "add_index_commands"),
    "neural_ndcg": ("PADDED", "neural_sort", "sinkhorn", "ndcg", "neural_ndcg_loss"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
