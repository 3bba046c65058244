"""SciFACE: facet-aware cross-encoder re-rankers (Background, Method).

* :class:`FacetCrossEncoder` - a trained facet model as a ``pt.Artifact`` (a directory with
  ``pt_meta.json`` and the sentence-transformers ``CrossEncoder`` under ``model/``); trained by
  :func:`train_facet_cross_encoder` (sentence-transformers' ``CrossEncoderTrainer`` with
  :class:`~pyterrier_sci.plugins.facet.loss.MarginRankingLoss`, margin 0.5), written atomically.
* :class:`FacetReranker` (``model.scorer()``, component ``facet_rerank``) - re-scores a result
  frame with one facet model; the facet score is also kept as ``<facet>_score``.
* :class:`FacetControl` (``facet_rerank(weights=...)``) - the controllable mode: a weighted sum of
  the per-query z-normalised Background and Method scores ("same method, different problem" =
  ``{"method": 1, "background": -0.5}``), both facet scores kept as columns.
* :class:`SeedText` - adds the seed paper's ``query_title`` / ``query_abstract`` from a docstore.

The cross-encoder input is the paper's
``[CLS] seed title [SEP] seed abstract [SEP] cand title [SEP] cand abstract [SEP]``: the tokenizer
gets the pair (``seed title [SEP] seed abstract``, ``cand title [SEP] cand abstract``) and
truncates ``longest_first`` from the end, i.e. at the abstract tails, titles kept.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.registry import DATASET, PATH, Param, params

from .triplets import (FACETS, PAIR_COLUMNS, check_pairs, collapse_method, csfcube_pairs, facet_scores,  # noqa: F401
                       make_triplets, sample_per_seed, split_seeds)

ARTIFACT_TYPE = "facet_cross_encoder"
ARTIFACT_FORMAT = "sentence-transformers"

PRESETS: Dict[str, Dict[str, float]] = {
    "same_method_different_problem": {"method": 1.0, "background": -0.5},
    "same_problem_different_method": {"background": 1.0, "method": -0.5},
    "both": {"background": 1.0, "method": 1.0},
    "background": {"background": 1.0, "method": 0.0},
    "method": {"background": 0.0, "method": 1.0},
}


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
    """transformers prints a load report when a classification head is new; keep loading silent."""
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


# ----------------------------------------------------------------------------------------------
# the artifact
# ----------------------------------------------------------------------------------------------
class FacetCrossEncoder(pt.Artifact):
    """A trained SciFACE facet model (directory with ``pt_meta.json`` and ``model/``).

    ``FacetCrossEncoder(path)`` or ``pt.Artifact.load(path)`` opens it; ``.scorer()`` hands out a
    :class:`FacetReranker`; ``.score(seeds, cands)`` scores pairs of ``(title, abstract)``."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT

    def __init__(self, path: Union[str, Path], device: Optional[str] = None):
        super().__init__(path)
        self.device = device
        meta_path = Path(self.path) / "pt_meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.path} is not a facet cross-encoder artifact (no pt_meta.json); "
                                    "train one with pyterrier_sci.plugins.facet.train_facet_cross_encoder")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("type") != ARTIFACT_TYPE:
            raise ValueError(f"{self.path} holds a {self.meta.get('type')!r} artifact, not {ARTIFACT_TYPE!r}")
        self.facet: str = self.meta["facet"]
        self.max_length: int = int(self.meta.get("max_length", 512))
        self._model = None

    @property
    def model(self):
        if self._model is None:
            self._model = _load_cross_encoder(str(Path(self.path) / "model"), self.max_length, self.device)
        return self._model

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_model"] = None
        return state

    def __repr__(self) -> str:
        return f"FacetCrossEncoder({str(self.path)!r}, facet={self.facet!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetCrossEncoder) and Path(other.path).resolve() == Path(self.path).resolve()

    def __hash__(self) -> int:
        return hash(("FacetCrossEncoder", str(Path(self.path).resolve())))

    def score(self, seeds: Sequence[Tuple[str, str]], cands: Sequence[Tuple[str, str]], batch_size: int = 32,
              show_progress_bar: bool = False) -> np.ndarray:
        """Raw scores (logits, no sigmoid) of ``(seed title, seed abstract)`` x ``(cand title, cand abstract)``."""
        return score_pairs(self.model, seeds, cands, batch_size=batch_size, show_progress_bar=show_progress_bar)

    def scorer(self, **kwargs) -> "FacetReranker":
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
    from pyterrier_sci.plugins.bm25 import build_atomically
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
        meta = {"type": ARTIFACT_TYPE, "format": ARTIFACT_FORMAT, "package_hint": "pyterrier-sci",
                "facet": facet, "max_length": max_length, "collapse_method": collapse,
                "base_model": base_model, "input": "seed title [SEP] seed abstract [SEP] cand title [SEP] cand abstract",
                "training": {"epochs": epochs, "triplets_per_seed": triplets_per_seed, "batch_size": batch_size,
                             "learning_rate": learning_rate, "warmup_ratio": warmup_ratio,
                             "weight_decay": weight_decay, "max_grad_norm": max_grad_norm, "margin": margin,
                             "seed": seed, "train_seeds": int(pairs["seed_id"].nunique()),
                             "train_pairs": int(len(pairs)), "triplets_available": int(len(triplets)),
                             "val_seeds": int(val_pairs["seed_id"].nunique()) if val_pairs is not None else 0,
                             **stats}}
        (tmp / "pt_meta.json").write_text(json.dumps(meta, indent=2))

    build_atomically(path, build)
    return FacetCrossEncoder(path)


def _train(pairs, triplets, val_pairs, out_dir: Path, facet: str, *, base_model, collapse, epochs, k,
           batch_size, lr, warmup_ratio, weight_decay, max_grad_norm, margin, max_length, seed, verbose,
           record) -> Dict[str, Any]:
    import datasets
    import torch
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator
    from transformers import TrainerCallback

    from pyterrier_sci.training import guard_finite
    from .loss import MarginRankingLoss

    torch.manual_seed(seed)
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
        evaluator = CrossEncoderCorrelationEvaluator([list(t) for t in _texts(val_pairs, sep)], vs.astype(float).tolist(),
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
        args = CrossEncoderTrainingArguments(
            output_dir=tmp, num_train_epochs=epochs, per_device_train_batch_size=batch_size,
            learning_rate=lr, warmup_steps=warmup_ratio, lr_scheduler_type="linear", weight_decay=weight_decay,
            max_grad_norm=max_grad_norm, optim="adamw_torch", seed=seed, data_seed=seed,
            batch_sampler=_per_seed_sampler_factory(n_per_epoch, record),
            eval_strategy="epoch" if evaluator is not None else "no", save_strategy="no",
            logging_strategy="no", report_to="none", disable_tqdm=not verbose, use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
        )
        with _quiet():
            trainer = guard_finite(CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                                       loss=MarginRankingLoss(model, margin=margin),
                                                       evaluator=evaluator, callbacks=[KeepBest()]))
            if not verbose:
                from transformers.trainer_callback import PrinterCallback, ProgressCallback
                trainer.remove_callback(PrinterCallback)
                trainer.remove_callback(ProgressCallback)
            out = trainer.train()
    if best["state"] is not None:
        model.model.load_state_dict(best["state"])
    with _quiet():
        model.save(str(out_dir))
    return {"steps": int(out.global_step), "triplets_per_epoch": int(n_per_epoch),
            "best_epoch": best["epoch"], "val_spearman": None if best["epoch"] is None else round(best["spearman"], 4),
            "val_spearman_per_epoch": best["history"], "train_loss": round(float(out.training_loss), 4)}


# ----------------------------------------------------------------------------------------------
# transformers
# ----------------------------------------------------------------------------------------------
def _as_model(model) -> FacetCrossEncoder:
    if isinstance(model, FacetCrossEncoder):
        return model
    if model is None:
        raise ValueError("a facet model is needed: the path of a FacetCrossEncoder artifact "
                         "(train one with pyterrier_sci.plugins.facet.train_facet_cross_encoder)")
    return FacetCrossEncoder(model)


class FacetReranker(pt.Transformer):
    """Re-scores a result frame with one SciFACE facet cross-encoder.

    Needs the candidate's ``title`` / ``abstract`` columns and the seed's ``query_title`` /
    ``query_abstract`` (:class:`SeedText` adds them); without seed columns the ``query`` text is
    the seed (no title split).  Sets ``score`` (the raw facet score) and 0-based ``rank``, and keeps
    the score as ``<facet>_score``; other input columns are kept.
    """

    def __init__(self, model, batch_size: int = 32, title_field: str = "title", abstract_field: str = "abstract",
                 seed_title_field: str = "query_title", seed_abstract_field: str = "query_abstract",
                 verbose: bool = False):
        self.model = _as_model(model)
        self.batch_size = batch_size
        self.title_field = title_field
        self.abstract_field = abstract_field
        self.seed_title_field = seed_title_field
        self.seed_abstract_field = seed_abstract_field
        self.verbose = verbose

    @property
    def facet(self) -> str:
        return self.model.facet

    @property
    def score_column(self) -> str:
        return f"{self.facet}_score"

    def _seeds(self, df: pd.DataFrame) -> List[Tuple[str, str]]:
        if self.seed_abstract_field in df.columns:
            titles = df[self.seed_title_field] if self.seed_title_field in df.columns else [""] * len(df)
            return list(zip(titles, df[self.seed_abstract_field]))
        return [("", q) for q in df["query"]]

    def facet_scores(self, df: pd.DataFrame) -> np.ndarray:
        cands = list(zip(df[self.title_field] if self.title_field in df.columns else [""] * len(df),
                         df[self.abstract_field]))
        return self.model.score(self._seeds(df), cands, batch_size=self.batch_size, show_progress_bar=self.verbose)

    def _validate(self, inp: pd.DataFrame) -> None:
        if self.seed_abstract_field in inp.columns:
            pta.validate.result_frame(inp, extra_columns=[self.abstract_field])
        else:
            pta.validate.result_frame(inp, extra_columns=["query", self.abstract_field])

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            cols = list(inp.columns) + [c for c in ("score", "rank", self.score_column) if c not in inp.columns]
            return pd.DataFrame(columns=cols)
        df = inp.copy()
        s = self.facet_scores(df)
        df[self.score_column] = s
        df["score"] = s
        return _ranked(df)

    def __repr__(self) -> str:
        return f"FacetReranker({str(self.model.path)!r}, facet={self.facet!r})"

    def _key(self):
        return (self.model, self.title_field, self.abstract_field, self.seed_title_field, self.seed_abstract_field)

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetReranker) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetReranker",) + self._key())


def _ranked(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=["rank"], errors="ignore")
    df = pt.model.add_ranks(df)
    return df.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)


def _zscore(s: pd.Series, groups: pd.Series) -> pd.Series:
    g = s.groupby(groups)
    sd = g.transform("std", ddof=0).replace(0.0, 1.0).fillna(1.0)
    return (s - g.transform("mean")) / sd


class FacetControl(pt.Transformer):
    """The controllable mode: ``score = sum_f weights[f] * z_f`` where ``z_f`` is facet f's score
    z-normalised within each query (the two models' scales differ; ``normalise="none"`` uses the raw
    scores).  ``weights`` is a dict or a preset name (:data:`PRESETS`, e.g.
    ``"same_method_different_problem"`` = method 1, background -0.5).  Keeps ``background_score``
    and ``method_score`` (raw) as columns."""

    def __init__(self, background, method, weights: Union[str, Mapping[str, float]] = "both",
                 normalise: str = "zscore", batch_size: int = 32, verbose: bool = False, **fields):
        self.background = background if isinstance(background, FacetReranker) else FacetReranker(background, batch_size=batch_size, verbose=verbose, **fields)
        self.method = method if isinstance(method, FacetReranker) else FacetReranker(method, batch_size=batch_size, verbose=verbose, **fields)
        if self.background.facet != "background" or self.method.facet != "method":
            raise ValueError(f"FacetControl needs a background and a method model, got "
                             f"{self.background.facet!r} and {self.method.facet!r}")
        if isinstance(weights, str):
            if weights not in PRESETS:
                raise ValueError(f"unknown preset {weights!r}; known: {sorted(PRESETS)}")
            weights = PRESETS[weights]
        unknown = set(weights) - set(FACETS)
        if unknown:
            raise ValueError(f"weights name unknown facets {sorted(unknown)}; facets are {FACETS}")
        if normalise not in ("zscore", "none"):
            raise ValueError("normalise must be 'zscore' or 'none'")
        self.weights = {f: float(weights.get(f, 0.0)) for f in FACETS}
        self.normalise = normalise
        self.batch_size = batch_size
        self.verbose = verbose

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self.background._validate(inp)
        cols = ("score", "rank", "background_score", "method_score")
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in cols if c not in inp.columns])
        df = inp.copy()
        total = np.zeros(len(df))
        for name, rr in (("background", self.background), ("method", self.method)):
            s = pd.Series(rr.facet_scores(df), index=df.index)
            df[f"{name}_score"] = s.to_numpy()
            z = _zscore(s, df["qid"]) if self.normalise == "zscore" else s
            total += self.weights[name] * z.to_numpy()
        df["score"] = total
        return _ranked(df)

    def __repr__(self) -> str:
        return f"FacetControl(weights={self.weights})"

    def _key(self):
        return (self.background, self.method, tuple(sorted(self.weights.items())), self.normalise)

    def __eq__(self, other) -> bool:
        return isinstance(other, FacetControl) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(("FacetControl",) + self._key())


class SeedText(pt.Transformer):
    """Adds the seed paper's ``query_title`` and ``query_abstract`` from a dataset's docstore.

    The seed's docno is the ``seed_docno`` column when present, else ``seed_id(qid)`` (default:
    CSFCube's convention, ``"10014168_method"`` -> ``"10014168"``).  Unknown seeds raise."""

    def __init__(self, dataset: str, seed_id=None, title_field: str = "title", abstract_field: str = "abstract"):
        self.dataset = dataset
        self.seed_id = seed_id
        self.title_field = title_field
        self.abstract_field = abstract_field

    def _seed(self, qid: str) -> str:
        return self.seed_id(qid) if self.seed_id is not None else str(qid).rsplit("_", 1)[0]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # a re-ranking step: it reads the results' qid and passes their docno on to the text loader
        pt.validate.result_frame(inp)
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in ("query_title", "query_abstract") if c not in inp.columns])
        import ir_datasets
        ds = ir_datasets.load(self.dataset[5:] if self.dataset.startswith("irds:") else self.dataset)
        ids = inp["seed_docno"] if "seed_docno" in inp.columns else inp["qid"].map(self._seed)
        wanted = sorted(set(map(str, ids)))
        docs = ds.docs_store().get_many(wanted)
        missing = [d for d in wanted if d not in docs]
        if missing:
            raise KeyError(f"seed papers {missing[:5]} are not in {self.dataset}'s corpus")
        df = inp.copy()
        df["query_title"] = [getattr(docs[str(i)], self.title_field, "") for i in ids]
        df["query_abstract"] = [getattr(docs[str(i)], self.abstract_field) for i in ids]
        return df

    def __repr__(self) -> str:
        return f"SeedText({self.dataset!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, SeedText) and (other.dataset, other.seed_id) == (self.dataset, self.seed_id)

    def __hash__(self) -> int:
        return hash(("SeedText", self.dataset))


@params(facet=Param(str, choices=FACETS, optional=True), model=Param(PATH, optional=True),
        background_model=Param(PATH, optional=True), method_model=Param(PATH, optional=True),
        weights=Param(str, dict, item=Param(float, min=-1e6, max=1e6), optional=True), dataset=Param(DATASET, optional=True),
        batch_size=Param(int, min=1, max=65536))
def facet_rerank_component(*inputs, context=None, facet: Optional[str] = None, model: Optional[str] = None,
                           background_model: Optional[str] = None, method_model: Optional[str] = None,
                           weights: Union[None, str, Mapping[str, float]] = None, normalise: str = "zscore",
                           dataset: Optional[str] = None, add_text: bool = True, batch_size: int = 32,
                           verbose: bool = False) -> pt.Transformer:
    """``facet_rerank(facet=method, model=PATH)``: SciFACE facet re-ranking of the input's results.
    ``facet_rerank(weights=same_method_different_problem, background_model=P1, method_model=P2)``:
    the controllable mode.  ``facet`` defaults to ``model``'s own facet (and to ``method`` without
    ``model``); a ``facet`` that differs from the model's is an error.  Without model paths the
    artifacts are looked up under the work directory at ``facet/<facet>``.  With a dataset (the pipeline's, or ``dataset=``) and
    ``add_text``, the seed's and candidates' titles and abstracts are added first."""
    def default_path(f):
        if context is None:
            raise ValueError(f"facet_rerank needs the {f} model's path (model=... / {f}_model=...)")
        p = Path(context.workdir()) / "facet" / f
        if not p.exists():
            raise FileNotFoundError(f"no {f} facet model at {p}; pass {f}_model=PATH or train one "
                                    "(pyterrier_sci.plugins.facet.train_facet_cross_encoder)")
        return str(p)

    if weights is None:
        if facet is not None and facet not in FACETS:
            raise ValueError(f"facet must be one of {FACETS}, not {facet!r}")
        want = facet or "method"
        m = model or (method_model if want == "method" else background_model) or default_path(want)
        rr: pt.Transformer = FacetReranker(m, batch_size=batch_size, verbose=verbose)
        if facet is not None and rr.facet != facet:
            raise ValueError(f"model {m} is a {rr.facet} model, not {facet}")
    else:
        rr = FacetControl(background_model or default_path("background"), method_model or default_path("method"),
                          weights=weights, normalise=normalise, batch_size=batch_size, verbose=verbose)
    dataset = dataset or (context.dataset if context is not None else None)
    if dataset and add_text:
        ds = pt.get_dataset(dataset if dataset.startswith("irds:") else "irds:" + dataset)
        rr = SeedText(dataset) >> pt.text.get_text(ds, ["title", "abstract"]) >> rr
    if len(inputs) > 1:
        raise ValueError("facet_rerank takes at most one input pipeline")
    return inputs[0] >> rr if inputs else rr
