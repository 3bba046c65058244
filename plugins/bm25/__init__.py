"""BM25: PISA (default, native) and Lucene through Pyserini (``pip install pyterrier-sci[lucene]``).

The indexes are ``pt.Artifact`` objects - :class:`pyterrier_pisa.PisaIndex` and
:class:`~pyterrier_sci.plugins.bm25.lucene.LuceneIndex` - and hand out the transformers.  This
module adds what both backends share:

* :func:`corpus_index` builds (once, atomically) the index of an ir_datasets corpus under the work
  directory and returns the artifact;
* :class:`BM25` is the transformer the pipeline language's ``bm25`` component returns.  Given a
  query frame it retrieves; given a result frame (``docno`` present) it *re-scores* exactly the
  input documents (e.g. a benchmark's candidate pool): the backend retrieves the query's top
  ``rerank_depth`` documents (default: the whole index) and input documents it does not return
  score 0, after all scored ones, in their input order.

Terrier's own BM25 is not offered: it downloads its jars from Maven at run time.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

# the one locked, atomic builder of the toolkit's artifacts; other plugins import it from here too
from pyterrier_sci.artifacts import build_atomically  # noqa: F401
from pyterrier_sci.registry import (DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields,  # noqa: E402
                                    params)

BACKENDS = ("pisa", "lucene")


def _irds_id(dataset: str) -> str:
    return dataset[5:] if dataset.startswith("irds:") else dataset


def corpus_texts(dataset: str, fields: Optional[Sequence[str]] = None) -> Iterator[dict]:
    """``{'docno', 'text'}`` for each document of an ir_datasets corpus; ``text`` joins ``fields``
    (default: the dataset's ``default_text()``)."""
    import ir_datasets
    ds = ir_datasets.load(_irds_id(dataset))
    if not ds.has_docs():
        raise ValueError(f"dataset {dataset} has no documents")
    for doc in ds.docs_iter():
        if fields:
            text = " ".join(str(getattr(doc, f) or "") for f in fields)
        else:
            text = doc.default_text()
        yield {"docno": doc.doc_id, "text": text}


def corpus_id(dataset: str) -> str:
    """The shortest ancestor id of ``dataset`` with the same documents (``sci/csfcube/method/fold1-test``
    -> ``sci/csfcube``), so that the subsets of a benchmark share one index."""
    import ir_datasets
    ds_id = _irds_id(dataset)
    try:
        docs = ir_datasets.load(ds_id).docs_handler()
    except Exception:
        return ds_id
    parts = ds_id.split("/")
    for i in range(1, len(parts)):
        anc = "/".join(parts[:i])
        try:
            anc_ds = ir_datasets.load(anc)
        except KeyError:
            continue
        if anc_ds.has_docs() and anc_ds.docs_handler() is docs:
            return anc
    return ds_id


def index_path(work_dir: Path, dataset: str, kind: str, fields: Optional[Sequence[str]] = None) -> Path:
    """``<work>/indexes/<corpus>/<kind>[-<fields>]``: where a corpus index of the toolkit lives."""
    suffix = "" if not fields else "-" + "+".join(fields)
    return Path(work_dir) / "indexes" / corpus_id(dataset).replace("/", "__") / f"{kind}{suffix}"


@contextlib.contextmanager
def quiet_native(enabled: bool = True):
    """Silences what native code (PISA's C++ progress and log lines) writes to the process's
    stdout/stderr file descriptors; Python-level output is flushed first."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


def build_index(docs: Iterable[dict], path: Union[str, Path], backend: str = "pisa", threads: int = 1,
                verbose: bool = False):
    """Indexes ``{'docno', 'text'}`` dicts into a new BM25 index at ``path`` (atomically: an
    interrupted build leaves nothing at ``path``) and returns the index artifact."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    path = Path(path)
    if backend == "pisa":
        from pyterrier_pisa import PisaIndex

        def build(tmp):
            with quiet_native(not verbose):
                PisaIndex(str(tmp), text_field="text", threads=threads).index(docs)
        build_atomically(path, build)
        return PisaIndex(str(path), threads=threads)
    from .lucene import LuceneIndex
    build_atomically(path, lambda tmp: LuceneIndex(str(tmp)).indexer(text_field="text", threads=threads).index(docs))
    return LuceneIndex(str(path))


def corpus_index(dataset: str, backend: str = "pisa", fields: Optional[Sequence[str]] = None,
                 work_dir: Optional[Path] = None, threads: int = 1, verbose: bool = False):
    """The BM25 index (an artifact) of a dataset's corpus, built on first use."""
    from pyterrier_sci.data import work_dir as default_work_dir
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    path = index_path(work_dir or default_work_dir(), dataset, backend, fields)
    if not path.exists():
        docs = pt.tqdm(corpus_texts(dataset, fields), desc=f"indexing {dataset} ({backend})", unit="doc",
                       disable=not verbose)
        build_index(docs, path, backend, threads, verbose)
    return _load_index(path, backend)


_PISA_DERIVED = re.compile(r"bm25\.k1-(.+?)\.b-(.+?)\.q\d+\.bmw\.\d+(?:\.[A-Za-z0-9_]+)?$")


def pisa_derived_files(index_dir: Union[str, Path], k1: float, b: float) -> list:
    """The files PISA derives inside an index on the first BM25 retrieval with ``k1``, ``b``: the
    block-max data ``bm25.k1-<k1>.b-<b>.q0.bmw.<block>`` and the index compressed with it
    (``….bmw.<block>.<encoding>``)."""
    from pyterrier_sci import artifacts
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
    from pyterrier_sci import artifacts
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


def _load_index(index, backend: Optional[str]):
    if not isinstance(index, (str, os.PathLike)):
        return index
    p = Path(index)
    if not p.exists():
        raise FileNotFoundError(f"BM25 index not found: {p}")
    meta = p / "pt_meta.json"
    fmt = None
    if meta.exists():
        import json
        fmt = json.loads(meta.read_text()).get("format")
    if backend == "lucene" or fmt == "lucene":
        from .lucene import LuceneIndex
        return LuceneIndex(str(p))
    from pyterrier_pisa import PisaIndex
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
        self.index = _load_index(index, None)
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
        cleaned = inp["query"].map(_clean_query)
        if (cleaned == inp["query"]).all():
            return self._retriever(self.num_results)(inp)
        # the backend sees the cleaned query; the caller gets its own back
        res = self._retriever(self.num_results)(inp.assign(query=cleaned, _row=np.arange(len(inp))))
        res["query"] = inp["query"].to_numpy()[res["_row"].to_numpy()]
        return res.drop(columns="_row")

    def _rescore(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        depth = self.rerank_depth or len(self.index)
        queries = inp[["qid", "query"]].drop_duplicates("qid")
        queries = queries.assign(query=queries["query"].map(_clean_query))
        scored = self._retriever(depth)(queries)[["qid", "docno", "score"]]
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

    def fuse_rank_cutoff(self, k: int) -> Optional["BM25"]:
        if k < self.num_results:
            return BM25(self.index, self.k1, self.b, k, self.rerank_depth, self.threads, self.verbose)
        return None

    def __repr__(self) -> str:
        return f"BM25({str(self.index.path)!r}, k1={self.k1}, b={self.b}, num_results={self.num_results})"

    def __eq__(self, other) -> bool:
        return isinstance(other, BM25) and (str(self.index.path), self.k1, self.b, self.num_results, self.rerank_depth) == \
            (str(other.index.path), other.k1, other.b, other.num_results, other.rerank_depth)

    def __hash__(self) -> int:
        return hash(("BM25", str(self.index.path), self.k1, self.b, self.num_results, self.rerank_depth))


def _clean_query(q) -> str:
    """Whitespace-normalised query text (control characters and newlines become spaces); the
    backends tokenise the rest themselves."""
    if not isinstance(q, str):
        return ""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in q).split())


@params(backend=Param(str, min_len=1), index=Param(PATH, optional=True), dataset=Param(DATASET, optional=True),
        fields=Param(list, item=str, min_len=1, optional=True), k1=Param(float, min=0, max=100),
        b=Param(float, min=0, max=1), num_results=Param(int, min=1, max=MAX_RESULTS),
        rerank_depth=Param(int, min=1, max=MAX_RESULTS, optional=True), threads=Param(int, min=1, max=1024))
def bm25_component(*, context=None, backend: str = "pisa", index: Optional[str] = None, dataset: Optional[str] = None,
                   fields: Optional[Sequence[str]] = None, k1: float = 0.9, b: float = 0.4, num_results: int = 1000,
                   rerank_depth: Optional[int] = None, threads: int = 1, verbose: bool = False) -> BM25:
    """``bm25``: BM25 over ``index`` or the dataset's corpus (index built on first use); backend ``pisa`` or ``lucene``."""
    if isinstance(index, (str, os.PathLike)):
        check_artifact(index, {"sparse_index": [backend] if backend == "lucene" else ["pisa", "lucene"]}, "bm25")
    elif index is None and fields:
        check_fields(dataset or (context.dataset if context is not None else None) or "", fields, "bm25")
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if index is None:
        dataset = dataset or (context.dataset if context is not None else None)
        if not dataset:
            raise ValueError("bm25 needs an index path or a dataset (set 'dataset' in the config or pass dataset=...)")
        work = context.workdir() if context is not None else None
        index_obj = corpus_index(dataset, backend, fields, work, threads=threads, verbose=verbose)
    else:
        index_obj = _load_index(index, backend)
    return BM25(index_obj, k1=k1, b=b, num_results=num_results, rerank_depth=rerank_depth, threads=threads, verbose=verbose)
