"""Diversity measures: how varied a run's top documents are in an embedding space (ILS, PRISM's dispersion
measures), and how well a ranking covers a query's subtopics (alpha-nDCG, ERR-IA, subtopic recall).

**Embedding measures** (:class:`EmbeddingMeasure`) embed the top ``k`` documents of each query's ranking and
compute one number from their vectors; they need no judgement.  The vectors come from an encoder (a setting,
default the offline all-MiniLM-L6-v2) over the dataset's documents (``ps.measures.get(name, dataset=...)`` and
every experiment pass the dataset), each document embedded once and kept per docno in memory and in the work
directory (:class:`DocumentEmbeddings`), or from ``vectors=`` / a pyterrier_dr ``FlexIndex`` (``index=``).
Names take the settings as ir_measures names take theirs::

    ILS@10                                          mean pairwise cosine similarity (pyterrier_dr's ILS)
    ILS(encoder='/models/specter2')@10              another sentence-transformers encoder
    prism.CosineDistance(fields='title+abstract')@200

**Subtopic measures** evaluate a run against subtopic qrels (the qrels' ``iteration`` is the subtopic:
``sci/doris-mae/aspects``, ``sci/csfcube/facets``).  ``alpha_nDCG@k``, ``ERR_IA@k`` and ``StRecall@k`` are
ir_measures' names, computed by its ``pyndeval`` provider (TREC's ``ndeval``) up to k = 20, one measure per call
(:class:`SubtopicMeasure`); what the provider cannot do (a cutoff above 20 or none, ``judged_only``, ERR-IA@1:
:func:`provider_fails`) is computed here with ndeval's definitions, equal to it where both run
(``tests/test_aspect_measures.py``).  See ``docs/evaluation.md``.
"""
from __future__ import annotations

import contextlib
import copy
import math
import re
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import ir_measures
import numpy as np
import pandas as pd

from pyterrier_sci import measures
from pyterrier_sci.artifacts import atomic_file, lock
from pyterrier_sci.corpus import corpus_key, doc_texts, irds_id
from pyterrier_sci.data import work_dir
from pyterrier_sci.models import DEFAULT_MODEL, load_sentence_transformer, model_slug
from pyterrier_sci.progress import phase

__all__ = ["ils", "cosine_distance", "centroid_distance", "convex_hull_volume",
           "DocumentEmbeddings", "EmbeddingMeasure", "embedding_family", "ILS_FAMILY",
           "alpha_ndcg", "err_ia", "subtopic_recall", "SubtopicMeasure", "NDEVAL_DEPTH", "provider_fails",
           "register_measures"]


# ---------------------------------------------------------------------------------------------
# dispersion of a set of vectors (one query's top k documents): rows are documents
# ---------------------------------------------------------------------------------------------

def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def ils(vectors: np.ndarray) -> float:
    """Intra-list similarity: the mean cosine similarity over the distinct pairs of rows, 0.0 for fewer than
    two rows (as pyterrier_dr's ``ILS``).  Higher means less diverse."""
    x = np.asarray(vectors, dtype=np.float64)
    n = len(x)
    if n < 2:
        return 0.0
    u = _unit(x)
    s = u.sum(axis=0)
    # sum over i != j of cos(i, j) = |sum u|^2 - sum |u_i|^2; the mean over the n(n-1)/2 pairs i < j
    off = float(s @ s) - float(np.einsum("ij,ij->", u, u))
    return off / (n * (n - 1))


def cosine_distance(vectors: np.ndarray) -> float:
    """PRISM's "cosine distance" (Table 8): one minus the mean pairwise cosine similarity of the rows (1 - ILS);
    NaN for fewer than two rows."""
    return 1.0 - ils(vectors) if len(vectors) >= 2 else math.nan


def centroid_distance(vectors: np.ndarray) -> float:
    """PRISM's "centroid distance" (Table 8): the mean Euclidean distance of the rows (the vectors as the encoder
    gives them) to their centroid; NaN for fewer than two rows."""
    x = np.asarray(vectors, dtype=np.float64)
    if len(x) < 2:
        return math.nan
    return float(np.mean(np.linalg.norm(x - x.mean(axis=0), axis=1)))


def convex_hull_volume(vectors: np.ndarray, dims: int = 3) -> float:
    """PRISM's "convex hull volume" (Table 8): the volume of the convex hull of the rows projected to ``dims``
    dimensions.  The paper does not say how it projects; here it is the rows' own principal components (the top
    ``dims`` right singular vectors of the centred rows).  0.0 when the projected points span no volume (fewer
    than ``dims + 1`` rows, or all in a hyperplane); NaN for fewer than two rows."""
    from scipy.spatial import ConvexHull, QhullError
    x = np.asarray(vectors, dtype=np.float64)
    if len(x) < 2:
        return math.nan
    centred = x - x.mean(axis=0)
    if len(x) <= dims:
        return 0.0
    _, sv, vt = np.linalg.svd(centred, full_matrices=False)
    if len(sv) < dims or sv[dims - 1] <= sv[0] * 1e-12:
        return 0.0
    projected = centred @ vt[:dims].T
    try:
        return float(ConvexHull(projected).volume)
    except QhullError:
        return 0.0


# ---------------------------------------------------------------------------------------------
# document vectors
# ---------------------------------------------------------------------------------------------

#: one store per (encoder, corpus, fields) in a process: the measures of one experiment share it
_STORES: Dict[Tuple[str, str, Tuple[str, ...]], "DocumentEmbeddings"] = {}


class DocumentEmbeddings:
    """The vectors of a corpus's documents by one sentence-transformers encoder, embedded on first use and kept per
    docno: in memory (one store per encoder, corpus and fields in a process: :meth:`of`) and in the work directory,
    ``<work dir>/embeddings/<corpus>/<model slug>[-<fields>].npz`` (merged and replaced atomically under a lock, so
    that processes sharing it lose nothing).  A document's vector does not depend on the batch it is embedded in.

    Args:
        dataset: an ir_datasets id whose documents the docnos are (``sci/acl-fulltext``, any of its subsets).
        encoder: a sentence-transformers model: ``"default"`` (the offline all-MiniLM-L6-v2), a local path or a
            Hugging Face hub id.
        fields: the document fields joined into the text embedded (default: the dataset's ``default_text()``).
        persist: keep the vectors in the work directory too.
        batch_size: documents per ``encode`` call.
    """

    def __init__(self, dataset: str, encoder: str = DEFAULT_MODEL, fields: Optional[Sequence[str]] = None,
                 persist: bool = True, batch_size: int = 64, verbose: bool = True):
        self.dataset = irds_id(dataset)
        self.encoder = str(encoder)
        self.fields = tuple(fields) if fields else None
        self.persist = persist
        self.batch_size = batch_size
        self.verbose = verbose
        self._vectors: Dict[str, np.ndarray] = {}
        self._model = None
        self._read_disk = False

    @classmethod
    def of(cls, dataset: str, encoder: str = DEFAULT_MODEL, fields: Optional[Sequence[str]] = None
           ) -> "DocumentEmbeddings":
        """The process's store for an encoder, a corpus and its fields (the subsets of a benchmark share one)."""
        fields = tuple(fields) if fields else None
        key = (str(encoder), corpus_key(dataset), fields or ())
        if key not in _STORES:
            _STORES[key] = cls(dataset, encoder, fields)
        return _STORES[key]

    @property
    def path(self) -> Path:
        """Where the vectors are kept in the work directory."""
        name = model_slug(self.encoder) + ("-" + "+".join(self.fields) if self.fields else "")
        return work_dir() / "embeddings" / corpus_key(self.dataset) / f"{name}.npz"

    def _load_disk(self) -> None:
        self._read_disk = True
        if not self.persist:
            return
        with contextlib.suppress(FileNotFoundError):
            for docno, vec in self._read(self.path).items():
                self._vectors.setdefault(docno, vec)

    @staticmethod
    def _read(path: Path) -> Dict[str, np.ndarray]:
        try:
            with np.load(path, allow_pickle=False) as z:
                return dict(zip(z["docnos"].tolist(), z["vectors"]))
        except (OSError, ValueError, KeyError) as e:
            if isinstance(e, FileNotFoundError):
                raise
            warnings.warn(f"the document vectors at {path} cannot be read ({e}); they are embedded again")
            return {}

    def _save(self, new: Mapping[str, np.ndarray]) -> None:
        path = self.path
        with lock(path, "the document vectors"):
            merged = {}
            with contextlib.suppress(FileNotFoundError):
                merged = self._read(path)
            merged.update(new)
            docnos = sorted(merged)
            with atomic_file(path, "the document vectors") as tmp:
                with open(tmp, "wb") as f:
                    np.savez(f, docnos=np.array(docnos, dtype=str),
                             vectors=np.stack([merged[d] for d in docnos]).astype(np.float32))

    def _encode(self, texts: List[str]) -> np.ndarray:
        if self._model is None:
            self._model = load_sentence_transformer(self.encoder)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))   # batches of similar length: less padding
        out: List[np.ndarray] = []
        with phase(f"embedding {len(texts):,} documents of {self.dataset} ({self.encoder})",   # one batch: no bar
                   self.verbose and len(texts) > self.batch_size, total=len(texts), unit="doc") as bar:
            for i in range(0, len(order), self.batch_size):
                batch = [texts[j] for j in order[i:i + self.batch_size]]
                out.append(np.asarray(self._model.encode(batch, batch_size=self.batch_size, convert_to_numpy=True,
                                                         show_progress_bar=False), dtype=np.float32))
                bar.update(len(batch))
        if not out:
            return np.zeros((0, 0), dtype=np.float32)
        vectors = np.empty((len(texts), out[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(out)
        return vectors

    def vectors(self, docnos: Sequence[str]) -> np.ndarray:
        """The vectors of ``docnos`` (rows in that order), embedding those not yet known."""
        if not self._read_disk:
            self._load_disk()
        missing = list(dict.fromkeys(d for d in docnos if d not in self._vectors))
        if missing:
            new = dict(zip(missing, self._encode(doc_texts(self.dataset, missing, self.fields))))
            self._vectors.update(new)
            if self.persist:
                self._save(new)
        if not len(docnos):
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._vectors[d] for d in docnos])


def _index_vectors(index) -> Callable[[Sequence[str]], np.ndarray]:
    """A ``docnos -> vectors`` function over a pyterrier_dr ``FlexIndex`` (or its path)."""
    import pyterrier_dr
    flex = index if isinstance(index, pyterrier_dr.FlexIndex) else pyterrier_dr.FlexIndex(str(index))
    loader = flex.vec_loader()

    def vectors(docnos: Sequence[str]) -> np.ndarray:
        found = loader(pd.DataFrame({"docno": list(docnos)}))
        return np.stack(found["doc_vec"].tolist())
    return vectors


# ---------------------------------------------------------------------------------------------
# the measure
# ---------------------------------------------------------------------------------------------

_SETTINGS = ("encoder", "fields", "index")


class EmbeddingMeasure(measures.RankingMeasure):
    """A measure of each query's top ``k`` documents in an embedding space: ``score(vectors)`` of their vectors
    (rows in rank order).  No judgement is read; the run's own order decides the top ``k`` (by score; ties keep the
    run's order).  A query whose value is NaN (fewer than two documents, or none, for PRISM's measures) is left out
    of the mean; a query the run does not answer has the value of no document.

    Args:
        family: the name without settings or cutoff (``ILS``, ``prism.CosineDistance``).
        score: ``score(vectors) -> float``.
        k: the cutoff (None: the whole ranking).
        encoder: a sentence-transformers model (``"default"``: the offline all-MiniLM-L6-v2).
        fields: the document fields embedded (default: the dataset's ``default_text()``).
        dataset: the ir_datasets id whose documents the run ranks (set by ``ps.measures.get(name, dataset=...)``
            and by every experiment through :meth:`for_dataset`).
        vectors: the vectors instead: a mapping ``docno -> vector`` or a function ``docnos -> matrix``.
        index: the vectors of a pyterrier_dr ``FlexIndex`` (an index or its path) instead.
        description: one line for listings.

    Example:
        >>> import numpy as np, pandas as pd
        >>> from pyterrier_sci.diversity import EmbeddingMeasure, cosine_distance
        >>> vecs = {"d1": np.array([1.0, 0.0]), "d2": np.array([0.0, 1.0]), "d3": np.array([1.0, 1.0])}
        >>> m = EmbeddingMeasure("my.CosDist", cosine_distance, k=2, vectors=vecs)
        >>> run = pd.DataFrame({"qid": ["q1"] * 3, "docno": ["d1", "d2", "d3"], "score": [3.0, 2.0, 1.0]})
        >>> m.per_query(pd.DataFrame(columns=["qid", "docno", "label"]), run)
        {'q1': 1.0}
    """

    def __init__(self, family: str, score: Callable[[np.ndarray], float], k: Optional[int] = None,
                 encoder: str = DEFAULT_MODEL, fields: Optional[Sequence[str]] = None, dataset: Optional[str] = None,
                 vectors: Union[None, Mapping[str, np.ndarray], Callable[[Sequence[str]], np.ndarray]] = None,
                 index=None, description: str = ""):
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise ValueError(f"{family}: the cutoff is a positive integer, not {k!r}")
        self.family, self.score, self.k = family, score, k
        self.encoder = str(encoder)
        self.fields = tuple(fields) if fields else None
        self.dataset = irds_id(dataset) if dataset else None
        self.vectors, self.index = vectors, index
        super().__init__(self._name(), description)
        #: a query of the qrels the run does not answer (ir_measures' default value): the value of no document
        self.DEFAULT = float(score(np.zeros((0, 1))))

    def _name(self) -> str:
        settings = []
        if self.encoder != DEFAULT_MODEL:
            settings.append(f"encoder={self.encoder!r}")
        if self.fields:
            settings.append(f"fields={'+'.join(self.fields)!r}")
        if self.index is not None:
            settings.append(f"index={str(getattr(self.index, 'index_path', self.index))!r}")
        name = self.family + (f"({','.join(settings)})" if settings else "")
        return name + (f"@{self.k}" if self.k is not None else "")

    def for_dataset(self, dataset: str) -> "EmbeddingMeasure":
        """A copy that embeds the documents of ``dataset`` (the protocol of :func:`pyterrier_sci.measures.bound`)."""
        out = copy.copy(self)
        out.dataset = irds_id(dataset)
        return out

    def _vectors_of(self, docnos: Sequence[str]) -> np.ndarray:
        if self.vectors is not None:
            if callable(self.vectors):
                return np.asarray(self.vectors(list(docnos)))
            return np.stack([np.asarray(self.vectors[d]) for d in docnos])
        if self.index is not None:
            return _index_vectors(self.index)(docnos)
        if not self.dataset:
            raise ValueError(f"{self.NAME} embeds the run's documents, so it needs the dataset whose documents they "
                             "are: give it (dataset= in ps.Experiment or ps.measures.parse, --dataset on the command "
                             "line), or build the measure with vectors= or index=")
        return DocumentEmbeddings.of(self.dataset, self.encoder, self.fields).vectors(docnos)

    def values(self, qrels, run) -> Dict[str, float]:
        if "score" in run.columns:
            run = run.sort_values(["query_id", "score"], ascending=[True, False], kind="stable")
        tops = {str(q): list(g["doc_id"].astype(str))[:self.k] for q, g in run.groupby("query_id", sort=False)}
        wanted = list(dict.fromkeys(d for docs in tops.values() for d in docs))
        if not wanted:
            return {q: float(self.score(np.zeros((0, 1)))) for q in tops}
        rows = dict(zip(wanted, self._vectors_of(wanted)))
        return {q: float(self.score(np.stack([rows[d] for d in docs]) if docs else np.zeros((0, 1))))
                for q, docs in tops.items()}


_FAMILY_NAME = re.compile(r"^(?P<family>[A-Za-z_][\w.]*?)(?:\((?P<settings>.*)\))?(?:@(?P<k>\d+))?$", re.S)
_SETTING = re.compile(r"""\s*(?P<key>\w+)\s*=\s*(?:'(?P<q1>[^']*)'|"(?P<q2>[^"]*)"|(?P<bare>[^,'"]*?))\s*(?:,|$)""")


def _settings(text: str, name: str) -> Dict[str, str]:
    out, pos = {}, 0
    text = text.strip()
    while pos < len(text):
        m = _SETTING.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"measure {name!r}: cannot read its settings {text!r} (write key=value, separated by "
                             f"commas; settings: {', '.join(_SETTINGS)})")
        key = m.group("key")
        if key not in _SETTINGS:
            raise ValueError(f"measure {name!r}: unknown setting {key!r} (settings: {', '.join(_SETTINGS)})")
        if key in out:
            raise ValueError(f"measure {name!r}: setting {key!r} given twice")
        value = next(v for v in (m.group("q1"), m.group("q2"), m.group("bare")) if v is not None)
        if not value:
            raise ValueError(f"measure {name!r}: setting {key!r} is empty")
        out[key] = value
        pos = m.end()
    return out


def embedding_family(families: Mapping[str, Tuple[Callable[[np.ndarray], float], str]],
                     default_k: Optional[int] = None) -> Callable[[str], Optional[EmbeddingMeasure]]:
    """A name parser (:func:`pyterrier_sci.measures.register_parser`) for ``FAMILY[(settings)][@k]`` of each family
    of ``families`` (``{family: (score, description)}``): settings ``encoder``, ``fields`` (joined by ``+``) and
    ``index`` (a FlexIndex path); without ``@k`` the cutoff is ``default_k``."""
    def parse(name: str) -> Optional[EmbeddingMeasure]:
        m = _FAMILY_NAME.match(name.strip())
        if not m or m.group("family") not in families:
            return None
        settings = _settings(m.group("settings") or "", name)
        k = int(m.group("k")) if m.group("k") else default_k
        if k is not None and k < 1:
            raise ValueError(f"measure {name!r}: the cutoff is a positive integer")
        score, description = families[m.group("family")]
        fields = tuple(f for f in settings.get("fields", "").split("+") if f) or None
        return EmbeddingMeasure(m.group("family"), score, k=k, encoder=settings.get("encoder", DEFAULT_MODEL),
                                fields=fields, index=settings.get("index"), description=description)
    return parse


#: ILS, as pyterrier_dr defines it, by name
ILS_FAMILY = {"ILS": (ils, "intra-list similarity: mean pairwise cosine similarity of the top k documents' "
                           "embeddings, 0 for fewer than two (pyterrier_dr's ILS; higher = less diverse); "
                           "settings encoder, fields, index")}


# ---------------------------------------------------------------------------------------------
# subtopic (intent-aware) measures, as TREC's ndeval computes them
# ---------------------------------------------------------------------------------------------

#: the deepest cutoff ndeval (and so ir_measures' pyndeval provider) computes
NDEVAL_DEPTH = 20


def _gains(ranking: Sequence[str], relevant: Mapping[str, Iterable[str]], alpha: float) -> List[float]:
    """Per rank, the sum over the document's subtopics of (1 - alpha)^(times the subtopic was seen before)."""
    seen: Dict[str, int] = {}
    out = []
    for d in ranking:
        g = 0.0
        for s in relevant.get(d, ()):
            g += (1.0 - alpha) ** seen.get(s, 0)
            seen[s] = seen.get(s, 0) + 1
        out.append(g)
    return out


def _ideal(relevant: Mapping[str, Iterable[str]], judged: Iterable[str], k: int, alpha: float) -> List[str]:
    """ndeval's greedy ideal ranking of the judged documents: at each rank the document of the largest gain, a tie
    going to the larger docno (as ndeval's ``strcmp``)."""
    left = sorted(set(judged), reverse=True)
    seen: Dict[str, int] = {}
    out = []
    while left and len(out) < k:
        best, best_gain = None, -1.0
        for d in left:   # docnos in decreasing order: the first of equal gains is the larger docno
            g = sum((1.0 - alpha) ** seen.get(s, 0) for s in relevant.get(d, ()))
            if g > best_gain:
                best, best_gain = d, g
        left.remove(best)
        for s in relevant.get(best, ()):
            seen[s] = seen.get(s, 0) + 1
        out.append(best)
    return out


def _discounted(gains: Sequence[float]) -> float:
    return float(sum(g / math.log2(i + 2) for i, g in enumerate(gains)))


def alpha_ndcg(ranking: Sequence[str], relevant: Mapping[str, Iterable[str]], k: Optional[int] = None,
               alpha: float = 0.5, judged: Optional[Iterable[str]] = None) -> float:
    """alpha-nDCG@k (Clarke et al., SIGIR 2008) as ndeval computes it: ``relevant`` maps a docno to the subtopics it
    is relevant to; the ideal is ndeval's greedy ranking of the ``judged`` documents (default: those of
    ``relevant``); 0 when no subtopic has a relevant document."""
    judged = set(relevant) if judged is None else set(judged) | set(relevant)
    if not any(relevant.get(d) for d in judged):
        return 0.0
    k = len(ranking) if k is None else k
    best = _discounted(_gains(_ideal(relevant, judged, max(k, 1), alpha), relevant, alpha))
    got = _discounted(_gains(list(ranking)[:k], relevant, alpha))
    return got / best if best > 0 and got > 0 else 0.0


def err_ia(ranking: Sequence[str], relevant: Mapping[str, Iterable[str]], k: Optional[int] = None,
           alpha: float = 0.5) -> float:
    """ERR-IA@k as ndeval computes it ("ERR-IA" of ir_measures' ``ERR_IA``): sum over ranks r <= k of the rank's
    alpha-discounted subtopic gain / r, over the same sum for |S| subtopics all new at every rank (ndeval's "ideal
    ideal" normalisation), S the subtopics with a relevant document."""
    subtopics = {s for subs in relevant.values() for s in subs}
    if not subtopics:
        return 0.0
    k = len(ranking) if k is None else k
    got = sum(g / (i + 1) for i, g in enumerate(_gains(list(ranking)[:k], relevant, alpha)))
    ideal = sum(len(subtopics) * (1.0 - alpha) ** i / (i + 1) for i in range(max(k, 1)))
    return got / ideal


def subtopic_recall(ranking: Sequence[str], relevant: Mapping[str, Iterable[str]], k: Optional[int] = None) -> float:
    """Subtopic recall (S-recall@k): the share of the subtopics with a relevant document that the top ``k`` cover."""
    subtopics = {s for subs in relevant.values() for s in subs}
    if not subtopics:
        return 0.0
    covered = {s for d in list(ranking)[:k] for s in relevant.get(d, ())}
    return len(covered) / len(subtopics)


_KINDS = {"alpha_nDCG": "alpha-nDCG", "ERR_IA": "ERR-IA", "StRecall": "subtopic recall"}


def provider_fails(measure: ir_measures.Measure) -> bool:
    """Whether ir_measures' pyndeval provider cannot compute ``measure`` (``alpha_nDCG``, ``ERR_IA``, ``StRecall``)
    as defined: no cutoff or one above ndeval's depth of 20 (it refuses them), ``judged_only=True`` (the provider
    fails on it, ir_measures 0.4.3), ``ERR_IA@1`` (ndeval leaves ERR-IA unnormalised at rank 1: the number of the
    first document's subtopics, 2.0 for a document of two)."""
    cutoff = measure.params.get("cutoff")
    return (cutoff is None or cutoff > NDEVAL_DEPTH or bool(measure.params.get("judged_only"))
            or (measure.NAME == "ERR_IA" and cutoff == 1))


class SubtopicMeasure(measures.RankingMeasure):
    """``alpha_nDCG``, ``ERR_IA`` or ``StRecall`` (ir_measures' measure ``measure``, with its parameters ``cutoff``,
    ``alpha``, ``rel``, ``judged_only``) over the qrels' subtopics (``iteration``); a document is relevant to a
    subtopic when its relevance is at least ``rel``.

    Computed by ir_measures' pyndeval provider (TREC's ndeval), one measure per call: ir_measures 0.4.3's provider
    gives every measure after the first parameter group of a call (``StRecall@5`` with ``StRecall(rel=2)@5``) the
    value 0 (it reads the run once), and an experiment computes all its measures in one call.  What the provider
    cannot do (:func:`provider_fails`) is computed here with ndeval's definitions (:func:`alpha_ndcg`,
    :func:`err_ia`, :func:`subtopic_recall`), the run ordered as pyndeval orders it (score decreasing, then docno
    increasing).  A query without a relevant document in any subtopic scores 0, as in ndeval."""

    def __init__(self, measure: ir_measures.Measure):
        self.measure = measure
        self.by_provider = not provider_fails(measure)
        super().__init__(repr(measure), f"{_KINDS[measure.NAME]} over the qrels' subtopics (iteration): "
                                        "ir_measures' pyndeval provider up to @20, ndeval's definition beyond")

    def values(self, qrels, run) -> Dict[str, float]:
        m = self.measure
        if "iteration" not in qrels.columns:
            warnings.warn(f"{self.NAME}: the qrels have no subtopics ('iteration' column): every query has one "
                          "subtopic. Use subtopic qrels (sci/doris-mae/aspects, sci/csfcube/facets)")
            qrels = qrels.assign(iteration="0")
        if self.by_provider:
            return {x.query_id: float(x.value) for x in ir_measures.pyndeval.iter_calc([m], qrels, run)}
        return self.computed(qrels, run)

    def computed(self, qrels, run) -> Dict[str, float]:
        """The per-query values computed here (``ir_measures`` frames; the qrels with ``iteration``)."""
        m = self.measure
        k, rel = m["cutoff"], m["rel"]
        alpha = m["alpha"] if m.NAME == "alpha_nDCG" else 0.5   # ir_measures' ERR_IA has no alpha: ndeval's 0.5
        judged: Dict[str, set] = {}
        relevant: Dict[str, Dict[str, set]] = {}
        for q, d, s, r in zip(qrels["query_id"].astype(str), qrels["doc_id"].astype(str),
                              qrels["iteration"].astype(str), qrels["relevance"]):
            judged.setdefault(q, set()).add(d)
            if r >= rel:
                relevant.setdefault(q, {}).setdefault(d, set()).add(s)
        out = {}
        run = run.assign(query_id=run["query_id"].astype(str), doc_id=run["doc_id"].astype(str))
        run = run.sort_values(["query_id", "score", "doc_id"], ascending=[True, False, True], kind="stable")
        for q, g in run.groupby("query_id", sort=False):
            if q not in judged:
                continue
            ranking = list(g["doc_id"])
            if m.NAME != "StRecall" and m["judged_only"]:
                ranking = [d for d in ranking if d in judged[q]]
            rels = relevant.get(q, {})
            if m.NAME == "alpha_nDCG":
                out[q] = alpha_ndcg(ranking, rels, k, alpha, judged[q])
            elif m.NAME == "ERR_IA":
                out[q] = err_ia(ranking, rels, k, alpha)
            else:
                out[q] = subtopic_recall(ranking, rels, k)
        return out


def _subtopic_parser(name: str) -> Optional[SubtopicMeasure]:
    """``alpha_nDCG``, ``α_nDCG``, ``ERR_IA``, ``StRecall`` with any parameters: a :class:`SubtopicMeasure`."""
    if not re.match(r"^\s*(alpha_nDCG|α_nDCG|ERR_IA|StRecall)\b", name):
        return None
    try:
        m = ir_measures.parse_measure(name)
    except (ValueError, NameError, SyntaxError):
        return None
    return SubtopicMeasure(m) if m.NAME in _KINDS else None


def register_measures() -> None:
    """Registers ``ILS@10`` (any cutoff and settings by name: ``ILS(encoder=...)@k``) and the names of the subtopic
    measures (:class:`SubtopicMeasure`: ``alpha_nDCG@10``, ``ERR_IA(rel=2)@20``, ``StRecall@50``)."""
    measures.register("ILS@10", lambda: embedding_family(ILS_FAMILY)("ILS@10"))
    measures.register_parser(embedding_family(ILS_FAMILY))
    measures.register_parser(_subtopic_parser)
