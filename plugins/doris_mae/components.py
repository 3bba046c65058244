"""DORIS-MAE's pipeline component: ``doris_maxsim`` (the multi-vector MaxSim scorer of Eq. 4)."""
from __future__ import annotations

from typing import Optional

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.plugins.dense.models import BACKENDS, DEFAULT_MODEL, PRECISIONS, check_backend
from pyterrier_sci.registry import DATASET, Param, params

from .maxsim import MaxSimScorer

__all__ = ["maxsim_component"]


@params(model=Param(str, min_len=1), query_mode=Param(str, min_len=1), doc_mode=Param(str, min_len=1),
        dataset=Param(DATASET, optional=True), batch_size=Param(int, min=1, max=65536),
        max_seq_length=Param(int, min=1, max=100_000, optional=True), backend=Param(str, choices=BACKENDS),
        precision=Param(str, choices=PRECISIONS), calibration=Param(DATASET, optional=True))
def maxsim_component(*, context=None, model: str = DEFAULT_MODEL, query_mode: str = "sentences",
                     doc_mode: str = "sentences", dataset: Optional[str] = None, text_field: str = "text",
                     doc_field: Optional[str] = None, batch_size: int = 32, device: Optional[str] = None,
                     max_seq_length: Optional[int] = None, verbose: bool = False, backend: str = "torch",
                     precision: str = "fp32", calibration: Optional[str] = None) -> MaxSimScorer:
    """``doris_maxsim``: DORIS-MAE's multi-vector scorer (Eq. 4) over sentences or aspects, any
    sentence-transformers model.  ``backend`` / ``precision``: the encoder's engine and precision
    (docs/dense.md); int8 calibrates on ``calibration`` (an ir_datasets id), default the dataset's corpus."""
    check_backend(backend, precision)
    dataset = dataset_of(dataset, context, "doris_maxsim", required=False)
    return MaxSimScorer(model, query_mode, doc_mode, dataset=dataset, text_field=text_field, doc_field=doc_field,
                        batch_size=batch_size, device=device, max_seq_length=max_seq_length, verbose=verbose,
                        backend=backend, precision=precision, calibration=calibration)
