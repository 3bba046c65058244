"""NeuralNDCG (Pobrotyn & Białobrzeski, 2021), the stage-2 ranking loss of HLM-Cite's curriculum.

NDCG with the sorting step relaxed by NeuralSort (Grover et al., 2019): the permutation matrix of
the scores is replaced by the row-stochastic matrix

    P[i, j] = softmax_j( ((n + 1 - 2 i) s_j - sum_k |s_j - s_k|) / tau ),     i = 1..n

made doubly stochastic by Sinkhorn scaling; the relaxed gains in rank order are ``P @ gains`` and
NeuralNDCG = sum_i (P g)_i / log2(i + 1) / IDCG.  The loss is -NeuralNDCG averaged over the lists.
As ``tau -> 0`` it tends to the exact NDCG of the score order (tested), and it is differentiable.

This follows allRank's ``neuralNDCG`` (deterministic variant, powered gains 2^y - 1, Sinkhorn
scaling, truncation at ``k``, padded items marked by ``y < 0``).  allRank itself is not a
dependency: its last release pins torch <= 1.8 and imports torchvision at import time.
"""
from __future__ import annotations

from typing import Optional

import torch

PADDED = -1.0


def neural_sort(scores: torch.Tensor, tau: float = 1.0, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The NeuralSort relaxation ``[batch, n, n]`` of the descending sort of ``scores`` ``[batch, n]``;
    masked (padded) items are pushed to the end."""
    if mask is not None:
        scores = torch.where(mask, scores.new_full((), -1e4), scores)
    n = scores.shape[1]
    s = scores.unsqueeze(-1)                                   # [b, n, 1]
    a_s = (s - s.transpose(1, 2)).abs()                         # [b, n, n]
    b = a_s.sum(dim=2, keepdim=True)                            # [b, n, 1]: sum_k |s_j - s_k|
    scaling = (n + 1 - 2 * (torch.arange(n, device=scores.device, dtype=scores.dtype) + 1))  # [n]
    c = s * scaling.view(1, 1, n)                               # [b, j, i]
    p_max = (c - b).transpose(1, 2)                             # [b, i, j]
    return torch.softmax(p_max / tau, dim=-1)


def sinkhorn(p: torch.Tensor, mask: Optional[torch.Tensor] = None, tol: float = 1e-6, max_iter: int = 50) -> torch.Tensor:
    """Alternating column/row normalisation until doubly stochastic (within ``tol``).  With a
    padding ``mask`` (padding at the end of each list, as in allRank) the padded rows (positions)
    and columns (items) are zero."""
    keep = None
    if mask is not None:
        keep = (~mask).to(p.dtype)
        p = p * keep.unsqueeze(2) * keep.unsqueeze(1)
    for _ in range(max_iter):
        p = p / p.sum(dim=1, keepdim=True).clamp(min=1e-10)
        p = p / p.sum(dim=2, keepdim=True).clamp(min=1e-10)
        dev = (p.sum(dim=1) - 1).abs()
        if keep is not None:
            dev = dev * keep
        if dev.max() < tol:
            break
    return p


def _discounts(n: int, like: torch.Tensor) -> torch.Tensor:
    return 1.0 / torch.log2(torch.arange(n, device=like.device, dtype=like.dtype) + 2.0)


def ndcg(scores: torch.Tensor, labels: torch.Tensor, k: Optional[int] = None, powered: bool = True) -> torch.Tensor:
    """The exact NDCG@k of ranking by ``scores`` (per list); padded items (label < 0) are ignored."""
    mask = labels < 0
    gains = torch.where(mask, torch.zeros_like(labels), (2 ** labels - 1) if powered else labels)
    order = torch.argsort(torch.where(mask, scores.new_full((), -1e9), scores), dim=1, descending=True)
    ranked = torch.gather(gains, 1, order)
    ideal = torch.sort(gains, dim=1, descending=True).values
    n = labels.shape[1]
    k = n if k is None else min(k, n)
    d = _discounts(n, scores)
    dcg = (ranked[:, :k] * d[:k]).sum(1)
    idcg = (ideal[:, :k] * d[:k]).sum(1)
    return torch.where(idcg > 0, dcg / idcg.clamp(min=1e-10), torch.zeros_like(dcg))


def neural_ndcg(scores: torch.Tensor, labels: torch.Tensor, tau: float = 1.0, k: Optional[int] = None,
                powered: bool = True, sinkhorn_iters: int = 50) -> torch.Tensor:
    """Per-list NeuralNDCG of ``scores`` ``[batch, n]`` against graded ``labels`` ``[batch, n]``
    (``labels < 0`` marks padding)."""
    labels = labels.to(scores.dtype)
    mask = labels < 0
    p = sinkhorn(neural_sort(scores, tau, mask), mask, max_iter=sinkhorn_iters)
    gains = torch.where(mask, torch.zeros_like(labels), (2 ** labels - 1) if powered else labels)
    relaxed = torch.matmul(p, gains.unsqueeze(-1)).squeeze(-1)   # gains in relaxed rank order
    n = labels.shape[1]
    k = n if k is None else min(k, n)
    d = _discounts(n, scores)
    dcg = (relaxed[:, :k] * d[:k]).sum(1)
    ideal = torch.sort(gains, dim=1, descending=True).values
    idcg = (ideal[:, :k] * d[:k]).sum(1)
    return torch.where(idcg > 0, dcg / idcg.clamp(min=1e-10), torch.zeros_like(dcg))


def neural_ndcg_loss(scores: torch.Tensor, labels: torch.Tensor, tau: float = 1.0, k: Optional[int] = None,
                     powered: bool = True) -> torch.Tensor:
    """``-mean(NeuralNDCG)``: the quantity to minimise."""
    return -neural_ndcg(scores, labels, tau, k, powered).mean()
