"""SciFACE's facet cross-encoders (Background, Method): the :class:`FacetCrossEncoder` artifact and
:func:`train_facet_cross_encoder` (margin ranking loss, best validation epoch kept, written
atomically).  The re-rankers live in :mod:`.rerank`; the input format and training are described in
``docs/sciface.md``.  A facet model runs on torch or, exported, on OpenVINO / ONNX Runtime in fp32
or int8 (``backend``, ``precision``; :func:`pyterrier_sci.plugins.dense.backends.load_cross_encoder`);
int8 calibrates on :func:`calibration_pairs` of a dataset's corpus.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.models import BackendError, check_backend
from pyterrier_sci.training import run_trainer, save_model_artifact, seed_everything, train_summary, trainer_arguments

from .triplets import (  # noqa: F401
    FACETS,
    PAIR_COLUMNS,
    check_pairs,
    collapse_method,
    csfcube_pairs,
    facet_scores,
    make_triplets,
    sample_per_seed,
    split_seeds,
)

ARTIFACT_TYPE = "facet_cross_encoder"
ARTIFACT_FORMAT = "sentence-transformers"
#: (seed, candidate) pairs that calibrate an int8 facet model (:func:`calibration_pairs`)
CALIBRATION_PAIRS = 128


def _clean(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return str(v).strip()


def pair_input(seed_title, seed_abstract, cand_title, cand_abstract, sep: str = "[SEP]") -> Tuple[str, str]:
    """The two segments given to the tokenizer (``sep`` is the tokenizer's separator token)."""
    a = f"{_clean(seed_title)} {sep} {_clean(seed_abstract)}" if _clean(seed_title) else _clean(seed_abstract)
    b = f"{_clean(cand_title)} {sep} {_clean(cand_abstract)}" if _clean(cand_title) else _clean(cand_abstract)
    return a, b


@contextlib.contextmanager
def _quiet():
    """Keeps loading and training silent at the Python level: transformers' load report of a new
    classification head, its progress bars and sentence-transformers' evaluator log lines.  These go
    through Python's logging, so :func:`pyterrier_sci.quiet.quiet_native` (which closes the process's
    stdout/stderr file descriptors, for native code) is not the tool: it would also swallow errors."""
    import transformers
    level = transformers.logging.get_verbosity()
    st_logger = logging.getLogger("sentence_transformers")
    st_level = st_logger.level
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    st_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if bars:
            transformers.utils.logging.enable_progress_bar()
        st_logger.setLevel(st_level)


def _load_cross_encoder(path: str, max_length: int, device: Optional[str] = None):
    from sentence_transformers import CrossEncoder
    with _quiet():
        return CrossEncoder(str(path), num_labels=1, max_length=max_length, device=device)


Paper = Tuple[str, str]  # (title, abstract)


def calibration_pairs(dataset: str, size: int = CALIBRATION_PAIRS, title_field: str = "title",
                      abstract_field: str = "abstract") -> Tuple[List[Tuple[Paper, Paper]], List[str]]:
    """The int8 calibration pairs of a facet model on ``dataset``: its corpus's first ``2 * size``
    documents with a non-empty abstract, in corpus order, paired in turn (document 2i is the seed,
    2i+1 the candidate), as ``((seed title, seed abstract), (cand title, cand abstract))``; and their
    docnos in that order.  Deterministic, streamed (nothing else is read), the same for every subset
    of a benchmark (they share a corpus), and it reads no query, pool or judgement of the benchmark."""
    import itertools

    import ir_datasets

    from pyterrier_sci.corpus import corpus_id, irds_id
    corpus = corpus_id(irds_id(dataset))
    ds = ir_datasets.load(corpus)
    if not ds.has_docs():
        raise BackendError(f"int8 calibration: dataset {dataset} has no documents")
    docs = ((str(d.doc_id), _clean(getattr(d, title_field, "")), _clean(getattr(d, abstract_field, None)))
            for d in ds.docs_iter())
    docs = list(itertools.islice((d for d in docs if d[2]), 2 * size))
    if len(docs) < 2:
        raise BackendError(f"int8 calibration: the corpus of {dataset} has fewer than two documents with "
                           f"a {abstract_field!r}")
    pairs = [((a[1], a[2]), (b[1], b[2])) for a, b in zip(docs[::2], docs[1::2])]
    return pairs, [d[0] for d in docs[:2 * len(pairs)]]


# ----------------------------------------------------------------------------------------------
# the artifact
# ----------------------------------------------------------------------------------------------
class FacetCrossEncoder(pt.Artifact):
    """A trained SciFACE facet model (directory with ``pt_meta.json`` and ``model/``).

    ``FacetCrossEncoder(path)`` or ``pt.Artifact.load(path)`` opens it; ``.scorer()`` hands out a
    :class:`FacetReranker`; ``.score(seeds, cands)`` scores pairs of ``(title, abstract)``.

    ``backend`` (``torch``, ``openvino``, ``onnx``) and ``precision`` (``fp32``, ``int8``): the engine
    the model runs on; the exports are built on first use and cached under ``<work>/models``
    (``work``: default the work directory).  int8 needs ``calibration``: a dataset id (its
    :func:`calibration_pairs`) or a list of ``((seed title, seed abstract), (cand title, cand
    abstract))``; an int8 export that does not keep the torch model's scores is refused with a
    :class:`~pyterrier_sci.models.BackendError` (docs/sciface.md, "Backends")."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT

    def __init__(self, path: Union[str, Path], device: Optional[str] = None, backend: str = "torch",
                 precision: str = "fp32", calibration: Union[None, str, Sequence] = None,
                 work: Union[None, str, Path] = None):
        super().__init__(path)
        self.device = device
        self.backend, self.precision = check_backend(backend, precision)
        if backend != "torch" and device not in (None, "cpu"):
            raise BackendError(f"backend {backend!r} runs on the CPU; device {device!r} needs backend='torch'")
        if precision == "int8" and calibration is None:
            raise BackendError("precision 'int8' calibrates on (seed, candidate) pairs: give calibration= a dataset "
                               f"(the first {CALIBRATION_PAIRS} pairs of its corpus) or a list of pairs")
        self.calibration = calibration if calibration is None or isinstance(calibration, str) \
            else tuple((tuple(a), tuple(b)) for a, b in calibration)
        self.work = work
        meta_path = Path(self.path) / "pt_meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.path} is not a facet cross-encoder artifact (no pt_meta.json); "
                                    "train one with pyterrier_sci.plugins.sciface.train_facet_cross_encoder")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("type") != ARTIFACT_TYPE:
            raise ValueError(f"{self.path} holds a {self.meta.get('type')!r} artifact, not {ARTIFACT_TYPE!r}")
        self.facet: str = self.meta["facet"]
        self.max_length: int = int(self.meta.get("max_length", 512))
        self._model = None

    @property
    def model(self):
        """The sentence-transformers CrossEncoder, or its export on ``backend`` (both have ``predict``
        and ``tokenizer``)."""
        if self._model is None:
            ce = _load_cross_encoder(str(Path(self.path) / "model"), self.max_length, self.device)
            if self.backend != "torch":
                from pyterrier_sci.plugins.dense.backends import load_cross_encoder
                ce = load_cross_encoder(ce, self.backend, self.precision, self._calibration(ce), work=self.work)
            self._model = ce
        return self._model

    def _calibration(self, ce):
        if self.precision != "int8":
            return None
        from pyterrier_sci.plugins.dense.backends import calibration_from_pairs
        sep = ce.tokenizer.sep_token or "[SEP]"
        if isinstance(self.calibration, str):
            from pyterrier_sci.corpus import corpus_id, irds_id
            pairs, docnos = calibration_pairs(self.calibration, CALIBRATION_PAIRS)
            source, extra = corpus_id(irds_id(self.calibration)), {  # the subsets of a benchmark share it
                "selection": f"the first {2 * len(pairs)} documents with an abstract in corpus order, paired in "
                             "turn (document 2i the seed, 2i+1 the candidate)",
                "first_docnos": docnos[:6]}
        else:
            pairs, docnos, source, extra = self.calibration, None, "pairs given by the caller", {}
        texts = [pair_input(s[0], s[1], c[0], c[1], sep) for s, c in pairs]
        return calibration_from_pairs(texts, source, docnos, **extra)

    def _key(self):
        return (str(Path(self.path).resolve()), self.backend, self.precision,
                self.calibration if self.precision == "int8" else None)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_model"] = None
        return state

    def __repr__(self) -> str:
        on = "" if self.backend == "torch" else f", backend={self.backend!r}, precision={self.precision!r}"
        return f"FacetCrossEncoder({str(self.path)!r}, facet={self.facet!r}{on})"

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetCrossEncoder) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetCrossEncoder",) + self._key())

    def on_backend(self, backend: Optional[str] = None, precision: Optional[str] = None,
                   calibration: Union[None, str, Sequence] = None,
                   work: Union[None, str, Path] = None) -> "FacetCrossEncoder":
        """This model on another backend / precision (None: keep this one's; ``backend='torch'`` alone
        means fp32); ``self`` when nothing changes."""
        precision = precision or ("fp32" if backend == "torch" else self.precision)
        backend = backend or self.backend
        calibration = self.calibration if calibration is None else calibration
        work = self.work if work is None else work
        if (backend, precision, calibration, work) == (self.backend, self.precision, self.calibration, self.work):
            return self
        return FacetCrossEncoder(self.path, self.device, backend, precision, calibration, work)

    def score(self, seeds: Sequence[Tuple[str, str]], cands: Sequence[Tuple[str, str]], batch_size: int = 32,
              show_progress_bar: bool = False) -> np.ndarray:
        """Raw scores (logits, no sigmoid) of ``(seed title, seed abstract)`` x ``(cand title, cand abstract)``."""
        return score_pairs(self.model, seeds, cands, batch_size=batch_size, show_progress_bar=show_progress_bar)

    def scorer(self, **kwargs) -> "FacetReranker":  # noqa: F821  (defined in .rerank, which imports this module)
        """A :class:`~pyterrier_sci.plugins.sciface.rerank.FacetReranker` with this model."""
        from .rerank import FacetReranker
        return FacetReranker(self, **kwargs)

    @classmethod
    def train(cls, pairs: pd.DataFrame, path: Union[str, Path], facet: str, **kwargs) -> "FacetCrossEncoder":
        return train_facet_cross_encoder(pairs, path, facet, **kwargs)


def score_pairs(model, seeds, cands, batch_size: int = 32, show_progress_bar: bool = False) -> np.ndarray:
    import torch
    sep = model.tokenizer.sep_token or "[SEP]"
    inputs = [pair_input(s[0], s[1], c[0], c[1], sep) for s, c in zip(seeds, cands)]
    if not inputs:
        return np.zeros(0, dtype=float)
    out = model.predict(inputs, batch_size=batch_size, activation_fn=torch.nn.Identity(),
                        show_progress_bar=show_progress_bar, convert_to_numpy=True)
    return np.asarray(out, dtype=float).reshape(-1)


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------
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
    An existing ``path`` is refused (artifacts are not overwritten)."""
    if facet not in FACETS:
        raise ValueError(f"facet must be one of {FACETS}, not {facet!r}")
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


def _train(pairs, triplets, val_pairs, out_dir: Path, facet: str, *, base_model, collapse, epochs, k,
           batch_size, lr, warmup_ratio, weight_decay, max_grad_norm, margin, max_length, seed, verbose,
           record) -> Dict[str, Any]:
    import torch
    from sentence_transformers.cross_encoder import CrossEncoderTrainer
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator
    from transformers import TrainerCallback

    import datasets

    from .loss import MarginRankingLoss

    seed_everything(seed)
    if base_model == "default":
        from pyterrier_sci.plugins.dense import resolve_model
        base_model = resolve_model("default")
    model = _load_cross_encoder(base_model, max_length)
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
        with _quiet():
            trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                          loss=MarginRankingLoss(model, margin=margin), evaluator=evaluator,
                                          callbacks=[KeepBest()])
            run_trainer(trainer, verbose)
    if best["state"] is not None:
        model.model.load_state_dict(best["state"])
    with _quiet():
        model.save(str(out_dir))
    return {"steps": int(trainer.state.global_step), "triplets_per_epoch": int(n_per_epoch),
            "best_epoch": best["epoch"], "val_spearman": None if best["epoch"] is None else round(best["spearman"], 4),
            "val_spearman_per_epoch": best["history"],
            "train_loss": round(float(train_summary(trainer)["train_loss"]), 4)}
