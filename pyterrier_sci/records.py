"""A researcher's own papers as a stream of records: the readers below a local collection.

:func:`read_records` turns a source (a file, a directory of PDFs, a list of them, or a pandas DataFrame) into
one dict per paper::

    {"docno": str, "title": str, "abstract": str, "text": str, "date": str, "citations": [docno, ...],
     "sections": [{"title": str, "text": str}, ...]}

``text`` is the body where the source has one (a PDF's extracted text, a ``text``/``body`` key; else ``""``),
``date`` ISO 8601 at the precision known (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``; :class:`~pyterrier_sci.dates.PaperDate`
in its string form) or ``""``, ``citations`` the docnos the paper cites, ``sections`` the titled parts of the body
where the source has them (a PDF's headings, a JSONL ``sections`` key; else ``[]``).

Formats (:data:`FORMATS`, :func:`detect_format` by suffix): JSONL (also gzipped), CSV and TSV (a header row;
Zotero, Rayyan and Covidence exports read without a mapping), BibTeX (bibtexparser 2, LaTeX decoded to Unicode),
CSL-JSON (an array of items, as Zotero and citation managers export), PDF (pypdf) and DataFrames.  Which key or
column fills which field: :data:`DEFAULT_FIELDS` per format, overridden by ``fields=``.

JSONL, CSV, TSV and DataFrames are streamed (one line or row at a time; memory does not grow with the file
beyond the set of docnos seen), a PDF directory one file at a time; BibTeX and CSL-JSON files are parsed whole
(bibliographies).  A problem is one :class:`~pyterrier_sci.errors.RecordError` naming the file and the line
(JSONL, CSV, TSV), the entry key (BibTeX), the item (CSL-JSON), the row (DataFrame) or the file (PDF), raised
when the stream reaches it; a collection without any record, or a ``fields=`` key no record has, is an error at
the end of the stream.  See ``docs/corpora.md``.
"""
from __future__ import annotations

import codecs
import csv
import datetime
import functools
import gzip
import io
import json
import logging
import math
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from pyterrier_sci.dates import PaperDate, parse_date
from pyterrier_sci.errors import ParameterError, RecordError
from pyterrier_sci.quiet import lowered_logger

__all__ = ["FORMATS", "RECORD_FIELDS", "DEFAULT_FIELDS", "SUFFIXES", "NO_DATE", "detect_format", "read_records",
           "read_citations", "pdf_sections"]

#: the formats :func:`read_records` reads
FORMATS = ("dataframe", "jsonl", "csv", "tsv", "bibtex", "csljson", "pdf")

#: the keys of every record, in this order
RECORD_FIELDS = ("docno", "title", "abstract", "text", "date", "citations", "sections")

#: the fields ``fields=`` may map: the record's fields and ``month`` (the month, when ``date`` gives only the year)
MAPPABLE = ("docno", "title", "abstract", "text", "date", "month", "citations", "sections")

_CITATIONS_KEYS = ("citations", "references", "outCitations", "cites")
_TABULAR: Dict[str, Sequence[str]] = {
    # compared without regard to case: Zotero's "Key", Rayyan's "key", Covidence's "Title" all match
    "docno": ("docno", "doc_id", "id", "key", "paper_id", "paperId", "Covidence #"),
    "title": ("title",),
    "abstract": ("abstract", "Abstract Note", "paperAbstract"),
    "text": ("text", "body", "full_text"),
    "date": ("date", "publication_date", "publicationDate", "published", "year", "Publication Year",
             "Published Year"),
    "month": ("month", "Published Month"),
    "citations": _CITATIONS_KEYS,
    "sections": (),
}

#: Per format: our field -> the source's keys (columns, BibTeX fields, CSL variables, PDF information) that fill
#: it, the first one with a value winning.  Columns of CSV, TSV and DataFrames match without regard to case;
#: JSON keys and BibTeX fields (lower-cased by the reader) exactly.  ``ID`` is a BibTeX entry's key; a PDF's
#: ``path`` is its path relative to the directory without ``.pdf``, ``Title`` its document information's title
#: (when it is not a converter's placeholder), ``first_line`` the first line of its text, ``abstract`` and
#: ``sections`` what :func:`pdf_sections` finds, ``text`` the text of all its pages.
DEFAULT_FIELDS: Dict[str, Dict[str, Sequence[str]]] = {
    "jsonl": {
        "docno": ("docno", "doc_id", "id", "paperId", "paper_id"),
        "title": ("title",),
        "abstract": ("abstract", "paperAbstract"),
        "text": ("text", "body", "full_text"),
        "date": ("date", "year", "publication_date", "publicationDate", "published"),
        "month": ("month",),
        "citations": _CITATIONS_KEYS,
        "sections": ("sections",),
    },
    "csv": dict(_TABULAR),
    "tsv": dict(_TABULAR),
    "dataframe": dict(_TABULAR),
    "bibtex": {
        "docno": ("ID",),
        "title": ("title",),
        "abstract": ("abstract",),
        "text": (),
        "date": ("date", "year"),
        "month": ("month",),
        "citations": ("cites", "citations"),
        "sections": (),
    },
    "csljson": {
        "docno": ("id",),
        "title": ("title",),
        "abstract": ("abstract",),
        "text": (),
        "date": ("issued",),
        "month": (),
        "citations": (),
        "sections": (),
    },
    "pdf": {
        "docno": ("path",),
        "title": ("Title", "first_line"),
        "abstract": ("abstract",),
        "text": ("text",),
        "date": (),
        "month": (),
        "citations": (),
        "sections": ("sections",),
    },
}

#: file name endings -> format (compared without regard to case; ``.gz`` for JSONL, CSV, TSV, BibTeX and CSL-JSON)
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".tab": "tsv",
            ".bib": "bibtex", ".bibtex": "bibtex", ".json": "csljson", ".pdf": "pdf"}

_DF_NAME = "the DataFrame"
_CASELESS = ("csv", "tsv", "dataframe")

Source = Union[str, os.PathLike, pd.DataFrame]


# ---------------------------------------------------------------------------------------------
# formats
# ---------------------------------------------------------------------------------------------

def detect_format(path: Source) -> str:
    """The format of ``path`` by its suffix (:data:`SUFFIXES`, ``.gz`` after it allowed); a directory is a
    directory of PDFs, a DataFrame ``"dataframe"``.  An unknown suffix or a missing path is a
    :class:`RecordError` saying how to name the format."""
    if isinstance(path, pd.DataFrame):
        return "dataframe"
    p = Path(path).expanduser()
    if p.is_dir():
        return "pdf"
    if not p.exists():
        raise RecordError(p, "no such file or directory")
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = os.path.splitext(name)[1]
    fmt = SUFFIXES.get(suffix)
    if fmt is None or (fmt == "pdf" and p.name.lower().endswith(".gz")):
        known = ", ".join(sorted(SUFFIXES))
        raise RecordError(p, f"cannot tell the format from the suffix {suffix or '(none)'!r} (known: {known}, a "
                             f"directory of PDFs); name it with format= one of {', '.join(FORMATS)}")
    return fmt


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------

def _empty(v: Any) -> bool:
    if isinstance(v, str):
        return not v or v.isspace()
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, (float, np.floating)):
        return math.isnan(v)
    if isinstance(v, (list, tuple, dict, np.ndarray)):
        return len(v) == 0
    return False


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _text(v: Any) -> str:
    """A text value: a string as it is, a list (of sentences, of paragraphs) joined, a number written."""
    if _empty(v):
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple, np.ndarray)):
        if all(isinstance(x, str) for x in v):   # sentences, paragraphs
            return " ".join(t for t in map(str.strip, v) if t)
        return " ".join(t for t in (_text(x).strip() for x in v) if t)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _docno(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))  # an integer column pandas turned into floats
    return str(v).strip()


_SPLIT = re.compile(r"[;,\s]+")


def _docnos(v: Any) -> List[str]:
    """A list of docnos: a list as it is, a string split at ``;``, ``,`` and white space (or a JSON list)."""
    if _empty(v):
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                parsed = json.loads(s)
            except ValueError:
                parsed = None
            if isinstance(parsed, list):
                return _unique(_docno(x) for x in parsed if not _empty(x))
        return _unique(x for x in _SPLIT.split(s) if x)
    if isinstance(v, (list, tuple, np.ndarray, set)):
        return _unique(_docno(x) for x in v if not _empty(x))
    return [_docno(v)]


def _unique(items: Iterable[str]) -> List[str]:
    return list(dict.fromkeys(x for x in items if x))


def _sections(v: Any) -> List[Dict[str, str]]:
    """Sections from a JSON value: a list of ``{"title"|"heading"|"section", "text"}`` objects or of strings."""
    if _empty(v) or not isinstance(v, (list, tuple, np.ndarray)):
        return []
    out = []
    for s in v:
        if isinstance(s, Mapping):
            title = next((_text(s[k]) for k in ("title", "heading", "section") if not _empty(s.get(k))), "")
            out.append({"title": _one_line(title), "text": _text(s.get("text")).strip()})
        elif not _empty(s):
            out.append({"title": "", "text": _text(s).strip()})
    return out


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")   # English, whatever the locale
_MONTH_NAMES = {**{m: i for i, m in enumerate(_MONTHS, 1)}, **{m[:3]: i for i, m in enumerate(_MONTHS, 1)},
                "sept": 9}
_ISO = re.compile(r"(\d{4})(?:[-/.](\d{1,2})(?:[-/.](\d{1,2}))?)?"
                  r"(?:[T ]\d{1,2}:\d{2}\S*(?: ?[+-]\d{2}:?\d{2}| ?UTC| ?Z)?)?")
_COMPACT = re.compile(r"(\d{4})(\d{2})(\d{2})")
_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?\S*")
_NAMED_DMY = re.compile(r"(?:(\d{1,2})\s+)?([a-z]+)\.?,?\s+(?:(\d{1,2})(?:st|nd|rd|th)?,?\s+)?(\d{4})")
_NAMED_YMD = re.compile(r"(\d{4}),?\s+([a-z]+)\.?(?:\s+(\d{1,2}))?")


def _month_number(v: Any) -> Optional[int]:
    """1-12 from a month (``5``, ``"05"``, ``"may"``, ``"September"``, ``"Sept."``), None when it is not one."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v) if 1 <= int(v) <= 12 else None
    if isinstance(v, (float, np.floating)):
        return int(v) if float(v).is_integer() and 1 <= v <= 12 else None
    s = str(v).strip().lower().rstrip(".")
    if s.isdigit():
        return int(s) if 1 <= int(s) <= 12 else None
    return _MONTH_NAMES.get(s)


def _iso(year, month=None, day=None) -> str:
    out = f"{int(year):04d}"
    if month is not None:
        out += f"-{int(month):02d}"
        if day is not None:
            out += f"-{int(day):02d}"
    return out


def _date_text(s: str) -> Optional[str]:
    """ISO (reduced precision) from a date string, None when it is none of the forms read."""
    s = s.strip()
    m = _ISO.fullmatch(s)
    if m:
        return _iso(*(g for g in m.groups() if g is not None))
    m = _COMPACT.fullmatch(s) or _PDF_DATE.fullmatch(s)
    if m:
        return _iso(*(g for g in m.groups() if g is not None))
    low = s.lower()
    m = _NAMED_DMY.fullmatch(low)
    if m and (m.group(1) is None or m.group(3) is None):
        month = _month_number(m.group(2))
        if month is not None:
            day = m.group(1) or m.group(3)
            return _iso(m.group(4), month, day) if day else _iso(m.group(4), month)
    m = _NAMED_YMD.fullmatch(low)
    if m:
        month = _month_number(m.group(2))
        if month is not None:
            return _iso(m.group(1), month, m.group(3)) if m.group(3) else _iso(m.group(1), month)
    return None


def _date_parts(parts: Any) -> Optional[str]:
    """ISO from CSL ``date-parts`` (``[[2020, 5, 3]]``, ``[["2020", "5"]]``), None when they are not ones."""
    if isinstance(parts, (list, tuple)) and parts and isinstance(parts[0], (list, tuple)):
        parts = parts[0]  # a range's start
    if not isinstance(parts, (list, tuple)) or not 1 <= len(parts) <= 3:
        return None
    try:
        return _iso(*(int(str(p).strip()) for p in parts))
    except ValueError:
        return None


#: date values that say "no date" (compared without regard to case): the record is undated
NO_DATE = frozenset({"none", "null", "nan", "nat", "na", "n/a", "n.d.", "nd", "no date", "unknown", "-", "--"})


def _date(value: Any, month: Any = None) -> Optional[str]:
    """ISO at the precision known from a date value (a year, an ISO date or timestamp, a written date, CSL
    date-parts, a :class:`datetime.date`), with ``month`` added to a bare year; ``""`` for a marker of no date
    (:data:`NO_DATE`); None when it cannot be read."""
    if isinstance(value, (str, int)) and (month is None or isinstance(month, (str, int))):
        return _scalar_date(value, month)   # years and date strings repeat: parsed once
    return _any_date(value, month)


@functools.lru_cache(maxsize=4096, typed=True)
def _scalar_date(value: Union[str, int], month: Union[str, int, None]) -> Optional[str]:
    return _any_date(value, month)


def _any_date(value: Any, month: Any) -> Optional[str]:
    if isinstance(value, str) and value.strip().lower() in NO_DATE:
        return ""
    if isinstance(value, PaperDate):
        iso: Optional[str] = value.iso
    elif isinstance(value, (datetime.date, pd.Timestamp)):
        iso = value.strftime("%Y-%m-%d")
    elif isinstance(value, (bool, np.bool_)):
        return None
    elif isinstance(value, (int, np.integer)):
        iso = _iso(value) if 1000 <= int(value) <= 9999 else None
    elif isinstance(value, (float, np.floating)):
        iso = _iso(value) if float(value).is_integer() and 1000 <= value <= 9999 else None
    elif isinstance(value, Mapping):
        iso = _date_parts(value.get("date-parts"))
        for key in ("raw", "literal"):
            if iso is None and not _empty(value.get(key)):
                iso = _date_text(str(value[key]))
    elif isinstance(value, (list, tuple)):
        iso = _date_parts(value)
    else:
        iso = _date_text(str(value))
    if iso is None:
        return None
    if len(iso) == 4 and not _empty(month):
        m = _month_number(month)
        if m is None:
            raise _BadMonthError(month)
        iso = f"{iso}-{m:02d}"
    return parse_date(iso).iso   # month 13, February 30: a ParameterError


class _BadMonthError(Exception):
    """A month that is not one (the reader names it in its RecordError)."""


# ---------------------------------------------------------------------------------------------
# the mapping of a source's keys to our fields
# ---------------------------------------------------------------------------------------------

def _check_fields(fields: Optional[Mapping[str, Any]], where: str) -> Dict[str, Optional[Tuple[str, ...]]]:
    """``fields=`` as ``{our field: (their keys...) or None}``; an unknown field or a value that is not a key is
    a :class:`RecordError` naming the allowed ones."""
    if fields is None:
        return {}
    if not isinstance(fields, Mapping):
        raise RecordError(where, f"fields= must map our fields to your keys (a dict such as "
                                 f"{{'title': 'Title'}}), not {type(fields).__name__}")
    out: Dict[str, Optional[Tuple[str, ...]]] = {}
    for ours, theirs in fields.items():
        if ours not in MAPPABLE:
            raise RecordError(where, f"fields= maps {ours!r}, which is not a field of a record; the fields are "
                                     f"{', '.join(MAPPABLE)}")
        if theirs is None:
            out[ours] = None   # the field is not read from the source at all
        elif isinstance(theirs, str) and theirs:
            out[ours] = (theirs,)
        elif isinstance(theirs, (list, tuple)) and theirs and all(isinstance(t, str) and t for t in theirs):
            out[ours] = tuple(theirs)
        else:
            raise RecordError(where, f"fields= maps {ours!r} to {theirs!r}: give a key or column name (or a list "
                                     f"of them, the first with a value winning), or None to leave it empty")
    return out


class _Mapper:
    """Builds records from one format's raw dicts: the candidate keys per field (defaults, overridden by
    ``fields=``), the fixed date, the docnos seen (for duplicates) and which explicitly mapped keys occurred."""

    def __init__(self, fmt: str, fields: Dict[str, Optional[Tuple[str, ...]]], fixed_date: Optional[str],
                 seen: Dict[str, Tuple[str, str]], date_key: Optional[str]):
        self.fmt = fmt
        keys = {k: tuple(v) for k, v in DEFAULT_FIELDS[fmt].items()}
        self.defaults = dict(keys)   # for messages, before a header narrows them
        self.explicit = {}
        for ours, theirs in fields.items():
            keys[ours] = theirs or ()
            if theirs:
                self.explicit[ours] = theirs
        self.date_from_arg = date_key is not None
        if date_key is not None:
            keys["date"] = (date_key,)
            self.explicit["date"] = (date_key,)
        self.keys = keys
        self.fixed_date = fixed_date
        self.seen = seen
        self.found: set = set()

    def resolve_header(self, header: Sequence[str], path, where: str) -> None:
        """Tabular sources: each field's candidates as the columns of ``header`` (defaults without regard to case);
        an explicitly mapped column that is not there is a :class:`RecordError`."""
        by_fold: Dict[str, str] = {}
        for h in header:
            by_fold.setdefault(h.casefold(), h)
        for ours, cands in list(self.keys.items()):
            if ours in self.explicit:
                missing = [c for c in cands if c not in header]
                if len(missing) == len(cands):
                    close = [h for h in header if h.casefold() in {c.casefold() for c in cands}]
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise RecordError(path, f"no column {' or '.join(map(repr, cands))}, which {self._how(ours)} "
                                            f"names{hint}; the columns are {', '.join(map(repr, header))}", where)
                self.keys[ours] = tuple(c for c in cands if c in header)
                self.found.add(ours)
            else:
                self.keys[ours] = tuple(dict.fromkeys(by_fold[c.casefold()] for c in cands
                                                      if c.casefold() in by_fold))
        if not self.keys["docno"]:
            looked = ", ".join(map(repr, self.defaults["docno"]))
            raise RecordError(path, f"no docno column (looked for {looked}, in any case); the columns are "
                                    f"{', '.join(map(repr, header))}: name it with fields={{'docno': 'COLUMN'}}",
                              where)

    def _how(self, ours: str) -> str:
        return "date=" if ours == "date" and self.date_from_arg else f"fields= (for {ours!r})"

    def _first(self, raw: Mapping[str, Any], ours: str) -> Tuple[Optional[str], Any]:
        for k in self.keys[ours]:
            v = raw.get(k)
            if not _empty(v) and not (ours == "date" and isinstance(v, str) and v.strip().lower() in NO_DATE):
                return k, v
        return None, None

    def build(self, raw: Mapping[str, Any], path, where: str, natural_docno: Optional[str] = None) -> dict:
        if self.explicit:
            for ours, cands in self.explicit.items():
                if ours not in self.found and any(c in raw for c in cands):
                    self.found.add(ours)
        _, docno_v = self._first(raw, "docno")
        docno = _docno(docno_v) if docno_v is not None else (natural_docno or "")
        if not docno:
            looked = ", ".join(map(repr, self.keys["docno"] or self.defaults["docno"])) or "(none)"
            raise RecordError(path, f"the record has no docno (looked for {looked}); give each record one, or "
                                    f"map its id with fields={{'docno': 'YOUR_KEY'}}", where)
        title = _one_line(_text(self._first(raw, "title")[1]))
        abstract = _one_line(_text(self._first(raw, "abstract")[1]))
        sections = _sections(self._first(raw, "sections")[1])
        text = _text(self._first(raw, "text")[1]).strip()
        if not text and sections:
            text = "\n\n".join(f"{s['title']}\n{s['text']}".strip() for s in sections)
        if not (title or abstract or text):
            raise RecordError(path, f"record {docno!r} has no title, abstract or text: nothing to retrieve it by",
                              where)
        if self.fixed_date is not None:
            date = self.fixed_date
        else:
            key, value = self._first(raw, "date")
            date = ""
            if key is not None:
                month = self._first(raw, "month")[1]
                try:
                    iso = _date(value, month)
                except _BadMonthError:
                    raise RecordError(path, f"record {docno!r}: its month {month!r} is not a month (write 1-12 or "
                                            f"a month's name)", where) from None
                except ParameterError:
                    raise RecordError(path, f"record {docno!r}: its date {value!r} ({key}) is not a date (no such "
                                            f"month or day)", where) from None
                if iso is None:
                    raise RecordError(path, f"record {docno!r}: its date {value!r} ({key}) is not a date; write "
                                            f"YYYY, YYYY-MM or YYYY-MM-DD (or a name: 'May 2020', '3 May 2020'), or "
                                            f"read another key with date='KEY'", where)
                date = iso
        citations = _docnos(self._first(raw, "citations")[1])
        previous = self.seen.get(docno)
        if previous is not None:
            p_path, p_where = previous
            first = f"{p_path}, {p_where}" if p_where else p_path
            raise RecordError(path, f"docno {docno!r} is given twice: here and at {first}; docnos must be unique",
                              where)
        self.seen[docno] = (str(path), where)
        return {"docno": docno, "title": title, "abstract": abstract, "text": text, "date": date,
                "citations": citations, "sections": sections}

    def unfound(self) -> List[str]:
        """The explicitly mapped fields whose keys no record had."""
        return [f"{ours!r} -> {' or '.join(map(repr, cands))}" for ours, cands in self.explicit.items()
                if ours not in self.found]


# ---------------------------------------------------------------------------------------------
# reading lines (streaming, each error at its line)
# ---------------------------------------------------------------------------------------------

def _open_binary(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _line_safe(encoding: str) -> bool:
    """Whether lines of ``encoding`` can be split at the byte ``\\n`` (ASCII-compatible encodings)."""
    try:
        return "\n".encode(encoding) == b"\n" and "a,\t\"".encode(encoding) == b"a,\t\""
    except (UnicodeError, LookupError):
        return False


def read_lines(path: Path, encoding: str) -> Iterator[Tuple[int, str, bool]]:
    """``(line number, decoded line, whether it ended with a line break)`` of a (gzipped) text file, one line in
    memory at a time; bytes that are not text in ``encoding`` and a damaged gzip stream are a RecordError."""
    lineno = 0
    try:
        with _open_binary(path) as f:
            if _line_safe(encoding):
                for raw in f:
                    lineno += 1
                    try:
                        line = raw.decode(encoding)
                    except UnicodeDecodeError as e:
                        raise RecordError(path, f"byte 0x{raw[e.start]:02x} at column {e.start + 1} is not "
                                                f"{encoding} text ({e.reason}); convert the file or give "
                                                f"encoding=", f"line {lineno}") from None
                    if lineno == 1:
                        line = line.lstrip("\ufeff")
                    yield lineno, line, raw.endswith(b"\n")
            else:   # UTF-16, UTF-32: decoded as a stream (a bad byte is named at the line it was read in)
                text = io.TextIOWrapper(f, encoding=encoding, newline="")
                try:
                    for line in text:
                        lineno += 1
                        yield lineno, (line.lstrip("\ufeff") if lineno == 1 else line), line.endswith("\n")
                except UnicodeDecodeError as e:
                    raise RecordError(path, f"bytes that are not {encoding} text ({e.reason}); convert the file "
                                            f"or give encoding=", f"line {lineno + 1}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise RecordError(path, f"the gzip stream is damaged or cut short ({e}); compress the file again",
                          f"after line {lineno}") from None
    except OSError as e:
        raise RecordError(path, f"the file cannot be read ({e.strerror or e})") from None


def _json_type(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string"}.get(type(v), type(v).__name__)


def json_lines(path: Path, encoding: str = "utf-8") -> Iterator[Tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line of a (gzipped) JSONL file (:func:`read_lines`); a
    line that is not JSON is a RecordError naming it (and saying so when it is cut short)."""
    for lineno, line, ended in read_lines(path, encoding):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as e:
            cut = " (the line is cut short: is the file truncated?)" if not ended else ""
            raise RecordError(path, f"not valid JSON ({e.msg}, column {e.colno}){cut}", f"line {lineno}") from None


def _read_jsonl(path: Path, mapper: _Mapper, encoding: str) -> Iterator[dict]:
    for lineno, obj in json_lines(path, encoding):
        if not isinstance(obj, dict):
            raise RecordError(path, f"expected a JSON object per line, found {_json_type(obj)}", f"line {lineno}")
        yield mapper.build(obj, path, f"line {lineno}")


def _raise_field_size_limit() -> None:
    """Abstracts and full texts are longer than the csv module's default field limit (128 KiB)."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def _read_table(path: Path, mapper: _Mapper, encoding: str, delimiter: str) -> Iterator[dict]:
    _raise_field_size_limit()
    current = [0]
    lines = read_lines(path, encoding)

    def text_lines():
        for lineno, line, _ in lines:
            current[0] = lineno
            yield line

    reader = csv.reader(text_lines(), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise RecordError(path, "the file is empty (no header row)") from None
    except csv.Error as e:
        raise RecordError(path, f"the header row is not {delimiter!r}-separated text ({e})", "line 1") from None
    header = [h.strip() for h in header]
    mapper.resolve_header(header, path, "line 1")
    while True:
        start = current[0] + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise RecordError(path, f"malformed {'TSV' if delimiter == chr(9) else 'CSV'} ({e})", f"line {start}") \
                from None
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            cut = " (the row is cut short: is the file truncated?)" if len(row) < len(header) else \
                " (a field with the separator in it must be quoted)"
            raise RecordError(path, f"the row has {len(row)} fields, the header {len(header)}{cut}", f"line {start}")
        yield mapper.build(dict(zip(header, row)), path, f"line {start}")


def _read_whole(path: Path, encoding: str) -> str:
    """A whole (gzipped) text file, for the formats parsed at once; a bad byte names its line."""
    try:
        with _open_binary(path) as f:
            data = f.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise RecordError(path, f"the gzip stream is damaged or cut short ({e}); compress the file again") from None
    except OSError as e:
        raise RecordError(path, f"the file cannot be read ({e.strerror or e})") from None
    try:
        return codecs.decode(data, encoding).lstrip("\ufeff")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1 if _line_safe(encoding) else None
        raise RecordError(path, f"byte 0x{data[e.start]:02x} is not {encoding} text ({e.reason}); convert the file "
                                f"or give encoding=", f"line {line}" if line else "") from None


def _read_csljson(path: Path, mapper: _Mapper, encoding: str) -> Iterator[dict]:
    text = _read_whole(path, encoding)
    if not text.strip():
        raise RecordError(path, "the file is empty (CSL-JSON is an array of items)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(path, f"not valid JSON ({e.msg}, column {e.colno}); CSL-JSON is an array of items",
                          f"line {e.lineno}") from None
    if isinstance(data, dict):
        data = data.get("items", [data]) if "items" in data or "id" in data else None
    if not isinstance(data, list):
        raise RecordError(path, "expected a CSL-JSON array of items (or one item object)")
    for i, item in enumerate(data, 1):
        where = f"item {i}" + (f" (id {item.get('id')!r})" if isinstance(item, dict) and "id" in item else "")
        if not isinstance(item, dict):
            raise RecordError(path, f"expected an object, found {_json_type(item)}", where)
        yield mapper.build(item, path, where)


def _read_bibtex(path: Path, mapper: _Mapper, encoding: str) -> Iterator[dict]:
    try:
        import bibtexparser
        from bibtexparser.middlewares import LatexDecodingMiddleware
        from bibtexparser.model import DuplicateBlockKeyBlock, Entry, MiddlewareErrorBlock
    except ImportError:
        raise RecordError(path, "reading BibTeX needs the bibtexparser package (version 2): "
                                "pip install 'pyterrier-sci[corpora]'") from None
    text = _read_whole(path, encoding)
    with _quiet_logger("bibtexparser"):
        try:
            library = bibtexparser.parse_string(text, append_middleware=[LatexDecodingMiddleware()])
        except Exception as e:  # noqa: BLE001 - the parser's own failures (it asks for a bug report)
            raise RecordError(path, f"bibtexparser cannot parse the file ({type(e).__name__}: {e})") from None
    for block in library.failed_blocks:   # the first problem in the file
        line = (block.start_line or 0) + 1
        key = getattr(block, "key", None) or getattr(block.ignore_error_block, "key", None)
        where = f"entry {key!r} (line {line})" if key else f"line {line}"
        if isinstance(block, DuplicateBlockKeyBlock):
            kind = "docno" if isinstance(block.previous_block, Entry) else "@string"
            first_line = (block.previous_block.start_line or 0) + 1
            raise RecordError(path, f"{kind} {block.key!r} is given twice: here and at {path}, line {first_line}; "
                                    f"BibTeX keys must be unique", where)
        if isinstance(block, MiddlewareErrorBlock):
            raise RecordError(path, f"its LaTeX cannot be decoded ({block.error})", where)
        raw = (block.raw or "").strip().splitlines()
        head = raw[0][:60] if raw else ""
        reason = getattr(block.error, "abort_reason", None) or str(block.error) or type(block.error).__name__
        reason = " ".join(reason.split(". Note:")[0].split())
        raise RecordError(path, f"not valid BibTeX ({reason}) in {head!r}", where)
    for entry in library.entries:
        line = (entry.start_line or 0) + 1
        raw = {"ID": entry.key, "ENTRYTYPE": entry.entry_type}
        for field in entry.fields:
            raw.setdefault(field.key.lower(), field.value)
        yield mapper.build(raw, path, f"entry {entry.key!r} (line {line})", natural_docno=entry.key.strip())


# ---------------------------------------------------------------------------------------------
# PDFs
# ---------------------------------------------------------------------------------------------

_NUMBERED = re.compile(r"((?:\d{1,2}\.)*\d{1,2})\.?\s+(\S.*)")
_ROMAN = re.compile(r"([IVX]{1,5})\.\s+(\S.*)")
_INLINE_ABSTRACT = re.compile(r"abstract\s*[.:\u2014\u2013-]\s*(\S.*)", re.I)
_NAMED_HEADINGS = {
    "abstract", "introduction", "related work", "related works", "background", "method", "methods", "methodology",
    "approach", "model", "data", "dataset", "datasets", "experiments", "experimental setup", "evaluation",
    "results", "discussion", "analysis", "conclusion", "conclusions", "conclusion and future work",
    "limitations", "acknowledgments", "acknowledgements", "acknowledgment", "acknowledgement", "references",
    "bibliography", "appendix"}


def _heading_words(line: str, title: str, width: int) -> bool:
    """Whether the words after a heading's number look like a heading title: at most 10 words, capitalised, no
    sentence in it (``. ``) or after it (a closing ``.,;:`` or a hyphen), mostly letters, and - unless 4 words or
    fewer - shorter than 3/4 of a full line (a numbered list item's line runs to the margin)."""
    words = title.split()
    return (0 < len(words) <= 10 and title[0].isupper() and title[-1] not in ".,;:-" and ". " not in title
            and sum(c.isalpha() for c in title) >= 0.6 * len(title.replace(" ", ""))
            and (len(words) <= 4 or len(line) < 0.75 * width))


def _is_heading(line: str, width: int = 80) -> bool:
    """Whether a stripped line of extracted text is a heading (:func:`pdf_sections`); ``width`` is the length of
    a full line of the text (its 90th percentile)."""
    s = line.strip()
    if not 2 <= len(s) <= 100:
        return False
    if s.lower().rstrip(":.") in _NAMED_HEADINGS:
        return True
    m = _NUMBERED.fullmatch(s)
    if m:
        return int(m.group(1).split(".")[0]) <= 20 and _heading_words(s, m.group(2), width)
    m = _ROMAN.fullmatch(s)
    if m:
        return _heading_words(s, m.group(2), width)
    letters = [c for c in s if c.isalpha()]
    return (len(letters) >= 4 and all(c.isupper() for c in letters) and len(s.split()) <= 8
            and s[-1] not in ".,;" and len(letters) >= 0.6 * len(s.replace(" ", "")))


def pdf_sections(text: str) -> Tuple[List[Dict[str, str]], str]:
    """``(sections, abstract)`` of a paper's extracted text.  A line is a heading when it is numbered and short
    (``1 Introduction``, ``2. Related Work``, ``3.1 Data``, ``IV. RESULTS``: at most 10 words, capitalised, no
    sentence in or after it, and when longer than 4 words shorter than 3/4 of a full line of the text), one of
    the usual section names alone on its line (``Abstract``, ``Introduction``, ``Related Work``, ``Conclusion``,
    ``References``, ...), or in capitals (at most 8 words: ``RELATED WORK``);
    ``Abstract.``/``Abstract:``/``Abstract—`` followed by text on the same line opens the abstract.  Text before
    the first heading (title, authors) belongs to no section; each section runs to the next heading (its title is
    the heading line as printed, its text the lines after it).  The abstract is the text of the section headed
    ``Abstract`` (``""`` when there is none)."""
    lines = [s for s in (line.strip() for line in text.splitlines()) if s]
    lengths = sorted(len(s) for s in lines)
    width = lengths[int(0.9 * (len(lengths) - 1))] if lengths else 80
    sections: List[Dict[str, Any]] = []
    for s in lines:
        m = _INLINE_ABSTRACT.fullmatch(s)
        if m and not any(sec["title"].lower().rstrip(":.") == "abstract" for sec in sections):
            sections.append({"title": "Abstract", "lines": [m.group(1)]})
        elif _is_heading(s, width):
            sections.append({"title": _one_line(s), "lines": []})
        elif sections:
            sections[-1]["lines"].append(s)
    out = [{"title": sec["title"], "text": "\n".join(sec["lines"])} for sec in sections]
    abstract = next((_one_line(sec["text"]) for sec in out if sec["title"].lower().rstrip(":.") == "abstract"), "")
    return out, abstract


_PLACEHOLDER_TITLE = re.compile(r"(microsoft word\s*-|untitled|^\s*$)|\.(docx?|pdf|dvi|tex|ps|rtf)\s*$", re.I)


def _quiet_logger(name: str):
    """A library's log lines silenced: pypdf logs what it repairs (``EOF marker not found``), bibtexparser the
    blocks it skips; what fails is one RecordError, and a reader that succeeds says nothing."""
    return lowered_logger(logging.getLogger(name), logging.CRITICAL)


def _pdf_raw(path: Path, docno: str) -> dict:
    """The raw dict of one PDF: ``path`` (its docno), the document information (``Title``, ``Author``,
    ``CreationDate``... without the slash), ``first_line``, ``text``, ``sections``, ``abstract``."""
    try:
        import pypdf
        from pypdf.errors import DependencyError, PdfReadError
    except ImportError:
        raise RecordError(path, "reading PDFs needs the pypdf package: pip install 'pyterrier-sci[corpora]'") \
            from None
    with _quiet_logger("pypdf"):
        try:
            reader = pypdf.PdfReader(str(path))
            if reader.is_encrypted:
                try:
                    opened = reader.decrypt("")
                except DependencyError as e:
                    raise RecordError(path, f"the PDF is encrypted and cannot be opened here ({e})") from None
                if not opened:
                    raise RecordError(path, "the PDF is encrypted with a password: save an unprotected copy")
            info = {}
            try:
                for k, v in (reader.metadata or {}).items():
                    if isinstance(v, str) and v.strip():
                        info[str(k).lstrip("/")] = v.strip()
            except (PdfReadError, ValueError, TypeError, KeyError):
                info = {}
            pages = []
            for i, page in enumerate(reader.pages, 1):
                try:
                    pages.append(page.extract_text() or "")
                except RecordError:
                    raise
                except Exception as e:  # noqa: BLE001 - pypdf raises many kinds on damaged content streams
                    raise RecordError(path, f"the text of page {i} cannot be extracted ({type(e).__name__}: {e}); "
                                            f"the PDF is damaged") from None
        except RecordError:
            raise
        except Exception as e:  # noqa: BLE001 - PdfReadError, PdfStreamError, struct/zlib errors of damaged files
            raise RecordError(path, f"not a readable PDF ({type(e).__name__}: {e}); the file is damaged or cut "
                                    f"short: save or download it again") from None
    text = "\n".join(p.strip("\n") for p in pages).strip()
    sections, abstract = pdf_sections(text)
    first_line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    raw: Dict[str, Any] = {k: v for k, v in info.items() if k not in ("path", "first_line", "text", "sections",
                                                                       "abstract")}
    if _PLACEHOLDER_TITLE.search(raw.get("Title", "")):
        raw.pop("Title", None)
    raw.update({"path": docno, "first_line": first_line, "text": text, "sections": sections, "abstract": abstract})
    return raw


def _pdf_files(path: Path) -> List[Tuple[Path, str]]:
    """``(file, docno)``: one PDF (its stem), or every PDF under a directory (the path relative to it, without
    ``.pdf``, with ``/``), in sorted order."""
    if not path.is_dir():
        return [(path, path.stem.strip())]
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() == ".pdf" and p.is_file())
    if not files:
        raise RecordError(path, "the directory holds no PDF file (*.pdf)")
    return [(p, p.relative_to(path).with_suffix("").as_posix()) for p in files]


def _read_pdfs(path: Path, mapper: _Mapper, encoding: str) -> Iterator[dict]:
    for file, docno in _pdf_files(path):
        raw = _pdf_raw(file, docno)
        try:
            yield mapper.build(raw, file, "")
        except RecordError as e:
            if not raw["text"] and "no title, abstract or text" in e.problem:
                raise RecordError(file, "no text can be extracted (a scanned PDF? run OCR on it first, e.g. "
                                        "ocrmypdf) and it has no title") from None
            raise


def _read_dataframe(df: pd.DataFrame, mapper: _Mapper) -> Iterator[dict]:
    columns = [str(c) for c in df.columns]
    mapper.resolve_header(columns, _DF_NAME, "")
    positional = isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1
    for i, (label, row) in enumerate(zip(df.index, df.itertuples(index=False, name=None))):
        where = f"row {i}" if positional else f"row {i} (index {label!r})"
        yield mapper.build(dict(zip(columns, row)), _DF_NAME, where)


_READERS: Dict[str, Callable[[Path, _Mapper, str], Iterator[dict]]] = {
    "jsonl": _read_jsonl,
    "csv": lambda p, m, enc: _read_table(p, m, enc, ","),
    "tsv": lambda p, m, enc: _read_table(p, m, enc, "\t"),
    "bibtex": _read_bibtex,
    "csljson": _read_csljson,
    "pdf": _read_pdfs,
}


# ---------------------------------------------------------------------------------------------
# citations from a separate file
# ---------------------------------------------------------------------------------------------

_CITING_HEADERS = {"citing", "source", "src", "from", "docno", "doc_id", "paper", "paper_id"}


def read_citations(source: Union[str, os.PathLike, Mapping[str, Any]], encoding: str = "utf-8") -> Dict[str, List[str]]:
    """``{citing docno: [cited docno, ...]}`` from a file of ``citing<TAB>cited`` pairs (a header line such as
    ``citing<TAB>cited`` is skipped; further columns are ignored; ``.csv``: comma-separated) or a JSONL file of
    ``{"docno": ..., "citations": [...]}`` objects (``doc_id``/``id`` and ``references``/``outCitations`` are read
    too), or a mapping of the same.  Read whole (the citation graph); errors name the file and line."""
    out: Dict[str, List[str]] = {}
    if isinstance(source, Mapping):
        for k, v in source.items():
            out.setdefault(_docno(k), []).extend(_docnos(v))
        return {k: _unique(v) for k, v in out.items()}
    path = Path(source)
    if not path.is_file():
        raise RecordError(path, "no such citations file")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        for lineno, obj in json_lines(path, encoding):
            citing = obj.get("docno", obj.get("doc_id", obj.get("id"))) if isinstance(obj, dict) else None
            if _empty(citing):
                raise RecordError(path, "expected an object with a docno and its citations, e.g. "
                                        '{"docno": "p1", "citations": ["p2", "p3"]}', f"line {lineno}")
            cited = next((obj[k] for k in ("citations", "references", "outCitations", "cited") if k in obj), [])
            out.setdefault(_docno(citing), []).extend(_docnos(cited))
    else:
        sep = "," if name.endswith(".csv") else "\t"
        for lineno, line, _ in read_lines(path, encoding):
            s = line.rstrip("\r\n")
            if not s.strip() or s.lstrip().startswith("#"):
                continue
            parts = s.split(sep) if sep in s else s.split()
            if len(parts) < 2 or _empty(parts[0]) or _empty(parts[1]):
                raise RecordError(path, f"expected a citing docno and a cited docno separated by "
                                        f"{'a comma' if sep == ',' else 'a tab'}, found {s[:80]!r}", f"line {lineno}")
            citing, cited = parts[0].strip(), parts[1].strip()
            if lineno == 1 and citing.lower() in _CITING_HEADERS:
                continue   # a header line
            out.setdefault(citing, []).append(cited)
    if not out:
        raise RecordError(path, "the citations file holds no citation")
    return {k: _unique(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------------

def _name(source: Source) -> str:
    return _DF_NAME if isinstance(source, pd.DataFrame) else str(source)


def _fixed_date(date: Any, where: str) -> Optional[str]:
    if date is None or isinstance(date, str):
        return None
    if isinstance(date, (PaperDate, datetime.date)):
        return parse_date(date).iso
    raise RecordError(where, f"date= is the key or column of the papers' dates (a string) or one date for every "
                             f"paper (a datetime.date or PaperDate), not {type(date).__name__}")


def read_records(source: Union[Source, Sequence[Source]], format: Optional[str] = None,  # noqa: A002
                 fields: Optional[Mapping[str, Any]] = None, date: Any = None,
                 citations: Union[str, os.PathLike, Mapping[str, Any], None] = None,
                 encoding: str = "utf-8") -> Iterator[dict]:
    """The papers of ``source`` as records (``docno``, ``title``, ``abstract``, ``text``, ``date``,
    ``citations``, ``sections``), one at a time.

    Args:
        source: a file, a directory of PDFs, a pandas DataFrame, or a list of them (read in order; docnos must
            be unique across them all).
        format: one of :data:`FORMATS`; default: :func:`detect_format` per path.
        fields: our field -> your key or column (or a list of them, the first with a value winning; None: leave
            the field empty), e.g. ``{"title": "Title", "abstract": "Abstract Note"}``; replaces the default keys
            of :data:`DEFAULT_FIELDS` for the fields it names.  ``month`` names the month that completes a date
            given as a bare year.  A key no record has is an error.
        date: the key or column of the dates when not the default (a string: ``date="Date Published"``, same as
            ``fields={"date": ...}``), or one date for every paper (a :class:`datetime.date`, or a
            :class:`~pyterrier_sci.dates.PaperDate` such as ``parse_date("2024-06")`` for a folder of PDFs
            collected in June 2024); a fixed date overrides the dates the source has.
        citations: a file of ``citing<TAB>cited`` pairs or a JSONL file of ``{"docno", "citations"}`` objects (see
            :func:`read_citations`), or a mapping ``{docno: [cited, ...]}``: added to each paper's own citations
            (duplicates dropped).  Cited docnos need not be in the collection; when no citing docno of the file is,
            the file does not belong to the collection (an error).
        encoding: of text files (JSONL, CSV, TSV, BibTeX, CSL-JSON).

    Raises :class:`~pyterrier_sci.errors.RecordError` (a ``ValueError``) naming the file and line, entry, item,
    row or PDF when the stream reaches a problem.
    """
    sources: List[Source] = list(source) if isinstance(source, (list, tuple)) else [source]
    label = ", ".join(_name(s) for s in sources) or "(no source)"
    if not sources:
        raise RecordError(label, "no source given: name a file, a directory of PDFs or a DataFrame")
    if format is not None and format not in FORMATS:
        raise RecordError(label, f"unknown format {format!r}; the formats are {', '.join(FORMATS)}")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise RecordError(label, f"unknown encoding {encoding!r}") from None
    given = _check_fields(fields, label)
    if isinstance(date, str) and "date" in given:
        raise RecordError(label, "give the date's key either as date= or in fields=, not both")
    fixed = _fixed_date(date, label)
    date_key = date if isinstance(date, str) and date else None
    plan = [(src, _format_of(src, format)) for src in sources]
    extra = read_citations(citations, encoding) if citations is not None else None
    return _stream(plan, given, fixed, date_key, extra, encoding, label, citations)


def _format_of(src: Source, format: Optional[str]) -> str:  # noqa: A002
    """The format ``src`` is read as (``format`` when given): checked before the stream starts."""
    if isinstance(src, pd.DataFrame):
        if format not in (None, "dataframe"):
            raise RecordError(_DF_NAME, f"format={format!r} was given for a DataFrame")
        return "dataframe"
    if not isinstance(src, (str, os.PathLike)):
        raise RecordError(repr(src)[:80], "not a source: give a path, a directory of PDFs or a pandas DataFrame")
    path = Path(src).expanduser()
    if not path.exists():
        raise RecordError(path, "no such file or directory")
    fmt = format or detect_format(path)
    if fmt == "dataframe":
        raise RecordError(path, "format='dataframe' is for a pandas DataFrame, not a path")
    if path.is_dir() and fmt != "pdf":
        raise RecordError(path, f"a directory is read as a directory of PDFs, not as {fmt}")
    return fmt


def _stream(plan, given, fixed, date_key, extra, encoding, label, citations_source) -> Iterator[dict]:
    seen: Dict[str, Tuple[str, str]] = {}
    mappers: List[Tuple[str, _Mapper]] = []
    matched = 0
    for src, fmt in plan:
        mapper = _Mapper(fmt, given, fixed, seen, date_key)
        mappers.append((_name(src), mapper))
        records = (_read_dataframe(src, mapper) if fmt == "dataframe"
                   else _READERS[fmt](Path(src).expanduser(), mapper, encoding))
        for rec in records:
            if extra:
                more = extra.get(rec["docno"])
                if more:
                    matched += 1
                    rec["citations"] = _unique(rec["citations"] + more)
            yield rec
    if not seen:
        raise RecordError(label, "no paper record at all: the collection is empty")
    for name, mapper in mappers:
        unfound = mapper.unfound()
        if unfound:
            raise RecordError(name, f"no record has the key(s) that fields=/date= name: {'; '.join(unfound)}")
    if extra and not matched:
        example = next(iter(extra))
        raise RecordError(str(citations_source) if not isinstance(citations_source, Mapping) else "citations=",
                          f"none of its {len(extra)} citing papers is in the collection (e.g. {example!r}; the "
                          f"collection's docnos look like {next(iter(seen))!r}): is it the citations file of "
                          f"another collection?")
