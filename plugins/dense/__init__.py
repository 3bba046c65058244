"""Dense bi-encoder retrieval with sentence-transformers models on pyterrier_dr (the ``dense`` component),
split as pyterrier_dr splits it (docs/dense.md, "Module layout"):

- encoders: :mod:`.engines` (the registry of :mod:`.torch_engine`, :mod:`.openvino_engine`,
  :mod:`.onnx_engine`), :mod:`.calibration`, :mod:`.exports`, :mod:`.encoders`, :mod:`.cross_encoders`
  (:mod:`.backends` re-exports them), :mod:`.encoding`;
- indexes: :mod:`.index_meta` (what an index records about its encoder), :mod:`.search` (exact search),
  :mod:`.ann`, :mod:`.flat`, :mod:`.shards` (the sharded format), :mod:`.fanout` (reading and searching it),
  :mod:`.sharded` (building it on Ray);
- retrieval: :mod:`.retriever` (``DenseRetriever``), :mod:`.components` (``dense``), :mod:`.models` (the
  fine-tuned model artifact), and the NeuralNDCG loss (:mod:`.neural_ndcg`).
"""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "models": ("DEFAULT_MODEL", "ModelNotFoundError", "resolve_model", "load_sentence_transformer", "model_slug",
               "ARTIFACT_TYPE", "ARTIFACT_FORMAT", "SentenceTransformerModel"),
    "retriever": ("DenseRetriever",),
    "components": ("dense_component",),
    "backends": ("BACKENDS", "PRECISIONS", "BackendError", "check_backend"),
    "engines": ("ENGINES", "engine_for"),
    "calibration": ("CALIBRATION_SIZE", "Calibration", "RecordedCalibration", "calibration_from_corpus",
                    "calibration_from_texts", "calibration_from_pairs"),
    "encoders": ("INT8_MIN_COSINE", "encoder_path", "load_encoder", "ExportedEncoder"),
    "cross_encoders": ("load_cross_encoder", "ExportedCrossEncoder"),
    "index_meta": ("IndexSettingsError", "IndexRecord", "describe_index"),
    "fanout": ("ShardedDenseIndex", "write_sharded_flex"),
    "shards": ("ShardedIndexError", "shard_bounds", "is_sharded"),
    "ann": ("ANN_METHODS", "ANN_DEFAULTS", "check_ann", "ann_index"),
    "sharded": ("build_sharded_index", "default_index_path", "add_index_commands"),
    "neural_ndcg": ("PADDED", "neural_sort", "sinkhorn", "ndcg", "neural_ndcg_loss"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
