"""Core-citation prediction sets (HLM-Cite §2, Eq. 1) from citation graphs.

A reference of a query paper is **core** when a paper citing the query also cites it, else
**superficial**.  :func:`build` turns any citation graph with paper texts into seeded train/test
prediction sets; registers ``sci/hepth-core-citations/...``, ``sci/acl-core-citations/...`` and
``sci/hlm/{train,val,test}`` (qrels 2 = core, 1 = superficial, 0 = non-citation).  See ``docs/hlm-cite.md``.
"""
import gzip
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, Tuple

import ir_datasets
import numpy as np

from pyterrier_sci.data import (
    DamagedDataError,
    DataFile,
    MissingDataError,
    checksums_enabled,
    data_dir,
    iter_jsonl,
    read_text,
    verified_once,
)
from pyterrier_sci.dates import QueryDates, acl_anthology_date, arxiv_header_date
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, FnScoredDocs, register
from pyterrier_sci.local_corpus import ID_PREFIX, LocalDocs

CORE, SUPERFICIAL, NON_CITATION = 2, 1, 0
#: the registered candidate-set sizes |C| (``/c{N}``); k = 5 and seed = 0 as in the paper's data
CANDIDATE_SIZES = (10, 100, 1000, 10000)
#: queries kept per split at each |C|, so that a run stays tractable (None: all)
MAX_QUERIES = {10: None, 100: None, 1000: 1000, 10000: 200}


# ----------------------------------------------------------------------------------------------
# the graph and Eq. 1
# ----------------------------------------------------------------------------------------------

@dataclass
class CitationGraph:
    """References per paper (``citing -> {cited}``) and the reverse."""
    references: Dict[str, Set[str]] = field(default_factory=dict)
    cited_by: Dict[str, Set[str]] = field(default_factory=dict)

    @classmethod
    def from_edges(cls, edges: Iterable[Tuple[str, str]]) -> "CitationGraph":
        g = cls(defaultdict(set), defaultdict(set))
        for citing, cited in edges:
            citing, cited = str(citing), str(cited)
            if citing != cited:
                g.references[citing].add(cited)
                g.cited_by[cited].add(citing)
        g.references, g.cited_by = dict(g.references), dict(g.cited_by)
        return g

    def core(self, q: str) -> Set[str]:
        """Eq. 1: references of ``q`` also cited by some paper that cites ``q``."""
        refs = self.references.get(q, set())
        followers = set()
        for p in self.cited_by.get(q, ()):
            followers |= self.references.get(p, set())
        return refs & followers

    def superficial(self, q: str) -> Set[str]:
        return self.references.get(q, set()) - self.core(q)


class CoreCitationSet(NamedTuple):
    """One split of a built set: per query, the graded candidates (in sampled order)."""
    queries: List[str]
    candidates: Dict[str, List[Tuple[str, int]]]


def _split(queries: List[str], test_fraction: float, seed: int) -> Tuple[List[str], List[str]]:
    order = sorted(queries)
    random.Random(f"split:{seed}").shuffle(order)
    n_test = int(round(len(order) * test_fraction))
    return sorted(order[n_test:]), sorted(order[:n_test])


def eligible_queries(graph: CitationGraph, with_text: Set[str], k: int = 5) -> List[str]:
    """Queries with text and at least ``k`` core and ``k`` superficial references with text."""
    out = []
    for q in graph.references:
        if q not in with_text:
            continue
        core = graph.core(q) & with_text
        sup = (graph.references[q] - graph.core(q)) & with_text
        if len(core) >= k and len(sup) >= k:
            out.append(q)
    return sorted(out)


def build(graph: CitationGraph, with_text: Iterable[str], k: int = 5, candidate_size: int = 10,
          test_fraction: float = 0.2, seed: int = 0, max_queries: Optional[int] = None
          ) -> Dict[str, CoreCitationSet]:
    """Builds ``{"train": ..., "test": ...}`` core-citation sets: the eligible queries (:func:`eligible_queries`)
    split by a seeded shuffle (``test_fraction``; HLM-Cite 8:2), per query ``k`` core and ``k`` superficial
    references sampled and padded with non-citations up to ``candidate_size`` (``>= 2k``).  Deterministic
    in ``seed``: a query's sample depends only on the seed and its id.

    ``max_queries`` keeps the first queries of each split in a seeded order."""
    if candidate_size < 2 * k:
        raise ValueError(f"candidate_size must be at least 2k = {2 * k}")
    universe = sorted(set(map(str, with_text)))
    text_set = set(universe)
    queries = eligible_queries(graph, text_set, k)
    if candidate_size - 2 * k > len(universe) - 1:
        raise ValueError(f"candidate_size {candidate_size} exceeds the {len(universe)} papers with text")
    out = {}
    for name, split in zip(("train", "test"), _split(queries, test_fraction, seed)):
        if max_queries is not None and len(split) > max_queries:
            picked = list(split)
            random.Random(f"cap:{seed}:{name}").shuffle(picked)
            split = sorted(picked[:max_queries])
        cands = {q: _candidates(graph, q, text_set, universe, k, candidate_size, seed) for q in split}
        out[name] = CoreCitationSet(split, cands)
    return out


def _candidates(graph, q, text_set, universe, k, size, seed) -> List[Tuple[str, int]]:
    rng = random.Random(f"{seed}:{q}")
    core = sorted(graph.core(q) & text_set)
    sup = sorted((graph.references.get(q, set()) - graph.core(q)) & text_set)
    picked = [(d, CORE) for d in rng.sample(core, k)] + [(d, SUPERFICIAL) for d in rng.sample(sup, k)]
    excluded = graph.references.get(q, set()) | {q}
    need = size - 2 * k
    non = []
    seen = set()
    while len(non) < need:  # rejection sampling: references and the query itself are excluded
        for d in rng.sample(universe, min(len(universe), need - len(non) + len(excluded) + 8)):
            if d not in excluded and d not in seen:
                seen.add(d)
                non.append(d)
                if len(non) == need:
                    break
    picked += [(d, NON_CITATION) for d in non]
    rng.shuffle(picked)
    return picked


# ----------------------------------------------------------------------------------------------
# corpora
# ----------------------------------------------------------------------------------------------

class Paper(NamedTuple):
    doc_id: str
    title: str
    abstract: str
    date: str = ""  # ISO (hep-th: the submission day, else its month; ACL: the year); "" unknown (docs/dates.md)

    def default_text(self) -> str:
        return f"{self.title} {self.abstract}"


class PaperQuery(NamedTuple):
    query_id: str
    text: str

    def default_text(self) -> str:
        return self.text


_HEPTH = {
    "edges": DataFile("hepth-citations/raw/cit-HepTh.txt.gz", url="https://snap.stanford.edu/data/cit-HepTh.txt.gz",
                      source="SNAP cit-HepTh (snap.stanford.edu/data/cit-HepTh.html), or the project's shared/data",
                      sha256="7df944b502bd7b687b0e7e94ba9b0a87f202693254558ae5f8ea45657697eb32"),
    "papers": DataFile("hepth-citations/papers.jsonl",
                       source="derived from SNAP cit-HepTh-abstracts.tar.gz; the project's shared/data/hepth-citations",
                       sha256="1f7552ccff2e360e4ab4166fb97a83b5a8540cca2d489adf45c73ae068949477"),
}
_ACL = {
    "edges": DataFile("acl-fulltext/edges_inset.tsv",
                      source="ACL Anthology Network links; the project's shared/data/acl-fulltext",
                      sha256="862c3f2767582289fd2310d36c60563f2061c816bc7da22dc1eea0d0a52414f4"),
    "papers": DataFile("acl-fulltext/papers.jsonl",
                       source="ScisummNet / CL-SciSumm full texts; the project's shared/data/acl-fulltext",
                       sha256="b7e336ceead1a2e6b39bf20c06dadce719b14f7ba0548e6060c0dab68ca02f25"),
}


def _hepth_edges():
    f = _HEPTH["edges"]
    path = f.resolve()
    try:
        with gzip.open(path, "rb") as fin:
            for lineno, raw in enumerate(fin, 1):
                if raw.startswith(b"#") or not raw.strip():
                    continue
                parts = raw.split()
                if len(parts) != 2:
                    raise f.damaged(f"expected '<citing> <cited>', found {raw[:60]!r}", lineno, path)
                yield parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace")
    except (EOFError, OSError) as e:  # truncated or not gzip
        raise f.damaged(f"cannot be decompressed ({e})", None, path) from None


def _acl_edges():
    f = _ACL["edges"]
    path = f.resolve()
    lines = read_text(path, f.remedy()).split("\n")
    if lines[0].split("\t")[:2] != ["citing", "cited"]:
        raise f.damaged(f"expected the header 'citing<TAB>cited...', found {lines[0][:60]!r}", 1, path)
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise f.damaged(f"expected '<citing><TAB><cited>', found {line[:60]!r}", lineno, path)
        yield parts[0], parts[1]


def _hepth_date(d: dict) -> str:
    """The submission day of the abstract's ``Date:`` line, else the month of its arXiv id (SNAP's ids are
    old-style hep-th numbers without leading zeros: 1001 = hep-th/0001001)."""
    arxiv = d.get("arxiv_id") or f"hep-th/{int(d['id']):07d}"
    return arxiv_header_date(d.get("date") or "", arxiv)


def _acl_date(d: dict) -> str:
    """The year of the ACL Anthology id (the only date the release carries)."""
    return acl_anthology_date(str(d["id"]))


def _papers(files, date_fn=None) -> Iterator[Paper]:
    f = files["papers"]
    for _, d in iter_jsonl(f.resolve(), f.remedy(), required=("id",)):
        if d.get("title") or d.get("abstract"):
            yield Paper(str(d["id"]), d.get("title") or "", d.get("abstract") or "", date_fn(d) if date_fn else "")


class _Source:
    """A corpus + graph, loaded once and shared by all its ids."""

    def __init__(self, name, files, edges_fn, sizes=CANDIDATE_SIZES, counts=None, inset=False, date_fn=None):
        self.name, self.files, self.edges_fn, self.sizes = name, files, edges_fn, tuple(sizes)
        self.date_fn = date_fn        # a paper's ISO date from its record (docs/dates.md)
        self.counts = counts or {}    # the release's papers with text and edges (checked with the checksums)
        self.inset = inset            # every edge joins two papers of the corpus
        self.clear()

    def clear(self) -> None:
        """Forgets what was read (the next use reads the files again)."""
        self._papers = None
        self._graph = None
        self._sets = {}

    def papers(self) -> Dict[str, Paper]:
        if self._papers is None:
            papers = {p.doc_id: p for p in _papers(self.files, self.date_fn)}
            if checksums_enabled() and "papers" in self.counts and len(papers) != self.counts["papers"]:
                f = self.files["papers"]
                raise f.damaged(f"{len(papers):,} papers with text, the release has {self.counts['papers']:,}")
            self._papers = papers
        return self._papers

    def graph(self) -> CitationGraph:
        if self._graph is None:
            edges = list(self.edges_fn())
            f = self.files["edges"]
            if checksums_enabled() and "edges" in self.counts and len(edges) != self.counts["edges"]:
                raise f.damaged(f"{len(edges):,} citation edges, the release has {self.counts['edges']:,}")
            if self.inset:
                paths = [self.files[k].resolve() for k in ("edges", "papers")]
                verified_once(self.name + ":inset", paths, lambda: self._check_inset(edges))
            self._graph = CitationGraph.from_edges(edges)
        return self._graph

    def _check_inset(self, edges) -> None:
        ids = self.papers()
        absent = sorted({d for e in edges for d in e if d not in ids})
        if absent:
            raise self.files["papers"].damaged(f"{len(absent)} paper(s) of the in-set links in "
                                               f"{self.files['edges'].local().name} are not in it "
                                               f"(e.g. {absent[0]}): the corpus is incomplete")

    def split(self, split: str, size: Optional[int]) -> CoreCitationSet:
        key = (split, size)
        if key not in self._sets:
            if size is None:  # every eligible query, all references graded
                g, text = self.graph(), set(self.papers())
                train, test = _split(eligible_queries(g, text), 0.2, 0)
                qs = train if split == "train" else test
                self._sets[key] = CoreCitationSet(qs, {q: sorted(
                    [(d, CORE) for d in g.core(q) & text] + [(d, SUPERFICIAL) for d in (g.superficial(q) & text)])
                    for q in qs})
            else:
                built = build(self.graph(), self.papers().keys(), k=5, candidate_size=size, seed=0,
                              max_queries=MAX_QUERIES.get(size))
                self._sets[("train", size)], self._sets[("test", size)] = built["train"], built["test"]
        return self._sets[key]

    def missing_files(self) -> List[str]:
        return [str(f.local()) for f in self.files.values() if not f.exists()]


def _register_source(src: _Source, docs=None):
    """Registers ``<name>/{train,test}[/c<size>]`` of a source (``docs``: its documents' handler, when not the
    source's papers)."""
    docs = docs if docs is not None else FnDocs(src.name, lambda: iter(src.papers().values()), Paper)

    def queries(split, size):
        ps = src.papers()
        return (PaperQuery(q, ps[q].default_text()) for q in src.split(split, size).queries)

    def qrels(split, size):
        s = src.split(split, size)
        return (ir_datasets.formats.GenericQrel(q, d, g) for q in s.queries for d, g in s.candidates[q])

    def dates(split, size):  # a query is a paper of the corpus: its date is the paper's
        ps = src.papers()
        return ((q, ps[q].date) for q in src.split(split, size).queries)

    def pool(split, size):
        s = src.split(split, size)
        return (ir_datasets.formats.GenericScoredDoc(q, d, 0.0) for q in s.queries for d, _ in s.candidates[q])

    defs = {CORE: "core citation", SUPERFICIAL: "superficial citation", NON_CITATION: "non-citation"}
    for split in ("train", "test"):
        for size in (None,) + src.sizes:
            name = f"{src.name}/{split}" + (f"/c{size}" if size else "")
            parts = [docs, FnQueries(src.name, lambda s=split, z=size: queries(s, z), PaperQuery),
                     FnQrels(lambda s=split, z=size: qrels(s, z), defs),
                     QueryDates(lambda s=split, z=size: dates(s, z))]
            if size:
                parts.append(FnScoredDocs(lambda s=split, z=size: pool(s, z)))
            register(name, *parts, documentation={"desc": f"core-citation prediction ({src.name}, {split}"
                                                          + (f", |C|={size}" if size else "") + ")"})


HEPTH = _Source("sci/hepth-core-citations", _HEPTH, _hepth_edges, counts={"papers": 29555, "edges": 352807},
                date_fn=_hepth_date)
ACL = _Source("sci/acl-core-citations", _ACL, _acl_edges, sizes=(10, 100, 1000),  # 1,672 papers
              counts={"papers": 1672, "edges": 10456}, inset=True, date_fn=_acl_date)


def missing_files() -> List[str]:
    return HEPTH.missing_files() + ACL.missing_files()


class LocalCoreCitations(_Source):
    """The core-citation sets of a local corpus (``sci/local/NAME/core-citations/{train,test}[/c10]``): Eq. 1 on
    the citation links its papers carry (``citations``, docs/corpora.md), the papers with a title or abstract as
    those with text; built from the corpus's current version, again when it changes."""

    def __init__(self, corpus: str):
        super().__init__(f"{ID_PREFIX}{corpus}/core-citations", {}, None, sizes=(10,))
        self.corpus = corpus
        self._version = None

    def docs(self) -> LocalDocs:
        return LocalDocs(self.corpus)

    def _current(self) -> None:
        version = self.docs().sci_version()
        if version != self._version:
            self.clear()
            self._version = version

    def papers(self) -> Dict[str, Paper]:
        self._current()
        if self._papers is None:
            self._papers = {p.doc_id: p for p in self.docs().docs_iter() if p.title or p.abstract}
        return self._papers

    def graph(self) -> CitationGraph:
        self._current()
        if self._graph is None:
            self._graph = CitationGraph.from_edges((p.doc_id, c) for p in self.docs().docs_iter()
                                                   for c in p.citations)
        return self._graph

    def split(self, split: str, size: Optional[int]) -> CoreCitationSet:
        self._current()
        return super().split(split, size)

    def missing_files(self) -> List[str]:
        return []


def register_local_core_citations(corpus: str) -> None:
    """Registers the core-citation sets of the local corpus ``corpus`` (a hook of
    :data:`pyterrier_sci.local_corpus.LOCAL_DATASET_HOOKS`)."""
    src = LocalCoreCitations(corpus)
    _register_source(src, docs=src.docs())


# ----------------------------------------------------------------------------------------------
# H-LM's release layout
# ----------------------------------------------------------------------------------------------

def read_hlm_release(root: Path, split: str) -> Tuple[CoreCitationSet, Dict[str, Paper]]:
    """Reads H-LM's layout: ``<root>/{train,val,test}_table.npy`` (rows: query id, 5 core ids,
    5 superficial ids) and ``<root>/text/<digit>/<id>.txt`` (first line the title, the rest the
    abstract; ``<digit>`` is the id's last digit).  Returns the split (candidates graded 2/1) and
    the papers it mentions."""
    root = Path(root)
    table_path = root / f"{split}_table.npy"
    if not table_path.exists():
        raise MissingDataError(f"missing {table_path} (H-LM release layout: <root>/{{train,val,test}}_table.npy and "
                               f"<root>/text/<digit>/<id>.txt; github.com/tsinghua-fib-lab/H-LM)")
    remedy = "restore it from H-LM's release (github.com/tsinghua-fib-lab/H-LM)"
    try:
        table = np.load(table_path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:  # truncated, not .npy, object arrays
        raise DamagedDataError(table_path, f"not a readable .npy table ({e})", None, remedy) from None
    if table.ndim != 2 or table.shape[1] < 11:
        raise DamagedDataError(table_path, f"expected rows of 11 ids (query, 5 core, 5 superficial), found shape "
                                           f"{table.shape}", None, remedy)
    queries, cands, papers = [], {}, {}
    for row in table:
        ids = [str(int(x)) if np.issubdtype(type(x), np.integer) else str(x) for x in row]
        q, core, sup = ids[0], ids[1:6], ids[6:11]
        queries.append(q)
        cands[q] = [(d, CORE) for d in core] + [(d, SUPERFICIAL) for d in sup]
        for pid in [q] + core + sup:
            if pid not in papers:
                papers[pid] = _hlm_paper(root, pid)
    return CoreCitationSet(queries, cands), papers


def _hlm_paper(root: Path, pid: str) -> Paper:
    path = root / "text" / pid[-1] / f"{pid}.txt"
    if not path.exists():
        raise MissingDataError(f"missing paper text {path} (H-LM layout text/<last digit>/<id>.txt)")
    lines = read_text(path, "restore it from H-LM's release (github.com/tsinghua-fib-lab/H-LM)").splitlines()
    return Paper(pid, lines[0].strip() if lines else "", " ".join(line.strip() for line in lines[1:]).strip())


class _HLMRelease:
    """Status of the default H-LM release directory (``<data dir>/hlm``) for ``pyterrier-sci datasets``."""
    name = "sci/hlm"

    @staticmethod
    def missing_files() -> List[str]:
        root = data_dir() / "hlm"
        return [str(root / f"{s}_table.npy") for s in ("train", "test") if not (root / f"{s}_table.npy").exists()]


HLM_RELEASE = _HLMRelease()


def register_hlm_release(root: Optional[Path] = None, name: str = "sci/hlm") -> None:
    """Registers ``<name>/{train,val,test}`` over an H-LM release directory (default
    ``<data dir>/hlm``); reading happens on first use."""
    cache = {}

    def get(split):
        if split not in cache:
            cache[split] = read_hlm_release(Path(root) if root else data_dir() / "hlm", split)
        return cache[split]

    def all_papers():
        seen = {}
        for split in ("train", "val", "test"):
            try:
                seen.update(get(split)[1])
            except MissingDataError:
                if split != "val":
                    raise
        return iter(seen.values())

    docs = FnDocs(name, all_papers, Paper)
    for split in ("train", "val", "test"):
        register(f"{name}/{split}", docs,
                 FnQueries(name, lambda s=split: (PaperQuery(q, get(s)[1][q].default_text())
                                                  for q in get(s)[0].queries), PaperQuery),
                 FnQrels(lambda s=split: (ir_datasets.formats.GenericQrel(q, d, g) for q in get(s)[0].queries
                                          for d, g in get(s)[0].candidates[q]),
                         {CORE: "core citation", SUPERFICIAL: "superficial citation"}),
                 FnScoredDocs(lambda s=split: (ir_datasets.formats.GenericScoredDoc(q, d, 0.0)
                                               for q in get(s)[0].queries for d, _ in get(s)[0].candidates[q])))


_register_source(HEPTH)
_register_source(ACL)
register_hlm_release()

#: id prefix -> what reports its missing files (``pyterrier-sci datasets``)
STATUS = {HEPTH.name: HEPTH, ACL.name: ACL, HLM_RELEASE.name: HLM_RELEASE}
