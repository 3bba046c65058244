"""What an encoder runs on: the :class:`Engine` interface that each backend implements once
(:mod:`.torch_engine`, :mod:`.openvino_engine`, :mod:`.onnx_engine`; registered in :mod:`.engines`), and
what the exporting engines share: the module they export (:func:`exported_module`), sentence-transformers'
own tokenisation (:func:`features`) and the engine's inputs (:func:`engine_inputs`).

Only the transformer runs in an exported engine: tokenisation is the model's own sentence-transformers
tokenizer (same truncation), and its pooling, dense and normalisation modules run on the engine's output.
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from pyterrier_sci.models import BackendError

__all__ = ["Engine", "ENGINE_INPUTS", "exported_module", "features", "engine_inputs", "example_inputs",
           "transformers_quiet"]

#: the inputs an exported transformer takes (those the model's tokenizer gives)
ENGINE_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Engine:
    """An inference engine for sentence-transformers models: one instance per backend name, in the registry
    of :mod:`.engines`.  ``exported`` engines run an export of the model's transformer on the CPU
    (built once by :func:`.encoders.load_encoder` / :func:`.cross_encoders.load_cross_encoder` and cached);
    the torch engine runs the model itself."""

    #: the ``backend`` name (``torch``, ``openvino``, ``onnx``)
    name: str = ""
    #: whether the engine runs an exported transformer (False: sentence-transformers on PyTorch)
    exported: bool = True
    #: the Python packages (import names) the engine needs
    packages: Tuple[str, ...] = ()
    #: the files an export consists of, inside its directory
    model_files: Tuple[str, ...] = ()
    #: whether this engine gives the int8 the toolkit recommends (refusals of another engine's int8 point to it)
    recommended_int8: bool = False
    #: how its int8 quantises, as an int8 refusal explains it (empty: nothing to add)
    int8_note: str = ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def check_available(self) -> None:
        """One :class:`BackendError` naming the packages the engine needs and this environment lacks."""
        missing = [m for m in self.packages if importlib.util.find_spec(m) is None]
        if missing:
            raise BackendError(f"backend {self.name!r} needs the package(s) {', '.join(missing)} "
                               "(pip install 'pyterrier-sci[fast]'); backend='torch' needs none")

    def check_device(self, device: Optional[str]) -> None:
        """One :class:`BackendError` for a device the engine cannot run on (exported engines: the CPU only)."""
        if self.exported and device not in (None, "cpu"):
            raise BackendError(f"backend {self.name!r} runs on the CPU; device {device!r} needs backend='torch'")

    def export(self, st, tmp: Path, precision: str, calibration, *, output: str = "last_hidden_state",
               examples: Sequence = (), reference: Optional[dict] = None, verbose: bool = False,
               name: str = "the model", bias_correction: bool = True) -> Dict[str, Any]:
        """Writes ``output`` of the model ``st``'s transformer, in ``precision`` (int8 calibrated on
        ``calibration``), to the new directory ``tmp`` (its :attr:`model_files`); ``examples`` trace it.
        ``bias_correction``: whether a static int8 quantisation also corrects the layers' biases (where the
        engine's quantiser can; ignored otherwise).
        With ``reference`` (a dict) and int8, ``reference['run']`` may be set to an engine function over the
        fp32 graph before quantisation (the int8 check's reference).  Returns what the export records of
        itself (library versions, the quantisation method)."""
        raise BackendError(f"backend {self.name!r} runs the model itself: there is nothing to export")

    def compile(self, path: Path, threads: Optional[int]):
        """The compiled model of the export at ``path``, computing with ``threads`` threads (None: every core)."""
        raise BackendError(f"backend {self.name!r} runs the model itself: there is no export to compile")

    def runner(self, compiled) -> Callable[[Dict[str, np.ndarray]], np.ndarray]:
        """The engine function of a compiled model: engine inputs (int64 arrays by input name; inputs the
        model does not take are dropped) -> its first output as a numpy array."""
        raise BackendError(f"backend {self.name!r} runs the model itself")

    def threads(self, compiled) -> int:
        """The threads a compiled model computes with."""
        raise BackendError(f"backend {self.name!r} runs the model itself")


def exported_module(st, output: str = "last_hidden_state"):
    """The torch module to export: sentence-transformers' first module's transformer, returning
    its ``output`` (``last_hidden_state``: the token embeddings sentence-transformers pools;
    ``logits``: a CrossEncoder's scores); one :class:`BackendError` for a model whose first module is
    not a plain text transformer with that output."""
    import torch
    first = st[0]
    model = getattr(first, "model", None)
    if model is None:
        model = getattr(first, "auto_model", None)
    cfg = getattr(first, "modality_config", None) or {}
    text_cfg = cfg.get("text", {}) if isinstance(cfg, dict) else {}
    if model is None or text_cfg.get("method", "forward") != "forward" or \
            text_cfg.get("method_output_name", "last_hidden_state") != output:
        raise BackendError(f"only sentence-transformers models whose first module is a text Transformer returning "
                           f"{output} can be exported (this one: {type(first).__name__} {cfg}); "
                           "use backend='torch'")

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kw["token_type_ids"] = token_type_ids
            return getattr(self.m(**kw, return_dict=True), output)

    return TokenEmbeddings(model).eval()


def features(st, texts: Sequence) -> dict:
    """sentence-transformers' own tokenisation (padding to the longest text, truncation to
    ``max_seq_length``)."""
    first = st[0]
    prep = getattr(first, "preprocess", None) or first.tokenize
    return prep(list(texts))


def engine_inputs(feats: dict) -> dict:
    return {k: feats[k].numpy().astype(np.int64) for k in ENGINE_INPUTS if k in feats}


def example_inputs(st, examples: Sequence) -> dict:
    """The torch tensors that trace the export: ``examples`` tokenised by the model."""
    import torch
    return {k: torch.from_numpy(v) for k, v in engine_inputs(features(st, examples)).items()}


@contextlib.contextmanager
def transformers_quiet():
    """transformers' warnings and load bars off (tracing a classification model warns about its unset loss)."""
    from transformers.utils import logging as hf_logging
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
