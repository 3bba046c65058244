"""SHA-256s of files and of a model's weights, cached by (path, size, modification time) in the work
directory (``manifest-hashes.json``), so that a rerun does not hash a file again.  Manifests
(:mod:`pyterrier_sci.manifest`) and the models' identities (:mod:`pyterrier_sci.models`) use them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Optional, Union

from pyterrier_sci.artifacts import atomic_write_text, sha256_file
from pyterrier_sci.data import work_dir

__all__ = ["WEIGHT_SUFFIXES", "FileHasher", "file_sha256", "weights_digest"]

#: suffixes of model weight files (what a model's hash covers)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".gguf", ".h5", ".msgpack", ".npy")
_HASH_CACHE = "manifest-hashes.json"
_MAX_HASHES = 5000


def _hash_cache_path() -> Optional[Path]:
    try:
        return work_dir() / _HASH_CACHE
    except Exception:  # noqa: BLE001 - a work directory that cannot be used: hash without caching
        return None


def _read_hash_cache() -> Dict[str, str]:
    p = _hash_cache_path()
    if p is None:
        return {}
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class FileHasher:
    """SHA-256s of files, cached by (resolved path, size, mtime) in ``<work dir>/manifest-hashes.json``."""

    def __init__(self):
        self.cache = _read_hash_cache()
        self.added = False

    def __call__(self, path: Union[str, Path]) -> str:
        p = Path(path).resolve()
        st = p.stat()
        key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
        digest = self.cache.get(key)
        if digest is None:
            digest = sha256_file(p)
            self.cache[key] = digest
            self.added = True
        return digest

    def save(self) -> None:
        if not self.added:
            return
        p = _hash_cache_path()
        if p is None:
            return
        merged = _read_hash_cache()  # another process may have added some meanwhile
        merged.update(self.cache)
        if len(merged) > _MAX_HASHES:
            merged = dict(list(merged.items())[-_MAX_HASHES:])
        try:
            atomic_write_text(p, json.dumps(merged), "the manifest hash cache")
        except OSError:  # a read-only work directory: hashed again next time
            pass
        self.added = False


def file_sha256(path: Union[str, Path]) -> str:
    """The SHA-256 of a file, from the work directory's hash cache when its size and modification
    time are unchanged."""
    h = FileHasher()
    digest = h(path)
    h.save()
    return digest


def weights_digest(path: Path, hasher: FileHasher) -> Dict[str, Any]:
    """One SHA-256 over the weight files under ``path`` (their relative names and SHA-256s)."""
    if path.is_file():
        files = [path]
        root = path.parent
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        root = path
    if not files:
        return {"sha256": None, "weight_files": 0, "note": f"no weight files found under {path}"}
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(root).as_posix()}\0{hasher(f)}\n".encode())
    return {"sha256": h.hexdigest(), "weight_files": len(files), "bytes": sum(f.stat().st_size for f in files)}
