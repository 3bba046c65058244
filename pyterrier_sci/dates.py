"""Dates of papers and the date cutoff: a query must not be answered with a paper written after it.

Documents carry a ``date`` field (ISO 8601 at the precision the data knows: ``YYYY``, ``YYYY-MM`` or
``YYYY-MM-DD``; ``""`` when unknown) where a dataset knows one, and a dataset's query papers their
dates (a ``date`` field of the query, or the dataset's ``query_dates_iter()``, :class:`QueryDates`).
:class:`DateCutoff` (the ``date_cutoff`` component) keeps the documents that are not later than a
fixed date or than each query paper's own date; wrapped around a retriever (``date_cutoff(dense,
before=query)``) it is pushed into the retriever where that retriever can search the allowed
documents only (the component protocol's ``sci_date_cutoff``), so that ``k`` results still come
back.  See ``docs/dates.md``.

Two dates of different precision are compared at the precision both share (``2005`` against
``2005-06-01``: by the year), as intervals of days: a document is *later* than a cutoff when its
first possible day comes after the cutoff's last possible day, and *before* it when its last
possible day comes before the cutoff's first.
"""
from __future__ import annotations

import calendar
import datetime
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import atomic_write_text
from pyterrier_sci.errors import IndexUpdateError, ParameterError
from pyterrier_sci.registry import DATASET, Param, check_dataset, irds_id, params

__all__ = ["PaperDate", "parse_date", "optional_date", "acl_anthology_date", "arxiv_id_date", "arxiv_header_date",
           "QueryDates", "DateCutoff", "date_cutoff_component", "document_dates", "query_dates", "has_document_dates",
           "has_query_dates", "later_training_query", "check_dated", "QUERY", "UNDATED", "APPENDED_DATES",
           "record_dates", "read_appended_dates", "write_appended_dates", "use_index_dates"]

#: ``before=QUERY``: each query's cutoff is its own paper's date
QUERY = "query"
#: what to do with a document that has no date
UNDATED = ("drop", "keep")
_ISO = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")


@dataclass(frozen=True)
class PaperDate:
    """A date at the precision the data knows, as the interval of days it may be: ``iso`` as given
    (``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``), ``start`` / ``end`` its first and last day (proleptic
    Gregorian ordinals, :meth:`datetime.date.toordinal`)."""
    iso: str
    start: int
    end: int

    def __str__(self) -> str:
        return self.iso


def parse_date(value: Union[str, datetime.date, "PaperDate"], where: str = "date") -> PaperDate:
    """A :class:`PaperDate` from an ISO date of reduced precision (``2005``, ``2005-06``, ``2005-06-30``) or a
    :class:`datetime.date`; anything else is a :class:`~pyterrier_sci.errors.ParameterError` naming ``where``."""
    if isinstance(value, PaperDate):
        return value
    if isinstance(value, datetime.datetime):
        value = value.date()
    if isinstance(value, datetime.date):
        return PaperDate(value.isoformat(), value.toordinal(), value.toordinal())
    text = value.strip() if isinstance(value, str) else None
    m = _ISO.fullmatch(text) if text else None
    if m is None:
        raise ParameterError(f"{where}: {value!r} is not a date; write an ISO date: YYYY, YYYY-MM or YYYY-MM-DD "
                             f"(e.g. 2005-06-30)", param=where)
    year, month, day = int(m.group(1)), m.group(2), m.group(3)
    try:
        if day is not None:
            d = datetime.date(year, int(month), int(day))
            return PaperDate(text, d.toordinal(), d.toordinal())
        if month is not None:
            first = datetime.date(year, int(month), 1)
            last = first.replace(day=calendar.monthrange(year, int(month))[1])
            return PaperDate(text, first.toordinal(), last.toordinal())
        return PaperDate(text, datetime.date(year, 1, 1).toordinal(), datetime.date(year, 12, 31).toordinal())
    except ValueError as e:  # month 13, February 30, year 0
        raise ParameterError(f"{where}: {value!r} is not a date ({e})", param=where) from None


def optional_date(value, where: str = "date") -> Optional[PaperDate]:
    """:func:`parse_date`, or None for a missing date (``None``, ``""``)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return parse_date(value, where)


# ---------------------------------------------------------------------------------------------
# dates from identifiers and headers (for the dataset modules)
# ---------------------------------------------------------------------------------------------

_ACL_OLD = re.compile(r"(?:ACL:)?([A-Z])(\d{2})-\d{4}")
_ACL_NEW = re.compile(r"(?:ACL:)?(\d{4})\.[A-Za-z]")
_ARXIV_NEW = re.compile(r"(?:ARXIV:|arXiv:)?(\d{2})(\d{2})\.\d{4,5}(?:v\d+)?", re.I)
_ARXIV_OLD = re.compile(r"(?:(?:ARXIV:|arXiv:)?[a-z\-]+(?:\.[A-Z]{2})?/)?(\d{2})(\d{2})\d{3}(?:v\d+)?", re.I)


def acl_anthology_date(anthology_id: str) -> str:
    """The year of an ACL Anthology id (``P98-2143`` -> ``1998``, ``ACL:2020.acl-main.1`` -> ``2020``), the
    only date the id carries (venues' months vary by year); ``""`` for another id."""
    s = str(anthology_id).strip()
    m = _ACL_OLD.fullmatch(s)
    if m:
        yy = int(m.group(2))
        return str(1900 + yy if yy >= 60 else 2000 + yy)  # the Anthology starts in 1965
    m = _ACL_NEW.match(s)
    return m.group(1) if m else ""


def arxiv_id_date(arxiv_id: str) -> str:
    """The ``YYYY-MM`` an arXiv id was assigned in (``hep-th/9912001`` -> ``1999-12``, ``1901.01234`` ->
    ``2019-01``); ``""`` for another id.  arXiv began in 1991: old-style ``YY`` from 91 are 19YY."""
    s = str(arxiv_id).strip()
    m = _ARXIV_NEW.fullmatch(s)
    if m:
        year, month = 2000 + int(m.group(1)), int(m.group(2))
    else:
        m = _ARXIV_OLD.fullmatch(s)
        if not m:
            return ""
        yy, month = int(m.group(1)), int(m.group(2))
        year = 1900 + yy if yy >= 91 else 2000 + yy
    return f"{year:04d}-{month:02d}" if 1 <= month <= 12 else ""


_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})[\s-]+" + _MONTH + r"[a-z]*[\s-]+(\d{4}|\d{2})\b", re.I)
_MONTH_DAY_YEAR = re.compile(r"\b" + _MONTH + r"[a-z]*\s+(\d{1,2})\b.*?\b(\d{4})\b", re.I)


def _header_day(header: str) -> Optional[datetime.date]:
    text = str(header or "").split("(")[0]
    m = _DAY_MONTH_YEAR.search(text)
    if m:
        day, mon, year = m.group(1), m.group(2), m.group(3)
    else:
        m = _MONTH_DAY_YEAR.search(text)
        if not m:
            return None
        mon, day, year = m.group(1), m.group(2), m.group(3)
    month = _MONTHS.get(mon.lower())
    y = int(year)
    y = y if y >= 100 else (1900 + y if y >= 50 else 2000 + y)
    try:
        return datetime.date(y, month, int(day)) if month else None
    except ValueError:
        return None


def arxiv_header_date(header: str, arxiv_id: str) -> str:
    """The submission day of an arXiv abstract header's ``Date:`` line (``Sat, 1 Jan 2000 00:02:31 GMT``:
    ``2000-01-01``) when it lies within a month of the month the id was assigned in; else that month
    (``YYYY-MM``: submitters' clocks were sometimes a year off, and some lines do not parse); ``""``
    when neither is known."""
    month = arxiv_id_date(arxiv_id)
    day = _header_day(header)
    if day is None:
        return month
    if not month:
        return day.isoformat()
    y, m = int(month[:4]), int(month[5:7])
    if abs((day.year * 12 + day.month) - (y * 12 + m)) <= 1:
        return day.isoformat()
    return month


class QueryDates:
    """An ir_datasets constituent that gives a dataset ``query_dates_iter()``: ``(query_id, date)`` pairs,
    the query papers' dates (ISO, ``""`` unknown), for datasets whose query class has no ``date`` field
    (adding one would change ``get_topics()``, which renames the single text field of a query to ``query``)."""

    def __init__(self, iter_fn: Callable[[], Iterable[Tuple[str, str]]]):
        self._iter_fn = iter_fn

    def query_dates_iter(self) -> Iterator[Tuple[str, str]]:
        return iter(self._iter_fn())


# ---------------------------------------------------------------------------------------------
# a dataset's dates
# ---------------------------------------------------------------------------------------------

def _load(dataset: str):
    import ir_datasets
    return ir_datasets.load(irds_id(dataset))


def has_document_dates(dataset: str) -> bool:
    """Whether the documents of ``dataset`` have a ``date`` field."""
    ds = _load(dataset)
    return ds.has_docs() and "date" in (getattr(ds.docs_cls(), "_fields", None) or ())


def has_query_dates(dataset: str) -> bool:
    """Whether ``dataset`` gives its query papers' dates (a ``date`` field or ``query_dates_iter()``)."""
    ds = _load(dataset)
    if not ds.has_queries():
        return False
    return "date" in (getattr(ds.queries_cls(), "_fields", None) or ()) or hasattr(ds, "query_dates_iter")


def document_dates(dataset: str) -> Dict[str, Optional[PaperDate]]:
    """``{docno: PaperDate or None}`` of every document of ``dataset`` (read from its documents, not the docstore)."""
    ds = _load(dataset)
    where = f"the date of a document of {dataset}"
    return {d.doc_id: optional_date(d.date, where) for d in ds.docs_iter()}


def query_dates(dataset: str) -> Dict[str, Optional[PaperDate]]:
    """``{qid: PaperDate or None}`` of the query papers of ``dataset``."""
    ds = _load(dataset)
    where = f"the date of a query of {dataset}"
    if "date" in (getattr(ds.queries_cls(), "_fields", None) or ()):
        return {q.query_id: optional_date(q.date, where) for q in ds.queries_iter()}
    return {str(q): optional_date(d, where) for q, d in ds.query_dates_iter()}


# ---------------------------------------------------------------------------------------------
# the dates of documents appended to a growing index
# ---------------------------------------------------------------------------------------------

#: the file of a grown index holding its appended documents' own dates (``{docno: ISO date}``), carried into every
#: later generation (a retracted document's removed): the dataset does not know those documents
APPENDED_DATES = "appended_dates.json"

#: the appended documents' dates of the indexes opened in this process, by docno (:func:`use_index_dates`)
_INDEX_DATES: Dict[str, PaperDate] = {}


def record_dates(docs: Iterable[dict], dates: Dict[str, str]) -> Iterator[dict]:
    """``docs`` (documents to append) as they are, each one's ``date`` (when given and not empty) checked and
    kept in ``dates`` (``{docno: its ISO form}``); a date that is not one is an :class:`IndexUpdateError` naming
    the document."""
    for i, d in enumerate(docs):
        if isinstance(d, dict) and d.get("date") not in (None, ""):
            try:
                dates[str(d.get("docno"))] = str(parse_date(d["date"], f"document {i} ({d.get('docno')!r})"))
            except (ParameterError, ValueError) as e:
                raise IndexUpdateError(f"document {i} ({d.get('docno')!r}): its date {d['date']!r} is not a date "
                                       f"({getattr(e, 'message', e)})") from None
        yield d


def read_appended_dates(path: Union[str, os.PathLike]) -> Dict[str, str]:
    """The appended documents' dates an index at ``path`` records (empty without the file)."""
    p = Path(path) / APPENDED_DATES
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise IndexUpdateError(f"{p} cannot be read ({e}): the appended documents' dates are damaged; append "
                               "them again or remove the file (they become undated)") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise IndexUpdateError(f"{p} is not an object of docnos and dates: the appended documents' dates are damaged")
    return data


def write_appended_dates(target: Union[str, os.PathLike], source: Union[str, os.PathLike],
                         added: Dict[str, str], removed: Iterable[str] = ()) -> None:
    """Writes into the index directory ``target`` (a new generation) the dates of ``source`` (the current one)
    with ``added`` and without ``removed``; nothing when there are none.  A new file (a new inode: a file
    hard-linked from the current generation is replaced, never changed)."""
    dates = {**read_appended_dates(source), **added}
    for d in removed:
        dates.pop(str(d), None)
    p = Path(target) / APPENDED_DATES
    if dates:
        atomic_write_text(p, json.dumps(dict(sorted(dates.items()))), "the appended documents' dates")
    elif p.exists() or p.is_symlink():
        p.unlink()


def use_index_dates(path: Union[str, os.PathLike]) -> int:
    """Makes the dates of the documents appended to the index at ``path`` known to every :class:`DateCutoff` of
    this process (a document of the dataset keeps the dataset's date); returns how many.  The retrievers call it
    when they open an index."""
    try:
        dates = read_appended_dates(path)
    except IndexUpdateError:
        return 0   # damaged: those documents stay undated (the append that wrote it says what to do)
    for docno, d in dates.items():
        _INDEX_DATES[docno] = parse_date(d)
    return len(dates)


# ---------------------------------------------------------------------------------------------
# the cutoff
# ---------------------------------------------------------------------------------------------

class DateCutoff(pt.Transformer):
    """Keeps the documents of a result frame that are not later than a cutoff.

    Args:
        before: an ISO date (``2005``, ``2005-06``, ``2005-06-30``) or ``"query"``: per query, the query
            paper's own date (an input column ``query_date`` when there is one, else the dataset's).
        dataset: the ir_datasets id whose documents' (and queries') dates are read.
        inclusive: whether a document of the cutoff's own date (at the precision both share) is kept.
            Default: false for a fixed date (``before="2005"`` keeps what is known to be from 2004 or
            earlier), true for ``"query"`` (a query keeps the papers not known to be later than itself:
            an ACL paper of its own year, a hep-th paper of its own day).
        undated: ``"drop"`` (default: a paper without a date cannot be shown to be earlier) or ``"keep"``.
            A query without a date is not cut.

    Wrapped around a retriever (:meth:`push_into`, or ``date_cutoff(retriever, ...)`` in the pipeline
    language) it is pushed into it where the retriever implements ``sci_date_cutoff(cutoff)`` (the dense
    retriever: documents masked before its top-k); elsewhere it filters the retriever's results.
    """

    def __init__(self, before: Union[str, datetime.date], dataset: str, inclusive: Optional[bool] = None,
                 undated: str = "drop"):
        if undated not in UNDATED:
            raise ParameterError(f"date_cutoff: undated must be one of {UNDATED}, got {undated!r}",
                                 component="date_cutoff", param="undated")
        self.before = before if before == QUERY else parse_date(before, "before").iso
        self.dataset = dataset
        self.inclusive = (self.before == QUERY) if inclusive is None else bool(inclusive)
        self.undated = undated
        self._docs: Optional[Dict[str, Optional[PaperDate]]] = None
        self._queries: Optional[Dict[str, Optional[PaperDate]]] = None

    # -- dates ------------------------------------------------------------------------------------
    def doc_dates(self) -> Dict[str, Optional[PaperDate]]:
        if self._docs is None:
            self._docs = document_dates(self.dataset)
        return self._docs

    def query_dates(self) -> Dict[str, Optional[PaperDate]]:
        if self._queries is None:
            self._queries = query_dates(self.dataset)
        return self._queries

    def _cutoffs(self, inp: pd.DataFrame) -> Tuple[np.ndarray, np.ndarray]:
        """Per row of ``inp``: the cutoff's first and last day (NaN: no cutoff for that row's query)."""
        n = len(inp)
        if self.before != QUERY:
            d = parse_date(self.before)
            return np.full(n, float(d.start)), np.full(n, float(d.end))
        if "query_date" in inp.columns:
            dates = [optional_date(v, "query_date") if isinstance(v, (str, datetime.date)) else None
                     for v in inp["query_date"]]
        else:
            known = self.query_dates()
            dates = [known.get(str(q)) for q in inp["qid"]]
        start = np.array([np.nan if d is None else d.start for d in dates], dtype=float)
        end = np.array([np.nan if d is None else d.end for d in dates], dtype=float)
        return start, end

    def _doc_intervals(self, docnos) -> Tuple[np.ndarray, np.ndarray]:
        known = self.doc_dates()
        # a document the dataset does not date: an appended document's own date (use_index_dates)
        dates = [known.get(str(d)) or _INDEX_DATES.get(str(d)) for d in docnos]
        start = np.array([np.nan if d is None else d.start for d in dates], dtype=float)
        end = np.array([np.nan if d is None else d.end for d in dates], dtype=float)
        return start, end

    def _allowed(self, c_start, c_end, d_start, d_end) -> np.ndarray:
        """Broadcast: whether documents (``d_*``) pass cutoffs (``c_*``)."""
        with np.errstate(invalid="ignore"):
            ok = (d_start <= c_end) if self.inclusive else (d_end < c_start)
        ok = np.asarray(ok, dtype=bool)
        ok |= np.isnan(c_start)  # an undated query: no cutoff
        if self.undated == "keep":
            ok |= np.isnan(d_start) & ~np.isnan(c_start)
        return ok

    def keep_rows(self, res: pd.DataFrame) -> np.ndarray:
        """A boolean per row of a result frame (``qid``, ``docno``): whether its document passes."""
        c_start, c_end = self._cutoffs(res)
        d_start, d_end = self._doc_intervals(res["docno"].astype(str).tolist())
        return self._allowed(c_start, c_end, d_start, d_end)

    def mask_fn(self, queries: pd.DataFrame, docnos) -> Callable[[int, int], np.ndarray]:
        """For pushdown: ``fn(lo, hi)`` -> a ``len(queries) x (hi - lo)`` boolean matrix, whether document
        ``docnos[j]`` (``lo <= j < hi``) may be returned for each query row."""
        c_start, c_end = self._cutoffs(queries)
        d_start, d_end = self._doc_intervals(docnos)
        c_start, c_end = c_start[:, None], c_end[:, None]

        def fn(lo: int, hi: int) -> np.ndarray:
            return self._allowed(c_start, c_end, d_start[None, lo:hi], d_end[None, lo:hi])
        return fn

    # -- the transformer --------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=[])
        if len(inp) == 0:
            return inp.copy()
        out = inp[self.keep_rows(inp)]
        if "rank" in out.columns:  # ranks renumbered from 0 in the order they had
            out = out.sort_values(["qid", "rank"], kind="stable")
            out = out.assign(rank=out.groupby("qid", sort=False).cumcount().astype(int))
        return out.reset_index(drop=True)

    def push_into(self, retriever: pt.Transformer) -> pt.Transformer:
        """``retriever`` with this cutoff applied: pushed into it where it implements
        ``sci_date_cutoff(cutoff)``; into the first stage of a composed pipeline (``pool >> text >> dense``:
        the cutoff follows the first stage, so later stages see the allowed documents only); else the
        retriever's results filtered (fewer than ``k`` may remain: over-fetch, e.g. ``num_results``, then ``% k``)."""
        push = getattr(retriever, "sci_date_cutoff", None)
        if push is not None:
            pushed = push(self)
            if pushed is not None:
                return pushed
        if isinstance(retriever, pt.Compose) and len(list(retriever)) > 1:
            first, *rest = list(retriever)
            out = self.push_into(first)
            for t in rest:
                out = out >> t
            return out
        return retriever >> self

    def __repr__(self) -> str:
        extra = "" if self.inclusive == (self.before == QUERY) else f", inclusive={self.inclusive}"
        extra += "" if self.undated == "drop" else f", undated={self.undated!r}"
        return f"DateCutoff(before={self.before!r}, dataset={self.dataset!r}{extra})"

    def _key(self):
        return (self.before, irds_id(self.dataset), self.inclusive, self.undated)

    def __eq__(self, other) -> bool:
        return isinstance(other, DateCutoff) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("DateCutoff",) + self._key())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_docs"] = state["_queries"] = None  # read again where unpickled
        return state


def later_training_query(train: str, test: str) -> Optional[Tuple[str, PaperDate, str, PaperDate]]:
    """A chronological protocol's check (MIR §4: train on the earlier proposals, test on the later ones):
    ``(train qid, its date, test qid, its date)`` of a training query dated after a test query (the latest
    training query against the earliest test query, at the precision both share), or None when there is
    none or either dataset gives no query dates.  Undated queries are not compared."""
    if not (has_query_dates(train) and has_query_dates(test)):
        return None
    tr = [(q, d) for q, d in query_dates(train).items() if d is not None]
    te = [(q, d) for q, d in query_dates(test).items() if d is not None]
    if not tr or not te:
        return None
    latest = max(tr, key=lambda qd: qd[1].start)
    earliest = min(te, key=lambda qd: qd[1].end)
    if latest[1].start > earliest[1].end:
        return latest[0], latest[1], earliest[0], earliest[1]
    return None


def check_dated(dataset: str, before, component: str = "date_cutoff") -> None:
    """A :class:`ParameterError` unless ``dataset``'s documents carry dates and, for ``before="query"``, its
    query papers' dates are known."""
    check_dataset(dataset, where=f"component '{component}'")
    if not has_document_dates(dataset):
        raise ParameterError(f"component '{component}': the documents of {dataset} carry no date, so no date cutoff "
                             f"can apply (docs/dates.md lists the datasets with dates)", component=component,
                             param="dataset")
    if before == QUERY and not has_query_dates(dataset):
        raise ParameterError(f"component '{component}': before='query' needs the query papers' dates, and {dataset} "
                             f"gives none (docs/dates.md lists the datasets with dates); give a date instead",
                             component=component, param="before")


@params(before=Param(str, min_len=1, note="an ISO date YYYY[-MM[-DD]] or 'query'"),
        dataset=Param(DATASET, optional=True), inclusive=Param(bool, optional=True),
        undated=Param(str, choices=UNDATED))
def date_cutoff_component(*inputs, context=None, before: str, dataset: Optional[str] = None,
                          inclusive: Optional[bool] = None, undated: str = "drop") -> pt.Transformer:
    """``date_cutoff``: keeps the papers not later than ``before`` (an ISO date, or ``query``: each query
    paper's own date); ``retriever >> date_cutoff(...)`` filters results, ``date_cutoff(retriever, ...)``
    pushes the cutoff into the retriever where it can (dense), so that k results still come back."""
    if before != QUERY:
        before = parse_date(before, "before").iso  # a ParameterError naming the parameter
    ds = dataset or (getattr(context, "dataset", None) if context is not None else None)
    if not ds:
        raise ParameterError("component 'date_cutoff' needs a dataset whose documents carry dates: set one in the "
                             "pipeline config or write date_cutoff(dataset='irds:...')", component="date_cutoff",
                             param="dataset")
    check_dated(ds, before)
    if len(inputs) > 1:
        raise ValueError("date_cutoff takes at most one input pipeline (the retriever it cuts)")
    cutoff = DateCutoff(before, ds, inclusive=inclusive, undated=undated)
    return cutoff.push_into(inputs[0]) if inputs else cutoff
