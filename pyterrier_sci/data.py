"""Where the toolkit finds benchmark data, and how it says so when data is missing or damaged.

``$PYTERRIER_SCI_DATA`` names the data directory (laid out like the project's ``shared/data``;
default ``<ir_datasets home>/sci``).  Each file a dataset module reads is checked once (SHA-256,
counts, cross-references) and the verdict cached in ``verified-data.json`` of the work directory; a
failure is one :class:`DamagedDataError` naming the file, the line and what to do
(``PYTERRIER_SCI_CHECKSUMS=0`` skips the checksums and exact counts).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

from pyterrier_sci import artifacts
from pyterrier_sci.artifacts import atomic_file, check_directory, work_dir  # noqa: F401 - work_dir re-exported
from pyterrier_sci.errors import DamagedDataError, MissingDataError  # noqa: F401 - defined there, re-exported
from pyterrier_sci.registry import DATASETS_GROUP, load_group, pt_dataset_id

ENV_VAR = "PYTERRIER_SCI_DATA"
CHECKSUMS_ENV = "PYTERRIER_SCI_CHECKSUMS"


def checksums_enabled() -> bool:
    """False when ``$PYTERRIER_SCI_CHECKSUMS`` is ``0``: checksums and the release's exact counts are
    skipped (format, structure and cross-reference checks still run)."""
    return os.environ.get(CHECKSUMS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def data_dir() -> Path:
    """The data directory: ``$PYTERRIER_SCI_DATA``, else ``<ir_datasets home>/sci``."""
    value = os.environ.get(ENV_VAR)
    if value:
        return Path(value).expanduser()
    import ir_datasets
    return Path(ir_datasets.util.home_path()) / "sci"


@dataclass(frozen=True)
class DataFile:
    """One file of a benchmark, relative to the data directory, with where to get it."""
    path: str                       # relative to the data directory, e.g. "csfcube/queries-release.csv"
    url: Optional[str] = None       # official download, used when the file is missing and the network allows
    md5: Optional[str] = None       # checksum of the official file
    source: str = ""                # human instructions for obtaining it
    sha256: Optional[str] = None    # checksum of the released file, verified once (see verify)

    def local(self) -> Path:
        return data_dir() / self.path

    def exists(self) -> bool:
        return self.local().exists()

    def resolve(self, download: bool = True) -> Path:
        """The local path, downloading the official file first when it is missing and a URL is known;
        a present file is verified (:meth:`verify`)."""
        p = self.local()
        if p.exists():
            return self.verify(p)
        if download and self.url and os.environ.get("PYTERRIER_SCI_OFFLINE", "") != "1":
            try:
                p = _download(self.url, p, self.md5)
            except Exception as e:  # network refused, checksum mismatch, ...
                raise MissingDataError(self._message(f"download from {self.url} failed: {e}")) from e
            return self.verify(p)
        raise MissingDataError(self._message())

    def remedy(self) -> str:
        """What to do about a damaged copy: where the intact file comes from."""
        if self.url:
            return (f"re-download it from {self.url} (delete the file: the toolkit downloads it again when "
                    f"the network allows){'; or restore it from: ' + self.source if self.source else ''}")
        return f"restore it from: {self.source}" if self.source else "restore it from the benchmark's release"

    def damaged(self, problem: str, line: Optional[int] = None, path: Optional[Path] = None) -> DamagedDataError:
        return DamagedDataError(path or self.local(), problem, line, self.remedy())

    def verify(self, path: Optional[Path] = None) -> Path:
        """Checks the file once (not empty; its SHA-256 when one is declared and checksums are on); the
        verdict is cached by path, size and modification time.  Returns the path."""
        p = Path(path or self.local())
        if p.stat().st_size == 0:
            raise self.damaged("the file is empty", path=p)
        if self.sha256 and checksums_enabled():
            def check():
                found = sha256_of(p)
                if found != self.sha256:
                    raise self.damaged(
                        f"its SHA-256 is {found}, the released file's is {self.sha256} ({p.stat().st_size:,} bytes "
                        f"here): it is truncated, altered or another version (set ${CHECKSUMS_ENV}=0 to read "
                        f"another release on purpose)", path=p)
            verified_once("sha256:" + self.sha256, [p], check)
        return p

    def _message(self, extra: str = "") -> str:
        msg = (f"missing data file {self.local()} ({self.path} under the data directory {data_dir()}; "
               f"set ${ENV_VAR} to the directory that holds it)")
        if self.source:
            msg += f". Get it from: {self.source}"
        if extra:
            msg += f". {extra}"
        return msg


def _download(url: str, dest: Path, md5: Optional[str]) -> Path:
    """Downloads through a temporary file beside ``dest`` (:func:`~pyterrier_sci.artifacts.atomic_file`),
    checked before it is renamed into place (no half-written file)."""

    h = hashlib.md5()
    with atomic_file(dest, "the data file") as tmp:
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
        if md5 and h.hexdigest() != md5:
            raise IOError(f"checksum mismatch for {url}: expected md5 {md5}, got {h.hexdigest()}")
    return dest


def sha256_of(path: Union[str, Path]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# verdicts: a check that passed is not run again on the same files
# ----------------------------------------------------------------------------------------------

_PASSED: set = set()          # this process's passed checks
_VERDICTS = "verified-data.json"
_MAX_VERDICTS = 2000


def _verdict_key(name: str, sig: Sequence[Tuple[str, int, int]]) -> str:
    resolved = [(str(Path(p).resolve()), size, mtime) for p, size, mtime in sig]
    return hashlib.sha256(json.dumps([name, resolved, checksums_enabled()]).encode()).hexdigest()


def _read_verdicts() -> Dict[str, str]:
    try:
        with open(work_dir() / _VERDICTS, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def verified_once(name: str, paths: Sequence[Path], check: Callable[[], None]) -> None:
    """Runs ``check()`` (which raises :class:`DamagedDataError`) unless it passed before on the same
    files - same path, size and modification time - in this process or, through the cache file
    ``<work dir>/verified-data.json`` (written atomically), in an earlier one."""
    sig = []
    for p in paths:
        st = os.stat(p)
        sig.append((str(p), st.st_size, st.st_mtime_ns))
    memo = (name, tuple(sig), checksums_enabled())
    if memo in _PASSED:
        return
    key = _verdict_key(name, sig)
    if key not in _read_verdicts():
        check()
        verdicts = _read_verdicts()
        verdicts[key] = name
        if len(verdicts) > _MAX_VERDICTS:
            verdicts = dict(list(verdicts.items())[-_MAX_VERDICTS:])
        try:
            atomic_write_text(work_dir() / _VERDICTS, json.dumps(verdicts))
        except OSError:  # a read-only work directory: the check runs again next time
            pass
    _PASSED.add(memo)


def forget_verdicts() -> None:
    """Forgets this process's passed checks (the cache file still holds them)."""
    _PASSED.clear()


# ----------------------------------------------------------------------------------------------
# readers: every error names the file and the line
# ----------------------------------------------------------------------------------------------

_REMEDY = "restore it from the benchmark's release"


def _decode(path: Path, data: bytes, remedy: str, first_line: int = 1) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data[:e.start].count(b"\n")
        raise DamagedDataError(path, f"byte 0x{data[e.start]:02x} is not UTF-8 text ({e.reason})", line,
                               remedy) from None


def read_text(path: Union[str, Path], remedy: str = _REMEDY, allow_empty: bool = False) -> str:
    """The file's text (UTF-8); a non-UTF-8 byte or, unless ``allow_empty``, an empty file is a
    :class:`DamagedDataError`."""
    path = Path(path)
    text = _decode(path, path.read_bytes(), remedy)
    if not allow_empty and not text.strip():
        raise DamagedDataError(path, "the file is empty", None, remedy)
    return text


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def read_json(path: Union[str, Path], remedy: str = _REMEDY, expect: Union[type, Tuple[type, ...], None] = None) -> Any:
    """One JSON document; malformed JSON names the line, ``expect`` (dict, list or a tuple of them) the
    top-level shape."""
    path = Path(path)
    text = read_text(path, remedy)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedDataError(path, f"malformed JSON ({e.msg}, column {e.colno}); the file may be truncated",
                               e.lineno, remedy) from None
    if expect is not None and not isinstance(value, expect):
        wanted = " or ".join(_json_type(t()) for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise DamagedDataError(path, f"expected {wanted} at the top level, found {_json_type(value)}",
                               None, remedy)
    return value


def iter_jsonl(path: Union[str, Path], remedy: str = _REMEDY,
               required: Sequence[str] = ()) -> Iterator[Tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file; a line that is not a
    JSON object, lacks one of ``required`` or is not UTF-8, and an empty file, are a
    :class:`DamagedDataError` naming the line."""
    path = Path(path)
    n = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            line = _decode(path, raw, remedy, lineno)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                cut = " (the line is cut short: the file is truncated)" if not raw.endswith(b"\n") else ""
                raise DamagedDataError(path, f"malformed JSON line ({e.msg}, column {e.colno}){cut}", lineno,
                                       remedy) from None
            if not isinstance(obj, dict):
                raise DamagedDataError(path, f"expected a JSON object per line, found {_json_type(obj)}", lineno,
                                       remedy)
            missing = [k for k in required if k not in obj]
            if missing:
                raise DamagedDataError(path, f"the object lacks the field(s) {missing}", lineno, remedy)
            n += 1
            yield lineno, obj
    if n == 0:
        raise DamagedDataError(path, "the file is empty (no JSON lines)", None, remedy)


def iter_csv(path: Union[str, Path], remedy: str = _REMEDY, required: Sequence[str] = (),
             delimiter: str = ",") -> Iterator[Tuple[int, Dict[str, str]]]:
    """``(line number, row)`` for each row of a CSV/TSV file with a header.  A missing ``required``
    column, a row with fewer or more fields than the header (a row cut short), a non-UTF-8 byte and
    a file without rows are a :class:`DamagedDataError` naming the line."""
    path = Path(path)
    csv.field_size_limit(1 << 30)
    text = read_text(path, remedy)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as e:
        raise DamagedDataError(path, f"no header row ({e or 'empty'})", 1, remedy) from None
    missing = [c for c in required if c not in header]
    if missing:
        raise DamagedDataError(path, f"the header lacks the column(s) {missing} (it has {header})", 1, remedy)
    n = 0
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise DamagedDataError(path, f"malformed CSV ({e})", start, remedy) from None
        if not fields:
            continue
        if len(fields) != len(header):
            cut = " (the row is cut short: the file is truncated)" if len(fields) < len(header) else ""
            raise DamagedDataError(path, f"the row has {len(fields)} fields, the header {len(header)}{cut}", start,
                                   remedy)
        n += 1
        yield start, dict(zip(header, fields))
    if n == 0:
        raise DamagedDataError(path, "the file has a header but no rows", None, remedy)


def atomic_write_text(path: Path, text: str) -> None:
    """Writes a text file so that an interruption leaves either the old file or the new one."""
    artifacts.atomic_write_text(path, text)


def registry_status() -> list:
    """``[{"id", "present", "missing"}]`` for every registered ``sci/...`` id: each benchmark module
    (``pyterrier_sci.datasets`` entry points) maps its id prefixes to what reports their missing
    files (``STATUS``)."""
    import ir_datasets

    status = {}
    for module in load_group(DATASETS_GROUP).values():
        status.update(getattr(module, "STATUS", {}))
    rows = []
    for name in sorted(n for n in ir_datasets.registry._registered if n.startswith("sci/")):
        prefixes = [p for p in status if name == p or name.startswith(p + "/")]
        owner = status[max(prefixes, key=len)] if prefixes else None
        missing = owner.missing_files() if owner is not None else []
        rows.append({"id": pt_dataset_id(name), "present": not missing, "missing": missing})
    return rows
