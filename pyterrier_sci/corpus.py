"""Corpus access every plugin shares: dataset-id normalisation, the corpus id and texts of a
dataset, where a corpus index lives in the work directory, and the two corpus components ``pool``
(a benchmark's candidate pool as a first stage) and ``text`` (document fields from the docstore)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.registry import DATASET, Param, check_fields, irds_id, params, pt_dataset_id  # noqa: F401


def dataset_of(dataset: Optional[str], context=None, component: str = "this component",
               required: bool = True) -> Optional[str]:
    """``dataset``, else the pipeline context's dataset; one clear error when neither is set (None
    instead when not ``required``: a component that can also work from an index path)."""
    dataset = dataset or (getattr(context, "dataset", None) if context is not None else None)
    if not dataset and required:
        raise ValueError(f"{component} needs a dataset: set one in the pipeline config "
                         f"or write {component}(dataset='irds:...')")
    return dataset or None


def corpus_texts(dataset: str, fields: Optional[Sequence[str]] = None) -> Iterator[dict]:
    """``{'docno', 'text'}`` for each document of an ir_datasets corpus; ``text`` joins ``fields``
    (default: the dataset's ``default_text()``)."""
    import ir_datasets
    ds = ir_datasets.load(irds_id(dataset))
    if not ds.has_docs():
        raise ValueError(f"dataset {dataset} has no documents")
    for doc in ds.docs_iter():
        yield {"docno": doc.doc_id, "text": _text_of(doc, fields)}


def _text_of(doc, fields: Optional[Sequence[str]]) -> str:
    if fields:
        return " ".join(str(getattr(doc, f) or "") for f in fields)
    return doc.default_text()


def doc_texts(dataset: str, docnos: Sequence[str], fields: Optional[Sequence[str]] = None) -> List[str]:
    """The texts of ``docnos`` (in that order) as :func:`corpus_texts` gives them, looked up in the
    corpus's docstore; a docno the corpus lacks is a ``KeyError`` naming it."""
    import ir_datasets
    store = ir_datasets.load(irds_id(dataset)).docs_store()
    found = store.get_many(list(dict.fromkeys(docnos)))
    missing = [d for d in docnos if d not in found]
    if missing:
        raise KeyError(f"docno(s) {missing[:5]} are not in the corpus of {dataset}")
    return [_text_of(found[d], fields) for d in docnos]


def corpus_size(dataset: str, exact: bool = True) -> Optional[int]:
    """The number of documents of an ir_datasets corpus.  ``exact=False``: only when it is known
    without reading the corpus (ir_datasets' metadata, a built docstore, a declared count), else
    None; a corpus read on first use (:class:`~pyterrier_sci.irds.FnDocs`) is not read for it."""
    import ir_datasets
    ds = ir_datasets.load(irds_id(dataset))
    handler = ds.docs_handler() if hasattr(ds, "docs_handler") else None
    if not exact and hasattr(handler, "known_count"):
        return handler.known_count()
    n = ds.docs_count()
    return int(n) if n is not None else None


def corpus_id(dataset: str) -> str:
    """The shortest ancestor id of ``dataset`` with the same documents (``sci/csfcube/method/fold1-test``
    -> ``sci/csfcube``), so that the subsets of a benchmark share one index."""
    import ir_datasets
    ds_id = irds_id(dataset)
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


def corpus_version(dataset: str) -> Optional[str]:
    """The version of a corpus whose content can change under one id (a local corpus, ``sci/local/NAME``: a hash of
    its sources), as its documents' ``sci_version()`` gives it; None for a benchmark's fixed corpus."""
    import ir_datasets
    try:
        handler = ir_datasets.load(irds_id(dataset)).docs_handler()
    except Exception:  # noqa: BLE001 - no such dataset, or one without documents: no version
        return None
    version = getattr(handler, "sci_version", None)
    return version() if callable(version) else None


def corpus_key(dataset: str) -> str:
    """The folder name of a corpus's indexes and saved runs: its :func:`corpus_id` with ``/`` as ``__``, and
    ``@<version>`` for a corpus with versions (a changed local corpus never shares the old one's indexes)."""
    version = corpus_version(dataset)
    return corpus_id(dataset).replace("/", "__") + (f"@{version}" if version else "")


def index_path(work_dir: Path, dataset: str, kind: str, fields: Optional[Sequence[str]] = None) -> Path:
    """``<work>/indexes/<corpus>[@<version>]/<kind>[-<fields>]``: where a corpus index of the toolkit lives."""
    suffix = "" if not fields else "-" + "+".join(fields)
    return Path(work_dir) / "indexes" / corpus_key(dataset) / f"{kind}{suffix}"


def sorted_results(df: pd.DataFrame) -> pd.DataFrame:
    """A result frame in ranking order: by ``qid``, then ``rank`` when present, else ``score``
    descending (a stable sort: ties keep the frame's order)."""
    if "rank" in df.columns:
        return df.sort_values(["qid", "rank"], kind="stable")
    return df.sort_values(["qid", "score"], ascending=[True, False], kind="stable")


#: columns :func:`take_rows` leaves in their own dtype (identifiers: short, and compared by dtype)
ID_COLUMNS = ("qid", "docno")


def take_rows(frame: pd.DataFrame, positions: Union[Sequence[int], np.ndarray]) -> pd.DataFrame:
    """The rows of ``frame`` at ``positions`` (repeats allowed), index reset.

    Text columns other than ``qid`` and ``docno`` come back as ``object`` columns whose rows refer to
    the frame's own Python strings.  Taken in pandas' Arrow-backed ``str`` dtype, every text would be
    copied once per row taken: 949 full-paper queries with their paper's fields, 3,000 results each,
    asked for one 3.1 GB block (PRISM's full tier), where references take 8 bytes a row."""
    texts = {c: frame[c].astype(object) for c in frame.columns
             if c not in ID_COLUMNS and frame[c].dtype != object and pd.api.types.is_string_dtype(frame[c].dtype)}
    if texts:
        frame = frame.assign(**texts)
    return frame.iloc[np.asarray(positions, dtype=np.intp)].reset_index(drop=True)


def repeat_rows(frame: pd.DataFrame, counts: Union[int, Sequence[int], np.ndarray]) -> pd.DataFrame:
    """Each row of ``frame`` repeated ``counts`` times (one count per row, or one for all), in order,
    index reset (:func:`take_rows`): a retriever's result frame before it sets ``docno``, ``score``
    and ``rank``."""
    return take_rows(frame, np.repeat(np.arange(len(frame)), counts))


class PoolRetriever(pt.Transformer):
    """Returns each query's candidate pool from a dataset's ``scoreddocs`` (pool benchmarks such as
    CSFCube and DORIS-MAE re-rank a fixed pool).  Input columns are kept; ``score`` is the pool's
    own score (0 for CSFCube) and ranks follow the pool order.  Queries without a pool get no rows.

    Args:
        dataset: an ir_datasets id (``irds:`` prefix optional) that has scoreddocs.
    """

    def __init__(self, dataset: str):
        self.dataset = dataset
        self._pool: Optional[pd.DataFrame] = None

    def _load(self) -> pd.DataFrame:
        if self._pool is None:
            import ir_datasets
            ds = ir_datasets.load(irds_id(self.dataset))
            if not ds.has_scoreddocs():
                raise ValueError(f"dataset {self.dataset} has no candidate pool (scoreddocs)")
            pool = pd.DataFrame(ds.scoreddocs_iter(), columns=["qid", "docno", "score"])
            pool["qid"] = pool["qid"].astype(str)
            pool["docno"] = pool["docno"].astype(str)
            pool["rank"] = pool.groupby("qid").cumcount()
            self._pool = pool
        return self._pool

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp)
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + ["docno", "score", "rank"])
        pool = self._load()
        out = inp.merge(pool, on="qid", how="inner")
        return out.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)

    def __repr__(self) -> str:
        return f"PoolRetriever({self.dataset!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, PoolRetriever) and other.dataset == self.dataset

    def __hash__(self) -> int:
        return hash(("PoolRetriever", self.dataset))


@params(dataset=Param(DATASET, optional=True))
def pool_component(*, context=None, dataset: Optional[str] = None) -> PoolRetriever:
    """``pool``: the experiment dataset's candidate pool (or ``pool(dataset="irds:...")``)."""
    dataset = dataset_of(dataset, context, "pool")
    return PoolRetriever(dataset)


@params(dataset=Param(DATASET, optional=True), fields=Param(str, list, item=str, min_len=1))
def text_component(*, context=None, dataset: Optional[str] = None, fields=("title", "abstract"),
                   verbose: bool = False) -> pt.Transformer:
    """``text``: adds document fields (default ``title`` and ``abstract``) from the dataset's docstore,
    for re-rankers that read text (``pool >> text >> mir_pointwise``)."""
    dataset = dataset_of(dataset, context, "text")
    fields = [fields] if isinstance(fields, str) else list(fields)
    check_fields(dataset, fields, "text")
    ds = pt.get_dataset(pt_dataset_id(dataset))
    return pt.text.get_text(ds, fields, verbose=verbose)
