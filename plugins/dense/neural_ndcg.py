"""NeuralNDCG (Pobrotyn & Białobrzeski, 2021), the stage-2 ranking loss of HLM-Cite's curriculum.

NDCG with the sorting step relaxed by NeuralSort (Grover et al., 2019): the permutation matrix of
the scores is replaced by the row-stochastic matrix

    P[i, j] = softmax_j( ((n + 1 - 2 i) s_j - sum_k |s_j - s_k|) / tau ),     i = 1..n

made doubly stochastic by Sinkhorn scaling; the relaxed gains in rank order are ``P @ gains`` and
NeuralNDCG = sum_i (P g)_i / log2(i + 1) / IDCG.  The loss is -NeuralNDCG averaged over the lists
that have a relevant item.
As ``tau -> 0`` it tends to the exact NDCG of the score order (tested), and it is differentiable.

This follows allRank's ``neuralNDCG`` (deterministic variant, powered gains 2^y - 1, Sinkhorn
scaling, truncation at ``k``, padded items marked by ``y < 0`` and kept out of the sort and the
Sinkhorn scaling by a separate block, so padded lists have finite gradients and lose no precision;
``tests/test_dense_neural_ndcg.py`` checks values against a float64 reference).  allRank itself is not a
dependency: its last release pins torch <= 1.8 and imports torchvision at import time.
"""
from __future__ import annotations

from typing import Optional

import torch

PADDED = -1.0
_EPS = 1e-10   # allRank's DEFAULT_EPS


def neural_sort(scores: torch.Tensor, tau: float = 1.0, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The NeuralSort relaxation ``[batch, n, n]`` (rows: positions, columns: items) of the descending
    sort of ``scores`` ``[batch, n]``.

    With a padding ``mask`` (``True`` = padded item, anywhere in the list) the matrix is block-diagonal,
    as in allRank's ``deterministic_neural_sort``: the first ``n_real`` positions are the NeuralSort of
    the real items alone (padded items take no part in ``sum_k |s_j - s_k|`` or in the scaling), and
    the padded positions are spread uniformly over the padded items.  Padded scores never enter the
    arithmetic, so their values (``-1e4``, ``inf``, ``nan``) cannot cost precision or gradients.
    """
    n = scores.shape[1]
    if mask is None:
        mask = torch.zeros_like(scores, dtype=torch.bool)
    n_real = (~mask).sum(dim=1, keepdim=True)                                  # [b, 1]
    s = scores.masked_fill(mask, 0.0).unsqueeze(-1)                            # [b, n, 1]
    pair_padded = mask.unsqueeze(2) | mask.unsqueeze(1)                        # [b, n, n]
    a_s = (s - s.transpose(1, 2)).abs().masked_fill(pair_padded, 0.0)
    b = a_s.sum(dim=2, keepdim=True)                                           # [b, j, 1]: sum_k |s_j - s_k|
    position = torch.arange(1, n + 1, device=scores.device).unsqueeze(0)       # [1, n]
    padded_position = position > n_real                                        # [b, n]
    scaling = (n_real + 1 - 2 * position).to(scores.dtype).masked_fill(padded_position, 0.0)
    c = s * scaling.unsqueeze(1)                                               # [b, j, i]
    p_max = (c - b).transpose(1, 2)                                            # [b, i, j]
    rows, cols = padded_position.unsqueeze(2), mask.unsqueeze(1)
    p_max = p_max.masked_fill(rows != cols, float("-inf"))    # real positions take real items only
    p_max = p_max.masked_fill(rows & cols, 0.0)               # padded positions: uniform over padded items
    return torch.softmax(p_max / tau, dim=-1)


def sinkhorn(p: torch.Tensor, mask: Optional[torch.Tensor] = None, tol: float = 1e-6,
             max_iter: int = 50) -> torch.Tensor:
    """Alternating column/row normalisation until doubly stochastic (within ``tol``), as allRank's
    ``sinkhorn_scaling``.  ``p`` must have no all-zero row or column (:func:`neural_sort`'s padded
    block guarantees it); with a padding ``mask`` the padded items' columns and the padded positions'
    rows are zeroed after scaling."""
    for _ in range(max_iter):
        p = p / p.sum(dim=1, keepdim=True).clamp(min=_EPS)
        p = p / p.sum(dim=2, keepdim=True).clamp(min=_EPS)
        if (p.sum(dim=2) - 1).abs().max() < tol and (p.sum(dim=1) - 1).abs().max() < tol:
            break
    if mask is not None:
        n_real = (~mask).sum(dim=1, keepdim=True)
        padded_position = torch.arange(1, p.shape[1] + 1, device=p.device).unsqueeze(0) > n_real
        p = p.masked_fill(padded_position.unsqueeze(2) | mask.unsqueeze(1), 0.0)
    return p


def _discounts(n: int, like: torch.Tensor) -> torch.Tensor:
    return 1.0 / torch.log2(torch.arange(n, device=like.device, dtype=like.dtype) + 2.0)


def _gains(labels: torch.Tensor, powered: bool) -> torch.Tensor:
    """Gains ``2^y - 1`` (or ``y``); padded items (``y < 0``) gain 0."""
    return torch.where(labels < 0, torch.zeros_like(labels), (2 ** labels - 1) if powered else labels)


def _ndcg_of(ranked_gains: torch.Tensor, labels: torch.Tensor, k: Optional[int], powered: bool) -> torch.Tensor:
    """DCG@k of gains in rank order over the ideal DCG@k of ``labels``; 0 where the ideal is 0."""
    n = labels.shape[1]
    k = n if k is None else min(k, n)
    d = _discounts(n, ranked_gains)[:k]
    dcg = (ranked_gains[:, :k] * d).sum(1)
    idcg = _idcg(labels, k, powered)
    return torch.where(idcg > 0, dcg / idcg.clamp(min=_EPS), torch.zeros_like(dcg))


def _idcg(labels: torch.Tensor, k: Optional[int], powered: bool) -> torch.Tensor:
    """The ideal DCG@k of each list."""
    n = labels.shape[1]
    k = n if k is None else min(k, n)
    ideal = torch.sort(_gains(labels, powered), dim=1, descending=True).values
    return (ideal[:, :k] * _discounts(n, ideal)[:k]).sum(1)


def ndcg(scores: torch.Tensor, labels: torch.Tensor, k: Optional[int] = None, powered: bool = True) -> torch.Tensor:
    """The exact NDCG@k of ranking by ``scores`` (per list); padded items (label < 0) are ignored."""
    labels = labels.to(scores.dtype)
    order = torch.argsort(scores.masked_fill(labels < 0, float("-inf")), dim=1, descending=True, stable=True)
    return _ndcg_of(torch.gather(_gains(labels, powered), 1, order), labels, k, powered)


def neural_ndcg(scores: torch.Tensor, labels: torch.Tensor, tau: float = 1.0, k: Optional[int] = None,
                powered: bool = True, sinkhorn_iters: int = 50) -> torch.Tensor:
    """Per-list NeuralNDCG of ``scores`` ``[batch, n]`` against graded ``labels`` ``[batch, n]``
    (``labels < 0`` marks padding, anywhere in the list)."""
    labels = labels.to(scores.dtype)
    mask = labels < 0
    p = sinkhorn(neural_sort(scores, tau, mask), mask, max_iter=sinkhorn_iters)
    relaxed = torch.matmul(p, _gains(labels, powered).unsqueeze(-1)).squeeze(-1)   # gains in relaxed rank order
    return _ndcg_of(relaxed, labels, k, powered)


def neural_ndcg_loss(scores: torch.Tensor, labels: torch.Tensor, tau: float = 1.0, k: Optional[int] = None,
                     powered: bool = True) -> torch.Tensor:
    """``-mean(NeuralNDCG)`` over the lists that have a relevant item (allRank's averaging: a list
    whose ideal DCG is 0 has no NDCG and takes no part); 0, still attached to the graph, when none has."""
    labels = labels.to(scores.dtype)
    values = neural_ndcg(scores, labels, tau, k, powered)
    counted = _idcg(labels, k, powered) > 0
    if not bool(counted.any()):
        return (scores * 0.0).sum()
    return -values[counted].mean()
