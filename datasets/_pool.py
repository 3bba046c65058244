"""A dataset's candidate pool (ir_datasets ``scoreddocs``) as a first-stage transformer."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.registry import DATASET, Param, check_fields, params


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
            ds = ir_datasets.load(self.dataset[5:] if self.dataset.startswith("irds:") else self.dataset)
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
    dataset = dataset or (context.dataset if context is not None else None)
    if not dataset:
        raise ValueError("pool needs a dataset: set one in the pipeline config or write pool(dataset='irds:...')")
    return PoolRetriever(dataset)


@params(dataset=Param(DATASET, optional=True), fields=Param(str, list, item=str, min_len=1))
def text_component(*, context=None, dataset: Optional[str] = None, fields=("title", "abstract"),
                   verbose: bool = False) -> pt.Transformer:
    """``text``: adds document fields (default ``title`` and ``abstract``) from the dataset's docstore,
    for re-rankers that read text (``pool >> text >> mir_pointwise``)."""
    dataset = dataset or (context.dataset if context is not None else None)
    if not dataset:
        raise ValueError("text needs a dataset: set one in the pipeline config or write text(dataset='irds:...')")
    fields = [fields] if isinstance(fields, str) else list(fields)
    check_fields(dataset, fields, "text")
    ds = pt.get_dataset(dataset if dataset.startswith("irds:") else "irds:" + dataset)
    return pt.text.get_text(ds, fields, verbose=verbose)
