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


# --- an independent float64 reference (allRank's deterministic NeuralNDCG on the real items) -----

def _reference(scores, labels, tau=1.0, k=None, iters=50, tol=1e-6):
    """NeuralNDCG of one list, NumPy float64, padded items (label < 0) removed first."""
    import numpy as np
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    s, y = s[y >= 0], y[y >= 0]
    n = len(s)
    a = np.abs(s[:, None] - s[None, :]).sum(axis=1)                     # sum_k |s_j - s_k|
    logits = np.array([[((n + 1 - 2 * i) * s[j] - a[j]) / tau for j in range(n)] for i in range(1, n + 1)])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    for _ in range(iters):
        p = p / p.sum(axis=0, keepdims=True)
        p = p / p.sum(axis=1, keepdims=True)
        if abs(p.sum(axis=1) - 1).max() < tol and abs(p.sum(axis=0) - 1).max() < tol:
            break
    gains = 2 ** y - 1
    k = n if k is None else min(k, n)
    disc = 1 / np.log2(np.arange(n) + 2)
    idcg = (np.sort(gains)[::-1][:k] * disc[:k]).sum()
    return float(((p @ gains)[:k] * disc[:k]).sum() / idcg) if idcg > 0 else 0.0


@pytest.mark.parametrize("tau", [1.0, 0.1])
def test_values_equal_the_float64_reference_with_and_without_padding(tau):
    torch.manual_seed(1)
    scores = torch.randn(3, 6) * 3
    labels = torch.tensor([[2.0, 1.0, 0.0, 0.0, 1.0, 2.0],
                           [2.0, 1.0, 0.0, -1.0, -1.0, -1.0],      # padded at the end (stage 2)
                           [0.0, -1.0, 2.0, -1.0, 1.0, 0.0]])      # padded anywhere
    scores[1, 3:] = -1e4                                          # padded scores may be anything
    scores[2, 1] = 7.0
    got = neural_ndcg(scores, labels, tau=tau)
    for i in range(3):
        assert got[i].item() == pytest.approx(_reference(scores[i].tolist(), labels[i].tolist(), tau), abs=2e-6)
    # k truncation
    got3 = neural_ndcg(scores, labels, tau=tau, k=3)
    for i in range(3):
        assert got3[i].item() == pytest.approx(_reference(scores[i].tolist(), labels[i].tolist(), tau, k=3), abs=2e-6)


def test_padded_lists_have_finite_gradients():
    # the reproduction: every item of the padded list used to get a NaN gradient
    torch.manual_seed(0)
    s = torch.randn(2, 4, requires_grad=True)
    loss = neural_ndcg_loss(s, torch.tensor([[2., 1., 0., -1.], [1., 0., 0., 0.]]))
    loss.backward()
    assert torch.isfinite(s.grad).all()
    assert s.grad[0, 3].item() == 0.0                # a padded item gets no gradient
    assert s.grad[0, :3].abs().sum() > 0             # the real items do
    # one real item and the rest padded: a list with nothing to sort
    s = torch.randn(1, 5, requires_grad=True)
    neural_ndcg_loss(s, torch.tensor([[1., -1., -1., -1., -1.]])).backward()
    assert torch.isfinite(s.grad).all()


def test_padding_does_not_change_the_loss_at_low_temperature():
    torch.manual_seed(2)
    scores = torch.randn(1, 5)
    labels = torch.tensor([[2.0, 0.0, 1.0, 0.0, 1.0]])
    padded_scores = torch.cat([scores, torch.full((1, 7), -1e4)], dim=1)
    padded_labels = torch.cat([labels, torch.full((1, 7), -1.0)], dim=1)
    for tau in (1.0, 0.1):
        assert neural_ndcg_loss(padded_scores, padded_labels, tau=tau).item() == pytest.approx(
            neural_ndcg_loss(scores, labels, tau=tau).item(), abs=1e-6)


def test_loss_averages_over_lists_with_a_relevant_item():
    scores = torch.tensor([[0.3, 2.0, -1.0], [1.0, 0.0, 3.0]], requires_grad=True)
    labels = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])     # the second list has no relevant item
    assert neural_ndcg_loss(scores, labels).item() == pytest.approx(-neural_ndcg(scores[:1], labels[:1]).item())
    none = neural_ndcg_loss(scores, torch.zeros(2, 3))
    none.backward()                                              # attached to the graph, zero gradient
    assert none.item() == 0.0 and torch.equal(scores.grad, torch.zeros(2, 3))
