"""Fast sentence-transformers encoders: the model's transformer exported to OpenVINO or ONNX Runtime,
in fp32 or int8 (NNCF post-training static quantisation for OpenVINO, onnxruntime dynamic
quantisation for ONNX), behind sentence-transformers' ``encode`` interface (:func:`load_encoder`; each
engine is an :class:`~.engine.Engine` of the registry :mod:`.engines`).

Only the transformer runs in the exported engine: tokenisation is the model's own sentence-transformers
tokenizer (same truncation), and its pooling, dense and normalisation modules run on the engine's token
embeddings as in sentence-transformers, so fp32 exports match the torch model to ~1e-6.  Exports are
cached as artifacts under ``<work dir>/models/<model slug>-<backend>-<precision>-<settings hash>/``
(:mod:`.exports`), with ``pt_meta.json`` recording the source model and its weight hash, the backend,
precision, library versions, the int8 calibration documents and the quality check run at build time.  An
int8 build whose mean cosine to torch fp32 on its calibration texts is below :data:`INT8_MIN_COSINE` is
refused with one :class:`BackendError`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from tqdm.auto import tqdm

from pyterrier_sci.data import work_dir
from pyterrier_sci.models import BackendError, load_sentence_transformer, model_slug, resolve_model, weights_sha256
from pyterrier_sci.progress import announce, phase

from .calibration import CALIBRATION_SIZE, Calibration, RecordedCalibration, calibration_from_texts
from .encoding import encode_texts
from .engine import engine_inputs, features
from .engines import ENGINES, engine_for
from .exports import (
    Exported,
    cached_export,
    check_threads,
    engine_function,
    is_compiled,
    library_versions,
    settings_digest,
    write_export_meta,
)

__all__ = ["ENCODER_TYPE", "INT8_MIN_COSINE", "FP32_MIN_COSINE", "CHECK_SIZE", "EXPORT_VERSION", "CHECK_TEXTS",
           "settings_hash", "encoder_path", "load_encoder", "ExportedEncoder"]

#: the ``type`` of an exported encoder's ``pt_meta.json`` (its ``format`` is the backend)
ENCODER_TYPE = "dense_encoder"
#: an int8 export is refused when its mean cosine to torch fp32 on the calibration texts is lower
INT8_MIN_COSINE = 0.99
#: fp32 exports must reach this cosine to torch fp32 on every checked text
FP32_MIN_COSINE = 0.9999
#: calibration texts on which a new export is compared with the model it came from (CSFCube's int8 MiniLM: mean
#: cosine 0.99516 on the first 128, 0.99517 on 256, against INT8_MIN_COSINE = 0.99; each 64 more cost about 2 s
#: of the main job's first run)
CHECK_SIZE = 64
#: bump when the export changes so that old cache entries are not reused
EXPORT_VERSION = 3  # 2: int8 without SmoothQuant; 3: and without bias correction
#: sentences that check an fp32 export when no calibration texts are given
CHECK_TEXTS = ("Dense retrieval of scientific papers.", "A second, somewhat longer sentence used to check that "
               "an exported encoder gives the embeddings of the torch model it was exported from.",
               "short", "Graph neural networks for citation recommendation with contrastive pre-training.")


def _settings(model: str, backend: str, precision: str, calibration) -> dict:
    s = {"source": resolve_model(model), "weights_sha256": weights_sha256(model), "backend": backend,
         "precision": precision, "export_version": EXPORT_VERSION}
    if precision == "int8":
        rec = calibration.record()
        s["calibration"] = {k: rec[k] for k in ("source", "documents", "texts_sha256")}
    return s


def settings_hash(model: str, backend: str, precision: str, calibration: Optional[Calibration] = None) -> str:
    """The ``settings_hash`` the export of ``model`` with these settings records, known without
    loading the model (its weights' hash is cached)."""
    return settings_digest(_settings(model, backend, precision, calibration))


def encoder_path(model: str, backend: str, precision: str, calibration: Optional[Calibration] = None,
                 work: Union[None, str, Path] = None) -> Path:
    """Where the export of ``model`` with these settings is cached."""
    h = settings_digest(_settings(model, backend, precision, calibration))
    return Path(work or work_dir()) / "models" / f"{model_slug(model)}-{backend}-{precision}-{h}"


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def _quality_check(st, tmp: Path, backend: str, precision: str, texts: Sequence[str], meta: dict,
                   reference=None) -> dict:
    """Cosines of the new export to the torch model on ``texts``; a :class:`BackendError` when they
    fall below the bar (the build is then discarded).

    ``reference`` (int8 only): an engine function over the fp32 graph the int8 model was quantised from.
    It stands in for torch on ``texts`` once it has reproduced torch on :data:`CHECK_TEXTS` (cosine
    >= :data:`FP32_MIN_COSINE`, as an fp32 export must): the same embeddings to ~1e-7, at OpenVINO's
    speed instead of torch's (the check's torch pass was a third of the int8 export's time)."""
    texts = list(texts)[:CHECK_SIZE]
    got = ExportedEncoder.over(st, engine_function(tmp, backend, keep=False), meta).encode(texts, batch_size=32)
    check = {"texts": len(texts)}
    if reference is not None:
        fp32 = ExportedEncoder.over(st, reference, meta)
        probe = _cosines(fp32.encode(list(CHECK_TEXTS)),
                         st.encode(list(CHECK_TEXTS), convert_to_numpy=True, show_progress_bar=False))
        if probe.min() < FP32_MIN_COSINE:
            raise BackendError(f"the fp32 {backend} graph does not reproduce the torch model before quantisation "
                               f"(min cosine {probe.min():.6f} < {FP32_MIN_COSINE})")
        ref = fp32.encode(texts, batch_size=32)
        check["reference"] = (f"the fp32 graph before quantisation, which reproduced torch fp32 on "
                              f"{len(CHECK_TEXTS)} check texts (min cosine {probe.min():.7f})")
    else:
        ref = st.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)
        check["reference"] = "torch fp32"
    cos = _cosines(got, ref)
    check.update(mean_cosine=float(cos.mean()), min_cosine=float(cos.min()),
                 max_abs_diff=float(np.abs(got - ref).max()))
    if precision == "int8" and check["mean_cosine"] < INT8_MIN_COSINE:
        raise BackendError(
            f"backend {backend!r} precision 'int8' is refused: its mean cosine to torch fp32 on the {len(texts)} "
            f"calibration texts is {check['mean_cosine']:.4f}, below {INT8_MIN_COSINE} "
            f"({ENGINES[backend].int8_note}use backend='openvino' for int8)")
    if precision == "fp32" and check["min_cosine"] < FP32_MIN_COSINE:
        raise BackendError(f"the fp32 {backend} export does not reproduce the torch model "
                           f"(min cosine {check['min_cosine']:.6f} < {FP32_MIN_COSINE})")
    return check


def _build(st, model: str, backend: str, precision: str, calibration, settings: dict, verbose: bool = False):
    def build(tmp: Path):
        reference = {}
        name = model_slug(model)
        announce(f"first use of {model} with backend={backend}, precision={precision}: it is exported"
                 f"{' and calibrated' if precision == 'int8' else ''} once and cached in {tmp.parent}", verbose)
        engine = ENGINES[backend]
        info = engine.export(st, tmp, precision, calibration, examples=CHECK_TEXTS[:2], reference=reference,
                             verbose=verbose, name=name, bias_correction=False)
        meta = {"type": ENCODER_TYPE, "format": backend, "source_model": str(model),
                "source_path": settings["source"], "weights_sha256": settings["weights_sha256"],
                "backend": backend, "precision": precision, "settings_hash": settings_digest(settings),
                "export_version": EXPORT_VERSION, "export": info, "versions": library_versions(),
                "files": list(engine.model_files),
                "calibration": calibration.record() if calibration is not None and precision == "int8" else None}
        texts = calibration.texts if calibration is not None else CHECK_TEXTS
        checked = min(len(texts), CHECK_SIZE)
        with phase(f"checking the {precision} export against the model on {checked} texts", verbose):
            meta["check"] = _quality_check(st, tmp, backend, precision, texts, meta, reference.get("run"))
        write_export_meta(tmp, meta)
    return build


def load_encoder(model: str, device: Optional[str] = None, backend: str = "torch", precision: str = "fp32",
                 calibration: Union[None, Calibration, RecordedCalibration, Sequence[str]] = None,
                 work: Union[None, str, Path] = None, threads: Optional[int] = None, verbose: bool = False):
    """An encoder with sentence-transformers' ``encode`` interface: the ``SentenceTransformer``
    itself for ``backend='torch'``, else an :class:`ExportedEncoder` (exported, quantised and cached on
    first use; see the module doc).  ``calibration`` (int8 only, required there): a
    :class:`~.calibration.Calibration` (e.g. :func:`~.calibration.calibration_from_corpus`), a
    :class:`~.calibration.RecordedCalibration` (an index's) or a list of texts.  ``threads``: the
    exported engine's threads (None: every core; torch's are ``torch.set_num_threads``'s, which this
    leaves alone).  ``verbose``: a first use names each phase of the export (exporting, calibrating,
    checking, compiling) with a progress bar of its own."""
    engine = engine_for(backend, precision)
    threads = check_threads(threads)
    if not engine.exported:
        return engine.load(model, device)
    engine.check_device(device)
    engine.check_available()
    if precision == "int8":
        if calibration is None:
            raise BackendError("precision 'int8' calibrates on documents: give calibration= (a dataset whose first "
                               f"{CALIBRATION_SIZE} documents are used, or a list of texts)")
        if not isinstance(calibration, (Calibration, RecordedCalibration)):
            calibration = calibration_from_texts(calibration)
    else:
        calibration = None
    st = load_sentence_transformer(model, "cpu")
    settings = _settings(model, backend, precision, calibration)
    path = encoder_path(model, backend, precision, calibration, work)
    meta = cached_export(path, settings, _build(st, model, backend, precision, calibration, settings, verbose),
                         f"the {backend} {precision} export of {model}")
    with phase(f"compiling the {backend} {precision} engine", verbose and not is_compiled(path, backend, threads)):
        return ExportedEncoder(st, path, meta, threads)


class ExportedEncoder(Exported):
    """sentence-transformers' ``encode`` on an exported transformer (OpenVINO or ONNX Runtime, on the
    CPU): the model's tokenizer and its pooling / normalisation modules around the engine.  Each text is
    padded to a length of its own and batched with texts of that length (:func:`.encoding.encode_texts`), so
    its vector does not depend on its batch."""

    # sentence-transformers' interface (and the base class's tokenizer, max_seq_length) -----------
    def get_sentence_embedding_dimension(self) -> int:
        st = self._source
        return st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension") \
            else st.get_sentence_embedding_dimension()

    get_embedding_dimension = get_sentence_embedding_dimension

    def _embed(self, texts: Sequence[str]):
        return self.embed_features(features(self._source, texts))

    def embed_features(self, feats: dict):
        """The embeddings of one tokenised batch (sentence-transformers' features, padded as given)."""
        import torch
        feats = dict(feats)
        feats["token_embeddings"] = torch.from_numpy(self._run(engine_inputs(feats)))
        with torch.inference_mode():
            for module in list(self._source)[1:]:
                feats = module(feats)
        return feats["sentence_embedding"].float().numpy()

    def encode(self, sentences, batch_size: int = 32, show_progress_bar: Optional[bool] = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, normalize_embeddings: bool = False,
               output_value: Optional[str] = "sentence_embedding", precision: str = "float32", **kwargs):
        """Embeddings of ``sentences`` (one string: one vector), as ``SentenceTransformer.encode``."""
        unsupported = {k: v for k, v in kwargs.items() if v is not None and k not in ("device",)}
        if output_value != "sentence_embedding" or precision != "float32" or unsupported:
            raise BackendError(f"the {self.backend} encoder supports sentence embeddings in float32 only "
                               f"(not {dict(output_value=output_value, precision=precision, **unsupported)}); "
                               "use backend='torch'")
        single = isinstance(sentences, str)
        texts = [sentences] if single else [str(s) for s in sentences]
        dim = self.get_sentence_embedding_dimension()
        out = np.zeros((len(texts), dim), dtype=np.float32)
        bar = tqdm(total=len(texts), desc="Batches", disable=not show_progress_bar)
        out[:] = encode_texts(self, texts, batch_size, bar.update)   # padded per text: batch-independent vectors
        bar.close()
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        result = out[0] if single else out
        if convert_to_tensor:
            import torch
            return torch.from_numpy(result)
        return result
