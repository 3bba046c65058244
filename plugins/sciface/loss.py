"""Margin ranking loss for cross-encoders, in the style of ``sentence_transformers.cross_encoder.losses``.

sentence-transformers 6.x has no margin ranking loss for cross-encoders (``MarginMSELoss`` regresses the
score margin onto a gold margin; ``RankNetLoss`` is a logistic pairwise loss).  SciFACE trains with
``torch.nn.MarginRankingLoss(margin=0.5)`` on (seed, positive, negative) triplets:
``max(0, -(s(seed, pos) - s(seed, neg)) + margin)``, averaged over the batch.
"""
from __future__ import annotations

from typing import List, Optional, Union

import torch
from torch import Tensor, nn


class MarginRankingLoss(nn.Module):
    """``max(0, margin - (s(q, pos) - s(q, neg)))`` over (anchor, positive, negative) text triplets.

    Inputs: three text columns (anchor, positive, negative); labels are not needed (a ``label`` column,
    if present, is ignored).  The model must have one output label.

    Args:
        model: a :class:`sentence_transformers.CrossEncoder` with ``num_labels == 1``.
        margin: the margin (SciFACE: 0.5).
        activation_fn: applied to the logits first (identity by default, as in the paper).
    """

    def __init__(self, model, margin: float = 0.5, activation_fn: nn.Module = nn.Identity()) -> None:
        super().__init__()
        from sentence_transformers.cross_encoder import CrossEncoder
        if not isinstance(model, CrossEncoder):
            raise ValueError(f"{type(self).__name__} expects a CrossEncoder, got {type(model)}")
        if model.num_labels != 1:
            raise ValueError(f"{type(self).__name__} expects a model with 1 output label, got {model.num_labels}")
        self.model = model
        self.margin = float(margin)
        self.activation_fn = activation_fn
        self.loss_fct = nn.MarginRankingLoss(margin=self.margin)

    def forward(self, inputs: List[List[str]], labels: Union[Tensor, None] = None,
                prompt: Optional[str] = None, task: Optional[str] = None) -> Tensor:
        if len(inputs) != 3:
            raise ValueError(f"{type(self).__name__} expects (anchor, positive, negative) columns, got {len(inputs)}")
        anchors, positives, negatives = inputs
        pos = self.logits_from_pairs(list(zip(anchors, positives)), prompt=prompt, task=task)
        neg = self.logits_from_pairs(list(zip(anchors, negatives)), prompt=prompt, task=task)
        return self.loss_from_scores(pos, neg)

    def loss_from_scores(self, pos: Tensor, neg: Tensor) -> Tensor:
        return self.loss_fct(pos, neg, torch.ones_like(pos))

    def logits_from_pairs(self, pairs, prompt: Optional[str] = None, task: Optional[str] = None) -> Tensor:
        from sentence_transformers.util import batch_to_device
        inputs = self.model.preprocess(pairs, prompt=prompt, task=task)
        inputs = batch_to_device(inputs, self.model.device)
        return self.activation_fn(self.model(inputs)["scores"].view(-1))

    def get_config_dict(self):
        return {"margin": self.margin}

    @property
    def citation(self) -> str:
        return "SciFACE (2025), section 3.10.2: pairwise margin ranking training, margin 0.5."
