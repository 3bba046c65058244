"""Training helpers every trainer of the toolkit shares: one builder of sentence-transformers /
cross-encoder trainer arguments (:func:`trainer_arguments`), running a trainer quietly with the
finiteness checks of :func:`guard_finite` (:func:`run_trainer`), seeding, saving a trained model as a
``pt.Artifact`` (:func:`save_model_artifact`) and freezing lower layers.

Models are written atomically by :func:`pyterrier_sci.artifacts.build_atomically`::

    def build(tmp):
        history = run_trainer(SentenceTransformerTrainer(model=model, args=trainer_arguments(
            "sentence_transformer", tmp / "checkpoints", epochs=1, batch_size=16, learning_rate=2e-5, seed=0),
            train_dataset=ds, loss=loss))
        model.save(str(tmp))
        save_model_artifact(tmp, "dense_model", "sentence_transformers", {"loss_history": history})
    build_atomically(output, build)
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib
import inspect
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np
import pandas as pd

from pyterrier_sci.artifacts import write_pt_meta
from pyterrier_sci.corpus import corpus_version
from pyterrier_sci.data import work_dir
from pyterrier_sci.errors import (
    NonFiniteTrainingError,  # noqa: F401 - defined there, re-exported
    ParameterError,
    TrainingDeferred,
)
from pyterrier_sci.models import model_identity, model_slug
from pyterrier_sci.registry import irds_id

__all__ = ["FoldRouting", "NonFiniteTrainingError", "check_finite_loss", "first_non_finite_parameter", "guard_finite",
           "seed_everything", "trainer_arguments", "run_trainer", "train_summary", "save_model_artifact",
           "PACKAGE_HINT", "freeze_lower_layers", "encoder_layers", "settings_key", "trained_model_dir", "save_model",
           "query_ids", "refuse_training_on_test_queries", "TrainingDeferred", "no_training", "about_to_train",
           "trainings"]


def check_finite_loss(value: Any, step: Optional[int] = None, what: str = "the training loss") -> None:
    """Raises :class:`NonFiniteTrainingError` when ``value`` (a tensor or a number) is not finite."""
    import torch
    if torch.is_tensor(value):
        finite = bool(torch.isfinite(value.detach()).all())
        shown = value.detach().float().flatten()[:4].tolist()
        shown = shown[0] if len(shown) == 1 else shown
    else:
        finite, shown = math.isfinite(float(value)), value
    if not finite:
        at = f" at step {step}" if step is not None else ""
        raise NonFiniteTrainingError(
            f"training stopped: {what} became {shown}{at}; nothing was saved. Lower the learning rate, check the "
            f"training data (empty texts, labels out of range) or the loss's inputs (padded lists)")


def first_non_finite_parameter(named_parameters: Iterable[Tuple[str, Any]]) -> Optional[str]:
    """The name of the first trainable parameter holding a NaN or an infinity, or ``None``."""
    import torch
    for name, p in named_parameters:
        if p.requires_grad and not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


def guard_finite(trainer):
    """Adds the finiteness checks to a ``transformers.Trainer`` (sentence-transformers' trainers and
    cross-encoder trainers included) and returns it."""
    from transformers import TrainerCallback

    losses = trainer.loss if isinstance(getattr(trainer, "loss", None), dict) else {"": getattr(trainer, "loss", None)}

    def loss_hook(module, inputs, output):
        value = output.get("loss") if isinstance(output, dict) else output
        if value is not None:
            check_finite_loss(value, trainer.state.global_step + 1)

    for loss in losses.values():
        if loss is not None and hasattr(loss, "register_forward_hook"):
            loss.register_forward_hook(loss_hook)

    class FiniteParameters(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            name = first_non_finite_parameter((model or trainer.model).named_parameters())
            if name is not None:
                raise NonFiniteTrainingError(
                    f"training stopped: parameter {name!r} became NaN or infinite at step {state.global_step}; "
                    f"nothing was saved. Lower the learning rate or check the training data")

    trainer.add_callback(FiniteParameters())
    return trainer


def seed_everything(seed: int) -> None:
    """Seeds Python's, NumPy's and PyTorch's random generators."""
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


PACKAGE_HINT = "pyterrier-sci"
TRAINER_KINDS = ("sentence_transformer", "cross_encoder")


def trainer_arguments(kind: str, output_dir: Union[str, Path], *, epochs: int, batch_size: int, learning_rate: float,
                      warmup_ratio: float = 0.1, max_steps: Optional[int] = None, seed: int,
                      device: Optional[str] = None, verbose: bool = False, **extra):
    """``SentenceTransformerTrainingArguments`` (``kind="sentence_transformer"``) or
    ``CrossEncoderTrainingArguments`` (``kind="cross_encoder"``) with the toolkit's one rule:

    * the CPU when ``device`` is ``None`` or ``"cpu"`` (``use_cpu``), else the accelerator;
    * linear warm-up over ``warmup_ratio`` of the steps (``warmup_ratio`` where transformers still
      accepts it; transformers 5 reads a float ``warmup_steps`` below 1 as that ratio);
    * nothing reported, nothing saved, the loss logged at every step (the trainers keep it);
    * ``seed`` and ``data_seed`` both ``seed``; no progress bars unless ``verbose``; no dataloader workers;
    * ``max_steps`` (``None``: the epochs decide).

    ``extra`` keyword arguments are passed on and override these (e.g. ``batch_sampler``,
    ``weight_decay``, ``optim``, ``eval_strategy``)."""

    from transformers import TrainingArguments
    if kind == "sentence_transformer":
        from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    elif kind == "cross_encoder":
        from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments as Arguments
    else:
        raise ValueError(f"kind must be one of {TRAINER_KINDS}, not {kind!r}")
    if not 0.0 <= float(warmup_ratio) < 1.0:
        raise ValueError(f"warmup_ratio must be in [0, 1), not {warmup_ratio}")
    if "warmup_ratio" in inspect.signature(TrainingArguments.__init__).parameters:
        warmup = {"warmup_ratio": float(warmup_ratio)}
    else:
        warmup = {"warmup_steps": float(warmup_ratio)}
    args = dict(output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
                learning_rate=learning_rate, max_steps=max_steps if max_steps else -1, seed=seed, data_seed=seed,
                save_strategy="no", report_to="none", logging_strategy="steps", logging_steps=1,
                use_cpu=(device or "cpu") == "cpu", disable_tqdm=not verbose, dataloader_num_workers=0, **warmup)
    args.update(extra)
    return Arguments(**args)


def run_trainer(trainer, verbose: bool = False) -> List[float]:
    """Trains ``trainer`` (a transformers / sentence-transformers trainer) with the checks of
    :func:`guard_finite`; unless ``verbose``, transformers' log messages below errors and its
    progress and printer callbacks are off.  Returns the loss of every logged step (rounded to 5
    digits); ``trainer.state`` holds the rest (``global_step``, and the run's summary
    ``train_runtime`` / ``train_loss`` as the last entry of ``log_history``)."""
    from transformers.utils import logging as hf_logging
    guard_finite(trainer)
    was = hf_logging.get_verbosity()
    if not verbose:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        hf_logging.set_verbosity_error()
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    try:
        trainer.train()
    finally:
        hf_logging.set_verbosity(was)
    return [round(float(h["loss"]), 5) for h in trainer.state.log_history if "loss" in h]


def train_summary(trainer) -> Dict[str, Any]:
    """The summary transformers logs at the end of training (``train_runtime``, ``train_loss``, ...)."""
    for entry in reversed(trainer.state.log_history):
        if "train_runtime" in entry:
            return dict(entry)
    return {}


#: modules whose module-level ``tqdm`` draws a bar while a model is saved (sentence-transformers' model card)
_SAVE_BAR_MODULES = ("sentence_transformers.base.model_card",)


@contextlib.contextmanager
def _no_save_bars():
    """transformers' "Writing model shards" and sentence-transformers' "Computing widget examples" bars off
    (a trained model is saved inside a step that has its own progress)."""
    from transformers.utils import logging as hf_logging
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    patched = []
    for name in _SAVE_BAR_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "tqdm", None)):
            patched.append((module, module.tqdm))
            module.tqdm = functools.partial(module.tqdm, disable=True)
    try:
        yield
    finally:
        for module, old in patched:
            module.tqdm = old
        if bars:
            hf_logging.enable_progress_bar()


def save_model(model, path: Union[str, Path]) -> None:
    """``model.save(path)`` (a sentence-transformers model or cross-encoder) without the library's progress
    bars."""
    with _no_save_bars():
        model.save(str(path))


def save_model_artifact(tmp_dir: Union[str, Path], artifact_type: str, artifact_format: str, training: Dict[str, Any],
                        training_file: Optional[str] = None) -> Path:
    """Makes the saved model at ``tmp_dir`` a ``pt.Artifact``: writes ``pt_meta.json`` (``type``,
    ``format``, ``package_hint``) and the training record ``training`` - in the file ``training_file``
    (named in ``pt_meta.json``) when given, else as fields of ``pt_meta.json`` itself.  Returns
    ``pt_meta.json``'s path."""
    tmp = Path(tmp_dir)
    meta: Dict[str, Any] = {"type": artifact_type, "format": artifact_format, "package_hint": PACKAGE_HINT}
    if training_file:
        meta["training_file"] = training_file
        (tmp / training_file).write_text(json.dumps(training, indent=2, default=str))
    else:
        clash = sorted(set(training) & (set(meta) | {"training_file"}))
        if clash:
            raise ValueError(f"training fields {clash} would overwrite pt_meta.json's own fields")
        meta.update(training)
    write_pt_meta(tmp, **meta)
    return tmp / "pt_meta.json"


def encoder_layers(model) -> Tuple[Any, List[Any]]:
    """(embeddings, transformer layers) of a sentence-transformers model's BERT-like backbone."""
    backbone = model[0].auto_model
    prefix = getattr(backbone, "base_model_prefix", None)
    base = getattr(backbone, prefix, backbone) if prefix is not None else backbone
    encoder = getattr(base, "encoder", None)
    layers = getattr(encoder, "layer", None) or getattr(encoder, "layers", None)
    if layers is None:
        raise ValueError(f"cannot find the transformer layers of {type(backbone).__name__}")
    return base.embeddings, list(layers)


def freeze_lower_layers(model, n: int) -> int:
    """Freezes the embeddings and the lowest ``n`` transformer layers; returns the number of
    trainable parameters left."""
    embeddings, layers = encoder_layers(model)
    if not 0 <= n <= len(layers):
        raise ValueError(f"frozen_layers={n}, but the model has {len(layers)} layers")
    for module in [embeddings] + layers[:n]:
        for p in module.parameters():
            p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def settings_key(settings: Mapping[str, Any], legacy: bool = False) -> str:
    """A short hash of the settings a model is trained with (its cache key): ``base_model`` by its weights
    (:func:`~pyterrier_sci.models.model_identity`: named by path or by name, installed here or elsewhere, the
    same model keys alike).  ``legacy``: the key of before, which named it by a slug of its path."""
    d = dict(settings)
    if "base_model" in d:
        d["base_model"] = model_slug(d["base_model"], legacy=True) if legacy else model_identity(d["base_model"])
    return hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def query_ids(dataset: str) -> set:
    """The query ids of an ir_datasets id (``irds:`` prefix optional; none for a dataset without queries)."""
    import ir_datasets
    ds = ir_datasets.load(irds_id(dataset))
    return {q.query_id for q in ds.queries_iter()} if ds.has_queries() else set()


def refuse_training_on_test_queries(component: str, train_qids: Iterable[str], train_name: str,
                                    dataset: Optional[str], param: str) -> None:
    """One :class:`ParameterError` (for ``component``'s ``param``) when a query a model trains on
    (``train_qids``, from ``train_name``) is also a query of the ``dataset`` it is tested on."""
    if not dataset:
        return
    shared = sorted(set(map(str, train_qids)) & query_ids(dataset), key=lambda q: (len(q), q))
    if shared:
        raise ParameterError(f"{component}: {len(shared)} query id(s) of {train_name} are also queries of {dataset} "
                             f"(e.g. {shared[:3]}): a model trained on them would be tested on its own training "
                             "queries", component=component, param=param)


_NO_TRAINING: "contextvars.ContextVar[bool]" = contextvars.ContextVar("pyterrier_sci_no_training", default=False)


@contextlib.contextmanager
def no_training():
    """Within it, a component about to train a model on first use raises :class:`TrainingDeferred` instead
    (:func:`about_to_train`): ``pyterrier-sci reproduce --dry-run`` counts an LLM row's calls by running its
    first stage, which must not start minutes or hours of training."""
    token = _NO_TRAINING.set(True)
    try:
        yield
    finally:
        _NO_TRAINING.reset(token)


#: ``(path, what, monotonic start, wall-clock start)`` of every training this process started (:func:`trainings`)
_STARTED: List[Tuple[str, str, float, float]] = []


def about_to_train(path: Union[str, Path], what: str) -> None:
    """Called by every component that trains a model on first use, right before it trains one at ``path``:
    inside :func:`no_training` that is :class:`TrainingDeferred`; otherwise the start is noted
    (:func:`trainings`)."""
    if _NO_TRAINING.get():
        raise TrainingDeferred(path, what)
    _STARTED.append((str(path), what, time.monotonic(), time.time()))


def trainings(since: int = 0) -> List[Dict[str, Any]]:
    """The trainings this process started after the first ``since`` (``len(trainings())`` marks a point):
    ``{"model": the model's folder name, "what": ..., "seconds": from the start to when its artifact was complete
    (its ``pt_meta.json`` written; now, when it is not)}``."""
    out = []
    for path, what, _, wall in _STARTED[since:]:
        meta = Path(path) / "pt_meta.json"
        done = meta.stat().st_mtime if meta.is_file() else time.time()
        out.append({"model": Path(path).name, "what": what, "seconds": round(max(0.0, done - wall), 1)})
    return out


def trained_model_dir(family: str, train_dataset: str, key: str, work: Union[None, str, Path] = None,
                      legacy_key: Optional[str] = None) -> Path:
    """Where a component that trains on first use (``mir_dense(train=True)``, ``doris_maxsim(train=True)``)
    keeps the model trained on ``train_dataset`` with the settings of ``key``:
    ``<work dir>/models/<family>/<dataset>-<key>``.  ``legacy_key``: the same settings' key of before
    (:func:`settings_key` with ``legacy``); a complete model there, trained before keys named the base model
    by its weights, is used as it is when none is at ``key`` (nothing is moved or trained again)."""
    base = Path(work or work_dir()) / "models" / family
    version = corpus_version(train_dataset)   # a model trained on a local corpus belongs to its version
    name = irds_id(train_dataset).replace("/", "__") + (f"@{version}" if version else "")
    path = base / f"{name}-{key}"
    if legacy_key and legacy_key != key and not os.path.lexists(path):
        old = base / f"{name}-{legacy_key}"
        if not old.is_symlink() and (old / "pt_meta.json").is_file():
            return old
    return path


class FoldRouting:
    """Mixin of the transformers that send each query to the model of the fold that tests it (a model
    trained only on other queries): ``by_fold`` maps a fold to its transformer, in the order the results are
    joined; :meth:`fold_of` names a query's fold (``None`` for none).  A query in no fold of ``by_fold`` is one
    :class:`ValueError` (:meth:`unknown_message`): no model is known never to have seen it.  Mixed into
    ``pt.Transformer`` subclasses: SciFACE's CSFCube folds, MIR's rolling-origin folds."""

    by_fold: Dict[Any, Any]

    def fold_of(self, qid: str) -> Optional[Any]:
        raise NotImplementedError

    def unknown_message(self, unknown: List[str]) -> str:
        raise NotImplementedError

    def sci_models(self):
        """The component protocol: the fold models' references."""
        return [ref for t in self.by_fold.values() for ref in getattr(t, "sci_models", lambda: [])()]

    def transform(self, inp):
        if len(inp) == 0:
            return next(iter(self.by_fold.values())).transform(inp)
        folds = inp["qid"].astype(str).map(self.fold_of)
        unknown = sorted(inp.loc[folds.isna() | ~folds.isin(list(self.by_fold)), "qid"].astype(str).unique())
        if unknown:
            raise ValueError(self.unknown_message(unknown))
        parts = [t.transform(inp[folds == fold]) for fold, t in self.by_fold.items() if (folds == fold).any()]
        return pd.concat(parts, ignore_index=True)
