"""BM25 over PISA (default, native) or Lucene: :func:`corpus_index` builds (once, atomically) the
index of an ir_datasets corpus under the work directory, and :class:`BM25` (the ``bm25`` component)
retrieves given a query frame or re-scores exactly the input documents given a result frame (those
the backend does not return score 0, after the scored ones, in input order).
"""
from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
from pyterrier_pisa import PisaIndex

from pyterrier_sci import artifacts
from pyterrier_sci.corpus import corpus_texts, index_path, take_rows
from pyterrier_sci.data import work_dir as default_work_dir
from pyterrier_sci.dates import use_index_dates
from pyterrier_sci.generations import index_ref
from pyterrier_sci.quiet import quiet_native

from .indexing import index_corpus
from .lucene import LuceneIndex

BACKENDS = ("pisa", "lucene")


def build_index(docs: Iterable[dict], path: Union[str, Path], backend: str = "pisa", threads: int = 1,
                verbose: bool = False, source: Optional[dict] = None):
    """Indexes ``{'docno', 'text'}`` dicts into a new BM25 index at ``path`` (atomically: an
    interrupted build leaves nothing at ``path``) and returns the index artifact: the documents are
    streamed in bounded memory and checked (:func:`~.indexing.index_corpus`).  ``source``: the corpus the
    documents are (``{"dataset", "fields"}``), recorded in ``pt_meta.json`` (what a PISA index needs to
    take appended documents, :mod:`.growth`)."""
    return index_corpus(docs, path, backend, threads=threads, verbose=verbose,
                        record={"source": source} if source else None)


def corpus_index(dataset: str, backend: str = "pisa", fields: Optional[Sequence[str]] = None,
                 work_dir: Optional[Path] = None, threads: int = 1, verbose: bool = False):
    """The BM25 index (an artifact) of a dataset's corpus, built on first use."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    path = index_path(work_dir or default_work_dir(), dataset, backend, fields)
    if not path.exists():
        docs = pt.tqdm(corpus_texts(dataset, fields), desc=f"indexing {dataset} ({backend})", unit="doc",
                       disable=not verbose)
        build_index(docs, path, backend, threads, verbose,
                    source={"dataset": dataset, "fields": list(fields) if fields else None})
    return load_index(path, backend)


_PISA_DERIVED = re.compile(r"bm25\.k1-(.+?)\.b-(.+?)\.q\d+\.bmw\.\d+(?:\.[A-Za-z0-9_]+)?$")


def pisa_derived_files(index_dir: Union[str, Path], k1: float, b: float) -> list:
    """The files PISA derives inside an index on the first BM25 retrieval with ``k1``, ``b``: the
    block-max data ``bm25.k1-<k1>.b-<b>.q0.bmw.<block>`` and the index compressed with it
    (``….bmw.<block>.<encoding>``)."""
    out = []
    for p in Path(index_dir).glob("bm25.k1-*"):
        m = not p.name.endswith(artifacts.CHECKSUM_SUFFIX) and _PISA_DERIVED.match(p.name)
        try:
            if m and float(m[1]) == float(k1) and float(m[2]) == float(b):
                out.append(p)
        except ValueError:
            continue
    return sorted(out)


def pisa_bm25(index, k1: float, b: float, verbose: bool = False, **kwargs) -> pt.Transformer:
    """``index.bm25(k1=k1, b=b, ...)`` for a :class:`pyterrier_pisa.PisaIndex`, with the files PISA
    derives for ``k1``/``b`` checked first.

    PISA writes them in place on first use and maps them unchecked afterwards: a truncated one
    crashes the process (SIGSEGV).  They are derived here under the index's lock (concurrent first
    uses derive once), their checksums are recorded beside them, and a file that does not match its
    checksum (or was derived without one being recorded, e.g. by a killed process) is removed with a
    :class:`~pyterrier_sci.artifacts.DamagedFileWarning` so that PISA derives it again."""
    d = Path(index.path)
    files = pisa_derived_files(d, k1, b)
    if len(files) >= 2 and all(artifacts.verify_checksum(f) for f in files):
        with quiet_native(not verbose):
            return index.bm25(k1=k1, b=b, verbose=verbose, **kwargs)
    with artifacts.lock(d / f"bm25.k1-{k1}.b-{b}", what=f"PISA's BM25 data (k1={k1}, b={b}) in {d}"):
        derived = pisa_derived_files(d, k1, b)
        if any([artifacts.discard_if_damaged(f, "PISA's derived file") for f in derived]):
            for f in derived:  # derived together: the compressed index is built with the block-max data
                artifacts.discard(f)
        with quiet_native(not verbose):
            retriever = index.bm25(k1=k1, b=b, verbose=verbose, **kwargs)
        for f in pisa_derived_files(d, k1, b):
            if artifacts.verify_checksum(f) is None:
                artifacts.record_checksum(f)
    return retriever


class DamagedIndexError(ValueError):
    """A BM25 index directory whose files are damaged (empty, truncated, not JSON); the message names
    the file and what to do."""


def _damaged(p: Path, problem: str) -> DamagedIndexError:
    return DamagedIndexError(f"the BM25 index {p} is damaged: {problem}; delete the directory {p} and run again "
                             "(an index of a dataset's corpus is then rebuilt)")


def _index_format(p: Path) -> Optional[str]:
    """The ``format`` in ``p/pt_meta.json`` (``None`` without one); a file that is empty or not a
    JSON object is a :class:`DamagedIndexError` naming it."""
    meta = p / "pt_meta.json"
    if not meta.exists():
        return None
    try:
        got = json.loads(meta.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise _damaged(p, f"{meta} is {'empty' if meta.stat().st_size == 0 else 'not JSON'} "
                          f"({' '.join(str(e).split())[:120]})") from None
    if not isinstance(got, dict):
        raise _damaged(p, f"{meta} holds a JSON {type(got).__name__}, not an object")
    return got.get("format")


#: the files of a PISA index (pyterrier-pisa 0.4): each holds at least a header when intact
PISA_FILES = ("fwd", "fwd.doclex", "fwd.documents", "fwd.termlex", "fwd.terms", "inv.docs", "inv.freqs", "inv.sizes")


def _check_pisa_files(p: Path) -> None:
    """An empty or missing PISA file would abort the process inside PISA (SIGABRT): one
    :class:`DamagedIndexError` naming it instead."""
    for name in PISA_FILES:
        f = p / name
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            raise _damaged(p, f"{f} is missing") from None
        if size == 0:
            raise _damaged(p, f"{f} is empty")


def load_index(index, backend: Optional[str] = None):
    """The index artifact at ``index`` (a path; anything else is returned as it is): Lucene when
    ``backend`` is ``"lucene"`` or its ``pt_meta.json`` says so, else PISA, its files checked first
    (:class:`DamagedIndexError`)."""
    if not isinstance(index, (str, os.PathLike)):
        return index
    p = Path(index)
    if not p.exists():
        raise FileNotFoundError(f"BM25 index not found: {p}")
    fmt = _index_format(p)
    if backend == "lucene" or fmt == "lucene":
        return LuceneIndex(str(p))
    _check_pisa_files(p)
    return PisaIndex(str(p))


class BM25(pt.Transformer):
    """BM25 retrieval and re-scoring over a PISA or Lucene index.

    Args:
        index: a :class:`pyterrier_pisa.PisaIndex`, a :class:`LuceneIndex`, or the path of either.
        k1, b: BM25 parameters (defaults 0.9 / 0.4, the Anserini/PISA defaults).
        num_results: results per query when retrieving.
        rerank_depth: how deep the backend retrieves when re-scoring given documents (default: all
            documents of the index, so every input document that matches a query term is scored).
        threads: retrieval threads.
        verbose: show a progress bar.
    """

    def __init__(self, index, k1: float = 0.9, b: float = 0.4, num_results: int = 1000,
                 rerank_depth: Optional[int] = None, threads: int = 1, verbose: bool = False):
        self.index = load_index(index, None)
        self.k1 = k1
        self.b = b
        self.num_results = num_results
        self.rerank_depth = rerank_depth
        self.threads = threads
        self.verbose = verbose
        self._retrievers = {}

    @property
    def backend(self) -> str:
        return "pisa" if type(self.index).__name__ == "PisaIndex" else "lucene"

    def _retriever(self, k: int) -> pt.Transformer:
        if not self._retrievers:  # the generation this retriever searches (sci_models)
            self._index_meta = _read_meta(Path(self.index.path))
            use_index_dates(self.index.path)   # appended documents' own dates, for date_cutoff
        if k not in self._retrievers:
            if self.backend == "pisa":
                self._retrievers[k] = pisa_bm25(self.index, k1=self.k1, b=self.b, num_results=k,
                                                threads=self.threads, verbose=self.verbose)
            else:
                self._retrievers[k] = self.index.bm25(k1=self.k1, b=self.b, num_results=k, threads=self.threads,
                                                      verbose=self.verbose)
        return self._retrievers[k]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"], mode="retrieve")
            v.result_frame(extra_columns=["query"], mode="rerank")
        if v.mode == "retrieve":
            return self._retrieve(inp)
        return self._rescore(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols = list(inp.columns) + [c for c in ("docno", "score", "rank") if c not in inp.columns]
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        inp = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns])
        found = self._retriever(self.num_results)(_backend_queries(inp))
        out = take_rows(inp, found["qid"].astype(np.int64).to_numpy())
        out["docno"] = found["docno"].to_numpy()
        out["score"] = found["score"].to_numpy()
        out["rank"] = found["rank"].to_numpy()
        return out[cols]

    def _rescore(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        depth = self.rerank_depth or len(self.index)
        queries = inp[["qid", "query"]].drop_duplicates("qid")
        # len(index) rows per query here: on pyarrow-backed strings the backend's copies took seconds
        found = self._retriever(depth)(_backend_queries(queries))
        scored = pd.DataFrame({"qid": queries["qid"].to_numpy()[found["qid"].astype(np.int64).to_numpy()],
                               "docno": found["docno"].to_numpy(), "score": found["score"].to_numpy()})
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns])
        out = out.assign(_order=np.arange(len(out))).merge(scored, on=["qid", "docno"], how="left")
        out["score"] = out["score"].fillna(0.0).astype(float)
        out = out.sort_values(["qid", "score", "_order"], ascending=[True, False, True], kind="stable")
        out = out.drop(columns="_order").reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_retrievers"] = {}  # native retrieval contexts are rebuilt where unpickled
        return state

    def sci_models(self):
        """The component protocol (:mod:`pyterrier_sci.protocol`): the index with the generation it searched
        (:func:`pyterrier_sci.generations.index_ref`; run manifests record it)."""
        return [index_ref(str(self.index.path), "sparse_index", self.__dict__.get("_index_meta"))]

    def fuse_rank_cutoff(self, k: int) -> Optional["BM25"]:
        if k < self.num_results:
            return BM25(self.index, self.k1, self.b, k, self.rerank_depth, self.threads, self.verbose)
        return None

    def __repr__(self) -> str:
        return f"BM25({str(self.index.path)!r}, k1={self.k1}, b={self.b}, num_results={self.num_results})"

    def __eq__(self, other) -> bool:
        return isinstance(other, BM25) and (
            (str(self.index.path), self.k1, self.b, self.num_results, self.rerank_depth)
            == (str(other.index.path), other.k1, other.b, other.num_results, other.rerank_depth))

    def __hash__(self) -> int:
        return hash(("BM25", str(self.index.path), self.k1, self.b, self.num_results, self.rerank_depth))


def _read_meta(path: Path) -> Optional[dict]:
    try:
        meta = json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _clean_query(q) -> str:
    """Whitespace-normalised query text (control characters and newlines become spaces); the
    backends tokenise the rest themselves."""
    if not isinstance(q, str):
        return ""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in q).split())


def _backend_queries(queries: pd.DataFrame) -> pd.DataFrame:
    """What a backend (PISA, Lucene) is asked: the rows' positions as qids and the cleaned queries, as plain
    object columns.  A backend copies its input's row once per result; the caller's own columns (a whole paper's
    fields, say, and its uncleaned query) are put back by position (``take_rows``, by reference)."""
    return pd.DataFrame({"qid": pd.Series(np.arange(len(queries)).astype(str), dtype=object),
                         "query": pd.Series(queries["query"].map(_clean_query).tolist(), dtype=object)})


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "bm25_component":
        return importlib.import_module(f"{__package__}.components").bm25_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
