"""The flat dense index: a ``pyterrier_dr.FlexIndex`` (one directory, ``vecs.f4`` and ``docnos.npids``) as the
retriever searches it (:class:`FlatIndex`, a :class:`~.search.VectorIndex`), written with the record of its
encoder (:func:`write_flat_index`, :mod:`.index_meta`); and :func:`open_index`, which opens an index
directory, flat or sharded, as the :class:`~.search.VectorIndex` it is.

Search and re-scoring read the index through pyterrier_dr's public API (``payload()``, ``docnos()``,
``sim_fn``) and do the numpy work in :mod:`.search`: the results of ``FlexIndex.np_retriever()`` /
``scorer()``, faster on many queries.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import pyterrier as pt

from pyterrier_sci.artifacts import write_pt_meta
from pyterrier_sci.generations import DocSet
from pyterrier_sci.upstream import fix_npids_multi_block_lookup, fix_npids_single_docno_blocks

from .ann import ann_index, ann_topk
from .calibration import Calibration
from .index_meta import read_pt_meta, write_calibration_texts
from .search import VectorIndex, prepare_queries, topk
from .shards import check_finished, is_sharded

# every reverse docno lookup of a FlexIndex (this module's, pyterrier_dr's re-scoring) needs it
fix_npids_multi_block_lookup()

__all__ = ["FlatIndex", "write_flat_index", "open_index", "as_vector_index"]


class FlatIndex:
    """A ``pyterrier_dr.FlexIndex`` behind the :class:`~.search.VectorIndex` interface (positions are its
    docids)."""

    def __init__(self, flex):
        self.flex = flex
        self.index_path = flex.index_path

    @property
    def path(self):
        return self.flex.path

    @property
    def sim_fn(self):
        return self.flex.sim_fn

    @property
    def num_docs(self) -> int:
        return len(self.flex)

    def __len__(self) -> int:
        return self.num_docs

    def __repr__(self) -> str:
        return f"FlatIndex({str(self.index_path)!r})"

    def search(self, qvecs, k: int):
        from pyterrier_dr import SimFn
        dvecs, _ = self.flex.payload(return_docnos=False)
        return topk(dvecs, prepare_queries(qvecs, self.sim_fn), k, cos=self.sim_fn == SimFn.cos)

    def ann_search(self, ann: str, settings: Dict[str, Any], qvecs, k: int):
        return ann_topk(ann_index(self.flex, ann, settings), ann, settings, qvecs, k, len(self.flex))

    def docnos_of(self, positions) -> np.ndarray:
        docnos = self.flex.payload(return_dvecs=False)[0]
        return np.asarray(docnos.fwd[positions], dtype=object)

    def positions_of(self, docnos: Sequence[str]) -> np.ndarray:
        return np.asarray(self.flex.docnos().inv[docnos], dtype=np.int64)

    def vectors(self, positions) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        dvecs, _ = self.flex.payload(return_docnos=False)
        order = np.argsort(positions, kind="stable")  # gathers from the memory map in file order
        out = np.empty((len(positions), dvecs.shape[1]), dtype=np.float32)
        out[order] = dvecs[positions[order]]
        return out


def write_flat_index(directory: Union[str, os.PathLike], docs: Iterable[dict],
                     describe: Callable[[], Tuple[dict, Optional[Calibration]]]) -> None:
    """Writes a FlexIndex of ``docs`` (``{'docno', 'doc_vec'}``) into ``directory`` (a build's temporary
    directory), then what describes it: ``describe()``, called once every document is encoded, gives the
    keys to add to its ``pt_meta.json`` (:mod:`.index_meta`) and the int8 calibration (kept in
    ``calibration.json``; None for fp32)."""
    from pyterrier_dr import FlexIndex
    held = DocSet()  # the documents' count and hash, recorded as generation 0 (pyterrier_sci.generations)
    fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
    FlexIndex(str(directory), verbose=False).indexer().index(_counted(docs, held))
    record, calibration = describe()
    meta = read_pt_meta(directory)
    meta.update(record)
    meta.update(generation=0, docs=held.record())
    write_pt_meta(directory, **meta)
    if calibration is not None:
        write_calibration_texts(directory, calibration)


def _counted(docs: Iterable[dict], held: DocSet) -> Iterable[dict]:
    for d in docs:
        held.add((str(d["docno"]),))
        yield d


def open_index(path: Union[str, os.PathLike]) -> VectorIndex:
    """The index at ``path`` as a :class:`~.search.VectorIndex`: a sharded index as the ``pt.Artifact`` its
    manifest names (:class:`~.fanout.ShardedDenseIndex`, checked against its shards; an unfinished build is
    one :class:`~.shards.ShardedIndexError`), else a :class:`FlatIndex` over its FlexIndex."""
    if is_sharded(path):
        check_finished(path)
        return pt.Artifact.load(str(path))
    from pyterrier_dr import FlexIndex
    flex = FlexIndex(str(Path(path)), verbose=False)
    if (Path(path) / "pt_meta.json").exists():
        flex.payload()  # opened now: this process keeps the generation it opened while an append replaces it
    return FlatIndex(flex)


def as_vector_index(index) -> VectorIndex:
    """``index`` as a :class:`~.search.VectorIndex`: itself when it is one (a sharded index, a
    :class:`FlatIndex`), else (a ``pyterrier_dr.FlexIndex``) a :class:`FlatIndex` over it."""
    return index if isinstance(index, VectorIndex) else FlatIndex(index)
