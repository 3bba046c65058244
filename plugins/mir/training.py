"""MIR's methodology inspiration retriever (§5.1, Algorithm 1): MAG-guided sampling of three triplet
types, the joint triplet loss, :func:`train_mir` (a :class:`MIRModel` artifact, type ``dense_model``,
format ``mir``) and the ``mir_dense`` component.  The method, its offline substitutes and the chosen
defaults are described in ``docs/mir.md`` ("Training" and "Choices the paper leaves open").
"""
from __future__ import annotations

import functools
import importlib
import json
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from torch import Tensor, nn

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.datasets import mir_multicite
from pyterrier_sci.plugins.dense import (
    DEFAULT_MODEL,
    DenseRetriever,
    dense_component,
    load_sentence_transformer,
    model_slug,  # noqa: F401 - part of this module's names (the cache key slugs the base model with it)
)
from pyterrier_sci.plugins.dense.models import SentenceTransformerModel
from pyterrier_sci.training import (
    FoldRouting,
    freeze_lower_layers,
    run_trainer,
    save_model,
    save_model_artifact,
    seed_everything,
    settings_key,
    train_summary,
    trained_model_dir,
    trainer_arguments,
)

from .mag import MethodologyAdjacencyGraph
from .measures import measure

__all__ = ["KeywordExtractor", "DomainIndex", "MAGSampler", "JointTripletLoss", "EpochBatchSampler",
           "MIRTrainingConfig", "MIRModel", "train_mir", "TRIPLET_SETS", "evaluate_part", "table2_figures",
           "trained_model_path", "mir_retriever", "wise_ft_model", "RollingRouted", "rolling_folds"]

TRIPLET_SETS = {"T1": ("T1",), "T1+T2": ("T1", "T2"), "T1+T3": ("T1", "T3"), "all": ("T1", "T2", "T3"),
                "T1+T2+T3": ("T1", "T2", "T3")}
#: the text columns of a training row: each distinct text of a sample once (P, l+ and c+ serve two
#: triplets each), then one negative per trained triplet type
_BASE_COLUMNS = ("proposal_text", "paper_text", "context_text")
_NEGATIVE = {"T1": "t1_negative", "T2": "t2_negative", "T3": "t3_negative"}
#: (anchor, positive) of each type, as indices into _BASE_COLUMNS
_TRIPLET = {"T1": (0, 1), "T2": (2, 0), "T3": (2, 1)}

# ------------------------------------------------------------------------------------------------
# domain representation: the offline substitute for PL-Marker + SciBERT
# ------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-]*[A-Za-z0-9]|[A-Za-z]")
_EXTRA_STOP = {"paper", "propose", "proposed", "present", "presents", "presented", "approach", "approaches", "method",
               "methods", "work", "study", "research", "problem", "problems", "motivation", "motivated", "aims", "aim",
               "goal", "address", "addressing", "new", "novel", "based", "using", "use", "used", "show", "shows",
               "results", "result", "existing", "current", "need", "task", "tasks", "model", "models", "driven",
               "specifically", "particularly", "improve", "improving", "develop", "developing", "effective",
               "effectively"}


class KeywordExtractor:
    """Keyword phrases of scientific text (the offline substitute for PL-Marker, see docs/mir.md).

    Args:
        n_keywords: phrases kept per text.
        max_words: longest phrase (words).
    """

    def __init__(self, n_keywords: int = 10, max_words: int = 3):
        self.n_keywords = n_keywords
        self.max_words = max_words
        self._vec = None

    @staticmethod
    def _stop_words():
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
        return ENGLISH_STOP_WORDS | _EXTRA_STOP

    def phrases(self, text: str) -> List[str]:
        """Candidate phrases: sub-phrases (1..``max_words`` words) of the runs between stop words and punctuation."""
        stop = self._stop_words()
        out: List[str] = []
        for chunk in re.split(r"[.,;:!?()\[\]{}\"'/]|\s-\s", str(text or "")):
            run: List[str] = []
            for w in _WORD.findall(chunk) + [None]:
                if w is None or w.lower() in stop or len(w) < 2 or w.isdigit():
                    for n in range(1, self.max_words + 1):
                        for i in range(len(run) - n + 1):
                            out.append(" ".join(run[i:i + n]).lower())
                    run = []
                else:
                    run.append(w)
        return out

    def fit(self, texts: Iterable[str]) -> "KeywordExtractor":
        from sklearn.feature_extraction.text import TfidfVectorizer
        self._vec = TfidfVectorizer(analyzer=self.phrases, sublinear_tf=True)
        self._vec.fit(list(texts))
        return self

    def keywords(self, texts: Sequence[str]) -> List[List[str]]:
        """The top phrases of each text (highest TF-IDF first; ties alphabetical)."""
        if self._vec is None:
            self.fit(texts)
        mat = self._vec.transform(list(texts))
        vocab = self._vec.get_feature_names_out()
        out = []
        for i in range(mat.shape[0]):
            row = mat.getrow(i)
            pairs = sorted(zip(row.data, row.indices), key=lambda x: (-x[0], vocab[x[1]]))
            out.append([str(vocab[j]) for _, j in pairs[:self.n_keywords]])
        return out

    def keyword_text(self, texts: Sequence[str]) -> List[str]:
        """The paper's condensed form: the keywords sorted alphabetically and joined with ", "."""
        return [", ".join(sorted(k)) for k in self.keywords(texts)]


class DomainIndex:
    """Domain vectors of the graph's proposals and papers, and SIM (cosine) between them.

    Args:
        graph: the training MAG.
        model: ``"tfidf"`` or a sentence-transformers model for the keyword texts (``"default"``:
            the offline MiniLM; the paper used SciBERT).
        n_keywords: keywords per text.
    """

    def __init__(self, graph: MethodologyAdjacencyGraph, model: str = DEFAULT_MODEL, n_keywords: int = 10,
                 batch_size: int = 64):
        self.model = model
        ex = KeywordExtractor(n_keywords)
        pids, lids = list(graph.proposals), list(graph.papers)
        texts = [graph.proposals[p] for p in pids] + [graph.papers[lid] for lid in lids]
        ex.fit(texts)
        kw = ex.keyword_text(texts)
        self.proposal_keywords = dict(zip(pids, kw[:len(pids)]))
        self.paper_keywords = dict(zip(lids, kw[len(pids):]))
        if model == "tfidf":
            from sklearn.feature_extraction.text import TfidfVectorizer
            vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(kw)
            m = vec.transform(kw).toarray().astype(np.float32)
        else:
            st = load_sentence_transformer(model, "cpu")
            m = np.asarray(st.encode(kw, batch_size=batch_size, convert_to_numpy=True), dtype=np.float32)
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        m = m / np.where(norms == 0, 1.0, norms)
        self._p = dict(zip(pids, m[:len(pids)]))
        self._l_ids = lids
        self._l = m[len(pids):]
        self._l_pos = {lid: i for i, lid in enumerate(lids)}

    def most_similar_papers(self, proposal: str, exclude: Iterable[str], n: int = 1) -> List[str]:
        """The ``n`` papers (not in ``exclude``) with the highest SIM to ``proposal``; ties by graph order."""
        sims = self._l @ self._p[proposal]
        ex = {self._l_pos[lid] for lid in exclude if lid in self._l_pos}
        order = np.argsort(-sims, kind="stable")
        return [self._l_ids[i] for i in order if i not in ex][:n]


# ------------------------------------------------------------------------------------------------
# MAG-guided sampling (Eqs. 2-4, Algorithm 1)
# ------------------------------------------------------------------------------------------------

class MAGSampler:
    """Draws Algorithm 1's triplets from a training MAG (Eqs. 2-4; see docs/mir.md).

    Args:
        graph: the training :class:`MethodologyAdjacencyGraph`.
        alpha: probability of hard negatives per sample (``r <= alpha``).
        sampling: MAG-guided sampling on; ``False`` = soft negatives only ("w/o S").
        triplets: ``"all"``, ``"T1"``, ``"T1+T2"``, ``"T1+T3"`` (or a tuple of ``T1``/``T2``/``T3``).
        domain: a :class:`DomainIndex` (built from ``graph`` with ``domain_model`` when ``None``; not
            needed when sampling is off or T1 is not trained).
        hard_top: T1's hard negative is drawn among the ``hard_top`` most similar uncited papers.
        samples: ``"contexts"`` (one sample per methodological context) or ``"proposals"``.
        seed: the RNG seed (every epoch's draw depends only on it and the epoch).
    """

    def __init__(self, graph: MethodologyAdjacencyGraph, alpha: float = 0.5, sampling: bool = True,
                 triplets: Union[str, Sequence[str]] = "all", domain: Optional[DomainIndex] = None,
                 domain_model: str = DEFAULT_MODEL, hard_top: int = 1, samples: str = "contexts", seed: int = 0):
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], not {alpha}")
        if samples not in ("contexts", "proposals"):
            raise ValueError("samples must be 'contexts' or 'proposals'")
        self.graph = graph
        self.alpha = float(alpha)
        self.sampling = bool(sampling)
        self.types = triplet_types(triplets)
        self.hard_top = max(1, int(hard_top))
        self.samples_mode = samples
        self.seed = seed
        self.samples = graph.samples()
        if not self.samples:
            raise ValueError("the training graph has no methodological citation context: nothing to train on")
        if len(graph.papers) < 2 or len(graph.proposals) < 2:
            raise ValueError("the training graph needs at least two proposals and two cited papers")
        if domain is None and self.sampling and self.alpha > 0 and "T1" in self.types:
            domain = DomainIndex(graph, domain_model)
        self.domain = domain
        self._by_proposal: Dict[str, List] = {}
        for s in self.samples:
            self._by_proposal.setdefault(s.proposal, []).append(s)
        self._hard_t1: Dict[str, List[str]] = {}
        self.stats: Dict[str, int] = {}

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def _t1_hard(self, p: str) -> List[str]:
        if p not in self._hard_t1:
            self._hard_t1[p] = self.domain.most_similar_papers(p, self.graph.cited(p), self.hard_top)
        return self._hard_t1[p]

    def negatives(self, sample, rng: random.Random) -> Dict[str, Tuple[str, str]]:
        """``{type: (negative id, "hard"|"soft")}`` for one sample (one r for all its triplets)."""
        g, p = self.graph, sample.proposal
        hard = self.sampling and rng.random() <= self.alpha
        out: Dict[str, Tuple[str, str]] = {}
        uncited = None
        for t in self.types:
            choice = None
            if hard:
                if t == "T1":
                    cands = self._t1_hard(p)
                elif t == "T2":
                    cands = g.overlapping_proposals(p)
                else:
                    cands = g.non_methodological(p)
                if cands:
                    choice = (rng.choice(cands), "hard")
                else:
                    self._count(f"{t}_hard_missing")
            if choice is None:
                if t == "T2":
                    choice = (rng.choice(g.other_proposals(p)), "soft")
                else:
                    if uncited is None:
                        uncited = g.uncited(p)
                    if not uncited:
                        raise ValueError(f"proposal {p!r} cites every paper of the training corpus: "
                                         f"no negative for {t}")
                    choice = (rng.choice(uncited), "soft")
            self._count(f"{t}_{choice[1]}")
            out[t] = choice
        return out

    def epoch(self, epoch: int) -> pd.DataFrame:
        """One epoch of training rows (shuffled), text columns per triplet type plus ids."""
        rng = random.Random(f"{self.seed}-{epoch}")
        g = self.graph
        if self.samples_mode == "contexts":
            chosen = list(self.samples)
        else:
            chosen = [rng.choice(self._by_proposal[p]) for p in sorted(self._by_proposal, key=list(g.proposals).index)]
        rng.shuffle(chosen)
        rows = []
        for s in chosen:
            negs = self.negatives(s, rng)
            row = {"proposal": s.proposal, "paper": s.paper, "proposal_text": g.proposals[s.proposal],
                   "paper_text": g.papers[s.paper], "context_text": s.context}
            for t in self.types:
                neg, kind = negs[t]
                row[_NEGATIVE[t]] = g.proposals[neg] if t == "T2" else g.papers[neg]
                row[f"{t.lower()}_negative_id"] = neg
                row[f"{t.lower()}_negative_kind"] = kind
            rows.append(row)
        return pd.DataFrame(rows)

    def text_columns(self) -> List[str]:
        """The columns the loss reads: proposal, paper and context texts, then the negatives of the trained types."""
        return list(_BASE_COLUMNS[:2] if self.types == ("T1",) else _BASE_COLUMNS) + [_NEGATIVE[t] for t in self.types]


def triplet_types(triplets: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """``"all"`` / ``"T1+T3"`` / ``("T1", "T2")`` -> the triplet types, T1 always included (the paper's ablations)."""
    if isinstance(triplets, str):
        if triplets not in TRIPLET_SETS:
            raise ValueError(f"triplets must be one of {sorted(TRIPLET_SETS)}, not {triplets!r}")
        return TRIPLET_SETS[triplets]
    types = tuple(dict.fromkeys(str(t).upper() for t in triplets))
    if not types or any(t not in _NEGATIVE for t in types):
        raise ValueError(f"triplet types must be among T1, T2, T3, not {triplets!r}")
    return tuple(t for t in ("T1", "T2", "T3") if t in types)


# ------------------------------------------------------------------------------------------------
# the loss and the batch sampler
# ------------------------------------------------------------------------------------------------

class JointTripletLoss(nn.Module):
    """Algorithm 1's joint objective: the Eq. 1 triplet margin loss with L2 distance (sentence-transformers'
    ``TripletLoss(distance_metric=EUCLIDEAN, triplet_margin=margin)``) of each trained triplet type of a
    row, summed.

    A row's columns are the proposal P, the cited paper l+, the methodological context c+ (left out when
    only T1 is trained), then one negative per type in ``types`` order.  Each distinct text is encoded
    once per step: T1 = (P, l+, n1), T2 = (c+, P, n2), T3 = (c+, l+, n3) share P, l+ and c+, whose
    gradients add up exactly as with separate copies."""

    def __init__(self, model, margin: float = 1.0, types: Sequence[str] = ("T1", "T2", "T3")):
        super().__init__()
        from sentence_transformers.sentence_transformer.losses import TripletDistanceMetric, TripletLoss
        self.model = model
        self.margin = float(margin)
        self.types = tuple(types)
        self.triplet = TripletLoss(model, distance_metric=TripletDistanceMetric.EUCLIDEAN, triplet_margin=self.margin)

    def forward(self, sentence_features: Iterable[Dict[str, Tensor]], labels: Optional[Tensor]) -> Tensor:
        from sentence_transformers.base.losses.merged_forward import embed_columns
        feats = list(sentence_features)
        n_base = 2 if self.types == ("T1",) else 3
        if len(feats) != n_base + len(self.types):
            raise ValueError(f"JointTripletLoss expects {n_base + len(self.types)} text columns, got {len(feats)}")
        emb = [self.model(f)["sentence_embedding"] for f in feats[:n_base]]
        emb += embed_columns(self.model, feats[n_base:], separate_first=False)
        total = None
        for k, t in enumerate(self.types):
            a, p = _TRIPLET[t]
            value = self.triplet.compute_loss_from_embeddings([emb[a], emb[p], emb[n_base + k]], labels)
            total = value if total is None else total + value
        return total

    def get_config_dict(self):
        return {"distance_metric": "TripletDistanceMetric.EUCLIDEAN", "triplet_margin": self.margin,
                "triplet_types": list(self.types)}


def _epoch_batch_sampler_class():
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import SequentialSampler

    class EpochBatchSampler(DefaultBatchSampler):
        """Reads the rows in order, in batches that stay inside blocks of ``block`` rows (one block =
        one epoch of Algorithm 1 with its own negatives and order)."""

        def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                     seed: int = 0, block: Optional[int] = None):
            super().__init__(SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last,
                             valid_label_columns=valid_label_columns, generator=generator, seed=seed)
            self.n = len(dataset)
            self.block = int(block or self.n)

        def _batches(self):
            for start in range(0, self.n, self.block):
                end = min(self.n, start + self.block)
                for b in range(start, end, self.batch_size):
                    batch = list(range(b, min(b + self.batch_size, end)))
                    if self.drop_last and len(batch) < self.batch_size:
                        continue
                    yield batch

        def __iter__(self):
            return self._batches()

        def __len__(self):
            return sum(1 for _ in self._batches())

    return EpochBatchSampler


def EpochBatchSampler(*args, **kwargs):  # noqa: N802  (a class to its callers)
    """A ``sentence_transformers`` batch sampler over consecutive epoch blocks (batches never straddle two epochs)."""
    return _epoch_batch_sampler_class()(*args, **kwargs)


# ------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------

@dataclass
class MIRTrainingConfig:
    """Every setting of a MIR fine-tuning run (stored in ``mir_training.json``)."""
    base_model: str = DEFAULT_MODEL
    triplets: str = "all"
    sampling: bool = True
    alpha: float = 0.5
    margin: float = 0.2
    epochs: int = 1
    batch_size: int = 4
    learning_rate: float = 1e-5
    warmup_ratio: float = 0.1
    max_seq_length: int = 256
    hard_top: int = 1
    samples: str = "contexts"
    domain_model: str = DEFAULT_MODEL
    n_keywords: int = 10
    lora: Union[bool, Dict] = False
    seed: int = 0
    device: Optional[str] = None
    max_steps: Optional[int] = None
    frozen_layers: int = 0

    def key(self, legacy: bool = False) -> str:
        """A short hash of the settings that change the model (for caching trained models; ``legacy``: the
        key of before)."""
        d = asdict(self)
        d.pop("device")
        if not d["frozen_layers"]:      # added later: keys of models trained before it stay valid
            d.pop("frozen_layers")
        return settings_key(d, legacy=legacy)


ARTIFACT_TYPE = "dense_model"
ARTIFACT_FORMAT = "mir"
TRAINING_FILE = "mir_training.json"


class MIRModel(SentenceTransformerModel):
    """A MIR fine-tuned sentence-transformers model on disk (a ``pt.Artifact``, type ``dense_model``,
    format ``mir``).  ``training`` holds ``mir_training.json``; :meth:`retriever` gives the ``mir_dense``
    transformer, :meth:`dense` the plain ``dense`` one (the same class)."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    TRAINING_FILE = TRAINING_FILE

    @property
    def training(self) -> dict:
        p = Path(self.path) / TRAINING_FILE
        return json.loads(p.read_text()) if p.exists() else {}

    def retriever(self, dataset: Optional[str] = None, **kwargs) -> DenseRetriever:
        """``mir_dense`` with this model over ``dataset``'s corpus (or re-scoring a first stage);
        ``kwargs`` are those of :func:`mir_retriever`."""
        return mir_retriever(str(self.path), dataset=dataset, **kwargs)

    def __repr__(self) -> str:
        return f"MIRModel({str(self.path)!r})"


def _lora_config(lora: Union[bool, Dict]):
    from peft import LoraConfig
    kwargs = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05}
    if isinstance(lora, dict):
        kwargs.update(lora)
    return LoraConfig(**kwargs)


def train_mir(graph: Union[MethodologyAdjacencyGraph, str], output: Union[str, Path],
              config: Optional[MIRTrainingConfig] = None, overwrite: bool = False, verbose: bool = False,
              **settings) -> MIRModel:
    """Fine-tunes ``config.base_model`` with Algorithm 1 on ``graph`` (a MAG or a ``sci/mir-multicite``
    training id) and saves a :class:`MIRModel` to ``output`` (atomically; an existing ``output`` is an
    error unless ``overwrite``).  Keyword arguments override fields of ``config``."""
    cfg = MIRTrainingConfig(**{**(asdict(config) if config else {}), **settings})
    triplet_types(cfg.triplets)  # validate before loading anything
    if cfg.frozen_layers and cfg.lora:
        raise ValueError("frozen_layers and lora exclude each other (LoRA already freezes the base weights)")
    output = Path(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} exists (pass overwrite=True to replace it)")
    dataset_id = None
    if isinstance(graph, str):
        dataset_id = graph
        graph = MethodologyAdjacencyGraph.from_dataset(graph)
    started = time.time()
    sampler = MAGSampler(graph, cfg.alpha, cfg.sampling, cfg.triplets, hard_top=cfg.hard_top, samples=cfg.samples,
                         domain=(DomainIndex(graph, cfg.domain_model, cfg.n_keywords)
                                 if cfg.sampling and cfg.alpha > 0 else None), seed=cfg.seed)
    epochs = [sampler.epoch(e) for e in range(cfg.epochs)]
    cols = sampler.text_columns()
    data = pd.concat([e[cols] for e in epochs], ignore_index=True).astype(str)
    seed_everything(cfg.seed)
    model = load_sentence_transformer(cfg.base_model, cfg.device or "cpu")
    inference_length = model.max_seq_length
    model.max_seq_length = int(cfg.max_seq_length)     # a training setting: the saved model keeps its own
    if cfg.frozen_layers:
        freeze_lower_layers(model, int(cfg.frozen_layers))
    if cfg.lora:
        from peft import get_peft_model
        model[0].model = get_peft_model(model[0].model, _lora_config(cfg.lora))
    loss = JointTripletLoss(model, cfg.margin, sampler.types)

    def build(tmp: Path) -> None:
        history, steps, train_seconds = _fit(model, loss, data, len(epochs[0]), tmp, cfg, verbose)
        if cfg.lora:
            model[0].model = model[0].model.merge_and_unload()
        model.max_seq_length = inference_length
        save_model(model, tmp)
        shutil.rmtree(tmp / "checkpoints", ignore_errors=True)
        meta = {"method": "MIR joint triplet loss (Algorithm 1)", **asdict(cfg),
                "triplet_types": list(sampler.types), "loss": "sum of TripletLoss(EUCLIDEAN) per triplet type",
                "dataset": dataset_id, "graph": graph.stats(), "samples_per_epoch": int(len(epochs[0])),
                "triplets_per_epoch": int(len(epochs[0]) * len(sampler.types)), "steps": steps,
                "sampling_stats": dict(sorted(sampler.stats.items())), "loss_history": history,
                "seconds": round(time.time() - started, 1), "train_seconds": round(train_seconds, 2),
                "triplets_trained": int(min(len(data), steps * cfg.batch_size) * len(sampler.types)),
                "domain_keywords_example": (dict(list(sampler.domain.proposal_keywords.items())[:3])
                                            if sampler.domain is not None else {})}
        save_model_artifact(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT, meta, training_file=TRAINING_FILE)

    build_atomically(output, build, overwrite=overwrite, what="the MIR model")
    return MIRModel(output)


def _fit(model, loss, data: pd.DataFrame, per_epoch: int, tmp: Path, cfg: MIRTrainingConfig, verbose: bool):
    from sentence_transformers import SentenceTransformerTrainer

    from datasets import Dataset
    # the epochs are laid out one after the other in ``data`` (each with its own negatives): one pass
    args = trainer_arguments("sentence_transformer", tmp / "checkpoints", epochs=1, batch_size=cfg.batch_size,
                             learning_rate=cfg.learning_rate, warmup_ratio=cfg.warmup_ratio, max_steps=cfg.max_steps,
                             seed=cfg.seed, device=cfg.device, verbose=verbose,
                             batch_sampler=functools.partial(EpochBatchSampler, block=per_epoch))
    tr = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_pandas(data), loss=loss)
    history = run_trainer(tr, verbose)
    return history, int(tr.state.global_step), float(train_summary(tr).get("train_runtime", float("nan")))


# ------------------------------------------------------------------------------------------------
# evaluation on any chronological part of a split (validation slices, rolling-origin folds)
# ------------------------------------------------------------------------------------------------

CORPORA = ("extended", "restricted")


def evaluate_part(model, split, train_q: Sequence[str], test_q: Sequence[str],
                  measures: Sequence[str] = ("R@3", "R@5", "mAP"), batch_size: int = 32) -> pd.DataFrame:
    """Per-proposal values of §6.2's measures for a sentence-transformers ``model`` (or anything with
    ``encode``) on the proposals ``test_q`` of ``split`` (a ``mir_multicite.Split``), in both corpus
    settings, when ``train_q`` are the training proposals (they make the extended corpus; §4.2,
    :func:`~pyterrier_sci.datasets.mir_multicite.candidate_pools`).  One row per (corpus, measure,
    proposal with ground truth): columns ``corpus``, ``measure``, ``qid``, ``value`` (x100).  Each paper
    and proposal is encoded once; ties keep the pool order."""
    judged = split.cited(test_q)
    relevant = {q: {d for d, r in judged.get(q, {}).items() if r} for q in test_q}
    qids = [q for q in test_q if relevant[q]]
    train_docs = list(dict.fromkeys(d for docs in split.cited(train_q).values() for d in docs))
    # restricted: the papers ALL test proposals cite (with ground truth or not), as the registered ids
    pools = {c: mir_multicite.candidate_pools(judged, test_q, c, train_docs) for c in CORPORA}
    docs = list(dict.fromkeys(d for c in CORPORA for pool in pools[c].values() for d in pool))
    rows = []
    if not qids:
        return pd.DataFrame(rows, columns=["corpus", "measure", "qid", "value"])
    doc_texts = [mir_multicite.MIRDoc(d, split.titles.get(d, ""), split.papers[d]).default_text() for d in docs]
    doc_vecs = model.encode(doc_texts, batch_size=batch_size)
    query_vecs = model.encode([split.proposals[q].text for q in qids], batch_size=batch_size)
    row = {d: i for i, d in enumerate(docs)}
    for corpus in CORPORA:
        ranked = {}
        for i, q in enumerate(qids):
            pool = pools[corpus][q]
            scores = doc_vecs[[row[d] for d in pool]] @ query_vecs[i]
            ranked[q] = [pool[j] for j in np.argsort(-scores, kind="stable")]
        for name in measures:
            for q, v in measure(name).compute({q: relevant[q] for q in qids}, ranked).items():
                rows.append((corpus, name, q, 100.0 * float(v)))
    return pd.DataFrame(rows, columns=["corpus", "measure", "qid", "value"])


def table2_figures(per_query: pd.DataFrame) -> Dict[str, float]:
    """The six figures of Table 2 (``"extended R@3"``, ..., ``"restricted mAP"``: means over the
    proposals) and their ``"mean"``, from :func:`evaluate_part`'s rows (or several parts' rows joined)."""
    means = per_query.groupby(["corpus", "measure"], sort=False)["value"].mean()
    out = {f"{c} {m}": float(means[(c, m)]) for c in CORPORA for m in per_query["measure"].drop_duplicates()
           if (c, m) in means.index}
    out["mean"] = float(np.mean(list(out.values()))) if out else float("nan")
    return out


# ------------------------------------------------------------------------------------------------
# the retriever of a trained model (the mir_dense component: components.py)
# ------------------------------------------------------------------------------------------------

def trained_model_path(train_dataset: str, config: MIRTrainingConfig, work: Optional[Path] = None) -> Path:
    """Where ``mir_dense(train=True)`` keeps the model trained on ``train_dataset`` with ``config``."""
    return trained_model_dir("mir", train_dataset, config.key(), work, legacy_key=config.key(legacy=True))


def mir_retriever(model: Union[str, Path], *, context=None, dataset: Optional[str] = None, num_results: int = 1000,
                  batch_size: int = 32, fields: Optional[Sequence[str]] = None, verbose: bool = False,
                  device: Optional[str] = None, backend: str = "torch", precision: str = "fp32") -> DenseRetriever:
    """Dense retrieval with the MIR model at ``model`` (a sentence-transformers directory), as ``dense``
    retrieves (``backend`` and ``precision``: the encoder's engine, docs/dense.md)."""
    if not (Path(model) / "modules.json").exists():
        raise FileNotFoundError(f"mir_dense: {model} is not a sentence-transformers model directory "
                                f"(train one with pyterrier_sci.plugins.mir.training.train_mir)")
    return dense_component(context=context, model=str(model), dataset=dataset, fields=fields, num_results=num_results,
                           batch_size=batch_size, verbose=verbose, device=device, backend=backend, precision=precision)


def wise_ft_model(tuned: Union[str, Path], weight: float, output: Optional[Union[str, Path]] = None) -> Path:
    """WiSE-FT (Wortsman et al., CVPR 2022) of a trained MIR model: the weights ``(1 - weight) * base +
    weight * fine-tuned`` (``weight`` 1 is the fine-tuned model, 0 its base; integer buffers from the
    fine-tuned one), saved once, atomically, at ``output`` (default: beside ``tuned``, named by the
    weight) as a MIR model whose training record adds ``wise_ft``.  Returns its path."""
    import torch
    weight = float(weight)
    if not 0 <= weight <= 1:
        raise ValueError(f"wise_ft must be a weight in [0, 1] (1 = the fine-tuned model), got {weight}")
    tuned = Path(tuned)
    record = json.loads((tuned / TRAINING_FILE).read_text())
    output = Path(output) if output is not None else tuned.with_name(f"{tuned.name}-wise-ft-{weight:g}")

    def build(tmp: Path) -> None:
        model = load_sentence_transformer(str(tuned), "cpu")
        base = load_sentence_transformer(record.get("base_model") or DEFAULT_MODEL, "cpu").state_dict()
        with torch.no_grad():
            state = {k: (base[k] * (1 - weight) + v * weight) if v.is_floating_point() else v
                     for k, v in model.state_dict().items()}
        model.load_state_dict(state)
        save_model(model, tmp)
        save_model_artifact(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT,
                            {**record, "wise_ft": {"weight": weight, "fine_tuned": str(tuned),
                                                   "method": "WiSE-FT weight interpolation with the base model"}},
                            training_file=TRAINING_FILE)

    build_atomically(output, build, what="the WiSE-FT MIR model")
    return output


class RollingRouted(FoldRouting, pt.Transformer):
    """Scores each proposal with the model of the rolling-origin fold that tests it (``[(test qids,
    transformer)]``, fold by fold): every fold's model saw only proposals dated before its fold.  A proposal
    that no fold tests is one :class:`ValueError` naming it (no model is known never to have seen it)."""

    def __init__(self, folds: Sequence[Tuple[Sequence[str], pt.Transformer]], dataset: str):
        self.by_fold = {k: t for k, (_, t) in enumerate(folds)}
        self._fold = {str(q): k for k, (qids, _) in enumerate(folds) for q in qids}
        self.dataset = dataset

    def fold_of(self, qid: str) -> Optional[int]:
        return self._fold.get(qid)

    def unknown_message(self, unknown) -> str:
        return (f"mir_dense(rolling=True): {len(unknown)} query id(s) are tested by no rolling-origin fold of "
                f"{self.dataset} (e.g. {unknown[:3]}): each proposal is scored by the model trained on the "
                "proposals before its fold, so only the fold's test proposals can be")

    def __repr__(self) -> str:
        return f"RollingRouted({self.dataset}, " + ", ".join(repr(t) for t in self.by_fold.values()) + ")"


def rolling_folds(dataset: str) -> List[Tuple[str, str, List[str]]]:
    """``[(training id, test id, test qids)]`` of a rolling-origin test id (``sci/mir-multicite/dev/rolling-test``
    or ``.../rolling-K-test``, either corpus): fold by fold, the registered ids of the proposals it trains on
    and of those it tests, and the latter's ids.  Any other id is a :class:`ValueError` that names the
    rolling ids."""
    try:
        view = mir_multicite.view_of(dataset)
    except ValueError:
        view = None
    if view is None or not (view.part or "").startswith("rolling-") or view.part.endswith("-train"):
        raise ValueError(f"mir_dense(rolling=True) scores a rolling-origin test set, not {dataset}: use "
                         f"irds:{mir_multicite.NAME}/dev/rolling-test (every fold) or .../rolling-K-test "
                         "(one fold), /extended for the extended corpus (docs/mir.md)")
    out = []
    for fold in view.folds():
        train = fold.training_view()
        test = f"irds:{mir_multicite.NAME}/{fold.split}/{fold.part}"
        test += "/extended" if fold.corpus == "extended" else ""
        out.append((f"irds:{mir_multicite.NAME}/{train.split}/{train.part}", test, fold.qids()))
    return out


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "mir_dense_component":
        return importlib.import_module(f"{__package__}.components").mir_dense_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
