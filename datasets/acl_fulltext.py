"""Full-paper retrieval on 1,672 real ACL Anthology papers (PRISM's task, 003_48f411899270a37b.txt §4).

Registers ``sci/acl-fulltext`` (the papers, :class:`FullPaper`), ``/references`` and
``/references-or-citers`` (949 full-paper queries) and the chunk corpora ``/chunks-<unit>``, read from
``acl-fulltext/`` of the data directory.  See ``docs/prism.md``.
"""
import html
import re
import sys
from typing import Dict, Iterator, List, NamedTuple, Tuple

import ir_datasets

from pyterrier_sci.data import DataFile, checksums_enabled, iter_jsonl, verified_once
from pyterrier_sci.dates import acl_anthology_date
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, register
from pyterrier_sci.text import STANDARD_UNITS, register_chunk_corpus

NAME = "sci/acl-fulltext"
FILES = {
    "papers": DataFile("acl-fulltext/papers.jsonl",
                       source="ScisummNet / CL-SciSumm full texts (github.com/WING-NUS/scisumm-corpus); "
                              "the project's shared/data/acl-fulltext",
                       sha256="b7e336ceead1a2e6b39bf20c06dadce719b14f7ba0548e6060c0dab68ca02f25"),
    "queries": DataFile("acl-fulltext/queries_A.jsonl",
                        source="derived from the ACL Anthology Network in-set links; "
                               "the project's shared/data/acl-fulltext",
                        sha256="aff298705d4d4c98c14d42ec3958a63046a63edec7910cfdf35c05d1340aa5ca"),
}
#: the release's counts (checked with the checksums)
COUNTS = {"papers": 1672, "queries": 949}
QREL_VARIANTS = {"references": "relevant_refs", "references-or-citers": "relevant_refs_or_citers"}
SKIP_SECTIONS = re.compile(r"^\W*(?:\d+(?:\.\d+)*\W*)?(acknowledge?ments?|references|bibliography)\b", re.I)
_NUMBER_ONLY = re.compile(r"^[\W\d]*$")


# (no `from __future__ import annotations` here: PyTerrier's text loader reads the str annotations)
class Section(NamedTuple):
    heading: str
    text: str


class FullPaper(NamedTuple):
    doc_id: str
    text: str
    title: str
    abstract: str
    full_text: str
    sections: Tuple[Section, ...]
    date: str = ""  # the year of the ACL Anthology id, the only date the release carries (docs/dates.md)

    def default_text(self) -> str:
        return self.text


class FullPaperQuery(NamedTuple):
    query_id: str
    text: str
    title: str
    abstract: str
    full_text: str
    sections: Tuple[Section, ...]
    date: str = ""  # the query paper's date (its ACL Anthology id's year)

    def default_text(self) -> str:
        return self.text


def clean(text: str) -> str:
    """HTML entities decoded, soft hyphens at line breaks joined (``multi\\xad lingual`` ->
    ``multilingual``), whitespace collapsed."""
    text = html.unescape(text or "")
    text = re.sub(r"\xad\s*", "", text)
    return " ".join(text.split())


def body_text(abstract: str, sections: Tuple[Section, ...]) -> str:
    """The full text: the abstract, then each section as heading and text (number-only headings left out)."""
    parts = [abstract] if abstract else []
    for s in sections:
        head = "" if _NUMBER_ONLY.match(s.heading) else s.heading
        parts.append(f"{head} {s.text}".strip())
    return " ".join(p for p in parts if p)


def paper_from_json(d: dict) -> FullPaper:
    title, abstract = clean(d.get("title") or ""), clean(d.get("abstract") or "")
    if not all(isinstance(s, dict) for s in d.get("sections") or ()):
        raise ValueError("'sections' must be a list of {heading, text} objects")
    sections = tuple(Section(clean(s.get("heading") or ""), clean(s.get("text") or ""))
                     for s in d.get("sections") or () if not SKIP_SECTIONS.match(s.get("heading") or ""))
    sections = tuple(s for s in sections if s.text)
    return FullPaper(str(d["id"]), f"{title} {abstract}".strip(), title, abstract, body_text(abstract, sections),
                     sections, acl_anthology_date(str(d["id"])))


class _Source:
    """The papers and query lists, read once on first use."""

    def __init__(self):
        self._papers = None
        self._queries = None

    def clear(self) -> None:
        """Forgets what was read (the next use reads the files again)."""
        self._papers = None
        self._queries = None

    def papers(self) -> Dict[str, FullPaper]:
        if self._papers is None:
            f = FILES["papers"]
            papers = {}
            for line, d in iter_jsonl(f.resolve(), f.remedy(), required=("id",)):
                try:
                    p = paper_from_json(d)
                except (TypeError, ValueError, AttributeError) as e:
                    raise f.damaged(f"not a paper ({e})", line) from None
                papers[p.doc_id] = p
            if checksums_enabled() and len(papers) != COUNTS["papers"]:
                raise f.damaged(f"{len(papers):,} papers, the release has {COUNTS['papers']:,}")
            self._papers = papers
        return self._papers

    def query_rows(self) -> List[dict]:
        if self._queries is None:
            f = FILES["queries"]
            rows = []
            for line, d in iter_jsonl(f.resolve(), f.remedy(), required=("query_id",) + tuple(QREL_VARIANTS.values())):
                if not all(isinstance(d[k], list) for k in QREL_VARIANTS.values()):
                    raise f.damaged(f"{list(QREL_VARIANTS.values())} must be lists of paper ids", line)
                rows.append(d)
            if checksums_enabled() and len(rows) != COUNTS["queries"]:
                raise f.damaged(f"{len(rows):,} queries, the release has {COUNTS['queries']:,}")
            paths = [FILES[k].resolve() for k in ("papers", "queries")]
            verified_once(NAME + ":queries", paths, lambda: self._check_queries(rows))
            self._queries = rows
        return self._queries

    def _check_queries(self, rows: List[dict]) -> None:
        """Every query paper and every relevant paper is in the corpus."""
        papers = self.papers()
        for row in rows:
            listed = [row["query_id"]] + row[QREL_VARIANTS["references-or-citers"]] + row[QREL_VARIANTS["references"]]
            absent = [str(d) for d in listed if str(d) not in papers]
            if absent:
                raise FILES["papers"].damaged(f"{len(absent)} paper(s) of query {row['query_id']} in "
                                              f"{FILES['queries'].local().name} are not in it (e.g. {absent[0]}): the "
                                              f"corpus is incomplete")

    def queries(self) -> Iterator[FullPaperQuery]:
        papers = self.papers()
        for row in self.query_rows():
            p = papers[str(row["query_id"])]
            yield FullPaperQuery(p.doc_id, p.text, p.title, p.abstract, p.full_text, p.sections, p.date)

    def qrels(self, variant: str) -> Iterator[ir_datasets.formats.GenericQrel]:
        key = QREL_VARIANTS[variant]
        for row in self.query_rows():
            q = str(row["query_id"])
            for d in sorted(set(map(str, row[key])) - {q}):  # a paper is never relevant to itself
                yield ir_datasets.formats.GenericQrel(q, d, 1)

    def missing_files(self) -> List[str]:
        return [str(f.local()) for f in FILES.values() if not f.exists()]


SOURCE = _Source()


def missing_files() -> List[str]:
    return SOURCE.missing_files()


def _register():
    docs = FnDocs(NAME, lambda: iter(SOURCE.papers().values()), FullPaper, count_hint=1672)
    register(NAME, docs, documentation={"desc": "1,672 ACL Anthology papers with full text (PRISM's task)"})
    queries = FnQueries(NAME, SOURCE.queries, FullPaperQuery)
    defs = {1: "cited by the query paper", 0: "not relevant"}
    register(f"{NAME}/references", docs, queries, FnQrels(lambda: SOURCE.qrels("references"), defs),
             documentation={"desc": "949 ACL full papers as queries; relevant = their in-set references"})
    register(f"{NAME}/references-or-citers", docs, queries,
             FnQrels(lambda: SOURCE.qrels("references-or-citers"),
                     {1: "cited by or citing the query paper", 0: "not relevant"}),
             documentation={"desc": "949 ACL full papers as queries; relevant = in-set references and citers"})
    for unit, stride in STANDARD_UNITS.items():
        register_chunk_corpus(NAME, unit, stride, text_field="full_text",
                              docs_fn=lambda: iter(SOURCE.papers().values()))


_register()

#: id prefix -> what reports its missing files (``pyterrier-sci datasets``)
STATUS = {NAME: sys.modules[__name__]}
