"""Cross-encoders on exported engines: a sentence-transformers ``CrossEncoder``'s sequence-classification
model (its first and only module) exported with its ``logits`` output, run by :class:`ExportedCrossEncoder`
behind ``CrossEncoder.predict`` (:func:`load_cross_encoder`).  The pairs are tokenised by the
CrossEncoder's own tokenizer (text pairs, its truncation and ``max_length``) and its activation is applied
to the engine's logits, so fp32 exports give torch's logits (:data:`CE_FP32_RTOL`).  int8 calibrates on
text pairs and is refused below a Pearson correlation of :data:`CE_INT8_MIN_PEARSON` with torch's logits on
its calibration pairs; the cache entry (:mod:`.exports`) is keyed by the weights (a hash of the state dict),
the settings and the calibration pairs.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from tqdm.auto import tqdm

from pyterrier_sci.data import work_dir
from pyterrier_sci.models import BackendError, model_slug, resolve_model

from .calibration import Calibration, calibration_from_pairs
from .encoders import CHECK_TEXTS
from .engine import engine_inputs, features, transformers_quiet
from .engines import ENGINES, engine_for
from .exports import (
    Exported,
    cached_export,
    check_threads,
    engine_function,
    library_versions,
    settings_digest,
    write_export_meta,
)

__all__ = ["CROSS_ENCODER_TYPE", "CE_INT8_MIN_PEARSON", "CE_FP32_RTOL", "CE_CHECK_SIZE", "CE_EXPORT_VERSION",
           "CHECK_PAIRS", "load_cross_encoder", "ExportedCrossEncoder"]

#: the ``type`` of an exported cross-encoder's ``pt_meta.json`` (its ``format`` is the backend)
CROSS_ENCODER_TYPE = "cross_encoder_export"
#: an int8 cross-encoder is refused when the Pearson correlation of its logits with torch fp32's
#: on its calibration pairs is lower
CE_INT8_MIN_PEARSON = 0.99
#: an fp32 cross-encoder export must give torch's logits: max |difference| <= this x max(1, max |logit|)
CE_FP32_RTOL = 1e-3
#: calibration pairs on which a new cross-encoder export is compared with the model it came from
CE_CHECK_SIZE = 128
#: bump when the cross-encoder export changes so that old cache entries are not reused
CE_EXPORT_VERSION = 2  # 2: int8 without SmoothQuant
#: pairs that check an fp32 cross-encoder export when no calibration pairs are given
CHECK_PAIRS = ((CHECK_TEXTS[0], CHECK_TEXTS[3]), (CHECK_TEXTS[1], CHECK_TEXTS[2]), (CHECK_TEXTS[3], CHECK_TEXTS[1]))


def _state_sha256(module) -> str:
    """SHA-256 over a torch module's state dict (names, dtypes, shapes and bytes, in name order)."""
    import torch
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous().reshape(-1)
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _ce_source(ce) -> str:
    return str(getattr(getattr(getattr(ce, "model", None), "config", None), "_name_or_path", "") or "cross-encoder")


def _ce_settings(ce, backend: str, precision: str, calibration: Optional[Calibration]) -> dict:
    s = {"kind": "cross_encoder", "source": _ce_source(ce), "state_sha256": _state_sha256(ce.model),
         "backend": backend, "precision": precision, "max_length": ce.max_seq_length, "num_labels": ce.num_labels,
         "export_version": CE_EXPORT_VERSION}
    if precision == "int8":
        rec = calibration.record()
        s["calibration"] = {k: rec[k] for k in ("source", "documents", "texts_sha256")}
    return s


def _pearson_spearman(a: np.ndarray, b: np.ndarray) -> tuple:
    from scipy.stats import pearsonr, spearmanr
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), float("nan")
    return float(pearsonr(a, b)[0]), float(spearmanr(a, b)[0])


def _ce_quality_check(ce, tmp: Path, backend: str, precision: str, pairs: Sequence, meta: dict) -> dict:
    """The new export's logits against torch's on the first :data:`CE_CHECK_SIZE` of ``pairs``; a :class:`BackendError`
    when they fall below the bar (the build is then discarded)."""
    import torch
    pairs = list(pairs)[:CE_CHECK_SIZE]
    got = ExportedCrossEncoder.over(ce, engine_function(tmp, backend, keep=False), meta).predict(
        pairs, batch_size=32, activation_fn=torch.nn.Identity())
    ref = ce.predict(pairs, batch_size=32, activation_fn=torch.nn.Identity(), show_progress_bar=False,
                     convert_to_numpy=True)
    got, ref = np.asarray(got, dtype=np.float64).reshape(-1), np.asarray(ref, dtype=np.float64).reshape(-1)
    pearson, spearman = _pearson_spearman(got, ref)
    check = {"pairs": len(pairs), "max_abs_diff": float(np.abs(got - ref).max()),
             "max_abs_logit": float(np.abs(ref).max()), "logit_std": float(ref.std()),
             "pearson": pearson, "spearman": spearman}
    if precision == "int8" and not check["pearson"] >= CE_INT8_MIN_PEARSON:
        raise BackendError(
            f"backend {backend!r} precision 'int8' is refused for this cross-encoder: the Pearson correlation of "
            f"its logits with torch fp32's on the {len(pairs)} calibration pairs is {check['pearson']:.4f}, below "
            f"{CE_INT8_MIN_PEARSON} (use precision='fp32'"
            f"{'' if ENGINES[backend].recommended_int8 else ' or backend=openvino'})")
    if precision == "fp32" and check["max_abs_diff"] > CE_FP32_RTOL * max(1.0, check["max_abs_logit"]):
        raise BackendError(f"the fp32 {backend} export does not reproduce the torch cross-encoder (max logit "
                           f"difference {check['max_abs_diff']:.2e} on {len(pairs)} pairs)")
    return check


def _build_cross_encoder(ce, backend: str, precision: str, calibration: Optional[Calibration], settings: dict):
    def build(tmp: Path):
        engine = ENGINES[backend]
        with transformers_quiet():
            info = engine.export(ce, tmp, precision, calibration, output="logits", examples=CHECK_PAIRS[:2])
        meta = {"type": CROSS_ENCODER_TYPE, "format": backend, "source_model": settings["source"],
                "state_sha256": settings["state_sha256"], "backend": backend, "precision": precision,
                "max_length": settings["max_length"], "num_labels": settings["num_labels"], "output": "logits",
                "settings_hash": settings_digest(settings), "export_version": CE_EXPORT_VERSION, "export": info,
                "versions": library_versions(), "files": list(engine.model_files),
                "calibration": calibration.record() if precision == "int8" else None}
        meta["check"] = _ce_quality_check(ce, tmp, backend, precision,
                                          calibration.texts if precision == "int8" else CHECK_PAIRS, meta)
        write_export_meta(tmp, meta)
    return build


def _load_ce(model: str, max_length: Optional[int], device: Optional[str]):
    """A sentence-transformers CrossEncoder from a path or hub id, quietly."""
    from sentence_transformers import CrossEncoder
    with transformers_quiet():
        return CrossEncoder(resolve_model(model), max_length=max_length, device=device)


def load_cross_encoder(path_or_model, backend: str = "torch", precision: str = "fp32",
                       calibration_pairs: Union[None, Calibration, Sequence] = None,
                       work: Union[None, str, Path] = None, max_length: Optional[int] = None,
                       device: Optional[str] = None, threads: Optional[int] = None):
    """A cross-encoder with ``CrossEncoder.predict``: the sentence-transformers ``CrossEncoder``
    itself for ``backend='torch'``, else an :class:`ExportedCrossEncoder` of its sequence-
    classification model (exported, quantised, checked and cached on first use under
    ``<work dir>/models/``; see the module doc).  ``path_or_model``: a CrossEncoder (on the CPU) or its
    path / hub id (loaded with ``max_length``).  ``calibration_pairs`` (int8 only, required there):
    a :class:`Calibration` (:func:`calibration_from_pairs`) or a list of text pairs; an int8 export
    whose logits correlate with torch's below :data:`CE_INT8_MIN_PEARSON` (Pearson) on them is
    refused with one :class:`BackendError`.  ``threads``: the exported engine's threads (None: every core)."""
    engine = engine_for(backend, precision)
    threads = check_threads(threads)
    engine.check_device(device)
    if isinstance(path_or_model, (str, Path)):
        ce = _load_ce(str(path_or_model), max_length, "cpu" if engine.exported else device)
    else:
        ce = path_or_model
        if max_length is not None and max_length != ce.max_seq_length:
            raise ValueError(f"max_length={max_length} differs from the CrossEncoder's own {ce.max_seq_length}")
    if not engine.exported:
        return ce
    if getattr(ce.device, "type", "cpu") != "cpu":
        raise BackendError(f"backend {backend!r} exports a CrossEncoder on the CPU (this one is on {ce.device})")
    engine.check_available()
    calibration = None
    if precision == "int8":
        if calibration_pairs is None:
            raise BackendError("precision 'int8' calibrates on text pairs: give calibration_pairs= "
                               "(a Calibration or a list of (text, text) pairs)")
        calibration = calibration_pairs if isinstance(calibration_pairs, Calibration) \
            else calibration_from_pairs(calibration_pairs)
    settings = _ce_settings(ce, backend, precision, calibration)
    path = Path(work or work_dir()) / "models" / \
        f"{model_slug(settings['source'])}-ce-{backend}-{precision}-{settings_digest(settings)}"
    meta = cached_export(path, settings, _build_cross_encoder(ce, backend, precision, calibration, settings),
                   f"the {backend} {precision} export of the cross-encoder {settings['source']}")
    return ExportedCrossEncoder(ce, path, meta, threads)


class ExportedCrossEncoder(Exported):
    """``CrossEncoder.predict`` on an exported sequence-classification model (OpenVINO or ONNX
    Runtime, on the CPU): the CrossEncoder's tokenizer before the engine, its activation after it.
    Pairs are sorted by length and padded per batch, as sentence-transformers does."""

    # CrossEncoder's interface (and the base class's tokenizer, max_seq_length) -------------------
    @property
    def num_labels(self) -> int:
        return self._source.num_labels

    @property
    def activation_fn(self):
        return self._source.activation_fn

    def predict(self, inputs, batch_size: int = 32, show_progress_bar: Optional[bool] = None,
                activation_fn=None, apply_softmax: Optional[bool] = False, convert_to_numpy: bool = True,
                convert_to_tensor: bool = False, **kwargs):
        """Scores of text pairs (one pair: one score), as ``CrossEncoder.predict``; ``activation_fn``
        defaults to the CrossEncoder's own (``torch.nn.Identity()``: the raw logits)."""
        import torch
        unsupported = {k: v for k, v in kwargs.items() if v is not None and k not in ("device",)}
        if unsupported:
            raise BackendError(f"the {self.backend} cross-encoder does not take {sorted(unsupported)}; "
                               "use backend='torch'")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
        single = len(inputs) == 2 and all(isinstance(t, str) for t in inputs)
        pairs = [tuple(inputs)] if single else [tuple(p) for p in inputs]
        out = np.zeros((len(pairs), self.num_labels), dtype=np.float32)
        order = np.argsort([-sum(len(t) for t in p) for p in pairs], kind="stable")
        for start in tqdm(range(0, len(pairs), batch_size), desc="Batches", disable=not show_progress_bar):
            idx = order[start:start + batch_size]
            out[idx] = self._run(engine_inputs(features(self._source, [pairs[i] for i in idx]))).reshape(len(idx), -1)
        scores = torch.from_numpy(out)
        activation_fn = self.activation_fn if activation_fn is None else activation_fn
        with torch.inference_mode():
            if activation_fn is not None:
                scores = activation_fn(scores)
            if self.num_labels == 1:
                scores = scores.squeeze(-1)
            elif apply_softmax:
                scores = torch.nn.functional.softmax(scores, dim=1)
        if single:
            scores = scores[0]
        if convert_to_tensor:
            return scores
        if convert_to_numpy:
            return scores.float().numpy()
        return list(scores)
