"""Exports of a model's transformer as cached artifacts, shared by bi-encoders (:mod:`.encoders`) and
cross-encoders (:mod:`.cross_encoders`): the cache entry (built atomically and locked by
:func:`pyterrier_sci.artifacts.build_atomically`, its model files checksummed, ``pt_meta.json`` last; a
damaged entry is rebuilt with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`), the compiled engines
of a process (each compiled once per export and thread count, the most recent :data:`MAX_ENGINES` kept) and
:class:`Exported`, the base of the encoders that run an export."""
from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import OrderedDict
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

from pyterrier_sci.artifacts import (
    DamagedFileWarning,
    build_atomically,
    record_checksum,
    verify_checksum,
    write_pt_meta,
)
from pyterrier_sci.models import BackendError

from .engines import ENGINES

__all__ = ["MAX_ENGINES", "check_threads", "library_versions", "settings_digest", "write_export_meta",
           "cached_export", "compiled_engine", "is_compiled", "engine_function", "Exported"]

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


def library_versions() -> dict:
    """The versions of the libraries an export depends on (those installed)."""
    out = {}
    for d in ("openvino", "nncf", "onnxruntime", "onnx", "torch", "transformers", "sentence-transformers"):
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            pass
    return out


def settings_digest(settings: dict) -> str:
    """The ``settings_hash`` of an export: what names its cache entry."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def write_export_meta(tmp: Path, meta: dict) -> None:
    """The checksums of the export's model files, then its ``pt_meta.json`` (last: it marks the build complete)."""
    for f in meta["files"]:
        record_checksum(tmp / f)
    write_pt_meta(tmp, **meta)


def _damage(path: Path, settings: dict) -> Optional[str]:
    """Why the cache entry at ``path`` cannot be used (None: it can)."""
    try:
        meta = json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"its pt_meta.json cannot be read ({e})"
    if meta.get("settings_hash") != settings_digest(settings):
        return "its pt_meta.json records other settings"
    for f in meta.get("files") or ["?"]:
        if verify_checksum(path / f) is not True:
            return f"{f} is missing or does not match its checksum"
    return None


def cached_export(path: Path, settings: dict, build: Callable[[Path], None], what: str) -> dict:
    """The ``pt_meta.json`` of the export at ``path``, built first when missing (atomically, locked) and
    rebuilt with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning` when damaged."""
    build_atomically(path, build, what=what)
    why = _damage(path, settings)
    if why is not None:
        warnings.warn(f"the cached export {path} is damaged: {why}; it is rebuilt", DamagedFileWarning, stacklevel=3)
        build_atomically(path, build, overwrite=True, what=what)
    return json.loads((path / "pt_meta.json").read_text(encoding="utf-8"))


def is_compiled(path: Path, backend: str, threads: Optional[int]) -> bool:
    """Whether this process holds the compiled engine of the export at ``path`` already."""
    with _ENGINES_LOCK:
        return any(k[:3] == (str(path.resolve()), backend, threads) for k in _ENGINES)


def compiled_engine(path: Path, backend: str, threads: Optional[int], keep: bool = True):
    """The compiled model of the export at ``path`` (``engine.compile``), compiled once per process and
    thread count (``keep=False``: compiled for the caller alone, e.g. a build's check)."""
    engine = ENGINES[backend]
    files = [path / f for f in engine.model_files]
    key = (str(path.resolve()), backend, threads,
           tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in (f.stat() for f in files)))
    with _ENGINES_LOCK:
        compiled = _ENGINES.get(key)
        if compiled is not None:
            _ENGINES.move_to_end(key)
        else:
            compiled = engine.compile(path, threads)
            if keep:
                _ENGINES[key] = compiled
                while len(_ENGINES) > MAX_ENGINES:
                    _ENGINES.popitem(last=False)
        return compiled


def engine_function(path: Path, backend: str, threads: Optional[int] = None, keep: bool = True):
    """A function running the exported model at ``path`` on the CPU with ``threads`` threads (None: the
    engine's default, every core): engine inputs -> its first output (``Engine.runner``)."""
    return ENGINES[backend].runner(compiled_engine(path, backend, threads, keep))


class Exported:
    """An export at ``path`` (its ``pt_meta.json`` as ``meta``), the engine that runs it and the torch
    model it was exported from (its tokenizer tokenises the engine's inputs)."""

    def __init__(self, source, path: Union[str, Path], meta: dict, threads: Optional[int] = None):
        self._source = source
        self.path = Path(path)
        self.meta = meta
        self.backend, self.precision = meta["backend"], meta["precision"]
        self.threads = check_threads(threads)
        self._compiled = compiled_engine(self.path, self.backend, self.threads)
        self._run = ENGINES[self.backend].runner(self._compiled)

    @classmethod
    def over(cls, source, run, meta: dict):
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
        return ENGINES[self.backend].threads(self._compiled)

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
