"""The ``torch`` engine: sentence-transformers itself, on PyTorch (any device), fp32 only."""
from __future__ import annotations

from typing import Optional

from pyterrier_sci.models import load_sentence_transformer

from .engine import Engine

__all__ = ["TorchEngine"]


class TorchEngine(Engine):
    """``SentenceTransformer.encode`` / ``CrossEncoder.predict`` on PyTorch: nothing is exported."""

    name = "torch"
    exported = False

    def load(self, model: str, device: Optional[str] = None):
        """The ``SentenceTransformer`` of ``model`` on ``device`` (default ``cpu``)."""
        return load_sentence_transformer(model, device or "cpu")
