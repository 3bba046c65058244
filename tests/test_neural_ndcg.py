import math

import pytest
import torch

from pyterrier_sci.plugins.dense.neural_ndcg import ndcg, neural_ndcg, neural_ndcg_loss, neural_sort, sinkhorn

SCORES = torch.tensor([[0.3, 2.0, -1.0, 0.5], [1.0, 0.0, 3.0, 2.0]])
LABELS = torch.tensor([[2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 2.0, 2.0]])


def test_exact_ndcg_by_hand():
    # list 1: order by score = items 1,3,0,2 -> gains 0,0,3,1 ; ideal 3,1,0,0
    d = [1 / math.log2(i + 2) for i in range(4)]
    dcg = 3 * d[2] + 1 * d[3]
    idcg = 3 * d[0] + 1 * d[1]
    assert ndcg(SCORES, LABELS)[0].item() == pytest.approx(dcg / idcg)
    # list 2 is ranked perfectly except the two 2s which tie in gain: 2,3,0,1 -> 3,3,0,1; ideal 3,3,1,0
    assert ndcg(SCORES, LABELS)[1].item() == pytest.approx((3 + 3 * d[1] + d[3]) / (3 + 3 * d[1] + d[2]))
    assert ndcg(SCORES, LABELS, k=1)[0].item() == 0.0


def test_neural_sort_is_the_sort_permutation_at_low_temperature():
    p = neural_sort(SCORES, tau=1e-3)
    perm = torch.argsort(SCORES, dim=1, descending=True)
    assert torch.equal(p.argmax(dim=2), perm)
    assert torch.allclose(p.sum(dim=2), torch.ones(2, 4), atol=1e-5)   # rows stochastic
    ds = sinkhorn(neural_sort(SCORES, tau=1.0))
    assert torch.allclose(ds.sum(dim=1), torch.ones(2, 4), atol=1e-4)
    assert torch.allclose(ds.sum(dim=2), torch.ones(2, 4), atol=1e-4)


def test_neural_ndcg_tends_to_ndcg_and_is_smooth_otherwise():
    exact = ndcg(SCORES, LABELS)
    assert torch.allclose(neural_ndcg(SCORES, LABELS, tau=1e-3), exact, atol=1e-4)
    soft = neural_ndcg(SCORES, LABELS, tau=5.0)
    assert not torch.allclose(soft, exact, atol=1e-2)
    assert ((soft >= 0) & (soft <= 1 + 1e-6)).all()


def test_padding_is_ignored():
    padded_scores = torch.cat([SCORES, torch.tensor([[9.0], [9.0]])], dim=1)
    padded_labels = torch.cat([LABELS, torch.tensor([[-1.0], [-1.0]])], dim=1)
    assert torch.allclose(ndcg(padded_scores, padded_labels), ndcg(SCORES, LABELS))
    assert torch.allclose(neural_ndcg(padded_scores, padded_labels, tau=1e-3), ndcg(SCORES, LABELS), atol=1e-4)


def test_gradient_descent_on_the_loss_learns_the_order():
    torch.manual_seed(0)
    scores = torch.zeros(1, 6, requires_grad=True)
    labels = torch.tensor([[0.0, 2.0, 1.0, 0.0, 2.0, 1.0]])
    opt = torch.optim.SGD([scores], lr=2.0)
    start = neural_ndcg_loss(scores, labels).item()
    for _ in range(200):
        opt.zero_grad()
        loss = neural_ndcg_loss(scores, labels, tau=0.5)
        loss.backward()
        opt.step()
    assert loss.item() < start
    assert ndcg(scores.detach(), labels).item() == pytest.approx(1.0)
