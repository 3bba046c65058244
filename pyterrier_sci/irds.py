"""Building blocks shared by the benchmark modules: ir_datasets components whose content comes from
a function run on first use (so registering a dataset reads no file)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, List, NamedTuple, Optional, Type

import ir_datasets
from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries, BaseScoredDocs
from ir_datasets.indices import PickleLz4FullStore

from pyterrier_sci.data import work_dir


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

    def docs_namespace(self):
        return self._name

    def docs_lang(self):
        return self._lang

    def docs_store(self, field: str = "doc_id"):
        path = Path(work_dir()) / "irds" / self._name / "docs.pklz4"
        path.parent.mkdir(parents=True, exist_ok=True)
        return PickleLz4FullStore(path=str(path), init_iter_fn=self.docs_iter, data_cls=self._cls,
                                  lookup_field=field, index_fields=["doc_id"], count_hint=self._count_hint)


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
