"""DORIS-MAE's pipeline component: ``doris_maxsim`` (the multi-vector MaxSim scorer of Eq. 4)."""
from __future__ import annotations

from typing import Optional

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.plugins.dense.models import BACKENDS, DEFAULT_MODEL, PRECISIONS, check_backend
from pyterrier_sci.registry import DATASET, Param, params
from pyterrier_sci.training import query_ids, refuse_training_on_test_queries

from .maxsim import MaxSimScorer
from .training import ContrastiveSettings, trained_model

__all__ = ["maxsim_component"]


@params(model=Param(str, min_len=1), query_mode=Param(str, min_len=1), doc_mode=Param(str, min_len=1),
        dataset=Param(DATASET, optional=True), batch_size=Param(int, min=1, max=65536),
        max_seq_length=Param(int, min=1, max=100_000, optional=True), backend=Param(str, choices=BACKENDS),
        precision=Param(str, choices=PRECISIONS), calibration=Param(DATASET, optional=True),
        train=Param(bool), train_dataset=Param(DATASET, optional=True),
        per_query=Param(int, min=1, max=1_000_000, optional=True),
        margin=Param(float, min=0, max=2, optional=True), epochs=Param(int, min=1, max=1000, optional=True),
        train_batch_size=Param(int, min=1, max=65536, optional=True),
        learning_rate=Param(float, min=1e-12, max=1, optional=True),
        warmup_ratio=Param(float, min=0, max=1, optional=True), seed=Param(int, min=0, max=2 ** 32 - 1, optional=True),
        max_steps=Param(int, min=1, max=10 ** 9, optional=True))
def maxsim_component(*, context=None, model: str = DEFAULT_MODEL, query_mode: str = "sentences",
                     doc_mode: str = "sentences", dataset: Optional[str] = None, text_field: str = "text",
                     doc_field: Optional[str] = None, batch_size: int = 32, device: Optional[str] = None,
                     max_seq_length: Optional[int] = None, verbose: bool = False, backend: str = "torch",
                     precision: str = "fp32", calibration: Optional[str] = None, train: bool = False,
                     train_dataset: Optional[str] = None, per_query: Optional[int] = None,
                     margin: Optional[float] = None, epochs: Optional[int] = None,
                     train_batch_size: Optional[int] = None, learning_rate: Optional[float] = None,
                     warmup_ratio: Optional[float] = None, seed: Optional[int] = None,
                     max_steps: Optional[int] = None) -> MaxSimScorer:
    """``doris_maxsim``: DORIS-MAE's multi-vector scorer (Eq. 4) over sentences or aspects, any
    sentence-transformers model.  ``backend`` / ``precision``: the encoder's engine and precision
    (docs/dense.md); int8 calibrates on ``calibration`` (an ir_datasets id), default the dataset's corpus.

    ``train=True``: ``model`` is first fine-tuned by supervised contrastive learning (§5.3, Eq. 3) on the
    queries of ``train_dataset`` (a ``sci/doris-mae`` id): ``per_query`` triplets per query, ``margin``,
    ``epochs``, ``train_batch_size``, ``learning_rate``, ``warmup_ratio``, ``max_steps``, ``seed`` and
    ``max_seq_length`` (unset: :class:`~.training.ContrastiveSettings`' defaults: 15 triplets per query, margin
    0.1, one epoch, batch 16, lr 2e-5, 256 word pieces, seed 0); the model is trained on first use and kept in
    the work directory, keyed by these settings.  A training query that is also one of ``dataset``'s queries
    is refused."""
    check_backend(backend, precision)
    dataset = dataset_of(dataset, context, "doris_maxsim", required=False)
    given = dict(per_query=per_query, margin=margin, epochs=epochs, batch_size=train_batch_size,
                 learning_rate=learning_rate, warmup_ratio=warmup_ratio, seed=seed, max_steps=max_steps)
    training = {k: v for k, v in given.items() if v is not None}
    if train:
        if not train_dataset:
            raise ParameterError("doris_maxsim(train=True) needs train_dataset= (e.g. "
                                 "irds:sci/doris-mae/birco-dev/train20)", component="doris_maxsim",
                                 param="train_dataset")
        refuse_training_on_test_queries("doris_maxsim", query_ids(train_dataset), train_dataset, dataset,
                                        "train_dataset")
        if max_seq_length is not None:
            training["max_seq_length"] = max_seq_length
        settings = ContrastiveSettings(base_model=model, **training)
        model = str(trained_model(train_dataset, settings, context.workdir() if context is not None else None,
                                  verbose=verbose).path)
    elif train_dataset is not None or training:
        raise ParameterError("doris_maxsim: train_dataset and the training settings need train=True",
                             component="doris_maxsim", param="train")
    return MaxSimScorer(model, query_mode, doc_mode, dataset=dataset, text_field=text_field, doc_field=doc_field,
                        batch_size=batch_size, device=device, max_seq_length=max_seq_length, verbose=verbose,
                        backend=backend, precision=precision, calibration=calibration)

