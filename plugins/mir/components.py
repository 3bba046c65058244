"""MIR's pipeline components: ``mir_dense`` (the fine-tuned retriever), ``mir_pointwise`` and
``mir_agent`` (the LLM judges of MIR §5.2)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import pyterrier as pt

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.dates import later_training_query
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.models import BACKENDS, PRECISIONS
from pyterrier_sci.plugins.llm.components import build_llm_component, declare_llm_params
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, params
from pyterrier_sci.training import about_to_train

from .judges import MIRAgent, MIRPointwise
from .training import (
    MIRTrainingConfig,
    RollingRouted,
    mir_retriever,
    rolling_folds,
    train_mir,
    trained_model_path,
    wise_ft_model,
)

__all__ = ["mir_dense_component", "mir_pointwise_component", "mir_agent_component"]


def _check_chronological(train_dataset: str, test: str) -> None:
    later = later_training_query(train_dataset, test)
    if later is not None:
        raise ParameterError(f"mir_dense: the training proposal {later[0]} of {train_dataset} ({later[1]}) is "
                             f"later than the proposal {later[2]} of {test} ({later[3]}); MIR's splits are "
                             f"chronological (train on the earlier proposals, docs/dates.md); set chronological: "
                             f"false to train anyway", component="mir_dense", param="train_dataset")


def _trained(train_dataset: str, cfg: MIRTrainingConfig, work, verbose: bool, wise_ft: Optional[float]) -> Path:
    """The model ``cfg`` trains on ``train_dataset``, trained once in the work directory (its WiSE-FT
    interpolation with the base when ``wise_ft`` is given)."""
    path = trained_model_path(train_dataset, cfg, work)
    if not (path / "pt_meta.json").exists():
        about_to_train(path, f"the MIR model of {train_dataset}")
        train_mir(train_dataset, path, cfg, overwrite=True, verbose=verbose)
    return path if wise_ft is None else wise_ft_model(path, wise_ft)


@declare_llm_params(MIRPointwise, num_shots=Param(int, min=0, max=100), per_label=Param(int, min=1, max=100),
                    relevance_threshold=Param(int, min=0, max=10))
def mir_pointwise_component(*inputs, context=None, **params):
    """``mir_pointwise``: MIR's pointwise methodological-relevance judge (zero/few-shot)."""
    return build_llm_component(MIRPointwise, inputs, context, params)


@declare_llm_params(MIRAgent)
def mir_agent_component(*inputs, context=None, **params):
    """``mir_agent``: MIR-Agent - proposal analysis, paper analysis, judgement."""
    return build_llm_component(MIRAgent, inputs, context, params)


@params(MIRTrainingConfig, model=Param(PATH, optional=True), dataset=Param(DATASET, optional=True),
        train_dataset=Param(DATASET, optional=True), num_results=Param(int, min=1, max=MAX_RESULTS),
        batch_size=Param(int, min=1, max=65536), fields=Param(list, item=str, min_len=1, optional=True),
        device=Param(str, min_len=1, optional=True), triplets=Param(str, min_len=1), alpha=Param(float, min=0, max=1),
        margin=Param(float, min=0, max=100), epochs=Param(int, min=1, max=1000),
        learning_rate=Param(float, min=1e-12, max=1),
        warmup_ratio=Param(float, min=0, max=1), max_seq_length=Param(int, min=1, max=100_000),
        hard_top=Param(int, min=0, max=MAX_RESULTS), n_keywords=Param(int, min=1, max=100_000),
        seed=Param(int, min=0, max=2 ** 32 - 1), max_steps=Param(int, min=1, max=10 ** 9, optional=True),
        frozen_layers=Param(int, min=0, max=1000), backend=Param(str, choices=BACKENDS),
        precision=Param(str, choices=PRECISIONS), rolling=Param(bool),
        wise_ft=Param(float, min=0, max=1, optional=True))
def mir_dense_component(*inputs, context=None, model: Optional[str] = None, dataset: Optional[str] = None,
                        train: bool = False, train_dataset: Optional[str] = None, num_results: int = 1000,
                        batch_size: int = 32, fields: Optional[Sequence[str]] = None, verbose: bool = False,
                        device: Optional[str] = None, backend: str = "torch", precision: str = "fp32",
                        chronological: bool = True, rolling: bool = False, wise_ft: Optional[float] = None,
                        **training) -> pt.Transformer:
    """``mir_dense``: dense retrieval with a MIR fine-tuned model (a saved model path, or trained on
    ``train_dataset`` with ``train=True`` and the training settings of ``MIRTrainingConfig``); ``backend``
    and ``precision`` choose the encoder's engine as for ``dense`` (docs/dense.md).  ``chronological``
    (default true): MIR's splits are chronological (§4), so a model trained here is refused for a dataset with a
    proposal dated before one of ``train_dataset`` (the proposals' dates, docs/dates.md).  ``rolling=True``
    (with ``train=True`` and no ``train_dataset``) on a rolling-origin test set
    (``sci/mir-multicite/dev/rolling-test``): one model per fold, each trained on the proposals before its
    fold and scoring that fold's proposals.  ``wise_ft=w``: the trained weights interpolated with the base
    model's, ``(1 - w) * base + w * fine-tuned`` (WiSE-FT; 1 is the fine-tuned model)."""
    if not train and (rolling or wise_ft is not None):
        name = "rolling" if rolling else "wise_ft"
        raise ParameterError(f"mir_dense: {name} applies to a model trained here: add train=True",
                             component="mir_dense", param=name)

    def retriever(path) -> pt.Transformer:
        return mir_retriever(path, context=context, dataset=dataset, fields=fields, num_results=num_results,
                             batch_size=batch_size, verbose=verbose, device=device, backend=backend,
                             precision=precision)

    t = None
    if train:
        unknown = set(training) - set(MIRTrainingConfig.__dataclass_fields__)
        if unknown:
            raise TypeError(f"mir_dense: unknown training settings {sorted(unknown)}")
        cfg = MIRTrainingConfig(**training)
        if model:
            cfg.base_model = model
        work = context.workdir() if context is not None else None
        if rolling:
            if train_dataset:
                raise ParameterError(f"mir_dense(rolling=True) trains each rolling-origin fold on the proposals "
                                     f"before it, so train_dataset ({train_dataset}) must be left out",
                                     component="mir_dense", param="train_dataset")
            test = dataset_of(dataset, context, "mir_dense(rolling=True)")
            try:
                folds = rolling_folds(test)
            except ValueError as e:
                raise ParameterError(str(e), component="mir_dense", param="dataset") from None
            routed = []
            for fold_train, fold_test, qids in folds:
                if chronological:
                    _check_chronological(fold_train, fold_test)
                routed.append((qids, retriever(_trained(fold_train, cfg, work, verbose, wise_ft))))
            t = RollingRouted(routed, test)
        else:
            if not train_dataset:
                raise ValueError("mir_dense(train=True) needs train_dataset='irds:sci/mir-multicite/...' "
                                 "(a training split), or rolling=True on a rolling-origin test set")
            test = dataset_of(dataset, context, "mir_dense", required=False)
            if chronological and test:
                _check_chronological(train_dataset, test)
            model = str(_trained(train_dataset, cfg, work, verbose, wise_ft))
    elif training:
        raise TypeError(f"mir_dense: training settings {sorted(training)} need train=True")
    if t is None:
        if not model:
            raise ValueError("mir_dense needs model=<path of a MIR model> (train_mir / MIRModel) or train=True "
                             "with train_dataset=...")
        t = retriever(model)
    if len(inputs) > 1:
        raise ValueError("mir_dense takes at most one input pipeline")
    return inputs[0] >> t if inputs else t
