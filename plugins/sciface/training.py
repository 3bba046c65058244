"""Training of SciFACE's facet cross-encoders: :func:`train_facet_cross_encoder` (margin ranking loss
on (seed, positive, negative) triplets drawn afresh every epoch, the best validation epoch kept, the
:class:`~.cross_encoder.FacetCrossEncoder` artifact written atomically).  See ``docs/sciface.md``
("Training").  Importing this module imports torch (the loss is a ``torch.nn.Module``)."""
from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import pandas as pd

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.plugins.dense import resolve_model
from pyterrier_sci.training import (
    run_trainer,
    save_model,
    save_model_artifact,
    seed_everything,
    train_summary,
    trainer_arguments,
)

from .cross_encoder import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    FacetCrossEncoder,
    open_cross_encoder,
    pair_input,
    quiet_transformers,
)
from .loss import MarginRankingLoss
from .triplets import FACETS, check_pairs, facet_scores, make_triplets, sample_per_seed

__all__ = ["train_facet_cross_encoder"]


def _per_seed_sampler_factory(n_per_epoch: int, record: Optional[list] = None):
    """A ``batch_sampler`` callable for the trainer: the training dataset holds one independent
    draw of up to k triplets per seed for every epoch, one block of ``n_per_epoch`` rows each; at
    epoch e the sampler shuffles and yields block e only (the per-epoch resampling of SciFACE)."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    class PerEpochBlockSampler(DefaultBatchSampler):
        def __len__(self):
            n = n_per_epoch
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

        def __iter__(self):
            n_blocks = max(1, len(self.sampler) // n_per_epoch)
            block = int(self.epoch) % n_blocks
            rng = np.random.default_rng(self.seed + int(self.epoch))
            idx = (block * n_per_epoch + rng.permutation(n_per_epoch)).tolist()
            if record is not None:
                record.append((int(self.epoch), block))
            for i in range(0, len(idx), self.batch_size):
                batch = idx[i:i + self.batch_size]
                if self.drop_last and len(batch) < self.batch_size:
                    break
                yield batch

    def make(dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0):
        return PerEpochBlockSampler(dataset, batch_size=batch_size, drop_last=drop_last,
                                    valid_label_columns=valid_label_columns, generator=generator, seed=seed)
    return make


def _texts(pairs: pd.DataFrame, sep: str):
    seeds = list(zip(pairs["seed_title"], pairs["seed_abstract"]))
    cands = list(zip(pairs["cand_title"], pairs["cand_abstract"]))
    return [pair_input(s[0], s[1], c[0], c[1], sep) for s, c in zip(seeds, cands)]


def train_facet_cross_encoder(pairs: pd.DataFrame, path: Union[str, Path], facet: str, *,
                              val_pairs: Optional[pd.DataFrame] = None, base_model: str = "default",
                              collapse: Optional[bool] = None, epochs: int = 10, triplets_per_seed: int = 10,
                              batch_size: int = 16, learning_rate: float = 2e-5, warmup_ratio: float = 0.1,
                              weight_decay: float = 0.01, max_grad_norm: float = 1.0, margin: float = 0.5,
                              max_length: int = 512, seed: int = 42, verbose: bool = False,
                              _sampler_record: Optional[list] = None) -> FacetCrossEncoder:
    """Trains one SciFACE facet cross-encoder and writes it atomically to ``path``.

    ``pairs`` is a pairs frame (:mod:`.triplets`) of the training seeds; triplets are all ordered
    candidate pairs of a seed with a higher ``facet`` score on the positive; every epoch draws up to
    ``triplets_per_seed`` of them per seed afresh.  Optimisation (SciFACE §3.10.2): margin ranking
    loss (``margin``), AdamW with linear warm-up over ``warmup_ratio`` of the steps then linear decay,
    gradient clipping ``max_grad_norm``, batch ``batch_size``.  With ``val_pairs`` (other seeds!)
    the model is evaluated after every epoch by the Spearman correlation of its scores with the
    graded labels over all validation pairs, and the best epoch is kept.  ``collapse`` (default:
    True for method) merges Method scores 2 and 3.  ``base_model``: any BERT-like model path or hub
    id (SciBERT in the paper), ``"default"`` = the offline MiniLM; a fresh 1-output head is added.
    ``epochs=0`` trains nothing: the artifact holds ``base_model`` as it is, for a base that already
    scores pairs (a warm-start student, :mod:`.warm_start`); its record says so.
    An existing ``path`` is refused (artifacts are not overwritten)."""
    if facet not in FACETS:
        raise ValueError(f"facet must be one of {FACETS}, not {facet!r}")
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, not {epochs}")
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; facet artifacts are not overwritten (choose a new path or delete it)")
    collapse = (facet == "method") if collapse is None else bool(collapse)
    check_pairs(pairs, facet)
    pairs = pairs[pairs[facet].notna()].reset_index(drop=True)
    triplets = make_triplets(pairs, facet, collapse)
    if len(triplets) == 0:
        raise ValueError(f"no {facet} triplets: every training seed's candidates share one score")
    if val_pairs is not None:
        check_pairs(val_pairs, facet)
        val_pairs = val_pairs[val_pairs[facet].notna()].reset_index(drop=True)
        overlap = set(pairs["seed_id"]) & set(val_pairs["seed_id"])
        if overlap:
            raise ValueError(f"seeds in both training and validation pairs: {sorted(overlap)[:5]}")

    stats: Dict[str, Any] = {}

    def build(tmp: Path):
        if epochs == 0:
            stats.update(_untrained(tmp / "model", base_model, max_length))
        else:
            stats.update(_train(pairs, triplets, val_pairs, tmp / "model", facet, base_model=base_model,
                                collapse=collapse, epochs=epochs, k=triplets_per_seed, batch_size=batch_size,
                                lr=learning_rate, warmup_ratio=warmup_ratio, weight_decay=weight_decay,
                                max_grad_norm=max_grad_norm, margin=margin, max_length=max_length, seed=seed,
                                verbose=verbose, record=_sampler_record))
        save_model_artifact(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT, {
            "facet": facet, "max_length": max_length, "collapse_method": collapse, "base_model": base_model,
            "input": "seed title [SEP] seed abstract [SEP] cand title [SEP] cand abstract",
            "training": {"epochs": epochs, "triplets_per_seed": triplets_per_seed, "batch_size": batch_size,
                         "learning_rate": learning_rate, "warmup_ratio": warmup_ratio, "weight_decay": weight_decay,
                         "max_grad_norm": max_grad_norm, "margin": margin, "seed": seed,
                         "train_seeds": int(pairs["seed_id"].nunique()), "train_pairs": int(len(pairs)),
                         "triplets_available": int(len(triplets)),
                         "val_seeds": int(val_pairs["seed_id"].nunique()) if val_pairs is not None else 0, **stats}})

    build_atomically(path, build)
    return FacetCrossEncoder(path)


def _untrained(out_dir: Path, base_model: str, max_length: int) -> Dict[str, Any]:
    """``epochs=0``: the base model saved as the facet model, unchanged (its head must already score pairs)."""
    model = open_cross_encoder(resolve_model(base_model) if base_model == "default" else base_model, max_length)
    with quiet_transformers():
        save_model(model, out_dir)
    return {"steps": 0, "triplets_per_epoch": 0, "best_epoch": None, "val_spearman": None,
            "val_spearman_per_epoch": [], "train_loss": None}


def _train(pairs, triplets, val_pairs, out_dir: Path, facet: str, *, base_model, collapse, epochs, k,
           batch_size, lr, warmup_ratio, weight_decay, max_grad_norm, margin, max_length, seed, verbose,
           record) -> Dict[str, Any]:
    import torch
    from sentence_transformers.cross_encoder import CrossEncoderTrainer
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator
    from transformers import TrainerCallback

    import datasets

    seed_everything(seed)
    if base_model == "default":
        base_model = resolve_model("default")
    model = open_cross_encoder(base_model, max_length)
    sep = model.tokenizer.sep_token or "[SEP]"
    texts = _texts(pairs, sep)
    rng = np.random.default_rng(seed)
    blocks = [sample_per_seed(triplets, k, rng) for _ in range(epochs)]
    n_per_epoch = len(blocks[0])
    rows = pd.concat(blocks, ignore_index=True)
    train_ds = datasets.Dataset.from_dict({
        "anchor": [texts[i][0] for i in rows["pos"]],
        "positive": [texts[i][1] for i in rows["pos"]],
        "negative": [texts[i][1] for i in rows["neg"]],
    })
    evaluator = None
    if val_pairs is not None and len(val_pairs):
        vs = facet_scores(val_pairs, facet, collapse)
        evaluator = CrossEncoderCorrelationEvaluator([list(t) for t in _texts(val_pairs, sep)],
                                                     vs.astype(float).tolist(),
                                                     name="val", batch_size=32, write_csv=False)
    best: Dict[str, Any] = {"spearman": -math.inf, "epoch": None, "state": None, "history": []}

    class KeepBest(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kw):
            rho = (metrics or {}).get("eval_val_spearman")
            if rho is None:
                return
            rho = float(rho) if rho == rho else -1.0
            best["history"].append(round(rho, 4))
            if rho > best["spearman"]:
                best.update(spearman=rho, epoch=len(best["history"]),
                            state={k_: v.detach().cpu().clone() for k_, v in model.model.state_dict().items()})

    with tempfile.TemporaryDirectory(prefix="facet-train-") as tmp:
        args = trainer_arguments(
            "cross_encoder", tmp, epochs=epochs, batch_size=batch_size, learning_rate=lr, warmup_ratio=warmup_ratio,
            seed=seed, device="cuda" if torch.cuda.is_available() else None, verbose=verbose,
            lr_scheduler_type="linear", weight_decay=weight_decay, max_grad_norm=max_grad_norm, optim="adamw_torch",
            batch_sampler=_per_seed_sampler_factory(n_per_epoch, record),
            eval_strategy="epoch" if evaluator is not None else "no")
        with quiet_transformers():
            trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                          loss=MarginRankingLoss(model, margin=margin), evaluator=evaluator,
                                          callbacks=[KeepBest()])
            run_trainer(trainer, verbose)
    if best["state"] is not None:
        model.model.load_state_dict(best["state"])
    with quiet_transformers():
        save_model(model, out_dir)
    return {"steps": int(trainer.state.global_step), "triplets_per_epoch": int(n_per_epoch),
            "best_epoch": best["epoch"], "val_spearman": None if best["epoch"] is None else round(best["spearman"], 4),
            "val_spearman_per_epoch": best["history"],
            "train_loss": round(float(train_summary(trainer)["train_loss"]), 4)}
