"""SciFullBench (PRISM, 003_48f411899270a37b.txt §4.1, appendix A), read from its released layout.

Registers ``sci/scifullbench`` (the target corpus), ``/<venue>/{references,citations}`` (queries and
qrels, candidates matched to the corpus by title and abstract as PRISM's code does), ``/segments`` and
``/chunks-<unit>`` over ``<data dir>/scifullbench`` (:func:`register_scifullbench`).  See ``docs/prism.md``.
"""
import hashlib
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

import ir_datasets

from pyterrier_sci.data import DamagedDataError, MissingDataError, data_dir, read_json
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, register
from pyterrier_sci.text import SEPARATOR, STANDARD_UNITS, ChunkDoc, register_chunk_corpus

from .acl_fulltext import FullPaper, Section, clean

NAME = "sci/scifullbench"
VENUES = {"acl": "ACL", "emnlp": "EMNLP", "iclr": "ICLR", "neurips": "NeurIPS"}
RELATIONS = {"references": "Direct_References", "citations": "Cited_Papers"}
FINAL = "Final_Dataset_w_citations_mentions_removed"
SOURCE = "huggingface.co/datasets/Jackson0018/SciFullBench (the SciFullBench folder)"
REMEDY = f"restore it from {SOURCE}"


class SciFullBenchQuery(NamedTuple):
    query_id: str
    text: str
    title: str
    abstract: str
    full_text: str
    sections: Tuple[Section, ...]
    paper_docno: str

    def default_text(self) -> str:
        return self.text


def match_key(title: str, abstract: str = "") -> str:
    """The key candidates are matched on: lower-cased words of the title (and abstract)."""
    norm = lambda s: " ".join(re.sub(r"[^\w]+", " ", (s or "").lower()).split())  # noqa: E731
    return norm(title) + ("\n" + norm(abstract) if abstract is not None else "")


def parse_markdown_sections(text: str) -> Tuple[Section, ...]:
    """``(heading, text)`` per markdown section of a ``.mmd`` full text (``#`` headings); text
    before the first heading is a section with an empty heading; reference sections are dropped."""
    sections: List[Section] = []
    head, buf = "", []

    def flush():
        body = clean(" ".join(buf))
        if body and not re.match(r"^\W*(?:\d+\W*)?(references|bibliography|acknowledge?ments?)\W*$", head, re.I):
            sections.append(Section(head, body))

    for line in (text or "").splitlines():
        m = re.match(r"^\s*#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            flush()
            head, buf = clean(m.group(1).replace("*", "")), []
        else:
            buf.append(line)
    flush()
    return tuple(sections)


def _segments(item: dict, unit: Optional[int] = None) -> List[str]:
    if unit is not None and f"chunked_sections_{unit}" in item:
        return list(item[f"chunked_sections_{unit}"])
    for key in ("chunked_sections_list", "chunked_sections"):
        if key in item:
            return list(item[key])
    keys = sorted(k for k in item if re.fullmatch(r"chunked_sections_\d+", k))
    return list(item[keys[0]]) if keys else []


class SciFullBench:
    """A SciFullBench folder, read on first use."""

    def __init__(self, root: Optional[Path] = None):
        self._root = Path(root) if root is not None else None
        self._corpus: Optional[Dict[str, dict]] = None
        self._papers: Optional[Dict[str, FullPaper]] = None
        self._keys: Optional[Dict[str, str]] = None
        self._title_keys: Optional[Dict[str, str]] = None
        self._queries: Dict[Tuple[str, str], List[Tuple[SciFullBenchQuery, List[str]]]] = {}

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else data_dir() / "scifullbench"

    def _final(self) -> Path:
        for base in (self.root, self.root / "SciFullBench"):
            if (base / FINAL).is_dir():
                return base / FINAL
        raise MissingDataError(f"SciFullBench not found: no {FINAL}/ under {self.root}. Get it from {SOURCE} "
                               f"and put the SciFullBench folder at {self.root} (or set $PYTERRIER_SCI_DATA)")

    def corpus_file(self) -> Path:
        found = sorted((self._final() / "Target_Corpus").glob("*/corpus.json"))
        if not found:
            raise MissingDataError(f"no Target_Corpus/*/corpus.json under {self._final()} ({SOURCE})")
        preferred = [p for p in found if "citations_removed_True_mentions_removed_True" in p.parent.name]
        return (preferred or found)[0]

    def missing_files(self) -> List[str]:
        try:
            self.corpus_file()
            return []
        except MissingDataError:
            return [str(self.root / FINAL)]

    def _full_text_file(self, rel: Optional[str]) -> Optional[Path]:
        if not rel:
            return None
        rel_path = Path(rel)
        for base in (self._final().parent, self.root, self._final()):
            p = base / rel_path
            if p.is_file():
                return p
        parts = rel_path.parts  # paths written relative to the authors' checkout (".../SciFullBench/...")
        if "SciFullBench" in parts:
            p = self._final().parent.joinpath(*parts[parts.index("SciFullBench") + 1:])
            if p.is_file():
                return p
        return None

    def _paper(self, doc_id: str, item: dict) -> FullPaper:
        title, abstract = clean(item.get("title") or ""), clean(item.get("abstract") or "")
        path = self._full_text_file(item.get("full_paper_directory"))
        if path is not None:
            raw = path.read_text(encoding="utf-8", errors="replace")
            sections = parse_markdown_sections(raw)
            full = " ".join([abstract] + [f"{s.heading} {s.text}".strip() for s in sections]).strip()
        else:
            segs = [clean(s) for s in _segments(item)]
            sections = tuple(Section("", s) for s in segs if s)
            full = " ".join([abstract] + [s.text for s in sections]).strip()
        return FullPaper(doc_id, f"{title} {abstract}".strip(), title, abstract, full, sections)

    def clear(self) -> None:
        """Forgets what was read (the next use reads the files again)."""
        self._corpus = self._papers = self._keys = self._title_keys = None
        self._queries = {}

    def corpus(self) -> Dict[str, dict]:
        if self._corpus is None:
            path = self.corpus_file()
            items = read_json(path, REMEDY, expect=(list, dict))
            if isinstance(items, dict):
                items = list(items.values())
            if not items:
                raise DamagedDataError(path, "the corpus has no papers", None, REMEDY)
            corpus, keys, title_keys = {}, {}, {}
            for i, item in enumerate(items):
                if not isinstance(item, dict) or not isinstance(item.get("title"), str):
                    raise DamagedDataError(path, f"corpus item {i} is not a paper object with a 'title'", None, REMEDY)
                key = match_key(item.get("title"), item.get("abstract"))
                doc_id = str(item.get("id") or "sfb-" + hashlib.sha1(key.encode()).hexdigest()[:16])
                if doc_id in corpus:
                    continue
                corpus[doc_id] = item
                keys.setdefault(key, doc_id)
                title_keys.setdefault(match_key(item.get("title"), None), doc_id)
            self._corpus, self._keys, self._title_keys = corpus, keys, title_keys
        return self._corpus

    def papers(self) -> Dict[str, FullPaper]:
        if self._papers is None:
            self._papers = {d: self._paper(d, item) for d, item in self.corpus().items()}
        return self._papers

    def find(self, title: str, abstract: Optional[str]) -> Optional[str]:
        """The corpus docno of a paper given by title and abstract (``None`` if absent)."""
        self.corpus()
        return self._keys.get(match_key(title, abstract)) or self._title_keys.get(match_key(title, None))

    def segments(self) -> Iterator:
        for doc_id, item in self.corpus().items():
            title = clean(item.get("title") or "")
            for i, seg in enumerate(_segments(item)):
                body = clean(seg)
                yield ChunkDoc(f"{doc_id}{SEPARATOR}{i}", doc_id, title, body, f"{title} {body}".strip())

    def queries(self, venue: str, relation: str) -> List[Tuple[SciFullBenchQuery, List[str]]]:
        key = (venue, relation)
        if key not in self._queries:
            folder = self._final() / "Benchmark" / VENUES[venue] / RELATIONS[relation]
            if not folder.is_dir():
                raise MissingDataError(f"SciFullBench split not found: {folder} ({SOURCE})")
            out = []
            for path in sorted(folder.glob("*.json")):
                data = read_json(path, REMEDY, expect=dict)
                q = data.get("Query")
                if not isinstance(q, dict) or not isinstance(q.get("title"), str):
                    raise DamagedDataError(path, "expected a 'Query' object with a 'title'", None, REMEDY)
                qid = str(data.get("id") or path.stem)
                paper = self._paper(qid, q)
                own = self.find(q.get("title"), q.get("abstract")) or ""
                rel = []
                cands = data.get("Total_Candidate") or data.get("Candidate") or data.get("Correct_Candidates") or []
                for cand in cands:
                    d = self.find(cand.get("title"), cand.get("abstract")) if isinstance(cand, dict) else None
                    if d is not None and d != own and d not in rel:
                        rel.append(d)
                out.append((SciFullBenchQuery(qid, paper.text, paper.title, paper.abstract, paper.full_text,
                                              paper.sections, own), rel))
            self._queries[key] = out
        return self._queries[key]


def register_scifullbench(root: Optional[Path] = None, name: str = NAME) -> SciFullBench:
    """Registers ``<name>``, ``<name>/<venue>/<relation>``, ``<name>/segments`` and
    ``<name>/chunks-<unit>`` over a SciFullBench folder (default ``<data dir>/scifullbench``);
    nothing is read until an id is used."""
    bench = SciFullBench(root)
    docs = FnDocs(name, lambda: iter(bench.papers().values()), FullPaper)
    register(name, docs, documentation={"desc": "SciFullBench target corpus (full papers)"})
    defs = {1: "reference or citation of the query paper", 0: "not relevant"}
    for venue in VENUES:
        for relation in RELATIONS:
            register(f"{name}/{venue}/{relation}", docs,
                     FnQueries(name, lambda v=venue, r=relation: (q for q, _ in bench.queries(v, r)),
                               SciFullBenchQuery),
                     FnQrels(lambda v=venue, r=relation: (ir_datasets.formats.GenericQrel(q.query_id, d, 1)
                                                          for q, rel in bench.queries(v, r) for d in rel), defs),
                     documentation={"desc": f"SciFullBench {VENUES[venue]} {RELATIONS[relation]}"})
    register(f"{name}/segments", FnDocs(f"{name}/segments", bench.segments, ChunkDoc),
             documentation={"desc": "SciFullBench's released segments (chunked_sections)"})
    for unit, stride in STANDARD_UNITS.items():
        register_chunk_corpus(name, unit, stride, name=f"{name}/chunks-{unit}", text_field="full_text",
                              docs_fn=lambda: iter(bench.papers().values()))
    return bench


BENCH = register_scifullbench()


def missing_files() -> List[str]:
    return BENCH.missing_files()

#: id prefix -> what reports its missing files (``pyterrier-sci datasets``)
STATUS = {NAME: sys.modules[__name__]}
