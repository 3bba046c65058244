"""The ``pt.Artifact`` of a fine-tuned sentence-transformers model on disk (type ``dense_model``,
format ``sentence_transformers``); model loading itself is the core's (:mod:`pyterrier_sci.models`,
re-exported here)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Union

import pyterrier as pt

from pyterrier_sci.models import (  # noqa: F401
    BACKENDS,
    DEFAULT_MODEL,
    PRECISIONS,
    BackendError,
    ModelNotFoundError,
    check_backend,
    load_sentence_transformer,
    model_slug,
    resolve_model,
)

from .retriever import DenseRetriever

ARTIFACT_TYPE = "dense_model"
ARTIFACT_FORMAT = "sentence_transformers"


class SentenceTransformerModel(pt.Artifact):
    """A fine-tuned sentence-transformers model on disk (a ``pt.Artifact``): the directory loads with
    ``SentenceTransformer(path)`` and works as ``model=<path>`` for ``dense``; ``training`` holds
    how it was trained.  The paper plugins' trainers write this type (or a subclass naming its
    ``TRAINING_FILE``)."""

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    #: the file holding how the model was trained, as its trainer names it: a trainer's artifact class (a
    #: paper plugin's subclass) declares its own
    TRAINING_FILE: Optional[str] = None

    def __init__(self, path: Union[str, Path]):
        super().__init__(path)
        if not (Path(path) / "modules.json").exists():
            raise FileNotFoundError(f"{path} is not a sentence-transformers model directory (no modules.json)")

    @classmethod
    def training_files(cls) -> List[str]:
        """The files trainers record how a model was trained in: this class's ``TRAINING_FILE``, then those
        the other subclasses of :class:`SentenceTransformerModel` declare (each paper plugin's artifact class
        names its trainer's file; that is how a model saved before ``pt_meta.json`` named its
        ``training_file`` is read, as the generic class, once its paper plugin is imported)."""
        names, todo = [cls.TRAINING_FILE], [SentenceTransformerModel]
        while todo:
            c = todo.pop(0)
            names.append(c.TRAINING_FILE)
            todo.extend(c.__subclasses__())
        return [n for n in dict.fromkeys(names) if n]

    @property
    def training(self) -> dict:
        """How the model was trained: the trainer's own file (``pt_meta.json``'s ``training_file``, else one
        of :meth:`training_files`), else the training fields of ``pt_meta.json`` (HLM-Cite's curriculum
        writes them there)."""
        meta = json.loads((Path(self.path) / "pt_meta.json").read_text())
        for name in (meta.get("training_file"), *self.training_files()):
            if name and (Path(self.path) / name).exists():
                return json.loads((Path(self.path) / name).read_text())
        return {k: v for k, v in meta.items() if k not in ("type", "format", "package_hint", "training_file")}

    def sentence_transformer(self, device: Optional[str] = None):
        return load_sentence_transformer(str(self.path), device or "cpu")

    def dense(self, **kwargs) -> DenseRetriever:
        """The ``dense`` component's transformer with this model."""
        return DenseRetriever(str(self.path), **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"
