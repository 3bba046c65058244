"""Fast sentence-transformers encoders: the model's transformer exported to OpenVINO or ONNX Runtime,
in fp32 or int8 (NNCF post-training static quantisation for OpenVINO, onnxruntime dynamic
quantisation for ONNX), behind sentence-transformers' ``encode`` interface.

Only the transformer runs in the exported engine: tokenisation is the model's own
sentence-transformers tokenizer (same truncation), and its pooling, dense and normalisation modules
run on the engine's token embeddings as in sentence-transformers, so fp32 exports match the torch
model to ~1e-6.  Exports are cached as artifacts under ``<work dir>/models/<model slug>-<backend>-
<precision>-<settings hash>/`` (built atomically and locked by
:func:`pyterrier_sci.artifacts.build_atomically`), with ``pt_meta.json`` recording the source model
and its weight hash, the backend, precision, library versions, the int8 calibration documents and
the quality check run at build time.  An int8 build whose mean cosine to torch fp32 on its
calibration texts is below :data:`INT8_MIN_COSINE` is refused with one :class:`BackendError`.  A
damaged cache entry (files not matching their checksums, unreadable ``pt_meta.json``) is rebuilt
with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`.

Cross-encoders (:func:`load_cross_encoder`, :class:`ExportedCrossEncoder`) go the same way: the
CrossEncoder's sequence-classification model is exported with its ``logits`` output, int8
calibrates on text pairs, fp32 must give torch's logits (:data:`CE_FP32_RTOL`) and int8 is
refused below a Pearson correlation of :data:`CE_INT8_MIN_PEARSON` with torch's logits on its
calibration pairs.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import json
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from pyterrier_sci.models import (
    BACKENDS,
    PRECISIONS,
    BackendError,
    check_backend,
    load_sentence_transformer,
    model_slug,
    resolve_model,
    weights_sha256,
)
from pyterrier_sci.progress import announce, phase

from .index_meta import texts_sha256

__all__ = ["BACKENDS", "PRECISIONS", "BackendError", "check_backend", "INT8_MIN_COSINE", "CALIBRATION_SIZE",
           "CHECK_SIZE", "settings_hash",
           "ENCODER_TYPE", "Calibration", "RecordedCalibration", "check_threads", "calibration_from_corpus",
           "calibration_from_texts", "encoder_path",
           "load_encoder", "ExportedEncoder", "CROSS_ENCODER_TYPE", "CE_INT8_MIN_PEARSON", "CE_FP32_RTOL",
           "calibration_from_pairs", "load_cross_encoder", "ExportedCrossEncoder"]

#: the ``type`` of an exported encoder's ``pt_meta.json`` (its ``format`` is the backend)
ENCODER_TYPE = "dense_encoder"
#: an int8 export is refused when its mean cosine to torch fp32 on the calibration texts is lower
INT8_MIN_COSINE = 0.99
#: fp32 exports must reach this cosine to torch fp32 on every checked text
FP32_MIN_COSINE = 0.9999
#: documents used to calibrate int8 (NNCF's default subset size)
CALIBRATION_SIZE = 300
#: calibration texts (pairs) on which a new export is compared with the model it came from (CSFCube's int8
#: MiniLM: mean cosine 0.99516 on the first 128, 0.99517 on 256, against INT8_MIN_COSINE = 0.99; the other 128
#: cost 2.6 s of the main job's first run)
CHECK_SIZE = 128
#: bump when the export changes so that old cache entries are not reused
EXPORT_VERSION = 2  # 2: int8 without SmoothQuant
#: sentences that check an fp32 export when no calibration texts are given
CHECK_TEXTS = ("Dense retrieval of scientific papers.", "A second, somewhat longer sentence used to check that "
               "an exported encoder gives the embeddings of the torch model it was exported from.",
               "short", "Graph neural networks for citation recommendation with contrastive pre-training.")
_MODEL_FILES = {"openvino": ("model.xml", "model.bin"), "onnx": ("model.onnx",)}


@dataclass
class Calibration:
    """Texts (for a cross-encoder: text pairs) that calibrate an int8 quantisation, and how they were
    chosen (recorded in the export's ``pt_meta.json`` and part of its cache key)."""
    texts: list
    source: str
    docnos: Optional[list] = None
    fields: Optional[Sequence[str]] = None
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        rec = {"source": self.source, "documents": len(self.texts),
               "texts_sha256": texts_sha256(self.texts)}
        if self.docnos is not None:
            rec["selection"] = f"the first {len(self.texts)} non-empty documents in corpus order"
            rec["docnos_sha256"] = hashlib.sha256("\n".join(self.docnos).encode()).hexdigest()
            rec["first_docnos"] = list(self.docnos[:5])
        if self.fields:
            rec["fields"] = list(self.fields)
        rec.update(self.extra)
        return rec


def calibration_from_corpus(corpus: str, fields: Optional[Sequence[str]] = None,
                            size: int = CALIBRATION_SIZE) -> Calibration:
    """The first ``size`` non-empty documents of an ir_datasets corpus (streamed: nothing else is read);
    the subsets of a benchmark (``sci/csfcube/method``) calibrate on their shared corpus."""
    from pyterrier_sci.corpus import corpus_id, corpus_texts
    corpus = corpus_id(corpus)
    docs = list(itertools.islice((d for d in corpus_texts(corpus, fields) if d["text"].strip()), size))
    if not docs:
        raise BackendError(f"int8 calibration: corpus {corpus} has no non-empty documents")
    return Calibration([d["text"] for d in docs], corpus, [str(d["docno"]) for d in docs], fields)


class RecordedCalibration:
    """The calibration of an int8 export known by its record (an index's ``pt_meta.json``): enough to find
    the cached export (its settings hash covers the record's source, count and texts' SHA-256).  Its texts
    are needed only when the export must be built again: they are read from ``texts_file`` (an index's
    ``calibration.json``) or, for a corpus selection, from the corpus itself, and checked against the
    record's SHA-256; where neither gives them, one :class:`BackendError` asks for ``calibration=``."""

    def __init__(self, record: dict, texts_file: Union[None, str, Path] = None,
                 fields: Optional[Sequence[str]] = None):
        self._record = dict(record)
        self.texts_file = None if texts_file is None else Path(texts_file)
        self.fields = list(record.get("fields") or fields or []) or None
        self.source = self._record.get("source")
        self.docnos = None
        self._texts = None

    def record(self) -> dict:
        return dict(self._record)

    def _matches(self, texts) -> bool:
        return texts_sha256(texts) == self._record.get("texts_sha256")

    @property
    def texts(self) -> list:
        if self._texts is None:
            self._texts = self._find_texts()
        return self._texts

    def _find_texts(self) -> list:
        if self.texts_file is not None and self.texts_file.exists():
            stored = json.loads(self.texts_file.read_text(encoding="utf-8")).get("texts") or []
            if self._matches(stored):
                return stored
        if self._record.get("docnos_sha256") and self.source:  # the first documents of a corpus
            try:
                found = calibration_from_corpus(self.source, self.fields, size=int(self._record["documents"]))
            except Exception:  # noqa: BLE001 - not a corpus of this machine: the error below says what to do
                found = None
            if found is not None and self._matches(found.texts):
                return found.texts
        raise BackendError(
            f"the int8 export calibrated on {self._record.get('documents')} texts of {self.source!r} (SHA-256 "
            f"{str(self._record.get('texts_sha256'))[:16]}...) is not in the work directory's cache, and those texts "
            f"are not at hand{f' (no intact {self.texts_file})' if self.texts_file else ''}: give calibration= "
            "with the same texts, or point PYTERRIER_SCI_HOME at the work directory that built it")


def calibration_from_texts(texts: Sequence[str], source: str = "texts given by the caller") -> Calibration:
    texts = [str(t) for t in texts if str(t).strip()]
    if not texts:
        raise BackendError("int8 calibration needs at least one non-empty text")
    return Calibration(texts, source)


# ------------------------------------------------------------------------------------- the export

def _exported_module(st, output: str = "last_hidden_state"):
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


_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _features(st, texts: Sequence[str]) -> dict:
    """sentence-transformers' own tokenisation (padding to the longest text, truncation to
    ``max_seq_length``)."""
    first = st[0]
    prep = getattr(first, "preprocess", None) or first.tokenize
    return prep(list(texts))


def _engine_inputs(features: dict) -> dict:
    return {k: features[k].numpy().astype(np.int64) for k in _INPUTS if k in features}


@contextlib.contextmanager
def _quiet_nncf():
    """NNCF's progress bars (rich, on stdout) and INFO log lines stay out of the caller's output."""
    import io
    import logging
    log = logging.getLogger("nncf")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        log.setLevel(level)


def _export_openvino(st, tmp: Path, precision: str, calibration: Optional[Calibration],
                     output: str = "last_hidden_state", examples: Sequence = CHECK_TEXTS[:2],
                     reference: Optional[dict] = None, verbose: bool = False, name: str = "the model") -> dict:
    """``output`` of ``st``'s transformer as an OpenVINO model; ``examples``: inputs that trace it.
    With ``reference`` (a dict) and int8, ``reference['run']`` is set to an engine function over the fp32
    graph before quantisation (compiled in memory): the int8 check's reference."""
    import openvino as ov
    import torch
    module = _exported_module(st, output)
    example = {k: torch.from_numpy(v) for k, v in _engine_inputs(_features(st, examples)).items()}
    with torch.no_grad(), warnings.catch_warnings(), _transformers_quiet(), \
            phase(f"exporting {name} to OpenVINO", verbose):
        # tracer warnings about shapes (the exported graph keeps them dynamic), and transformers' log line
        # about an unset loss_type, which tracing provokes by reading every attribute of the model
        warnings.simplefilter("ignore")
        ovm = ov.convert_model(module, example_input=example)
    ovm.reshape({inp.get_any_name(): ov.PartialShape([-1, -1]) for inp in ovm.inputs})
    info = {"openvino": ov.__version__}
    if precision == "int8":
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
        if reference is not None:
            fp32 = ov.Core().compile_model(ovm.clone(), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            reference["run"] = _run_compiled(fp32)
        data = [_engine_inputs(_features(st, [t])) for t in calibration.texts]
        # SmoothQuant off: on CSFCube it moved NDCG%20 by up to +0.70 points (method facet) against torch
        # fp32, without it at most 0.41 (docs/dense.md, the quality guard)
        advanced = AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1))
        with _quiet_nncf(), phase(f"calibrating int8 on {len(data)} documents", verbose, total=len(data),
                                  unit="doc") as bar:
            def seen(item):  # nncf's statistics pass reads each calibration input once
                if bar.n < bar.total:
                    bar.update(1)
                return item
            ovm = nncf.quantize(ovm, nncf.Dataset(data, seen), model_type=nncf.ModelType.TRANSFORMER,
                                subset_size=len(data), advanced_parameters=advanced)
        info.update(nncf=nncf.__version__, method="nncf.quantize (post-training static, ModelType.TRANSFORMER, "
                    "SmoothQuant off, fast bias correction, per-text calibration inputs)")
    tmp.mkdir(parents=True)
    ov.save_model(ovm, str(tmp / "model.xml"), compress_to_fp16=False)
    return info


def _export_onnx(st, tmp: Path, precision: str, calibration: Optional[Calibration],
                 output: str = "last_hidden_state", examples: Sequence = CHECK_TEXTS[:2]) -> dict:
    """``output`` of ``st``'s transformer as an ONNX model (``last_hidden_state`` is named
    ``token_embeddings``; any other output has a dynamic batch axis only); ``examples`` trace it."""
    import onnxruntime
    import torch
    module = _exported_module(st, output)
    example = {k: torch.from_numpy(v) for k, v in _engine_inputs(_features(st, examples)).items()}
    names = list(example)
    tmp.mkdir(parents=True)
    target = tmp / ("model-fp32.onnx" if precision == "int8" else "model.onnx")
    out_name = "token_embeddings" if output == "last_hidden_state" else output
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes[out_name] = {0: "batch", 1: "tokens"} if output == "last_hidden_state" else {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings(), _transformers_quiet():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(example[n] for n in names), str(target), input_names=names,
                          output_names=[out_name], dynamic_axes=axes, opset_version=17, dynamo=False)
    info = {"onnxruntime": onnxruntime.__version__, "torch_onnx_opset": 17}
    if precision == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(target), str(tmp / "model.onnx"), weight_type=QuantType.QInt8)
        target.unlink()
        info["method"] = "onnxruntime.quantization.quantize_dynamic (weights QInt8, activations per batch)"
    return info


def _check_available(backend: str) -> None:
    need = {"openvino": ("openvino",), "onnx": ("onnxruntime", "onnx")}[backend]
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise BackendError(f"backend {backend!r} needs the package(s) {', '.join(missing)} "
                           "(pip install 'pyterrier-sci[fast]'); backend='torch' needs none")


def _versions() -> dict:
    from importlib import metadata
    out = {}
    for d in ("openvino", "nncf", "onnxruntime", "onnx", "torch", "transformers", "sentence-transformers"):
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            pass
    return out


def _settings(model: str, backend: str, precision: str, calibration: Optional[Calibration]) -> dict:
    s = {"source": resolve_model(model), "weights_sha256": weights_sha256(model), "backend": backend,
         "precision": precision, "export_version": EXPORT_VERSION}
    if precision == "int8":
        rec = calibration.record()
        s["calibration"] = {k: rec[k] for k in ("source", "documents", "texts_sha256")}
    return s


def _settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def settings_hash(model: str, backend: str, precision: str, calibration: Optional[Calibration] = None) -> str:
    """The ``settings_hash`` the export of ``model`` with these settings records, known without
    loading the model (its weights' hash is cached)."""
    return _settings_hash(_settings(model, backend, precision, calibration))


def encoder_path(model: str, backend: str, precision: str, calibration: Optional[Calibration] = None,
                 work: Union[None, str, Path] = None) -> Path:
    """Where the export of ``model`` with these settings is cached."""
    from pyterrier_sci.data import work_dir
    h = _settings_hash(_settings(model, backend, precision, calibration))
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
    got = ExportedEncoder._over(st, _engine(tmp, backend, keep=False), meta).encode(texts, batch_size=32)
    check = {"texts": len(texts)}
    if reference is not None:
        fp32 = ExportedEncoder._over(st, reference, meta)
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
            f"({'onnxruntime dynamic quantisation; ' if backend == 'onnx' else ''}use backend='openvino' for int8)")
    if precision == "fp32" and check["min_cosine"] < FP32_MIN_COSINE:
        raise BackendError(f"the fp32 {backend} export does not reproduce the torch model "
                           f"(min cosine {check['min_cosine']:.6f} < {FP32_MIN_COSINE})")
    return check


def _build(st, model: str, backend: str, precision: str, calibration: Optional[Calibration], settings: dict,
           verbose: bool = False):
    def build(tmp: Path):
        reference = {}
        name = model_slug(model)
        announce(f"first use of {model} with backend={backend}, precision={precision}: it is exported"
                 f"{' and calibrated' if precision == 'int8' else ''} once and cached in {tmp.parent}", verbose)
        if backend == "openvino":
            info = _export_openvino(st, tmp, precision, calibration, reference=reference, verbose=verbose, name=name)
        else:
            with phase(f"exporting {name} to ONNX{' (int8)' if precision == 'int8' else ''}", verbose):
                info = _export_onnx(st, tmp, precision, calibration)
        meta = {"type": ENCODER_TYPE, "format": backend, "source_model": str(model),
                "source_path": settings["source"], "weights_sha256": settings["weights_sha256"],
                "backend": backend, "precision": precision, "settings_hash": _settings_hash(settings),
                "export_version": EXPORT_VERSION, "export": info, "versions": _versions(),
                "files": list(_MODEL_FILES[backend]),
                "calibration": calibration.record() if calibration is not None and precision == "int8" else None}
        texts = calibration.texts if calibration is not None else CHECK_TEXTS
        with phase(f"checking the {precision} export against the model on {min(len(texts), 256)} texts", verbose):
            meta["check"] = _quality_check(st, tmp, backend, precision, texts, meta, reference.get("run"))
        _write_meta(tmp, meta)
    return build


def _write_meta(tmp: Path, meta: dict) -> None:
    """The checksums of the export's model files, then its ``pt_meta.json`` (last: it marks the build complete)."""
    from pyterrier_sci.artifacts import record_checksum, write_pt_meta
    for f in meta["files"]:
        record_checksum(tmp / f)
    write_pt_meta(tmp, **meta)


def _damage(path: Path, settings: dict) -> Optional[str]:
    """Why the cache entry at ``path`` cannot be used (None: it can)."""
    from pyterrier_sci.artifacts import verify_checksum
    try:
        meta = json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"its pt_meta.json cannot be read ({e})"
    if meta.get("settings_hash") != _settings_hash(settings):
        return "its pt_meta.json records other settings"
    for f in meta.get("files") or ["?"]:
        if verify_checksum(path / f) is not True:
            return f"{f} is missing or does not match its checksum"
    return None


def load_encoder(model: str, device: Optional[str] = None, backend: str = "torch", precision: str = "fp32",
                 calibration: Union[None, Calibration, Sequence[str]] = None,
                 work: Union[None, str, Path] = None, threads: Optional[int] = None, verbose: bool = False):
    """An encoder with sentence-transformers' ``encode`` interface: the ``SentenceTransformer``
    itself for ``backend='torch'``, else an :class:`ExportedEncoder` (exported, quantised and cached on
    first use; see the module doc).  ``calibration`` (int8 only, required there): a
    :class:`Calibration` (e.g. :func:`calibration_from_corpus`) or a list of texts.  ``threads``: the
    exported engine's threads (None: every core; torch's are ``torch.set_num_threads``'s, which this
    leaves alone).  ``verbose``: a first use names each phase of the export (exporting, calibrating,
    checking, compiling) with a progress bar of its own."""
    check_backend(backend, precision)
    threads = check_threads(threads)
    if backend == "torch":
        return load_sentence_transformer(model, device or "cpu")
    if device not in (None, "cpu"):
        raise BackendError(f"backend {backend!r} runs on the CPU; device {device!r} needs backend='torch'")
    _check_available(backend)
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
    meta = _cached(path, settings, _build(st, model, backend, precision, calibration, settings, verbose),
                   f"the {backend} {precision} export of {model}")
    with phase(f"compiling the {backend} {precision} engine", verbose and not _is_compiled(path, backend, threads)):
        return ExportedEncoder(st, path, meta, threads)


def _cached(path: Path, settings: dict, build, what: str) -> dict:
    """The ``pt_meta.json`` of the export at ``path``, built first when missing (atomically, locked) and
    rebuilt with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning` when damaged."""
    from pyterrier_sci.artifacts import DamagedFileWarning, build_atomically
    build_atomically(path, build, what=what)
    why = _damage(path, settings)
    if why is not None:
        warnings.warn(f"the cached export {path} is damaged: {why}; it is rebuilt", DamagedFileWarning, stacklevel=3)
        build_atomically(path, build, overwrite=True, what=what)
    return json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))


# -------------------------------------------------------------------------------- the encoder

#: compiled engines shared by the encoders of one process, by (export, backend, threads), the most recently
#: used :data:`MAX_ENGINES` kept (an encoder holds on to its own); an export rebuilt in place (a damaged cache
#: entry) has other files, hence another key
_ENGINES: "OrderedDict" = OrderedDict()
_ENGINES_LOCK = threading.Lock()
MAX_ENGINES = 8


def check_threads(threads) -> Optional[int]:
    """``threads`` as the engine takes it: None (the engine's default: every core) or an int >= 1;
    anything else is one :class:`BackendError`."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise BackendError(f"threads must be a whole number >= 1 (or None: every core), got {threads!r}")
    return int(threads)


def _is_compiled(path: Path, backend: str, threads: Optional[int]) -> bool:
    """Whether this process holds the compiled engine of the export at ``path`` already."""
    with _ENGINES_LOCK:
        return any(k[:3] == (str(path.resolve()), backend, threads) for k in _ENGINES)


def _compiled(path: Path, backend: str, threads: Optional[int], keep: bool = True):
    """The compiled OpenVINO model / ONNX Runtime session of the export at ``path``, compiled once per
    process and thread count (``keep=False``: compiled for the caller alone, e.g. a build's check)."""
    files = [path / f for f in _MODEL_FILES[backend]]
    key = (str(path.resolve()), backend, threads,
           tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in (f.stat() for f in files)))
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None:
            _ENGINES.move_to_end(key)
        else:
            if backend == "openvino":
                import openvino as ov
                core = ov.Core()
                # f32: on CPUs with bf16 units OpenVINO would otherwise run fp32 models in bf16
                config = {"INFERENCE_PRECISION_HINT": "f32"}
                if threads:
                    config["INFERENCE_NUM_THREADS"] = threads
                engine = core.compile_model(core.read_model(str(files[0])), "CPU", config)
            else:
                import onnxruntime as ort
                options = ort.SessionOptions()
                if threads:
                    options.intra_op_num_threads = threads
                    options.inter_op_num_threads = 1
                engine = ort.InferenceSession(str(files[0]), options, providers=["CPUExecutionProvider"])
            if keep:
                _ENGINES[key] = engine
                while len(_ENGINES) > MAX_ENGINES:
                    _ENGINES.popitem(last=False)
        return engine


def _run_compiled(compiled):
    """The engine function of a compiled OpenVINO model (its own infer request: a request runs one
    inference at a time)."""
    request = compiled.create_infer_request()
    names = {i.get_any_name() for i in compiled.inputs}

    def run(inputs):
        request.infer({k: v for k, v in inputs.items() if k in names})
        return np.array(request.get_output_tensor(0).data, copy=True)
    return run


def _run_of(compiled, backend: str):
    """The engine function of a compiled model (:func:`_compiled`): engine inputs (numpy int64 arrays by
    input name; inputs the model does not take are dropped) -> its first output as a numpy array."""
    if backend == "openvino":
        return _run_compiled(compiled)
    onnx_names = {i.name for i in compiled.get_inputs()}

    def run_onnx(inputs):
        return compiled.run(None, {k: v for k, v in inputs.items() if k in onnx_names})[0]
    return run_onnx


def _engine(path: Path, backend: str, threads: Optional[int] = None, keep: bool = True):
    """A function running the exported model at ``path`` on the CPU with ``threads`` threads (None:
    the engine's default, every core); see :func:`_run_of`."""
    return _run_of(_compiled(path, backend, threads, keep), backend)


class _Exported:
    """An export at ``path`` (its ``pt_meta.json`` as ``meta``), the engine that runs it and the torch
    model it was exported from (its tokenizer tokenises the engine's inputs)."""

    def __init__(self, source, path: Union[str, Path], meta: dict, threads: Optional[int] = None):
        self._source = source
        self.path = Path(path)
        self.meta = meta
        self.backend, self.precision = meta["backend"], meta["precision"]
        self.threads = check_threads(threads)
        self._compiled = _compiled(self.path, self.backend, self.threads)
        self._run = _run_of(self._compiled, self.backend)

    @classmethod
    def _over(cls, source, run, meta: dict):
        """One over the engine function ``run`` (a build's own check: nothing compiled is kept)."""
        self = cls.__new__(cls)
        self._source, self.path, self.meta, self.threads, self._run = source, None, meta, None, run
        self._compiled = None
        self.backend, self.precision = meta["backend"], meta["precision"]
        return self

    @property
    def engine_threads(self) -> Optional[int]:
        """The threads the compiled engine computes with (OpenVINO's ``INFERENCE_NUM_THREADS``, ONNX
        Runtime's intra-op threads; 0 there: ONNX Runtime's default, every core)."""
        if self._compiled is None:
            return None
        if self.backend == "openvino":
            return int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        return int(self._compiled.get_session_options().intra_op_num_threads)

    def __repr__(self) -> str:
        threads = "" if self.threads is None else f", threads={self.threads}"
        return f"{type(self).__name__}({self.meta.get('source_model')!r}, backend={self.backend!r}, " \
               f"precision={self.precision!r}{threads}, path={str(self.path)!r})"

    @property
    def max_seq_length(self) -> int:
        return self._source.max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, length: int) -> None:  # the source model tokenises: truncation is its setting
        self._source.max_seq_length = length

    @property
    def tokenizer(self):
        return self._source.tokenizer


class ExportedEncoder(_Exported):
    """sentence-transformers' ``encode`` on an exported transformer (OpenVINO or ONNX Runtime, on the
    CPU): the model's tokenizer and its pooling / normalisation modules around the engine.  Texts
    are sorted by length and padded per batch, as sentence-transformers does."""

    # sentence-transformers' interface (and the base class's tokenizer, max_seq_length) -----------
    def get_sentence_embedding_dimension(self) -> int:
        st = self._source
        return st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension") \
            else st.get_sentence_embedding_dimension()

    get_embedding_dimension = get_sentence_embedding_dimension

    def _embed(self, texts: Sequence[str]):
        import torch
        features = _features(self._source, texts)
        features["token_embeddings"] = torch.from_numpy(self._run(_engine_inputs(features)))
        with torch.inference_mode():
            for module in list(self._source)[1:]:
                features = module(features)
        return features["sentence_embedding"].float().numpy()

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
        order = np.argsort([-len(t) for t in texts], kind="stable")
        from tqdm.auto import tqdm
        for start in tqdm(range(0, len(texts), batch_size), desc="Batches", disable=not show_progress_bar):
            idx = order[start:start + batch_size]
            out[idx] = self._embed([texts[i] for i in idx])
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        result = out[0] if single else out
        if convert_to_tensor:
            import torch
            return torch.from_numpy(result)
        return result


# ----------------------------------------------------------------------------------- cross-encoders
#
# A sentence-transformers CrossEncoder is exported the same way: its transformers sequence-
# classification model (the CrossEncoder's first and only module) with its ``logits`` output, run
# by :class:`ExportedCrossEncoder` behind ``CrossEncoder.predict``; the pairs are tokenised by the
# CrossEncoder's own tokenizer (text pairs, its truncation and ``max_length``) and its activation
# is applied to the engine's logits, so fp32 exports give torch's logits.  int8 calibrates on text
# pairs; the cache entry is keyed by the weights (a hash of the state dict), the settings and the
# calibration pairs.

#: the ``type`` of an exported cross-encoder's ``pt_meta.json`` (its ``format`` is the backend)
CROSS_ENCODER_TYPE = "cross_encoder_export"
#: an int8 cross-encoder is refused when the Pearson correlation of its logits with torch fp32's
#: on its calibration pairs is lower
CE_INT8_MIN_PEARSON = 0.99
#: an fp32 cross-encoder export must give torch's logits: max |difference| <= this x max(1, max |logit|)
CE_FP32_RTOL = 1e-3
#: bump when the cross-encoder export changes so that old cache entries are not reused
CE_EXPORT_VERSION = 2  # 2: int8 without SmoothQuant
#: pairs that check an fp32 cross-encoder export when no calibration pairs are given
CHECK_PAIRS = ((CHECK_TEXTS[0], CHECK_TEXTS[3]), (CHECK_TEXTS[1], CHECK_TEXTS[2]), (CHECK_TEXTS[3], CHECK_TEXTS[1]))


def calibration_from_pairs(pairs: Sequence, source: str = "pairs given by the caller",
                           docnos: Optional[list] = None, **extra) -> Calibration:
    """A :class:`Calibration` of text pairs ``(a, b)`` (as ``CrossEncoder.predict`` takes them);
    ``extra`` is recorded in the export's ``pt_meta.json`` (e.g. ``selection``: how they were chosen)."""
    pairs = [(str(a), str(b)) for a, b in pairs]
    if not pairs:
        raise BackendError("int8 calibration of a cross-encoder needs at least one (text, text) pair")
    return Calibration(pairs, source, docnos, extra=extra)


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
    """The new export's logits against torch's on ``pairs`` (at most 256); a :class:`BackendError`
    when they fall below the bar (the build is then discarded)."""
    import torch
    pairs = list(pairs)[:CHECK_SIZE]
    got = ExportedCrossEncoder._over(ce, _engine(tmp, backend, keep=False), meta).predict(
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
            f"{CE_INT8_MIN_PEARSON} (use precision='fp32'{'' if backend == 'openvino' else ' or backend=openvino'})")
    if precision == "fp32" and check["max_abs_diff"] > CE_FP32_RTOL * max(1.0, check["max_abs_logit"]):
        raise BackendError(f"the fp32 {backend} export does not reproduce the torch cross-encoder (max logit "
                           f"difference {check['max_abs_diff']:.2e} on {len(pairs)} pairs)")
    return check


@contextlib.contextmanager
def _transformers_quiet():
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


def _build_cross_encoder(ce, backend: str, precision: str, calibration: Optional[Calibration], settings: dict):
    def build(tmp: Path):
        export = _export_openvino if backend == "openvino" else _export_onnx
        with _transformers_quiet():
            info = export(ce, tmp, precision, calibration, output="logits", examples=CHECK_PAIRS[:2])
        meta = {"type": CROSS_ENCODER_TYPE, "format": backend, "source_model": settings["source"],
                "state_sha256": settings["state_sha256"], "backend": backend, "precision": precision,
                "max_length": settings["max_length"], "num_labels": settings["num_labels"], "output": "logits",
                "settings_hash": _settings_hash(settings), "export_version": CE_EXPORT_VERSION, "export": info,
                "versions": _versions(), "files": list(_MODEL_FILES[backend]),
                "calibration": calibration.record() if precision == "int8" else None}
        meta["check"] = _ce_quality_check(ce, tmp, backend, precision,
                                          calibration.texts if precision == "int8" else CHECK_PAIRS, meta)
        _write_meta(tmp, meta)
    return build


def _load_ce(model: str, max_length: Optional[int], device: Optional[str]):
    """A sentence-transformers CrossEncoder from a path or hub id, quietly."""
    from sentence_transformers import CrossEncoder
    with _transformers_quiet():
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
    check_backend(backend, precision)
    threads = check_threads(threads)
    if backend != "torch" and device not in (None, "cpu"):
        raise BackendError(f"backend {backend!r} runs on the CPU; device {device!r} needs backend='torch'")
    if isinstance(path_or_model, (str, Path)):
        ce = _load_ce(str(path_or_model), max_length, device if backend == "torch" else "cpu")
    else:
        ce = path_or_model
        if max_length is not None and max_length != ce.max_seq_length:
            raise ValueError(f"max_length={max_length} differs from the CrossEncoder's own {ce.max_seq_length}")
    if backend == "torch":
        return ce
    if getattr(ce.device, "type", "cpu") != "cpu":
        raise BackendError(f"backend {backend!r} exports a CrossEncoder on the CPU (this one is on {ce.device})")
    _check_available(backend)
    calibration = None
    if precision == "int8":
        if calibration_pairs is None:
            raise BackendError("precision 'int8' calibrates on text pairs: give calibration_pairs= "
                               "(a Calibration or a list of (text, text) pairs)")
        calibration = calibration_pairs if isinstance(calibration_pairs, Calibration) \
            else calibration_from_pairs(calibration_pairs)
    settings = _ce_settings(ce, backend, precision, calibration)
    from pyterrier_sci.data import work_dir
    path = Path(work or work_dir()) / "models" / \
        f"{model_slug(settings['source'])}-ce-{backend}-{precision}-{_settings_hash(settings)}"
    meta = _cached(path, settings, _build_cross_encoder(ce, backend, precision, calibration, settings),
                   f"the {backend} {precision} export of the cross-encoder {settings['source']}")
    return ExportedCrossEncoder(ce, path, meta, threads)


class ExportedCrossEncoder(_Exported):
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
        from tqdm.auto import tqdm
        for start in tqdm(range(0, len(pairs), batch_size), desc="Batches", disable=not show_progress_bar):
            idx = order[start:start + batch_size]
            out[idx] = self._run(_engine_inputs(_features(self._source, [pairs[i] for i in idx]))).reshape(len(idx), -1)
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
