"""The ColBERT plugin's pipeline component: ``colbert`` (late interaction over a PLAID index of the
dataset's corpus, built on first use)."""
from __future__ import annotations

from typing import Optional, Sequence

from pyterrier_sci.corpus import dataset_of, index_path
from pyterrier_sci.data import work_dir
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields, params

from .checkpoint import DEFAULT_CHECKPOINT, checkpoint_slug
from .plaid import ColBERTIndex, ColBERTRetriever

__all__ = ["colbert_component"]


@params(dataset=Param(DATASET, optional=True), checkpoint=Param(str, min_len=1), index=Param(PATH, optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS), fields=Param(list, item=str, min_len=1, optional=True),
        doc_maxlen=Param(int, min=1, max=100_000), nbits=Param(int, choices=None, min=1, max=8),
        kmeans_niters=Param(int, min=1, max=1000), query_maxlen=Param(int, min=1, max=100_000),
        ncells=Param(int, min=1, max=1_000_000, optional=True),
        centroid_score_threshold=Param(float, min=-1, max=1, optional=True),
        ndocs=Param(int, min=1, max=10_000_000, optional=True), threads=Param(int, min=1, max=1024, optional=True),
        timeout=Param(float, min=0.001, max=1e7, optional=True))
def colbert_component(*, context=None, dataset: Optional[str] = None, checkpoint: str = DEFAULT_CHECKPOINT,
                      index: Optional[str] = None, num_results: int = 1000, fields: Optional[Sequence[str]] = None,
                      doc_maxlen: int = 300, nbits: int = 2, kmeans_niters: int = 4, query_maxlen: int = 32,
                      ncells: Optional[int] = None, centroid_score_threshold: Optional[float] = None,
                      ndocs: Optional[int] = None, threads: Optional[int] = None, timeout: Optional[float] = None,
                      verbose: bool = True) -> ColBERTRetriever:
    """``colbert``: ColBERT late interaction over a PLAID index (colbert-ai) of the dataset's corpus.

    The checkpoint is ``"default"`` (built from the offline all-MiniLM-L6-v2: untrained ColBERT, for
    tests), ``"colbert-ir/colbertv2.0"`` (the standard ColBERTv2, from the hub) or a local checkpoint
    directory.  The index of ``dataset`` (or the pipeline's dataset; ``fields`` joined, default the
    documents' ``default_text()``) lives under the work directory and is built on first use; the other
    parameters are those of :meth:`ColBERTIndex.indexer` and :class:`ColBERTRetriever`."""
    corpus = dataset_of(dataset, context, "colbert", required=False)
    if index is not None:  # built there on first use when missing
        check_artifact(index, {"multi_vector_index": ["plaid"]}, "colbert", must_exist=False)
    check_fields(corpus, fields, "colbert")
    if index is None:
        if not corpus:
            raise ValueError("colbert needs a corpus: dataset=... (an ir_datasets id), the pipeline's dataset, "
                             "or index=<path of a built ColBERT index>")
        work = context.workdir() if context is not None else work_dir()
        index = str(index_path(work, corpus, f"colbert-{checkpoint_slug(checkpoint)}-l{doc_maxlen}-b{nbits}", fields))
    options = {"doc_maxlen": doc_maxlen, "nbits": nbits, "kmeans_niters": kmeans_niters, "threads": threads,
               "timeout": timeout, "verbose": verbose}
    return ColBERTRetriever(ColBERTIndex(index, checkpoint=checkpoint, verbose=verbose), num_results=num_results,
                            query_maxlen=query_maxlen, ncells=ncells, centroid_score_threshold=centroid_score_threshold,
                            ndocs=ndocs, corpus=corpus, fields=fields, index_options=options)
