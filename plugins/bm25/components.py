"""The lexical plugin's pipeline components: ``bm25`` (PISA or Lucene, over an index or a dataset's
corpus, indexed on first use) and ``tfidf`` (TF-IDF cosine re-ranking of each query's candidates)."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields, params

from .retriever import BACKENDS, BM25, corpus_index, load_index
from .tfidf import STOP_WORDS, TfidfScorer

__all__ = ["bm25_component", "tfidf_component"]


@params(backend=Param(str, min_len=1), index=Param(PATH, optional=True), dataset=Param(DATASET, optional=True),
        fields=Param(list, item=str, min_len=1, optional=True), k1=Param(float, min=0, max=100),
        b=Param(float, min=0, max=1), num_results=Param(int, min=1, max=MAX_RESULTS),
        rerank_depth=Param(int, min=1, max=MAX_RESULTS, optional=True), threads=Param(int, min=1, max=1024))
def bm25_component(*, context=None, backend: str = "pisa", index: Optional[str] = None, dataset: Optional[str] = None,
                   fields: Optional[Sequence[str]] = None, k1: float = 0.9, b: float = 0.4, num_results: int = 1000,
                   rerank_depth: Optional[int] = None, threads: int = 1, verbose: bool = False) -> BM25:
    """``bm25``: BM25 over ``index`` or the dataset's corpus (index built on first use); backend ``pisa``
    or ``lucene``."""
    dataset = dataset_of(dataset, context, "bm25", required=False)
    if isinstance(index, (str, os.PathLike)):
        check_artifact(index, {"sparse_index": [backend] if backend == "lucene" else ["pisa", "lucene"]}, "bm25")
    elif index is None and fields:
        check_fields(dataset or "", fields, "bm25")
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if index is None:
        if not dataset:
            raise ValueError("bm25 needs an index path or a dataset (set 'dataset' in the config or pass dataset=...)")
        work = context.workdir() if context is not None else None
        index_obj = corpus_index(dataset, backend, fields, work, threads=threads, verbose=verbose)
    else:
        index_obj = load_index(index, backend)
    return BM25(index_obj, k1=k1, b=b, num_results=num_results, rerank_depth=rerank_depth, threads=threads,
                verbose=verbose)


@params(dataset=Param(DATASET, optional=True), text_field=Param(str, min_len=1),
        fields=Param(list, item=str, min_len=1, optional=True), lowercase=Param(bool), sublinear_tf=Param(bool),
        stop_words=Param(str, choices=STOP_WORDS, optional=True), clean=Param(bool))
def tfidf_component(*, context=None, dataset: Optional[str] = None, text_field: str = "text",
                    fields: Optional[Sequence[str]] = None, lowercase: bool = True, sublinear_tf: bool = False,
                    stop_words: Optional[str] = None, clean: bool = True, verbose: bool = False) -> TfidfScorer:
    """``tfidf``: re-ranks each query's candidates by TF-IDF cosine, the IDF fitted on that query's candidates
    (scikit-learn's ``TfidfVectorizer`` with the DORIS-MAE authors' settings); the text comes from a
    ``text_field`` column or the dataset's docstore (``fields``)."""
    dataset = dataset_of(dataset, context, "tfidf", required=False)
    if fields:
        check_fields(dataset or "", fields, "tfidf")
    return TfidfScorer(dataset=dataset, text_field=text_field, fields=fields, lowercase=lowercase,
                       sublinear_tf=sublinear_tf, stop_words=stop_words, clean=clean, verbose=verbose)
