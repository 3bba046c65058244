"""DORIS-MAE's supervised contrastive fine-tuning (§5.3): triplets from the training queries' pools
and the cosine triplet loss of Eq. 3; the result is a ``dense_model`` artifact."""
from __future__ import annotations

import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Optional, Union

import pandas as pd

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.datasets import doris_mae
from pyterrier_sci.plugins.dense.models import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    DEFAULT_MODEL,
    SentenceTransformerModel,
    load_sentence_transformer,
)
from pyterrier_sci.registry import irds_id
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

from .maxsim import MaxSimScorer


def make_triplets(dataset: str, qids: Optional[Iterable[str]] = None, per_query: int = 75, seed: int = 0,
                  min_gap: float = 0.0, doc_field: Optional[str] = None) -> pd.DataFrame:
    """Triplets (anchor = query text, positive = the higher-scored abstract, negative = the lower one)
    from the candidate pools of a ``sci/doris-mae`` id's queries (``qids`` to restrict them).

    Per query, ``per_query`` pairs of pool abstracts are drawn without replacement among the pairs
    whose normalised scores S/|Q| differ by more than ``min_gap`` (default: any difference), with a
    seeded RNG; the paper drew 3,000 triplets from 40 queries (75 per query).  Columns: ``qid``,
    ``anchor``, ``positive``, ``negative``, ``pos_docno``, ``neg_docno``, ``pos_score``, ``neg_score``."""
    import ir_datasets

    scores = doris_mae.scores_frame(dataset)
    queries = doris_mae.aspect_queries(dataset)
    if qids is not None:
        keep = {str(q) for q in qids}
        scores = scores[scores["qid"].isin(keep)]
    ds_id = irds_id(dataset)
    store = ir_datasets.load(ds_id).docs_store()
    rng = random.Random(seed)
    rows = []
    for qid, g in scores.groupby("qid", sort=True):
        items = list(zip(g["docno"], g["normalised"]))
        pairs = [(a, b) for (a, sa), (b, sb) in _combinations(items) if abs(sa - sb) > min_gap and sa != sb]
        chosen = rng.sample(pairs, min(per_query, len(pairs)))
        score_of = dict(items)
        for a, b in chosen:
            sa, sb = score_of[a], score_of[b]
            pos, neg, sp, sn = (a, b, sa, sb) if sa > sb else (b, a, sb, sa)
            rows.append({"qid": qid, "pos_docno": pos, "neg_docno": neg, "pos_score": sp, "neg_score": sn})
    df = pd.DataFrame(rows, columns=["qid", "pos_docno", "neg_docno", "pos_score", "neg_score"])
    docs = store.get_many(list(set(df["pos_docno"]) | set(df["neg_docno"]))) if len(df) else {}
    text = (lambda d: str(getattr(docs[d], doc_field))) if doc_field else (lambda d: docs[d].default_text())
    df.insert(1, "anchor", [queries[q].text for q in df["qid"]])
    df.insert(2, "positive", [text(d) for d in df["pos_docno"]])
    df.insert(3, "negative", [text(d) for d in df["neg_docno"]])
    return df


def _combinations(items):
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            yield items[i], items[j]


TRAINING_FILE = "doris_contrastive.json"


class ContrastiveModel(SentenceTransformerModel):
    """A model fine-tuned by :func:`fine_tune` (a ``dense_model`` artifact); ``training`` holds
    ``doris_contrastive.json``, and :meth:`maxsim` scores with it."""

    TRAINING_FILE = TRAINING_FILE

    def maxsim(self, **kwargs) -> MaxSimScorer:
        """A :class:`MaxSimScorer` with this model (keyword arguments as the scorer's)."""
        return MaxSimScorer(str(self.path), **kwargs)


def fine_tune(triplets: pd.DataFrame, output: Union[str, Path], base_model: str = DEFAULT_MODEL, margin: float = 0.1,
              epochs: int = 1, batch_size: int = 16, learning_rate: float = 2e-5, warmup_ratio: float = 0.1,
              max_seq_length: int = 256, max_steps: Optional[int] = None, seed: int = 0, device: Optional[str] = None,
              trainer: str = "auto", overwrite: bool = False, verbose: bool = False,
              extra_metadata: Optional[dict] = None) -> ContrastiveModel:
    """Fine-tunes ``base_model`` on ``triplets`` (columns ``anchor``, ``positive``, ``negative``) with the
    cosine triplet loss of Eq. 3, ``max(cos(A,N) - cos(A,P) + margin, 0)``, and saves it to ``output``.

    Training uses sentence-transformers' ``SentenceTransformerTrainer`` (``trainer`` ``"auto"`` or
    ``"st"``; the plain PyTorch fallback ``"torch"`` was removed).  The model is written atomically
    (:func:`~pyterrier_sci.artifacts.build_atomically`): an interrupted run leaves no half-written
    model.  An existing ``output`` is an error unless ``overwrite``."""
    try:
        from sentence_transformers.sentence_transformer import losses
    except ImportError:  # sentence-transformers < 5
        from sentence_transformers import losses
    output = Path(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} exists (pass overwrite=True to replace it)")
    for col in ("anchor", "positive", "negative"):
        if col not in triplets.columns:
            raise ValueError(f"triplets need an {col!r} column")
    if trainer == "torch":
        raise ValueError("trainer='torch' is no longer available: the plain PyTorch fallback was removed "
                         "(accelerate is a dependency); use trainer='st' (the default)")
    if trainer not in ("auto", "st"):
        raise ValueError(f"trainer must be 'auto' or 'st', not {trainer!r}")
    seed_everything(seed)
    model = load_sentence_transformer(base_model, device or "cpu")
    model.max_seq_length = int(max_seq_length)
    loss = losses.TripletLoss(model, distance_metric=losses.TripletDistanceMetric.COSINE, triplet_margin=float(margin))
    data = triplets[["anchor", "positive", "negative"]].astype(str).reset_index(drop=True)
    started = time.time()

    def build(tmp: Path) -> None:
        history = _train_st(model, loss, data, tmp, epochs, batch_size, learning_rate, warmup_ratio, max_steps, seed,
                            device, verbose)
        save_model(model, tmp)
        shutil.rmtree(tmp / "checkpoints", ignore_errors=True)
        meta = {"base_model": str(base_model), "loss": "TripletLoss(distance_metric=COSINE)", "margin": float(margin),
                "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                "warmup_ratio": warmup_ratio, "max_seq_length": int(max_seq_length), "max_steps": max_steps,
                "seed": seed, "trainer": "st",
                "triplets": int(len(data)), "loss_history": history, "seconds": round(time.time() - started, 1)}
        if "qid" in triplets.columns:
            meta["queries"] = sorted({str(q) for q in triplets["qid"]}, key=lambda q: (len(q), q))
        meta.update(extra_metadata or {})
        save_model_artifact(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT, meta, training_file=TRAINING_FILE)

    build_atomically(output, build, overwrite=overwrite, what="the fine-tuned model")
    return ContrastiveModel(output)


def _train_st(model, loss, data, tmp, epochs, batch_size, lr, warmup_ratio, max_steps, seed, device, verbose):
    from sentence_transformers import SentenceTransformerTrainer

    from datasets import Dataset
    args = trainer_arguments("sentence_transformer", tmp / "checkpoints", epochs=epochs, batch_size=batch_size,
                             learning_rate=lr, warmup_ratio=warmup_ratio, max_steps=max_steps, seed=seed, device=device,
                             verbose=verbose)
    return run_trainer(SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_pandas(data),
                                                  loss=loss), verbose)


@dataclass(frozen=True)
class ContrastiveSettings:
    """The settings of a supervised contrastive fine-tuning (§5.3) that ``doris_maxsim(train=True)`` runs:
    triplets drawn per training query (the paper: 3,000 from 40 queries, 75 each; the offline default is 15
    of the 20 training queries' smaller BIRCO pools), the triplet margin of Eq. 3, one epoch, and the
    trainer's batch, learning rate, warm-up, sequence length, step cap and seed."""

    base_model: str = DEFAULT_MODEL
    per_query: int = 15
    margin: float = 0.1
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    max_seq_length: int = 256
    max_steps: Optional[int] = None
    seed: int = 0

    def key(self, legacy: bool = False) -> str:
        """A short hash of the settings (the trained model's cache key; ``legacy``: the key of before)."""
        return settings_key(asdict(self), legacy=legacy)


def trained_model_path(train_dataset: str, settings: ContrastiveSettings, work: Optional[Path] = None) -> Path:
    """Where ``doris_maxsim(train=True)`` keeps the model fine-tuned on ``train_dataset`` with ``settings``."""
    return trained_model_dir("doris-mae", train_dataset, settings.key(), work, legacy_key=settings.key(legacy=True))


def trained_model(train_dataset: str, settings: ContrastiveSettings, work: Optional[Path] = None,
                  verbose: bool = False) -> ContrastiveModel:
    """The model fine-tuned on every query of ``train_dataset`` (a ``sci/doris-mae`` id) with ``settings``:
    read from :func:`trained_model_path` when a complete one is there, else trained and saved there first
    (atomically: an interrupted training leaves nothing a later call would take for a model)."""
    path = trained_model_path(train_dataset, settings, work)
    if (path / "pt_meta.json").exists():
        return ContrastiveModel(path)
    about_to_train(path, f"the DORIS-MAE contrastive model of {train_dataset}")
    triplets = make_triplets(train_dataset, per_query=settings.per_query, seed=settings.seed)
    if not len(triplets):
        raise ValueError(f"{train_dataset} gives no training triplet (its pools have no two abstracts with "
                         "different scores)")
    s = asdict(settings)
    per_query = s.pop("per_query")
    return fine_tune(triplets, path, overwrite=True, verbose=verbose,
                     extra_metadata={"train_dataset": train_dataset, "per_query": per_query,
                                     "settings_key": settings.key()}, **s)
