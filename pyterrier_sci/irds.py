"""Building blocks shared by the benchmark modules: ir_datasets components whose content comes from
a function run on first use (so registering a dataset reads no file)."""
from __future__ import annotations

import json
import logging
import pickle
import struct
import warnings
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, NamedTuple, Optional, Type

import ir_datasets
import pyterrier as pt
from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries, BaseScoredDocs
from ir_datasets.indices import PickleLz4FullStore

from pyterrier_sci.artifacts import DamagedFileWarning, build_atomically
from pyterrier_sci.data import DamagedDataError, work_dir
from pyterrier_sci.filesums import damaged_file, record_files
from pyterrier_sci.quiet import lowered_logger


class FnDocs(BaseDocs):
    """Documents produced by ``iter_fn``; ``docs_store()`` is ir_datasets' lz4 docstore, built once
    under the toolkit's work directory (``<work dir>/irds/<name>``)."""

    def __init__(self, name: str, iter_fn: Callable[[], Iterable[NamedTuple]], cls: Type,
                 count_hint: Optional[int] = None, lang: str = "en"):
        self._name = name
        self._iter_fn = iter_fn
        self._cls = cls
        self._count_hint = count_hint
        self._lang = lang

    def docs_iter(self) -> Iterator:
        return iter(self._iter_fn())

    def docs_cls(self):
        return self._cls

    def docs_count(self):
        return self.docs_store().count()

    def known_count(self) -> Optional[int]:
        """The number of documents when known without reading them: the built docstore's count, else
        the declared ``count_hint``, else None."""
        path = self._store_path()
        if _docstore_problem(path) is None:
            return self._store(path).count()
        return self._count_hint

    def docs_namespace(self):
        return self._name

    def docs_lang(self):
        return self._lang

    def docs_store(self, field: str = "doc_id"):
        """ir_datasets' lz4 docstore of these documents, built on first use under the artifact lock
        (:func:`~pyterrier_sci.artifacts.build_atomically`: two processes build it once, never into
        the same files) with its files' checksums recorded (``files.json``).  A docstore that does
        not match them (truncated, overwritten) or was left by an earlier version without them is
        built again, with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`."""
        path = self._store_path()
        ensure_docstore(path, lambda p: self._store(p, field), what=f"the docstore of {self._name}")
        return self._store(path, field)

    def _store_path(self) -> Path:
        return Path(work_dir()) / "irds" / self._name / "docs.pklz4"

    def _store(self, path: Path, field: str = "doc_id") -> "CheckedLz4Store":
        return CheckedLz4Store(path=str(path), init_iter_fn=self.docs_iter, data_cls=self._cls,
                                  lookup_field=field, index_fields=["doc_id"], count_hint=self._count_hint)


#: the record of a docstore's files (:func:`pyterrier_sci.filesums.record_files`)
DOCSTORE_FILES = "files.json"


def ensure_docstore(path: Path, make: Callable[[Path], PickleLz4FullStore], what: str) -> Path:
    """Builds the docstore ``make(tmp).build()`` at ``path`` unless an intact one is there."""
    def build(tmp: Path) -> None:
        make(tmp).build()
        files = record_files(tmp)
        (tmp / DOCSTORE_FILES).write_text(json.dumps(files, indent=2), encoding="utf-8")

    problem = _docstore_problem(path)
    if problem is not None:
        if problem:
            warnings.warn(f"{what} at {path} {problem}; it is built again", DamagedFileWarning, stacklevel=3)
        build_atomically(path, build, overwrite=bool(problem), what=what)
        if _docstore_problem(path):  # another process built it meanwhile and it was fine: checked again
            build_atomically(path, build, overwrite=True, what=what)
    return path


def _docstore_problem(path: Path) -> Optional[str]:
    """None for an intact docstore at ``path``; "" when there is none; else what is wrong with it."""
    if not path.is_dir() or not any(path.iterdir()):
        return ""
    try:
        files = json.loads((path / DOCSTORE_FILES).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"has no {DOCSTORE_FILES} (built by an earlier version, or by two processes at once)"
    except (OSError, ValueError) as e:
        return f"has an unreadable {DOCSTORE_FILES} ({e})"
    return damaged_file(path, files, str(path / DOCSTORE_FILES))


class CheckedLz4Store(PickleLz4FullStore):
    """ir_datasets' lz4 docstore whose read errors (a file damaged after it was checked) name the
    docstore and say what to do, instead of lz4's ``Input source data size too small``."""

    def _damaged(self, e: Exception):
        return DamagedDataError(self.path, f"the docstore cannot be read ({type(e).__name__}: {e})", None,
                                f"delete the directory {self.path}: it is built again on next use")

    def build(self):
        """ir_datasets' build without its log lines ("[INFO] [starting] building docstore", ...): a
        progress bar that goes away when done."""
        if self.built():
            return
        hint = self.count_hint() if callable(self.count_hint) else self.count_hint
        with _irds_quiet(), self.lookup.transaction() as trans:
            for doc in pt.tqdm(self.init_iter_fn(), desc=f"building the docstore {self.path}", unit="doc",
                               total=hint, leave=False):
                trans.add(doc)

    def get_many_iter(self, keys):
        try:
            with _irds_quiet():
                yield from super().get_many_iter(keys)
        except _READ_ERRORS as e:
            raise self._damaged(e) from e

    def __iter__(self):
        try:
            with _irds_quiet():
                yield from super().__iter__()
        except _READ_ERRORS as e:
            raise self._damaged(e) from e


def _irds_quiet():
    """ir_datasets' INFO lines ("Opening .../bin with direct file access") off; its warnings stay."""
    # the logger is created (at INFO) first, so that the level set here holds
    return lowered_logger(ir_datasets.log.easy().logger(), logging.WARNING)


#: what reading a damaged lz4 docstore raises (lz4's errors are RuntimeError; a cut pickle EOFError,
#: UnpicklingError or ValueError; a cut index IndexError / struct.error)
_READ_ERRORS = (RuntimeError, EOFError, ValueError, IndexError, OSError, pickle.UnpicklingError, struct.error)


class FnQueries(BaseQueries):
    def __init__(self, name: str, iter_fn: Callable[[], Iterable[NamedTuple]], cls: Type, lang: str = "en"):
        self._name, self._iter_fn, self._cls, self._lang = name, iter_fn, cls, lang

    def queries_iter(self):
        return iter(self._iter_fn())

    def queries_cls(self):
        return self._cls

    def queries_namespace(self):
        return self._name

    def queries_lang(self):
        return self._lang


class FnQrels(BaseQrels):
    def __init__(self, iter_fn: Callable[[], Iterable[NamedTuple]], defs: dict,
                 cls: Type = ir_datasets.formats.GenericQrel):
        self._iter_fn, self._defs, self._cls = iter_fn, defs, cls

    def qrels_iter(self):
        return iter(self._iter_fn())

    def qrels_cls(self):
        return self._cls

    def qrels_defs(self):
        return self._defs


class FnScoredDocs(BaseScoredDocs):
    def __init__(self, iter_fn: Callable[[], Iterable[NamedTuple]], cls: Type = ir_datasets.formats.GenericScoredDoc):
        self._iter_fn, self._cls = iter_fn, cls

    def scoreddocs_iter(self):
        return iter(self._iter_fn())

    def scoreddocs_cls(self):
        return self._cls


def register(name: str, *components, documentation: Optional[dict] = None) -> None:
    """Registers ``name`` with ir_datasets (once: importing twice is harmless)."""
    if name in ir_datasets.registry._registered:
        return
    parts: List = list(components)
    ir_datasets.registry.register(name, ir_datasets.Dataset(*parts, _Documentation(documentation or {})))


class _Documentation:
    def __init__(self, doc: dict):
        self._doc = doc

    def documentation(self):
        return self._doc
