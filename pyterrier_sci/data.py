"""Where the toolkit finds benchmark data, and how it says so when data is missing.

One setting: the environment variable ``PYTERRIER_SCI_DATA`` names a data directory laid out like
the project's ``shared/data`` (``csfcube/``, ``doris-mae/``, ...).  Without it, the data
directory is ``<ir_datasets home>/sci`` (``~/.ir_datasets/sci`` unless ``IR_DATASETS_HOME`` is
set), where files downloaded from an official release are also kept.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ENV_VAR = "PYTERRIER_SCI_DATA"


class MissingDataError(FileNotFoundError):
    """A benchmark file is not in the data directory (and could not be downloaded)."""


def data_dir() -> Path:
    """The data directory: ``$PYTERRIER_SCI_DATA``, else ``<ir_datasets home>/sci``."""
    value = os.environ.get(ENV_VAR)
    if value:
        return Path(value).expanduser()
    import ir_datasets
    return Path(ir_datasets.util.home_path()) / "sci"


def work_dir() -> Path:
    """Where components keep what they build (indexes, encoded corpora): ``$PYTERRIER_SCI_HOME``,
    else ``<ir_datasets home>/sci-work``."""
    value = os.environ.get("PYTERRIER_SCI_HOME")
    if value:
        return Path(value).expanduser()
    import ir_datasets
    return Path(ir_datasets.util.home_path()) / "sci-work"


@dataclass(frozen=True)
class DataFile:
    """One file of a benchmark, relative to the data directory, with where to get it."""
    path: str                       # relative to the data directory, e.g. "csfcube/queries-release.csv"
    url: Optional[str] = None       # official download, used when the file is missing and the network allows
    md5: Optional[str] = None       # checksum of the official file
    source: str = ""                # human instructions for obtaining it

    def local(self) -> Path:
        return data_dir() / self.path

    def exists(self) -> bool:
        return self.local().exists()

    def resolve(self, download: bool = True) -> Path:
        """The local path, downloading the official file first when it is missing and a URL is known."""
        p = self.local()
        if p.exists():
            return p
        if download and self.url and os.environ.get("PYTERRIER_SCI_OFFLINE", "") != "1":
            try:
                return _download(self.url, p, self.md5)
            except Exception as e:  # network refused, checksum mismatch, ...
                raise MissingDataError(self._message(f"download from {self.url} failed: {e}")) from e
        raise MissingDataError(self._message())

    def _message(self, extra: str = "") -> str:
        msg = (f"missing data file {self.local()} ({self.path} under the data directory {data_dir()}; "
               f"set ${ENV_VAR} to the directory that holds it)")
        if self.source:
            msg += f". Get it from: {self.source}"
        if extra:
            msg += f". {extra}"
        return msg


def _download(url: str, dest: Path, md5: Optional[str]) -> Path:
    """Downloads to a temporary file beside ``dest``, checks it, then renames (no half-written file)."""
    import urllib.request
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    h = hashlib.md5()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
        if md5 and h.hexdigest() != md5:
            raise IOError(f"checksum mismatch for {url}: expected md5 {md5}, got {h.hexdigest()}")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def atomic_write_text(path: Path, text: str) -> None:
    """Writes a text file so that an interruption leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
