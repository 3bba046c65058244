"""The dense plugin's component factory: ``dense`` (:func:`dense_component`), registered through the
``pyterrier_sci.components`` entry point."""
from __future__ import annotations

from typing import Optional, Sequence, Union

from pyterrier_sci.corpus import dataset_of, index_path
from pyterrier_sci.data import work_dir
from pyterrier_sci.models import (
    BACKENDS,
    DEFAULT_MODEL,
    PRECISIONS,
    check_backend,
    default_backend,
    model_max_seq_length,
    model_slug,
)
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields, params

from .ann import ANN_METHODS
from .fanout import ShardedDenseIndex
from .retriever import DenseRetriever
from .shards import is_sharded

__all__ = ["dense_component"]


@params(model=Param(str, min_len=1, optional=True,
                    note="None: the index's own, else the offline all-MiniLM-L6-v2"),
        index=Param(bool, PATH, optional=True),
        dataset=Param(DATASET, optional=True), fields=Param(list, item=str, min_len=1, optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS), batch_size=Param(int, min=1, max=65536),
        device=Param(str, min_len=1, optional=True), ann=Param(str, choices=ANN_METHODS, optional=True),
        ann_params=Param(dict, optional=True),
        backend=Param(str, choices=BACKENDS, optional=True,
                      note="None: the index's own where it records one, else 'openvino' where OpenVINO is installed "
                           "and the device is the CPU, else 'torch'"),
        precision=Param(str, choices=PRECISIONS, optional=True, note="None: the index's own, else 'fp32'"),
        max_seq_length=Param(int, min=1, max=1_000_000, optional=True))
def dense_component(*, context=None, model: Optional[str] = None, index: Union[None, bool, str] = None,
                    dataset: Optional[str] = None, fields: Optional[Sequence[str]] = None, num_results: int = 1000,
                    batch_size: int = 32, verbose: bool = True, device: Optional[str] = None,
                    ann: Optional[str] = None, ann_params: Optional[dict] = None, backend: Optional[str] = None,
                    precision: Optional[str] = None, max_seq_length: Optional[int] = None) -> DenseRetriever:
    """``dense``: a sentence-transformers bi-encoder (default: offline all-MiniLM-L6-v2) over a flat index
    or a sharded one (``pyterrier-sci index --shards N``; searched shard-parallel).

    ``index``: a FlexIndex or sharded index path (built there when needed); by default the dataset's corpus
    index, built on first retrieval, or when re-scoring a first stage that covers a quarter of the corpus
    (a smaller one, ``pool % 30 >> dense``, has only its own documents encoded, each once); ``true``: the
    corpus index is built on first use either way; ``false``: no index, the input's ``text`` column is
    encoded.  ``backend`` / ``precision``: the encoder's engine and precision (docs/dense.md; default
    ``openvino`` where OpenVINO is installed and the device is the CPU, else ``torch``: the same vectors to about
    1e-7, about twice torch's speed; ``fp32``); int8 calibrates on the dataset's first documents and gets its
    own corpus index.
    An index path that holds an index takes ``model``, ``backend``, ``precision``, ``fields`` and the int8
    calibration from its ``pt_meta.json`` where they are left out; one that contradicts it is one
    :class:`~.index_meta.IndexSettingsError`.  ``max_seq_length``: every text (query and document) truncated
    to that many word pieces (default the model's own); the corpus index of another length is its own (the model's
    own length, written out, uses the default's)."""
    corpus = dataset_of(dataset, context, "dense", required=False)
    common = dict(num_results=num_results, batch_size=batch_size, verbose=verbose, device=device, ann=ann,
                  ann_params=ann_params, max_seq_length=max_seq_length)
    if isinstance(index, str):  # an index there (its settings where left out), or built there on first use
        if is_sharded(index):  # a finished sharded index (opened: checked against its shards) or an unfinished build
            index = ShardedDenseIndex(index)
        else:
            check_artifact(index, {"dense_index": ["flex", "sharded_flex"]}, "dense", must_exist=False)
        return DenseRetriever(model, index=index, corpus=corpus, fields=fields, backend=backend, precision=precision,
                              build_index=True, **common)
    model, backend = model or DEFAULT_MODEL, backend or default_backend(device)
    check_backend(backend, precision or "fp32")
    precision = precision or "fp32"
    if fields and index is not False:
        check_fields(corpus, fields, "dense")
    fast = dict(backend=backend, precision=precision, calibration=corpus)
    if index is False:
        return DenseRetriever(model, index=None, corpus=None, fields=fields, **common, **fast)
    build_index = True if index is True else None  # asked for: built when needed
    if corpus:
        work = context.workdir() if context is not None else None
        # the model's own length written out is the default's index, not one of its own
        own = max_seq_length if max_seq_length and max_seq_length != model_max_seq_length(model) else None
        kind = "dense-" + model_slug(model) + (f"-{backend}-int8" if precision == "int8" else "") \
            + (f"-len{own}" if own else "")  # fp32 exports match
        index = str(index_path(work or work_dir(), corpus, kind, fields))
    else:
        index = None
    return DenseRetriever(model, index=index, corpus=corpus, fields=fields, build_index=build_index, **common, **fast)
