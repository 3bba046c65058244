"""Exact dense search, in numpy, the same for a flat index and for every shard of a sharded one: query
preparation (:func:`prepare_queries`), scores of aligned blocks (:func:`aligned_scores`), the per-query top-k
(:func:`topk`) and its exact merge over shards (:func:`merge_topk`), re-scoring (:func:`rowwise_dot`,
:func:`ranked`) and the result frame (:func:`results_frame`), without a per-query loop.  Ties go to the lower
global position everywhere, and every score is computed by the same matrix-product shape at the same place
in it, so a sharded index returns the flat index's results bit for bit.

:class:`VectorIndex` is what the retriever asks of an index, flat (:class:`~.flat.FlatIndex`) or sharded
(:class:`~.fanout.ShardedDenseIndex`).
"""
from __future__ import annotations

from typing import Callable, Dict, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np
import pandas as pd

from pyterrier_sci.corpus import repeat_rows

__all__ = ["SCORE_ALIGN", "VectorIndex", "prepare_queries", "select_topk", "aligned_scores", "topk", "merge_topk",
           "masked_search", "rowwise_dot", "ranked", "results_frame"]


@runtime_checkable
class VectorIndex(Protocol):
    """A dense index as the retriever searches it: global positions ``0 .. num_docs - 1``, each a docno and a
    stored vector, compared with the query vectors by ``sim_fn`` (a ``pyterrier_dr.SimFn``)."""

    index_path: object
    num_docs: int
    sim_fn: object

    def search(self, qvecs, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)`` of the exact top-``k`` per query, by score then position."""

    def ann_search(self, ann: str, settings: Dict, qvecs, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """The same by an ANN structure (:mod:`.ann`); rows end in position -1, score -inf where it found fewer."""

    def docnos_of(self, positions) -> np.ndarray:
        """The docnos (an object array) at ``positions``."""

    def positions_of(self, docnos: Sequence[str]) -> np.ndarray:
        """The positions of ``docnos`` (-1 where a docno is not in the index)."""

    def vectors(self, positions) -> np.ndarray:
        """The stored vectors (float32 rows) at ``positions`` (all valid)."""


def prepare_queries(qvecs, sim_fn):
    """Query vectors as float32, normalised for cosine similarity."""
    from pyterrier_dr import SimFn
    qvecs = np.asarray(qvecs, dtype=np.float32)
    if SimFn(sim_fn) == SimFn.cos:
        qvecs = qvecs / np.linalg.norm(qvecs, axis=1, keepdims=True)
    return qvecs


def select_topk(s, i, k: int):
    """Per row the ``k`` largest scores of ``s`` (ids ``i``), equal scores by lower id: argpartition,
    then an exact sort of the (rare) rows where ties straddle the cut."""
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    ts, ti = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    kth = ts.min(axis=1, keepdims=True)
    split = (s == kth).sum(axis=1) > (ts == kth).sum(axis=1)
    for r in np.flatnonzero(split):
        order = np.lexsort((i[r], -s[r]))[:k]
        ts[r], ti[r] = s[r, order], i[r, order]
    return ts, ti


#: rows of one matrix product in exact search, at global positions aligned to multiples of it (see aligned_scores)
SCORE_ALIGN = 1024


def aligned_scores(qvecs, dvecs, lo: int, hi: int, offset: int = 0, cos: bool = False):
    """Scores (``len(qvecs) x (hi - lo)``, float32) of rows ``lo:hi`` of ``dvecs`` (global positions
    ``offset + row``), the same bit for bit however an index is cut into shards.

    A BLAS matrix product's value for one (query, document) pair depends on the product's shape and
    on where the pair falls in it (OpenBLAS splits the work into tiles and threads by shape, and
    edge tiles accumulate in another order): with blocks starting at each shard's first row, 2-4 %
    of the scores differed from a flat index's in the last bits, enough to swap near-ties (the
    fan-out tests failed on a Zen 5 CPU with OPENBLAS_CORETYPE=Haswell).  So every product here
    covers :data:`SCORE_ALIGN` rows at global positions ``[j A, (j + 1) A)``; rows of such a block
    outside ``lo:hi`` (the edges of a shard, the end of the index) are zeros, and their scores are
    dropped.  Every pair is then computed by the same product shape at the same place in it, in a
    flat index and in every sharding of it (for the same queries)."""
    nq, dim = qvecs.shape[0], qvecs.shape[1]
    out = np.empty((nq, hi - lo), dtype=np.float32)
    a_glob = offset + lo
    start = (a_glob // SCORE_ALIGN) * SCORE_ALIGN
    while start < offset + hi:
        a, b = max(start, a_glob), min(start + SCORE_ALIGN, offset + hi)  # global rows of this block
        rows = np.asarray(dvecs[a - offset:b - offset], dtype=np.float32)
        if cos:
            rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        if b - a < SCORE_ALIGN:
            block = np.zeros((SCORE_ALIGN, dim), dtype=np.float32)
            block[a - start:b - start] = rows
            out[:, a - a_glob:b - a_glob] = (qvecs @ block.T)[:, a - start:b - start]
        else:
            out[:, a - a_glob:b - a_glob] = qvecs @ rows.T
        start += SCORE_ALIGN
    return out


def topk(dvecs, qvecs, k: int, offset: int = 0, cos: bool = False, batch_size: int = 8192, ordered: bool = True):
    """``(scores, ids)`` of the top-``k`` rows of ``dvecs`` for each (prepared) query, ``batch_size``
    rows scored (:func:`aligned_scores`) and selected at a time; ids are ``offset`` + row, ordered by score
    (descending) then id (ascending): a flat index and the shards of a sharded one (``offset`` = a
    shard's start) give the same scores and order ties alike, so their results are identical.
    ``ordered=False`` leaves each query's top ``k`` unordered (a shard's, which :func:`merge_topk` orders
    once for all shards: the ordering is a sort of every query's ``k`` results, as costly as the selection)."""
    n, nq = dvecs.shape[0], qvecs.shape[0]
    k = min(k, n)
    qvecs = np.ascontiguousarray(qvecs, dtype=np.float32)
    best_s = np.empty((nq, 0), dtype=np.float32)
    best_i = np.empty((nq, 0), dtype=np.int64)
    for start in range(0, n, batch_size):
        end = min(start + batch_size, n)
        s = np.concatenate([best_s, aligned_scores(qvecs, dvecs, start, end, offset, cos)], axis=1)
        ids = np.broadcast_to(np.arange(offset + start, offset + end), (nq, end - start))
        i = np.concatenate([best_i, ids], axis=1)
        if s.shape[1] > k:
            s, i = select_topk(s, i, k)
        best_s, best_i = s, i
    return _by_score(best_s, best_i) if ordered else (best_s, best_i)


def _by_score(s, i):
    """Each row's results ordered by score (descending), then id (ascending)."""
    order = np.lexsort((i, -s), axis=1)
    return np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1)


def merge_topk(scores: list, ids: list, k: int):
    """The exact top-``k`` of per-shard top-k lists (ordered or not), by score then id."""
    s, i = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    if s.shape[1] > k:
        s, i = select_topk(s, i, k)
    return _by_score(s, i)


def masked_search(index: VectorIndex, qvecs, k: int, mask_fn: Callable[[int, int], np.ndarray],
                  batch_size: int = 8192):
    """The exact top-``k`` per query among the positions ``mask_fn`` allows: ``mask_fn(lo, hi)`` is a
    ``len(qvecs) x (hi - lo)`` boolean matrix over positions ``lo:hi`` (a date cutoff,
    :class:`pyterrier_sci.dates.DateCutoff`).  Disallowed positions score ``-inf`` before selection, so
    ``k`` allowed documents come back where there are ``k``; rows end in position -1, score -inf where
    fewer are allowed (:func:`results_frame` with ``padded=True`` leaves them out).  Scores are
    :func:`aligned_scores`' at the same global positions as :func:`topk`'s, so the result equals the
    unmasked search's ranking filtered to the allowed documents, bit for bit."""
    from pyterrier_dr import SimFn
    cos = SimFn(index.sim_fn) == SimFn.cos
    q = np.ascontiguousarray(prepare_queries(qvecs, index.sim_fn))
    n, nq = int(index.num_docs), q.shape[0]
    k = min(k, n)
    best_s = np.empty((nq, 0), dtype=np.float32)
    best_i = np.empty((nq, 0), dtype=np.int64)
    for start in range(0, n, batch_size):
        end = min(start + batch_size, n)
        dvecs = index.vectors(np.arange(start, end))
        s = aligned_scores(q, dvecs, 0, end - start, offset=start, cos=cos)
        s[~mask_fn(start, end)] = -np.inf
        ids = np.broadcast_to(np.arange(start, end), (nq, end - start))
        s, i = np.concatenate([best_s, s], axis=1), np.concatenate([best_i, ids], axis=1)
        if s.shape[1] > k:
            s, i = select_topk(s, i, k)
        best_s, best_i = s, i
    best_i = np.where(np.isfinite(best_s), best_i, -1)
    order = np.lexsort((np.where(best_i < 0, n, best_i), -best_s), axis=1)
    return np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)


def rowwise_dot(qvecs, pos, dvecs):
    """Per row i, ``qvecs[pos[i]] . dvecs[i]``."""
    return np.einsum("ij,ij->i", np.asarray(qvecs, dtype=np.float32)[pos], dvecs).astype(np.float32, copy=False)


def ranked(inp: pd.DataFrame, scores) -> pd.DataFrame:
    """``inp`` with ``score``, sorted by qid then score (descending, ties in input order), ranked per qid."""
    qid_codes, _ = pd.factorize(inp["qid"], sort=True)
    order = np.lexsort((-np.asarray(scores, dtype=np.float64), qid_codes))  # lexsort is stable
    out = inp.iloc[order].reset_index(drop=True)
    out["score"] = np.asarray(scores)[order]
    starts = np.r_[0, np.flatnonzero(np.diff(qid_codes[order])) + 1]
    out["rank"] = np.arange(len(out)) - np.repeat(starts, np.diff(np.r_[starts, len(out)]))
    return out


def results_frame(inp: pd.DataFrame, scores: np.ndarray, ids: np.ndarray,
                  docno_of: Callable[[np.ndarray], np.ndarray], padded: bool = False) -> pd.DataFrame:
    """The result frame of a top-k search: each row of the query frame ``inp`` repeated for its results
    (``scores``, positions ``ids``: one row per query, ordered), with ``docno`` (one lookup per distinct
    position), ``score`` and ``rank`` (from 0).  ``padded``: rows may end in position -1 / score -inf (an ANN
    structure that found fewer than k), which are left out."""
    nq = len(inp)
    if not padded:
        k = scores.shape[1]
        out = repeat_rows(inp, k)
        uniq, inverse = np.unique(ids.ravel(), return_inverse=True)  # docno lookups are per element
        out["docno"] = docno_of(uniq)[inverse]
        out["score"] = scores.ravel()
        out["rank"] = np.tile(np.arange(k), nq)
        return out
    valid = (ids >= 0) & np.isfinite(scores)  # a prefix of each row
    out = repeat_rows(inp, valid.sum(axis=1))
    uniq, inverse = np.unique(ids[valid], return_inverse=True)
    out["docno"] = docno_of(uniq)[inverse] if len(uniq) else np.empty(0, dtype=object)
    out["score"] = scores[valid]
    out["rank"] = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)[valid]
    return out
