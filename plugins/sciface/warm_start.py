"""Warm start for facet cross-encoders (not in SciFACE): a cross-encoder distilled from a bi-encoder's
similarities on unlabelled papers (:func:`neighbour_pairs`, :func:`distil_cross_encoder`), a
starting point for facet training on tiny training sets (``base_model=<its path>``).  The whole step,
corpus to model, is :func:`warm_start_model` with :class:`WarmStartSettings`, which
``sciface_rerank(train=True, warm_loss=...)`` runs before its fold training.  See ``docs/sciface.md``
("Warm start from the bi-encoder").
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.datasets import csfcube
from pyterrier_sci.plugins.dense import load_sentence_transformer, resolve_model
from pyterrier_sci.training import (
    about_to_train,
    run_trainer,
    save_model,
    save_model_artifact,
    seed_everything,
    settings_key,
    trained_model_dir,
    trainer_arguments,
)

from .cross_encoder import open_cross_encoder, pair_input


class WarmStartCrossEncoder(pt.Artifact):
    """A distilled cross-encoder (:func:`distil_cross_encoder`'s output): a sentence-transformers
    ``CrossEncoder`` directory with a ``pt_meta.json``; ``base_model=<its path>`` starts facet training."""
    ARTIFACT_TYPE = "cross_encoder_warm_start"
    ARTIFACT_FORMAT = "sentence-transformers"

    @property
    def metadata(self) -> dict:
        return json.loads((Path(self.path) / "pt_meta.json").read_text())

    def cross_encoder(self, max_length: Optional[int] = None):
        return open_cross_encoder(str(self.path), max_length or self.metadata.get("max_length"))


PAIR_COLUMNS = ("seed_id", "seed_title", "seed_abstract", "cand_id", "cand_title", "cand_abstract", "teacher_score")


def neighbour_pairs(docs: Iterable[Tuple[str, str, str]], teacher: str = "default", n_seeds: int = 400,
                    ranks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), n_random: int = 1, seed: int = 0,
                    batch_size: int = 32, n_sampled_ranks: int = 0, max_rank: int = 100) -> pd.DataFrame:
    """(seed, candidate) pairs with the ``teacher`` bi-encoder's cosine similarity.

    ``docs``: ``(docno, title, abstract)`` of an unlabelled corpus.  ``n_seeds`` seeds are drawn
    (deterministically by ``seed``); each gets its neighbours at ``ranks`` (1 = nearest other paper)
    and ``n_random`` random papers, so the targets span near-duplicates to unrelated papers.
    ``n_sampled_ranks`` > 0 adds that many more neighbours per seed, at distinct ranks drawn
    uniformly from 1..``max_rank`` (not already in ``ranks``): a re-ranking pool is made of such
    near neighbours, and fine distinctions among them are what a re-ranker has to learn.
    Within a seed the candidates come in rank order, random papers last."""
    docs = [(str(d), t or "", a or "") for d, t, a in docs if (t or a)]
    if len(docs) < 2:
        raise ValueError("neighbour_pairs needs at least two documents with a title or abstract")
    enc = load_sentence_transformer(teacher, "cpu")
    vecs = enc.encode([f"{t} {a}" for _, t, a in docs], batch_size=batch_size, normalize_embeddings=True,
                      convert_to_numpy=True, show_progress_bar=False)
    rng = np.random.default_rng(seed)
    seeds = rng.choice(len(docs), size=min(n_seeds, len(docs)), replace=False)
    rows = []
    for s in seeds:
        sims = vecs @ vecs[s]
        order = np.argsort(-sims, kind="stable")
        order = order[order != s]
        use = [r for r in ranks if r - 1 < len(order)]
        if n_sampled_ranks:
            free = np.setdiff1d(np.arange(1, min(max_rank, len(order)) + 1), np.asarray(use, dtype=int))
            use += rng.choice(free, size=min(n_sampled_ranks, len(free)), replace=False).tolist()
        picks = [order[r - 1] for r in sorted(set(use))]
        others = np.setdiff1d(np.arange(len(docs)), np.array(picks + [s]))
        if n_random and len(others):
            picks += list(rng.choice(others, size=min(n_random, len(others)), replace=False))
        for c in picks:
            rows.append((docs[s][0], docs[s][1], docs[s][2], docs[c][0], docs[c][1], docs[c][2], float(sims[c])))
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


LOSSES = ("mse", "margin_mse")


def distil_cross_encoder(pairs: pd.DataFrame, path: Union[str, Path], base_model: str = "default",
                         scale: float = 5.0, epochs: int = 1, batch_size: int = 16, learning_rate: float = 5e-5,
                         warmup_ratio: float = 0.1, max_length: int = 256, seed: int = 0, loss: str = "mse",
                         callbacks: Optional[list] = None, verbose: bool = False) -> Path:
    """Trains a cross-encoder (fresh 1-output head on ``base_model``) on the ``teacher_score`` of
    ``pairs`` (input as in SciFACE: ``seed title [SEP] seed abstract`` / ``cand title [SEP] cand
    abstract``) and writes it atomically to ``path`` (a sentence-transformers ``CrossEncoder``
    directory with a ``pt_meta.json``).  An existing ``path`` is returned as is.

    ``loss="mse"``: each pair regresses ``scale`` x its teacher score (sentence-transformers'
    cross-encoder ``MSELoss``).  ``loss="margin_mse"``: each seed's candidates form one group, and the
    student's score differences to the group's first candidate regress the teacher's
    (``MarginMSELoss`` with several negatives, Hofstätter et al. 2020): only the order and spacing
    within a seed is taught, which is what re-ranking needs; a seed's absolute level is free.
    Every group is cut to the smallest group size (the cut pairs are counted in ``pt_meta.json``);
    the ``batch_size`` pairs of a step are then ``batch_size // group size`` groups (at least one).
    ``callbacks``: transformers ``TrainerCallback``s (e.g. to save checkpoints for a learning curve)."""
    path = Path(path)
    if (path / "pt_meta.json").exists():
        return path
    missing = [c for c in PAIR_COLUMNS if c not in pairs.columns]
    if missing:
        raise ValueError(f"distillation pairs lack columns {missing} (make them with neighbour_pairs)")
    if len(pairs) == 0:
        raise ValueError("no distillation pairs")
    if loss not in LOSSES:
        raise ValueError(f"unknown distillation loss {loss!r}; one of {LOSSES}")
    if loss == "margin_mse" and pairs.groupby("seed_id").size().min() < 2:
        raise ValueError("margin_mse distillation needs at least two candidates per seed")

    def build(tmp: Path):

        import torch
        from sentence_transformers.cross_encoder import CrossEncoderTrainer
        from sentence_transformers.cross_encoder.losses import MarginMSELoss, MSELoss

        import datasets

        seed_everything(seed)
        base = base_model
        if base == "default":
            base = resolve_model("default")
        model = open_cross_encoder(base, max_length)
        sep = model.tokenizer.sep_token or "[SEP]"
        texts = [pair_input(st, sa, ct, ca, sep) for st, sa, ct, ca in
                 zip(pairs.seed_title, pairs.seed_abstract, pairs.cand_title, pairs.cand_abstract)]
        frame = pd.DataFrame({"seed_id": pairs["seed_id"].to_numpy(), "seed": [a for a, _ in texts],
                              "cand": [b for _, b in texts],
                              "label": (scale * pairs["teacher_score"].astype(float)).to_numpy()})
        if loss == "mse":
            ds = datasets.Dataset.from_pandas(frame[["seed", "cand", "label"]], preserve_index=False)
            per_step, objective, stats = batch_size, MSELoss(model), {}
        else:
            ds, stats = _groups(frame)
            per_step = max(1, batch_size // stats["group_size"])
            objective = MarginMSELoss(model)
        args = trainer_arguments("cross_encoder", tmp / "run", epochs=epochs, batch_size=per_step,
                                 learning_rate=learning_rate, warmup_ratio=warmup_ratio, seed=seed,
                                 device="cuda" if torch.cuda.is_available() else None, verbose=verbose,
                                 lr_scheduler_type="linear")
        run_trainer(CrossEncoderTrainer(model=model, args=args, train_dataset=ds, loss=objective, callbacks=callbacks),
                    verbose)
        shutil.rmtree(tmp / "run", ignore_errors=True)
        save_model(model, tmp)
        save_model_artifact(tmp, WarmStartCrossEncoder.ARTIFACT_TYPE, WarmStartCrossEncoder.ARTIFACT_FORMAT, {
            "method": "bi-encoder distillation (" + ("MSE on scaled cosine" if loss == "mse" else
                                                     "margin MSE within each seed's group") + ")",
            "loss": loss, **stats, "base_model": str(base_model), "scale": scale, "pairs": int(len(pairs)),
            "seeds": int(pairs["seed_id"].nunique()), "epochs": epochs, "batch_size": batch_size,
            "learning_rate": learning_rate, "warmup_ratio": warmup_ratio, "max_length": max_length, "seed": seed})

    build_atomically(path, build)
    return path


def _groups(frame: pd.DataFrame):
    """One row per seed for ``MarginMSELoss``: the seed's text, its first ``size`` candidates' texts
    (``size`` = the smallest group) and their targets as one list."""
    import datasets
    groups = [g for _, g in frame.groupby("seed_id", sort=False)]
    size = min(len(g) for g in groups)
    cols = {"seed": [g.seed.iloc[0] for g in groups]}
    for i in range(size):
        cols[f"cand{i}"] = [g.cand.iloc[i] for g in groups]
    cols["label"] = [g.label.iloc[:size].tolist() for g in groups]
    cut = int(sum(len(g) - size for g in groups))
    return datasets.Dataset.from_dict(cols), {"group_size": size, "groups": len(groups), "pairs_cut": cut}


#: the unlabelled corpora a warm start distils on: ``acl`` (the 1,672 ACL papers of
#: ``sci/acl-core-citations``: no CSFCube paper) or ``csfcube`` (CSFCube's papers without its query
#: papers: in-domain, transductive in the way GPL is)
CORPORA = {"acl": "sci/acl-core-citations/train", "csfcube": "sci/csfcube"}


@dataclass(frozen=True)
class WarmStartSettings:
    """The settings of a warm start (:func:`warm_start_model`); the defaults are docs/sciface.md's
    margin-MSE setting.  ``seeds`` seed papers of ``corpus`` each give a group of candidates: with
    ``loss="mse"`` its neighbours at ranks 1, 2, 4, ..., 64 and one random paper (8 pairs), with
    ``"margin_mse"`` its nearest paper, ``sampled_ranks`` neighbours at ranks drawn from 2..100 and one
    random paper.  ``docs``: only the corpus's first ``docs`` papers (a quick check of the whole path)."""
    loss: str = "margin_mse"
    seeds: int = 1000
    corpus: str = "acl"
    epochs: int = 1
    docs: Optional[int] = None
    sampled_ranks: int = 6
    max_length: int = 256
    base_model: str = "default"
    seed: int = 0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"unknown distillation loss {self.loss!r}; one of {LOSSES}")
        _check_corpus(self.corpus)

    def key(self, legacy: bool = False) -> str:
        return settings_key(asdict(self), legacy=legacy)


def distillation_corpus(corpus: str = "acl", docs: Optional[int] = None) -> List[Tuple[str, str, str]]:
    """``(docno, title, abstract)`` of a warm-start corpus (:data:`CORPORA`), the first ``docs`` only when set;
    CSFCube's without its query papers, so no query is ever a distillation seed."""
    _check_corpus(corpus)
    if corpus == "acl":
        import ir_datasets
        out = [(d.doc_id, d.title, d.abstract) for d in ir_datasets.load(CORPORA[corpus]).docs_iter()]
    else:
        queries = csfcube.query_papers()
        out = [(d.doc_id, d.title, d.abstract) for d in csfcube.docs().values() if d.doc_id not in queries]
    return out[:docs] if docs else out


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"unknown warm-start corpus {corpus!r}; one of {tuple(CORPORA)}")


def warm_start_model(settings: WarmStartSettings = WarmStartSettings(), work: Union[None, str, Path] = None,
                     verbose: bool = False) -> Path:
    """The distilled cross-encoder of ``settings``, built on first use (the corpus's neighbour pairs with
    MiniLM's cosine, then :func:`distil_cross_encoder`, atomically under the model's lock) and kept in
    the work directory keyed by the settings:
    ``<work>/models/sciface/<corpus dataset>-warm-<loss>-<settings key>``."""
    path = trained_model_dir("sciface", CORPORA[settings.corpus], f"warm-{settings.loss}-{settings.key()}", work,
                             legacy_key=f"warm-{settings.loss}-{settings.key(legacy=True)}")
    if (path / "pt_meta.json").exists():
        return path
    about_to_train(path, f"the SciFACE warm-start student ({settings.loss}, {settings.corpus})")
    docs = distillation_corpus(settings.corpus, settings.docs)
    if settings.loss == "mse":
        pairs = neighbour_pairs(docs, n_seeds=settings.seeds, seed=settings.seed)
    else:
        pairs = neighbour_pairs(docs, n_seeds=settings.seeds, ranks=(1,), n_sampled_ranks=settings.sampled_ranks,
                                max_rank=100, n_random=1, seed=settings.seed)
    if verbose:
        print(f"sciface warm start: distilling MiniLM's similarities ({settings.loss}) on {len(pairs)} pairs of "
              f"{settings.seeds} {settings.corpus} seeds into {path} (once)", flush=True)
    return distil_cross_encoder(pairs, path, base_model=settings.base_model, epochs=settings.epochs,
                                max_length=settings.max_length, seed=settings.seed, loss=settings.loss,
                                verbose=verbose)
