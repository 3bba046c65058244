"""The files of a directory artifact with their sizes and SHA-256 (:func:`record_files`), and the
check of a directory against such a record (:func:`damaged_file`), so that a damaged artifact is
found - also a file overwritten with bytes of the same size - by the rerun of a build (which builds
it again) and by its readers.  Used for the shards of a sharded dense index (their ``shard.json``'s
``files``) and ir_datasets docstores (:mod:`pyterrier_sci.irds`).  A file's check is cached
(:func:`pyterrier_sci.data.verified_once`: by path, size and modification time), so an artifact is
hashed once, not at every load.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

from pyterrier_sci.data import sha256_of, verified_once

__all__ = ["record_files", "damaged_file", "RECORD_FILES"]

#: files of an artifact directory that are not its content: the records themselves
RECORD_FILES = frozenset({"shard.json", "manifest.json", "files.json"})


def _content(directory: Path):
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name not in RECORD_FILES and not entry.name.startswith("."):
            yield entry


def record_files(directory) -> Dict[str, dict]:
    """``{name: {"bytes": n, "sha256": h}}`` of every file of ``directory`` but the records
    (:data:`RECORD_FILES`) and hidden files: FlexIndex's ``vecs.f4``, ``docnos.npids``,
    ``pt_meta.json``, a docstore's ``bin``, ``bin.pos``, ..."""
    out = {}
    for entry in _content(Path(directory)):
        if entry.is_file(follow_symlinks=False):
            out[entry.name] = {"bytes": entry.stat(follow_symlinks=False).st_size, "sha256": sha256_of(entry.path)}
    return out


class _MismatchError(Exception):
    pass


def damaged_file(directory, files: Optional[dict], record: str = "its record") -> Optional[str]:
    """What is wrong with the files of ``directory`` against ``files`` (a :func:`record_files`
    result): a missing, extra, resized or altered file; None when they match.  ``files`` None (an
    artifact written before files were recorded) is None too: its readers' own checks still apply.
    ``record`` names where ``files`` was read from, for the message."""
    if files is None:
        return None
    directory = Path(directory)
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        return f"{record} has a malformed 'files' record"
    present = {e.name for e in _content(directory)}
    for name in sorted(set(files) - present):
        return f"{directory / name} is missing"
    for name in sorted(present - set(files)):
        return f"{directory / name} is not one of the files {record} lists"
    for name, rec in sorted(files.items()):
        path = directory / name
        if path.is_symlink() or not path.is_file():
            return f"{path} is not a regular file"
        size = path.stat().st_size
        if size != rec.get("bytes"):
            return f"{path} has {size:,} bytes, {rec.get('bytes')!r} were written (truncated or damaged)"

        def check(path=path, want=rec.get("sha256")):
            found = sha256_of(path)
            if found != want:
                raise _MismatchError(f"{path} does not match its recorded SHA-256 (it is {found}, {want} was written)")
        try:
            verified_once(f"recorded-file:{rec.get('sha256')}", [path], check)
        except _MismatchError as e:
            return str(e)
    return None
