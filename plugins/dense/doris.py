"""DORIS-MAE's dense methods (Wang et al., 2023): the sentence-level multi-vector scorer of Eq. 4,
the aspect-based query modes of section 5.2 / appendix C.3, and the supervised contrastive
fine-tuning of section 5.3.

* :class:`MaxSimScorer` re-scores a first stage (``pool >> MaxSimScorer(...)``) with any
  sentence-transformers model.  The query and the document are each encoded as a list of vectors
  and scored with Eq. 4, ``Rel(p|Q) = 1/n sum_i max_j cos(Q_i, p_j)``.  Query units
  (``query_mode``): ``whole`` (one vector: the single-vector baseline), ``sentences`` (one per query
  sentence), ``aspects`` (one per aspect, appendix C.3 approach 2), ``aspects_concat`` (the aspects
  joined into one text, section 5.2 / C.3 approach 1).  Document units (``doc_mode``): ``whole`` or
  ``sentences``.  With one unit on each side the score is the plain cosine.
* :func:`make_triplets` and :func:`fine_tune`: the triplets (query, higher-scored abstract,
  lower-scored abstract) of the training queries and the cosine triplet loss with margin of Eq. 3
  (sentence-transformers ``TripletLoss(distance_metric=COSINE)``), trained with
  ``SentenceTransformerTrainer``.  The result is a :class:`ContrastiveModel` artifact: a
  sentence-transformers directory (usable as ``model=<path>`` by ``dense`` and :class:`MaxSimScorer`)
  with ``pt_meta.json`` and ``doris_contrastive.json`` (how it was trained), written atomically.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.plugins.dense import DEFAULT_MODEL, load_sentence_transformer, resolve_model
from pyterrier_sci.registry import DATASET, Param, params

QUERY_MODES = ("whole", "sentences", "aspects", "aspects_concat")
DOC_MODES = ("whole", "sentences")

# ------------------------------------------------------------------------------------------------
# sentences
# ------------------------------------------------------------------------------------------------

_ABBREVIATIONS = {"e.g", "i.e", "et al", "al", "etc", "vs", "fig", "figs", "eq", "eqs", "cf", "resp", "approx",
                  "no", "sec", "ref", "refs", "dr", "mr", "ms", "prof", "viz", "ca", "incl", "tab", "ch", "vol"}
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> List[str]:
    """Sentences of a query or an abstract: a break after ``.``, ``!`` or ``?`` followed by a capital
    letter or a digit, except after common abbreviations (``e.g.``, ``et al.``, ``Fig.``) and initials.
    Line breaks are treated as spaces (arXiv abstracts are hard-wrapped).  Never empty: a text
    without a break is one sentence (an empty text gives ``[""]``)."""
    text = re.sub(r"\s+", " ", str(text or "")).strip()
    if not text:
        return [""]
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        piece = text[start:m.end()].strip()
        word = re.search(r"(\S+?)[.!?]+[\"')\]]*$", piece)
        w = word.group(1).lower().lstrip("(\"'[") if word else ""
        if w in _ABBREVIATIONS or (len(w) == 1 and w.isalpha()) or w.endswith(("e.g", "i.e")):
            continue
        out.append(piece)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out or [text]


# ------------------------------------------------------------------------------------------------
# encoding with a cache shared by every scorer of the same model
# ------------------------------------------------------------------------------------------------

class SentenceEncoder:
    """A sentence-transformers model with an in-memory cache of unit-length vectors by text: the
    whole-text, sentence and aspect rows of an experiment encode each distinct text once."""

    def __init__(self, model: str = DEFAULT_MODEL, device: Optional[str] = None, batch_size: int = 32,
                 max_seq_length: Optional[int] = None):
        self.model_name = model
        self.device = device or "cpu"
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self._model = None
        self._cache: Dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def model(self):
        if self._model is None:
            self._model = load_sentence_transformer(self.model_name, self.device)
            if self.max_seq_length:
                self._model.max_seq_length = int(self.max_seq_length)
        return self._model

    def encode(self, texts: Sequence[str], verbose: bool = False) -> np.ndarray:
        """Unit-length float32 rows, one per text (cached by text)."""
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vecs = self.model.encode(missing, batch_size=self.batch_size, convert_to_numpy=True,
                                     show_progress_bar=verbose and len(missing) > 10 * self.batch_size)
            vecs = np.asarray(vecs, dtype=np.float32)
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = vecs / np.where(norms == 0, 1.0, norms)
            with self._lock:
                for t, v in zip(missing, vecs):
                    self._cache[t] = v
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])

    def clear(self) -> None:
        self._cache.clear()


_ENCODERS: Dict[Tuple, SentenceEncoder] = {}


def shared_encoder(model: str = DEFAULT_MODEL, device: Optional[str] = None, batch_size: int = 32,
                   max_seq_length: Optional[int] = None) -> SentenceEncoder:
    """One :class:`SentenceEncoder` per (resolved model, device, max_seq_length) in the process."""
    key = (resolve_model(model), device or "cpu", max_seq_length)
    if key not in _ENCODERS:
        _ENCODERS[key] = SentenceEncoder(model, device, batch_size, max_seq_length)
    return _ENCODERS[key]


# ------------------------------------------------------------------------------------------------
# Eq. 4
# ------------------------------------------------------------------------------------------------

def maxsim(query_vecs: np.ndarray, doc_vecs: np.ndarray) -> float:
    """Eq. 4 on unit-length rows: the mean over query vectors of the max cosine over document vectors."""
    return float((query_vecs @ doc_vecs.T).max(axis=1).mean())


class MaxSimScorer(pt.Transformer):
    """Re-scores a result frame with Eq. 4 (see the module doc for the modes).

    Args:
        model: a sentence-transformers hub id, a local path (e.g. a :class:`ContrastiveModel`), or
            ``"default"`` (the offline all-MiniLM-L6-v2).
        query_mode: ``whole``, ``sentences``, ``aspects`` or ``aspects_concat``.
        doc_mode: ``whole`` or ``sentences``.
        dataset: an ir_datasets id whose docstore gives the document text when the input has no
            ``text_field`` column, and (for a ``sci/doris-mae`` id) the aspects when the input has no
            ``aspects`` column.
        text_field: the input column with the document text (default ``text``).
        doc_field: the document field read from the docstore (default: the document's ``default_text()``).
        batch_size, device, max_seq_length: encoding settings.
        verbose: a progress bar while encoding many texts.

    The aspect modes read the query's aspects from an ``aspects`` column (a tuple of texts, as
    :func:`pyterrier_sci.datasets.doris_mae.aspect_topics` gives) or from ``dataset``.
    """

    def __init__(self, model: str = DEFAULT_MODEL, query_mode: str = "sentences", doc_mode: str = "sentences",
                 dataset: Optional[str] = None, text_field: str = "text", doc_field: Optional[str] = None,
                 batch_size: int = 32, device: Optional[str] = None, max_seq_length: Optional[int] = None,
                 verbose: bool = False):
        if query_mode not in QUERY_MODES:
            raise ValueError(f"query_mode must be one of {QUERY_MODES}, not {query_mode!r}")
        if doc_mode not in DOC_MODES:
            raise ValueError(f"doc_mode must be one of {DOC_MODES}, not {doc_mode!r}")
        self.model = model
        self.query_mode = query_mode
        self.doc_mode = doc_mode
        self.dataset = dataset
        self.text_field = text_field
        self.doc_field = doc_field
        self.batch_size = batch_size
        self.device = device
        self.max_seq_length = max_seq_length
        self.verbose = verbose
        self._aspects: Optional[Dict[str, Tuple[str, ...]]] = None

    @property
    def encoder(self) -> SentenceEncoder:
        return shared_encoder(self.model, self.device, self.batch_size, self.max_seq_length)

    # -- units ------------------------------------------------------------------------------
    def query_units(self, qid: str, query: str, aspects: Optional[Sequence[str]] = None) -> List[str]:
        if self.query_mode == "whole":
            return [str(query)]
        if self.query_mode == "sentences":
            return split_sentences(query)
        if aspects is None:
            aspects = self._dataset_aspects().get(str(qid))
        if not aspects:
            raise ValueError(f"query mode {self.query_mode!r} needs the aspects of query {qid!r}: give an 'aspects' "
                             "column (pyterrier_sci.datasets.doris_mae.aspect_topics) or a sci/doris-mae dataset")
        aspects = [str(a) for a in aspects]
        return aspects if self.query_mode == "aspects" else [" ".join(aspects)]

    def doc_units(self, text: str) -> List[str]:
        return [str(text)] if self.doc_mode == "whole" else split_sentences(text)

    def _dataset_aspects(self) -> Dict[str, Tuple[str, ...]]:
        if self._aspects is None:
            if not self.dataset:
                self._aspects = {}
            else:
                from pyterrier_sci.datasets import doris_mae
                self._aspects = {q: tuple(a.aspect_texts()) for q, a in doris_mae.aspect_queries(self.dataset).items()}
        return self._aspects

    def _texts(self, inp: pd.DataFrame) -> List[str]:
        if self.text_field in inp.columns:
            return inp[self.text_field].astype(str).tolist()
        if not self.dataset:
            raise ValueError(f"MaxSimScorer needs a {self.text_field!r} column or a dataset to read the documents from")
        import ir_datasets
        store = ir_datasets.load(self.dataset[5:] if self.dataset.startswith("irds:") else self.dataset).docs_store()
        docs = store.get_many(list(dict.fromkeys(inp["docno"].astype(str))))
        def text(d):
            doc = docs.get(d)
            if doc is None:
                raise KeyError(f"document {d!r} is not in {self.dataset}")
            return str(getattr(doc, self.doc_field)) if self.doc_field else doc.default_text()
        return [text(d) for d in inp["docno"].astype(str)]

    # -- transform --------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query"])
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        inp = inp.reset_index(drop=True)
        texts = self._texts(inp)
        has_aspects = "aspects" in inp.columns
        q_units: Dict[str, List[str]] = {}
        for row in inp.drop_duplicates("qid").itertuples(index=False):
            q_units[str(row.qid)] = self.query_units(str(row.qid), row.query, getattr(row, "aspects", None) if has_aspects else None)
        d_units = [self.doc_units(t) for t in texts]
        all_texts = [u for us in q_units.values() for u in us] + [u for us in d_units for u in us]
        self.encoder.encode(list(dict.fromkeys(all_texts)), verbose=self.verbose)
        scores = np.empty(len(inp), dtype=np.float64)
        for qid, idx in inp.groupby("qid", sort=False).indices.items():
            qv = self.encoder.encode(q_units[str(qid)])
            units = [d_units[i] for i in idx]
            dv = self.encoder.encode([u for us in units for u in us])
            sims = qv @ dv.T                                   # (query units) x (all doc units of the query)
            starts = np.cumsum([0] + [len(us) for us in units[:-1]])
            scores[idx] = np.maximum.reduceat(sims, starts, axis=1).mean(axis=0)
        out = inp.assign(score=scores)
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable").reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def __repr__(self) -> str:
        return f"MaxSimScorer({self.model!r}, query_mode={self.query_mode!r}, doc_mode={self.doc_mode!r})"

    def _key(self):
        return (self.model, self.query_mode, self.doc_mode, self.dataset, self.text_field, self.doc_field, self.max_seq_length)

    def __eq__(self, other) -> bool:
        return isinstance(other, MaxSimScorer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("MaxSimScorer",) + self._key())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_aspects"] = None
        return state


@params(model=Param(str, min_len=1), query_mode=Param(str, min_len=1), doc_mode=Param(str, min_len=1),
        dataset=Param(DATASET, optional=True), batch_size=Param(int, min=1, max=65536),
        max_seq_length=Param(int, min=1, max=100_000, optional=True))
def maxsim_component(*, context=None, model: str = DEFAULT_MODEL, query_mode: str = "sentences",
                     doc_mode: str = "sentences", dataset: Optional[str] = None, text_field: str = "text",
                     doc_field: Optional[str] = None, batch_size: int = 32, device: Optional[str] = None,
                     max_seq_length: Optional[int] = None, verbose: bool = False) -> MaxSimScorer:
    """``doris_maxsim``: DORIS-MAE's multi-vector scorer (Eq. 4) over sentences or aspects, any sentence-transformers model."""
    dataset = dataset or (context.dataset if context is not None else None)
    return MaxSimScorer(model, query_mode, doc_mode, dataset=dataset, text_field=text_field, doc_field=doc_field,
                        batch_size=batch_size, device=device, max_seq_length=max_seq_length, verbose=verbose)


# ------------------------------------------------------------------------------------------------
# supervised contrastive fine-tuning (section 5.3)
# ------------------------------------------------------------------------------------------------

def make_triplets(dataset: str, qids: Optional[Iterable[str]] = None, per_query: int = 75, seed: int = 0,
                  min_gap: float = 0.0, doc_field: Optional[str] = None) -> pd.DataFrame:
    """Triplets (anchor = query text, positive = the higher-scored abstract, negative = the lower one)
    from the candidate pools of a ``sci/doris-mae`` id's queries (``qids`` to restrict them).

    Per query, ``per_query`` pairs of pool abstracts are drawn without replacement among the pairs
    whose normalised scores S/|Q| differ by more than ``min_gap`` (default: any difference), with a
    seeded RNG; the paper drew 3,000 triplets from 40 queries (75 per query).  Columns: ``qid``,
    ``anchor``, ``positive``, ``negative``, ``pos_docno``, ``neg_docno``, ``pos_score``, ``neg_score``."""
    import ir_datasets
    from pyterrier_sci.datasets import doris_mae
    scores = doris_mae.scores_frame(dataset)
    queries = doris_mae.aspect_queries(dataset)
    if qids is not None:
        keep = {str(q) for q in qids}
        scores = scores[scores["qid"].isin(keep)]
    ds_id = dataset[5:] if dataset.startswith("irds:") else dataset
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


ARTIFACT_TYPE = "dense_model"
ARTIFACT_FORMAT = "sentence_transformers"
TRAINING_FILE = "doris_contrastive.json"


class ContrastiveModel(pt.Artifact):
    """A fine-tuned sentence-transformers model on disk (a ``pt.Artifact``): the directory loads with
    ``SentenceTransformer(path)`` and works as ``model=<path>`` for ``dense`` and :class:`MaxSimScorer`;
    ``training`` holds how it was trained (``doris_contrastive.json``)."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT

    def __init__(self, path: Union[str, Path]):
        super().__init__(path)
        if not (Path(path) / "modules.json").exists():
            raise FileNotFoundError(f"{path} is not a sentence-transformers model directory (no modules.json)")

    @property
    def training(self) -> dict:
        """How the model was trained: ``doris_contrastive.json``, else the training fields of
        ``pt_meta.json`` (HLM-Cite's curriculum writes them there)."""
        p = Path(self.path) / TRAINING_FILE
        if p.exists():
            return json.loads(p.read_text())
        meta = json.loads((Path(self.path) / "pt_meta.json").read_text())
        return {k: v for k, v in meta.items() if k not in ("type", "format", "package_hint")}

    def sentence_transformer(self, device: Optional[str] = None):
        return load_sentence_transformer(str(self.path), device or "cpu")

    def maxsim(self, **kwargs) -> MaxSimScorer:
        """A :class:`MaxSimScorer` with this model (keyword arguments as the scorer's)."""
        return MaxSimScorer(str(self.path), **kwargs)

    def dense(self, **kwargs):
        """The ``dense`` component's transformer with this model."""
        from pyterrier_sci.plugins.dense import DenseRetriever
        return DenseRetriever(str(self.path), **kwargs)

    def __repr__(self) -> str:
        return f"ContrastiveModel({str(self.path)!r})"


def fine_tune(triplets: pd.DataFrame, output: Union[str, Path], base_model: str = DEFAULT_MODEL, margin: float = 0.1,
              epochs: int = 1, batch_size: int = 16, learning_rate: float = 2e-5, warmup_ratio: float = 0.1,
              max_seq_length: int = 256, max_steps: Optional[int] = None, seed: int = 0, device: Optional[str] = None,
              trainer: str = "auto", overwrite: bool = False, verbose: bool = False,
              extra_metadata: Optional[dict] = None) -> ContrastiveModel:
    """Fine-tunes ``base_model`` on ``triplets`` (columns ``anchor``, ``positive``, ``negative``) with the
    cosine triplet loss of Eq. 3, ``max(cos(A,N) - cos(A,P) + margin, 0)``, and saves it to ``output``.

    ``trainer="auto"`` uses sentence-transformers' ``SentenceTransformerTrainer`` (needs the
    ``accelerate`` package) and falls back to a plain PyTorch loop over the same loss module (AdamW,
    linear warm-up then decay, the same batches) when ``accelerate`` is missing; ``"st"`` / ``"torch"``
    force one.  The model is written to a temporary directory beside ``output`` and renamed into place:
    an interrupted run leaves no half-written model.  An existing ``output`` is an error unless
    ``overwrite``."""
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
    if trainer not in ("auto", "st", "torch"):
        raise ValueError("trainer must be 'auto', 'st' or 'torch'")
    if trainer == "auto":
        try:
            import accelerate  # noqa: F401
            trainer = "st"
        except ImportError:
            trainer = "torch"
    _seed_everything(seed)
    model = load_sentence_transformer(base_model, device or "cpu")
    model.max_seq_length = int(max_seq_length)
    loss = losses.TripletLoss(model, distance_metric=losses.TripletDistanceMetric.COSINE, triplet_margin=float(margin))
    data = triplets[["anchor", "positive", "negative"]].astype(str).reset_index(drop=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f"{output.name}.partial-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    started = time.time()
    try:
        if trainer == "st":
            history = _train_st(model, loss, data, tmp, epochs, batch_size, learning_rate, warmup_ratio, max_steps, seed,
                                device, verbose)
        else:
            history = _train_torch(model, loss, data, epochs, batch_size, learning_rate, warmup_ratio, max_steps, seed, verbose)
        model.save(str(tmp))
        shutil.rmtree(tmp / "checkpoints", ignore_errors=True)
        meta = {"base_model": str(base_model), "loss": "TripletLoss(distance_metric=COSINE)", "margin": float(margin),
                "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate, "warmup_ratio": warmup_ratio,
                "max_seq_length": int(max_seq_length), "max_steps": max_steps, "seed": seed, "trainer": trainer,
                "triplets": int(len(data)), "loss_history": history, "seconds": round(time.time() - started, 1)}
        if "qid" in triplets.columns:
            meta["queries"] = sorted({str(q) for q in triplets["qid"]}, key=lambda q: (len(q), q))
        meta.update(extra_metadata or {})
        (tmp / TRAINING_FILE).write_text(json.dumps(meta, indent=2))
        (tmp / "pt_meta.json").write_text(json.dumps({"type": ARTIFACT_TYPE, "format": ARTIFACT_FORMAT,
                                                      "package_hint": "pyterrier-sci"}))
        _replace_dir(tmp, output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return ContrastiveModel(output)


def _seed_everything(seed: int) -> None:
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _replace_dir(tmp: Path, output: Path) -> None:
    """Moves ``tmp`` to ``output``; an existing ``output`` is moved aside first and removed after."""
    old = None
    if output.exists():
        old = output.with_name(f"{output.name}.old-{os.getpid()}")
        os.rename(output, old)
    try:
        os.rename(tmp, output)
    except OSError:
        if old is not None:
            os.rename(old, output)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _train_st(model, loss, data, tmp, epochs, batch_size, lr, warmup_ratio, max_steps, seed, device, verbose):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from transformers.utils import logging as hf_logging
    import inspect
    from transformers import TrainingArguments
    from pyterrier_sci.training import guard_finite
    params = inspect.signature(TrainingArguments.__init__).parameters
    # transformers 5 reads a float warmup_steps < 1 as a ratio (warmup_ratio is deprecated there)
    warmup = {"warmup_ratio": warmup_ratio} if "warmup_ratio" in params else {"warmup_steps": float(warmup_ratio)}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp / "checkpoints"), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=lr, max_steps=max_steps if max_steps else -1, seed=seed, data_seed=seed, save_strategy="no",
        report_to="none", logging_strategy="steps", logging_steps=1, use_cpu=(device or "cpu") == "cpu",
        disable_tqdm=not verbose, dataloader_num_workers=0, **warmup)
    was = hf_logging.get_verbosity()
    if not verbose:
        hf_logging.set_verbosity_error()
    try:
        tr = guard_finite(SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_pandas(data),
                                                     loss=loss))
        if not verbose:  # the loss of every step is kept in the metadata, not printed
            from transformers.trainer_callback import PrinterCallback, ProgressCallback
            tr.remove_callback(PrinterCallback)
            tr.remove_callback(ProgressCallback)
        tr.train()
    finally:
        hf_logging.set_verbosity(was)
    return [round(float(h["loss"]), 5) for h in tr.state.log_history if "loss" in h]


def _train_torch(model, loss, data, epochs, batch_size, lr, warmup_ratio, max_steps, seed, verbose):
    import torch
    from pyterrier_sci.training import check_finite_loss, first_non_finite_parameter
    n_batches = (len(data) + batch_size - 1) // batch_size
    total = n_batches * epochs if not max_steps else min(max_steps, n_batches * epochs)
    warmup = int(round(total * warmup_ratio))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    gen = torch.Generator().manual_seed(seed)
    history, step = [], 0
    model.train()
    bar = pt.tqdm(total=total, desc="fine-tuning", disable=not verbose)
    for _ in range(epochs):
        order = torch.randperm(len(data), generator=gen).tolist()
        for b in range(n_batches):
            if step >= total:
                break
            rows = data.iloc[order[b * batch_size:(b + 1) * batch_size]]
            feats = [_to_device(model.tokenize(rows[c].tolist()), model.device) for c in ("anchor", "positive", "negative")]
            value = loss(feats, None)
            check_finite_loss(value, step + 1)
            value.backward()
            opt.step()
            bad = first_non_finite_parameter(model.named_parameters())
            if bad is not None:
                check_finite_loss(float("nan"), step + 1, what=f"parameter {bad!r}")
            sched.step()
            opt.zero_grad()
            history.append(round(float(value.detach()), 5))
            step += 1
            bar.update(1)
    bar.close()
    model.eval()
    return history


def _to_device(features: dict, device) -> dict:
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in features.items()}
