"""Encoder backends and precisions, in one place: the public names of the encoder modules, re-exported
(the import path ``pyterrier_sci.plugins.dense.backends`` that pipelines, plugins and docs use).

- :mod:`.engines`: the registry of engines (:mod:`.torch_engine`, :mod:`.openvino_engine`,
  :mod:`.onnx_engine`, each an :class:`~.engine.Engine`);
- :mod:`.calibration`: what int8 calibrates on;
- :mod:`.exports`: the export cache and the compiled engines of a process;
- :mod:`.encoders`: bi-encoders (:func:`load_encoder`, :class:`ExportedEncoder`);
- :mod:`.cross_encoders`: cross-encoders (:func:`load_cross_encoder`, :class:`ExportedCrossEncoder`).
"""
from pyterrier_sci.models import BACKENDS, PRECISIONS, BackendError, check_backend

from .calibration import (
    CALIBRATION_SIZE,
    Calibration,
    RecordedCalibration,
    calibration_from_corpus,
    calibration_from_pairs,
    calibration_from_texts,
)
from .cross_encoders import (
    CE_EXPORT_VERSION,
    CE_FP32_RTOL,
    CE_INT8_MIN_PEARSON,
    CHECK_PAIRS,
    CROSS_ENCODER_TYPE,
    ExportedCrossEncoder,
    load_cross_encoder,
)
from .encoders import (
    CHECK_SIZE,
    CHECK_TEXTS,
    ENCODER_TYPE,
    EXPORT_VERSION,
    FP32_MIN_COSINE,
    INT8_MIN_COSINE,
    ExportedEncoder,
    encoder_path,
    load_encoder,
    settings_hash,
)
from .engines import ENGINES, engine_for
from .exports import MAX_ENGINES, check_threads

__all__ = ["BACKENDS", "PRECISIONS", "BackendError", "check_backend", "ENGINES", "engine_for", "INT8_MIN_COSINE",
           "FP32_MIN_COSINE", "CALIBRATION_SIZE", "CHECK_SIZE", "CHECK_TEXTS", "EXPORT_VERSION", "settings_hash",
           "ENCODER_TYPE", "Calibration", "RecordedCalibration", "check_threads", "MAX_ENGINES",
           "calibration_from_corpus", "calibration_from_texts", "encoder_path", "load_encoder", "ExportedEncoder",
           "CROSS_ENCODER_TYPE", "CE_INT8_MIN_PEARSON", "CE_FP32_RTOL", "CE_EXPORT_VERSION", "CHECK_PAIRS",
           "calibration_from_pairs", "load_cross_encoder", "ExportedCrossEncoder"]

# the OpenVINO export had this name here before the engines' registry (tests/test_sciface_backends.py patches
# it); the export is ENGINES["openvino"].export (openvino_engine.OpenVINOEngine.export), which does not read it
_export_openvino = ENGINES["openvino"].export
