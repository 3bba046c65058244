"""What a dense index records about the encoder of its vectors, and the settings a retriever takes from it.

Every dense index this plugin writes (a flat ``pyterrier_dr.FlexIndex`` built by ``dense``, a sharded index
built by ``pyterrier-sci index`` or :func:`~.fanout.write_sharded_flex`) describes itself in its
``pt_meta.json``::

    "encoder": {"model": "default", "model_id": "/.../all-MiniLM-L6-v2", "weights_sha256": "...",
                "backend": "openvino", "precision": "int8", "max_seq_length": 256,
                "settings_hash": "...", "calibration": {...}, "check": {...}},   # the last three: exports
    "fields": ["title", "abstract"],      # null: the dataset's default text
    "corpus": "sci/csfcube", "vectors": "openvino-int8-<settings hash>"   # "fp32" for every fp32 backend

(an int8 index also keeps its calibration texts in ``calibration.json``).  :class:`IndexRecord` reads
this back - from indexes written before these keys existed too (a sharded manifest's top-level ``model``,
``backend``, ``precision`` and ``encoder`` export record; a flat index without any: nothing recorded) -
and :meth:`IndexRecord.resolve` gives a retriever its settings: each one the caller leaves out is the
index's, and one that contradicts the index is one :class:`IndexSettingsError` naming the setting, the
index's value and the index's path.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from pyterrier_sci.models import DEFAULT_MODEL, check_backend, resolve_model, weights_sha256
from pyterrier_sci.registry import PipelineError

from .calibration import Calibration

__all__ = ["IndexSettingsError", "IndexRecord", "CALIBRATION_FILE", "RECORD_KEYS", "vectors_label",
           "encoder_record", "describe_index", "read_pt_meta", "write_calibration_texts"]

#: the keys of ``pt_meta.json`` that this version adds to describe a dense index's encoder
RECORD_KEYS = ("encoder", "fields", "corpus", "vectors")
#: the file of an int8 index that holds its calibration texts (to rebuild the export where it is not cached)
CALIBRATION_FILE = "calibration.json"
#: the settings :meth:`IndexRecord.resolve` reconciles, in the order they are checked
SETTINGS = ("model", "precision", "backend", "fields")


class IndexSettingsError(PipelineError):
    """A setting given to use a dense index contradicts what the index records about its vectors."""


def vectors_label(backend: str, precision: str, settings_hash: Optional[str] = None) -> str:
    """What an index's vectors are: ``fp32`` for every fp32 backend (their exports reproduce torch to
    ~1e-6), else ``<backend>-int8-<the export's settings hash>``."""
    return "fp32" if precision == "fp32" else f"{backend}-int8-{settings_hash}"


def encoder_record(model: str, backend: str, precision: str, export: Optional[dict] = None,
                   max_seq_length: Optional[int] = None, weights: Optional[str] = None) -> dict:
    """The ``encoder`` entry of an index's ``pt_meta.json``: the model (as named, and resolved), the
    SHA-256 of its weights, backend, precision and maximum sequence length, and for an exported encoder
    (``export``: its ``pt_meta.json``) the export's settings hash, calibration record and quality check."""
    rec: Dict[str, Any] = {"model": str(model), "model_id": resolve_model(model)}
    rec["weights_sha256"] = weights if weights is not None else (
        export.get("weights_sha256") if export else weights_sha256(model))
    rec.update(backend=backend, precision=precision, max_seq_length=max_seq_length)
    if export:
        rec.update({k: export.get(k) for k in ("settings_hash", "calibration", "check")})
    return rec


def write_calibration_texts(directory: Union[str, Path], calibration: Calibration) -> None:
    """``calibration.json`` in an index directory: the texts an int8 encoder was calibrated on and their
    record (what :class:`~.calibration.RecordedCalibration` reads to rebuild an export no longer cached)."""
    texts = [t if isinstance(t, str) else list(t) for t in calibration.texts]
    (Path(directory) / CALIBRATION_FILE).write_text(json.dumps({"record": calibration.record(), "texts": texts}),
                                                    encoding="utf-8")


def read_pt_meta(path: Union[str, Path], what: str = "dense index") -> Optional[dict]:
    """An index directory's ``pt_meta.json`` (None when there is none yet); one
    :class:`IndexSettingsError` naming ``what`` the index is when it cannot be read."""
    p = Path(path) / "pt_meta.json"
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise IndexSettingsError(f"{what} {str(path)!r}: its pt_meta.json cannot be read ({e})") from None
    if not isinstance(meta, dict):
        raise IndexSettingsError(f"{what} {str(path)!r}: its pt_meta.json is not a JSON object")
    return meta


def _same_model(given: str, recorded: str, recorded_id: Optional[str], recorded_weights: Optional[str]) -> bool:
    """Whether the model named ``given`` is the index's: the same name, the same resolved path or hub id,
    or (a copy elsewhere) the same weights."""
    if given in (recorded, recorded_id):
        return True
    try:
        if resolve_model(given) in (recorded_id, resolve_model(recorded)):
            return True
    except Exception:  # noqa: BLE001 - a default-model alias without its package: compare names only
        return False
    return bool(recorded_weights) and weights_sha256(given) == recorded_weights


@dataclass(frozen=True)
class IndexRecord:
    """What a dense index records about its vectors' encoder (each ``None`` where it records nothing).

    ``fields_recorded``: whether the index records its fields (``fields`` None then means the dataset's
    default text)."""
    path: str
    model: Optional[str] = None
    model_id: Optional[str] = None
    weights_sha256: Optional[str] = None
    backend: Optional[str] = None
    precision: Optional[str] = None
    max_seq_length: Optional[int] = None
    settings_hash: Optional[str] = None
    calibration: Optional[dict] = None
    fields: Optional[Tuple[str, ...]] = None
    fields_recorded: bool = False
    corpus: Optional[str] = None

    @classmethod
    def from_meta(cls, meta: dict, path: Union[str, Path]) -> "IndexRecord":
        """The record of an index's ``pt_meta.json`` (current or earlier layout)."""
        enc = meta.get("encoder") if isinstance(meta.get("encoder"), dict) else {}
        sharded = meta.get("format") == "sharded_flex"
        # a sharded manifest names model, backend and precision at its top level (before backends were
        # recorded: fp32 vectors of torch); a flat index of an earlier version records nothing
        precision = enc.get("precision") or meta.get("precision") or ("fp32" if sharded else None)
        backend = enc.get("backend") or meta.get("backend") or ("torch" if sharded else None)
        fields = meta.get("fields")
        return cls(path=str(path), model=enc.get("model") or meta.get("model"),
                   model_id=enc.get("model_id") or meta.get("model_id"), weights_sha256=enc.get("weights_sha256"),
                   backend=backend, precision=precision, max_seq_length=enc.get("max_seq_length"),
                   settings_hash=enc.get("settings_hash"), calibration=enc.get("calibration") or None,
                   fields=tuple(fields) if fields else None, fields_recorded="fields" in meta,
                   corpus=meta.get("corpus"))

    @property
    def calibration_file(self) -> Path:
        return Path(self.path) / CALIBRATION_FILE

    def _contradiction(self, setting: str, given, recorded, why: str = "") -> IndexSettingsError:
        return IndexSettingsError(
            f"{setting}={given!r} contradicts the dense index {self.path!r}, whose vectors were encoded with "
            f"{setting}={recorded!r}{why}; leave {setting} out to use the index's, or use an index built with "
            f"{setting}={given!r}")

    def resolve(self, model: Optional[str] = None, backend: Optional[str] = None, precision: Optional[str] = None,
                fields: Optional[Sequence[str]] = None) -> Tuple[str, str, str, Optional[Tuple[str, ...]]]:
        """``(model, backend, precision, fields)`` for a retriever over this index: each setting given
        (not None) checked against the index's, each one left out taken from it (else the defaults:
        ``default``, ``torch``, ``fp32``, the dataset's text).  An fp32 index takes queries of any fp32
        backend (their vectors agree to ~1e-6); an int8 index only those of its own export's backend."""
        if model is not None and self.model is not None and \
                not _same_model(model, self.model, self.model_id, self.weights_sha256):
            raise self._contradiction("model", model, self.model, f" ({self.model_id})" if self.model_id and
                                      self.model_id != self.model else "")
        if precision is not None and self.precision is not None and precision != self.precision:
            raise self._contradiction("precision", precision, self.precision,
                                      f" (backend {self.backend!r}): queries encoded otherwise would not be "
                                      "comparable with them")
        precision = precision or self.precision or "fp32"
        if backend is not None and self.backend is not None and precision == "int8" and backend != self.backend:
            raise self._contradiction("backend", backend, self.backend,
                                      f" (int8, export {self.settings_hash}): another engine's int8 queries would "
                                      "not be comparable with them")
        backend = backend or self.backend or "torch"
        check_backend(backend, precision)
        given = tuple(fields) if fields else None
        if given is not None and self.fields_recorded and given != self.fields:
            raise self._contradiction("fields", list(given), list(self.fields) if self.fields else None,
                                      "" if self.fields else " (null: the dataset's default text)")
        return (model if model is not None else (self.model or DEFAULT_MODEL), backend, precision,
                given if given is not None else self.fields)

    def check_max_seq_length(self, given: Optional[int]) -> Optional[int]:
        """The truncation for queries over this index: ``given`` checked against the index's (a contradiction
        is one :class:`IndexSettingsError`), else the index's (None: the model's own)."""
        if given is not None and self.max_seq_length is not None and int(given) != int(self.max_seq_length):
            raise self._contradiction("max_seq_length", given, self.max_seq_length,
                                      ": its documents were truncated there, and queries are truncated as they were")
        return given if given is not None else self.max_seq_length

    def check_weights(self, model: str) -> None:
        """One :class:`IndexSettingsError` when the weights of ``model`` (a local model) are no longer those
        the index's vectors were encoded with (the model was retrained or replaced in place)."""
        if not self.weights_sha256:
            return
        now = weights_sha256(model)
        if now is not None and now != self.weights_sha256:
            raise IndexSettingsError(
                f"the dense index {self.path!r} was encoded with weights SHA-256 {self.weights_sha256[:16]}... of "
                f"the model {model!r}, which now has weights {now[:16]}...: the model changed since the index was "
                "built; rebuild the index, or restore the model")


def describe_index(index) -> Optional[IndexRecord]:
    """The :class:`IndexRecord` of an index (a directory, or an artifact with a ``path``), or None when it
    has no ``pt_meta.json`` yet."""
    path = getattr(index, "path", index)
    meta = read_pt_meta(path)
    return None if meta is None else IndexRecord.from_meta(meta, path)
