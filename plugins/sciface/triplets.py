"""SciFACE stage 1 (data side): graded (seed, candidate) pairs -> facet triplets.

A *pairs frame* has one row per judged (seed, candidate) pair with the columns ``seed_id``,
``seed_title``, ``seed_abstract``, ``cand_id``, ``cand_title``, ``cand_abstract`` and one integer
score column per facet (``background``, ``method``; 0-3).  :func:`csfcube_pairs` builds one from
CSFCube's judgements, :func:`pyterrier_sci.plugins.sciface.labels.label_pairs` from LLM labels.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from pyterrier_sci.datasets import csfcube

FACETS = ("background", "method")
PAIR_COLUMNS = ("seed_id", "seed_title", "seed_abstract", "cand_id", "cand_title", "cand_abstract")


def collapse_method(scores) -> np.ndarray:
    """SciFACE §3.9.3: the Method scale 0-3 becomes 0-2 by merging 2 and 3."""
    return np.minimum(np.asarray(scores, dtype=int), 2)


def facet_scores(pairs: pd.DataFrame, facet: str, collapse: bool = False) -> np.ndarray:
    if facet not in pairs.columns:
        raise ValueError(f"pairs frame has no {facet!r} score column (columns: {list(pairs.columns)})")
    s = pairs[facet].to_numpy()
    if collapse:
        if facet != "method":
            raise ValueError("the 0-3 -> 0-2 collapse is defined for the method facet only")
        s = collapse_method(s)
    return np.asarray(s, dtype=int)


def check_pairs(pairs: pd.DataFrame, facet: Optional[str] = None) -> None:
    missing = [c for c in PAIR_COLUMNS if c not in pairs.columns]
    if missing:
        raise ValueError(f"pairs frame lacks columns {missing}; expected {list(PAIR_COLUMNS)} "
                         "+ a score column per facet")
    if facet is not None and facet not in pairs.columns:
        raise ValueError(f"pairs frame has no {facet!r} score column")


def make_triplets(pairs: pd.DataFrame, facet: str, collapse: bool = False) -> pd.DataFrame:
    """All ordered candidate pairs of each seed with ``score(pos) > score(neg)`` (SciFACE §3.9.3).

    Returns one row per triplet: ``seed_id``, ``pos`` and ``neg`` (row positions into ``pairs``),
    ``pos_score``, ``neg_score``.  Ties make no triplet; a seed whose candidates all share one
    score makes none."""
    check_pairs(pairs, facet)
    scores = facet_scores(pairs, facet, collapse)
    out = []
    pos_idx = np.arange(len(pairs))
    for seed, idx in pd.Series(pos_idx).groupby(pairs["seed_id"].to_numpy(), sort=False):
        idx = idx.to_numpy()
        s = scores[idx]
        hi, lo = np.nonzero(s[:, None] > s[None, :])
        if len(hi):
            out.append(pd.DataFrame({"seed_id": seed, "pos": idx[hi], "neg": idx[lo],
                                     "pos_score": s[hi], "neg_score": s[lo]}))
    if not out:
        return pd.DataFrame({"seed_id": pd.Series(dtype=object), "pos": pd.Series(dtype=int),
                             "neg": pd.Series(dtype=int), "pos_score": pd.Series(dtype=int),
                             "neg_score": pd.Series(dtype=int)})
    return pd.concat(out, ignore_index=True)


def sample_per_seed(triplets: pd.DataFrame, k: int = 10, rng: Optional[np.random.Generator] = None) -> pd.DataFrame:
    """Up to ``k`` triplets per seed, drawn without replacement (SciFACE resamples every epoch)."""
    rng = rng if rng is not None else np.random.default_rng()
    keep = []
    for _, idx in triplets.groupby("seed_id", sort=False).indices.items():
        keep.extend(rng.choice(idx, size=min(k, len(idx)), replace=False).tolist() if len(idx) > k else idx.tolist())
    return triplets.iloc[sorted(keep)].reset_index(drop=True)


def split_seeds(seed_ids: Iterable, val: float = 0.15, test: float = 0.15, seed: int = 0) -> Dict[str, str]:
    """Seed-level train/val/test split (no seed in two parts): ``{seed_id: "train"|"val"|"test"}``.
    ``val`` and ``test`` are fractions of the seeds (a non-zero fraction gets at least one seed)."""
    ids = sorted(set(seed_ids), key=str)
    rng = np.random.default_rng(seed)
    ids = [ids[i] for i in rng.permutation(len(ids))]
    n = len(ids)
    n_test = 0 if test <= 0 else max(1, int(round(test * n)))
    n_val = 0 if val <= 0 else max(1, int(round(val * n)))
    if n_test + n_val >= n:
        raise ValueError(f"{n} seeds cannot be split into val={val}, test={test} and a non-empty train part")
    out = {s: "test" for s in ids[:n_test]}
    out.update({s: "val" for s in ids[n_test:n_test + n_val]})
    out.update({s: "train" for s in ids[n_test + n_val:]})
    return out


def csfcube_pairs(facets: Sequence[str] = FACETS, split: Optional[str] = None) -> pd.DataFrame:
    """CSFCube's own graded judgements as a pairs frame: one row per (query paper, pool candidate)
    with the adjudicated 0-3 grade in the column of the query's facet (NaN for the other facet).
    ``split`` selects official query ids (``"fold1-test"``, ...).  Used by the fold-protocol example."""
    docs = csfcube.docs()
    rows = []
    for facet in facets:
        for qid, cand, rel in csfcube.iter_judged(facet, split):
            pid = csfcube.query_paper_id(qid)
            s, c = docs.get(pid), docs.get(cand)
            if s is None or c is None:
                continue
            rows.append({"seed_id": qid, "seed_title": s.title, "seed_abstract": s.abstract,
                         "cand_id": cand, "cand_title": c.title, "cand_abstract": c.abstract, facet: rel})
    return pd.DataFrame(rows)
