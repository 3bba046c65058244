"""ColBERT checkpoints: a hub id (``"colbert-ir/colbertv2.0"``, fetched with ``snapshot_download``),
a local colbert-ai checkpoint directory, or ``"default"``: one *built* (atomically, once, under the
work directory) from the offline all-MiniLM-L6-v2 with a seeded random orthogonal projection - an
untrained ColBERT for tests and smoke runs, not for effectiveness figures (``docs/colbert.md``).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Optional

from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.data import work_dir as default_work_dir
from pyterrier_sci.models import resolve_model

from ._compat import import_colbert, quiet

DEFAULT_CHECKPOINT = "default"
COLBERTV2 = "colbert-ir/colbertv2.0"
_DEFAULT_ALIASES = {"default", "minilm", "all-MiniLM-L6-v2"}
PROVENANCE_FILE = "pyterrier_sci_checkpoint.json"


class CheckpointNotFoundError(FileNotFoundError):
    """A ColBERT checkpoint is neither a local ColBERT directory nor obtainable from the hub."""


def build_checkpoint(model: str, out: os.PathLike, dim: int = 128, seed: int = 0, doc_maxlen: int = 300,
                     query_maxlen: int = 32) -> Path:
    """Writes a colbert-ai checkpoint at ``out`` from a BERT-like Hugging Face model (a local path,
    a hub id, or ``"default"`` for the offline MiniLM): the model's weights, a ``dim``-dimensional
    linear projection initialised as a random orthogonal map seeded by ``seed`` (deterministic; an
    exact rotation when ``dim`` equals the hidden size), its tokenizer, and colbert-ai's
    ``artifact.metadata``.  The result is untrained ColBERT (see the module doc).  Written
    atomically; an existing checkpoint at ``out`` is kept."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer
    src = resolve_model(model)
    out = Path(out)

    def build(tmp: Path):
        tmp.mkdir(parents=True)
        with quiet():
            lm = AutoModel.from_pretrained(src)
            tokenizer = AutoTokenizer.from_pretrained(src)
        hidden = lm.config.hidden_size
        if not 0 < dim <= hidden:
            raise ValueError(f"dim must be between 1 and the model's hidden size {hidden}, not {dim}")
        gen = torch.Generator().manual_seed(seed)
        q, r = torch.linalg.qr(torch.randn(hidden, dim, generator=gen, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r))  # the unique QR with a positive diagonal
        state = {f"{lm.base_model_prefix}.{k}": v.contiguous() for k, v in lm.state_dict().items()}
        state["linear.weight"] = q.T.to(torch.float32).contiguous()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        lm.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        import_colbert()
        from colbert.infra import ColBERTConfig
        with quiet():
            ColBERTConfig(dim=dim, doc_maxlen=doc_maxlen, query_maxlen=query_maxlen).save_for_checkpoint(str(tmp))
        (tmp / PROVENANCE_FILE).write_text(json.dumps({
            "source_model": str(model), "source_path": src, "dim": dim, "projection": "random orthogonal",
            "seed": seed, "trained": False,
            "note": "built by pyterrier_sci.plugins.colbert.checkpoint.build_checkpoint; not a trained ColBERT model",
        }, indent=2))

    return build_atomically(out, build)


def default_checkpoint_path(work_dir: Optional[os.PathLike] = None, dim: int = 128) -> Path:
    """Where the ``"default"`` checkpoint of dimension ``dim`` is built: ``<work dir>/models/``."""
    return Path(work_dir or default_work_dir()) / "models" / f"colbert-minilm-l6-d{dim}"


def is_default(checkpoint: str) -> bool:
    return str(checkpoint) in _DEFAULT_ALIASES


def resolve_checkpoint(checkpoint: str, work_dir: Optional[os.PathLike] = None) -> str:
    """A local colbert-ai checkpoint directory for ``checkpoint`` (see the module doc)."""
    checkpoint = str(checkpoint)
    if is_default(checkpoint):
        path = default_checkpoint_path(work_dir)
        if not (path / "artifact.metadata").exists():
            build_checkpoint("default", path)
        return str(path)
    p = Path(checkpoint).expanduser()
    if p.exists():
        if not (p / "artifact.metadata").exists():
            raise CheckpointNotFoundError(
                f"{p} is not a ColBERT checkpoint (no artifact.metadata); to make one from a BERT-like model, "
                f"use pyterrier_sci.plugins.colbert.build_checkpoint({str(p)!r}, out_dir)")
        return str(p.resolve())
    if checkpoint.endswith(".dnn") or checkpoint.startswith((".", "/", "~")) or checkpoint.count("/") > 1:
        raise CheckpointNotFoundError(f"ColBERT checkpoint not found: {checkpoint}")
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(repo_id=checkpoint)
    except Exception as e:
        raise CheckpointNotFoundError(
            f"ColBERT checkpoint {checkpoint!r} is not a local directory and could not be obtained from the "
            f"Hugging Face hub ({type(e).__name__}: {e}). Online, pass {COLBERTV2!r} (the standard ColBERTv2); "
            f"offline, pass 'default' (built from the packaged all-MiniLM-L6-v2, untrained) or a local "
            f"checkpoint directory") from e


def checkpoint_slug(checkpoint: str) -> str:
    """A short, file-name-safe name for ``checkpoint`` (for index paths)."""
    checkpoint = str(checkpoint)
    if is_default(checkpoint):
        return "minilm"
    p = Path(checkpoint)
    base = p.name if p.exists() else checkpoint
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', base)}-{hashlib.sha1(checkpoint.encode()).hexdigest()[:8]}"
