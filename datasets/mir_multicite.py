"""MIR-MultiCite (Garikaparthi et al., ACL 2025): methodology inspiration retrieval.  Queries are research
*proposals*, documents the papers they cite; a cited paper is relevant when a citation context has a
methodological intent (MultiCite's ``Uses`` or ``Extention``, sic).

Registers ``sci/mir-multicite/{train,dev,test,train-aug}[/restricted,/extended]`` and the offline
chronological protocols ``sci/mir-multicite/dev/chrono-{train,test}[/extended]``, their validation slice
``.../dev/validation-train`` and ``.../dev/validation[/extended]`` and the rolling-origin folds
``.../dev/rolling-K-{train,test}[/extended]`` and ``.../dev/rolling-test[/extended]``; reads the release's
files, the citation graph (``citations_iter()``) and the proposals.  See ``docs/mir.md``.
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import ir_datasets

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.data import DamagedDataError, DataFile, iter_csv
from pyterrier_sci.dates import QueryDates, acl_anthology_date, arxiv_id_date
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, FnScoredDocs, register

NAME = "sci/mir-multicite"
#: MultiCite intents that make a citation methodological (§4: "Uses or Extension"; the data spells it Extention)
MI_INTENTS = frozenset({"Uses", "Extention", "Extension", "Extends"})
CHRONO_TRAIN_FRACTION = 0.6

_REPO = "https://github.com/Anikethh/Methodology-Inspiration-Retrieval"
_RAW = "https://raw.githubusercontent.com/Anikethh/Methodology-Inspiration-Retrieval"
_RELEASE = "c40dca1e029150dd41b1257b8436fa7fd34332b8"    # the release with train/dev/test (CC BY 4.0 / CC BY-NC 2.0)
_SNAPSHOT = "34cf11094d7709a4d4d79af8202674bcf8157c69"   # the snapshot whose dev file is in shared/data
_SOURCE = (f"the authors' release {_REPO} (data/, commit {_RELEASE[:8]}; MIR parts CC BY 4.0, "
           f"MultiCite parts CC BY-NC 2.0)")

FILES = {
    "dev": DataFile("mir-multicite/mir_dev_chronological.csv", url=f"{_RAW}/{_SNAPSHOT}/data/dev_chronological.csv",
                    source=f"{_REPO} data/dev_chronological.csv (commit {_SNAPSHOT[:8]}), or the project's "
                           f"shared/data/mir-multicite",
                    sha256="90aed6fdcaa4968a6d05e652ae9772d824f1e921c1757566ff8aa82dd5cc5b75"),
    "train": DataFile("mir-multicite/train_chronological_df.csv",
                      url=f"{_RAW}/{_RELEASE}/data/train_chronological_df.csv", source=_SOURCE),
    "test": DataFile("mir-multicite/test_chronological_df.csv", url=f"{_RAW}/{_RELEASE}/data/test_chronological_df.csv",
                     source=_SOURCE),
    "train-aug": DataFile("mir-multicite/augmented_train_chronological_df.csv",
                          source=f"the MIR-MultiCite-Aug training split (Table 1, Aug-T); it is not part of the public "
                                 f"release at {_REPO} (commit {_RELEASE[:8]}): ask the authors, and save it under "
                                 f"this name with the release's columns"),
}
SPLITS = ("train", "dev", "test", "train-aug")


# (no `from __future__ import annotations` in this module: PyTerrier's text loader reads the str
# annotations of the document class to know which fields are text)
class MIRDoc(NamedTuple):
    doc_id: str
    title: str
    abstract: str

    def default_text(self) -> str:
        return f"{self.title} {self.abstract}".strip()


class MIRQuery(NamedTuple):
    query_id: str
    text: str

    def default_text(self) -> str:
        return self.text


class MIRCitation(NamedTuple):
    """One citation context: an edge of the Methodology Adjacency Graph."""
    query_id: str        # the citing paper (proposal)
    doc_id: str          # the cited paper
    context: str         # the citation context (one or more sentences)
    intent: str          # MultiCite intent (Background, Motivation, Uses, Extention, Similar, ...)
    methodological: int  # 1 when intent is Uses / Extention
    source: str          # the release's gen_id: "s2" (context matched in Semantic Scholar) or "llm" (found by the LLM)


class Proposal(NamedTuple):
    """A research proposal with what the release gives about its citing paper."""
    query_id: str
    text: str                # problem + motivation (the release's ``proposal``)
    citing_abstract: str     # the abstract the proposal was extracted from
    keywords: Tuple[str, ...]  # the release's scientific-IE keywords of the proposal (PL-Marker), in its order
    position: int            # order of first appearance in the release file


# ----------------------------------------------------------------------------------------------
# reading a release file (old dev schema and the newer *_chronological_df.csv schema alike)
# ----------------------------------------------------------------------------------------------

@dataclass
class Split:
    """The parsed rows of one release file."""
    proposals: Dict[str, Proposal]
    papers: Dict[str, str]            # cited paper id -> abstract
    titles: Dict[str, str]            # cited paper id -> title (empty in the release)
    citations: List[MIRCitation]

    def cited(self, qids: Optional[Iterable[str]] = None) -> Dict[str, Dict[str, int]]:
        """``{qid: {docno: 1 if any methodological context else 0}}`` in release order."""
        keep = None if qids is None else set(qids)
        out: Dict[str, Dict[str, int]] = {}
        for c in self.citations:
            if keep is not None and c.query_id not in keep:
                continue
            d = out.setdefault(c.query_id, {})
            d[c.doc_id] = max(d.get(c.doc_id, 0), c.methodological)
        return out


REQUIRED_COLUMNS = ("actual_ids", "cited_paper_id", "citation_text", "intent", "cited_paper_abstracts", "proposal")


def _split_keywords(value: str) -> Tuple[str, ...]:
    return tuple(k.strip() for k in str(value or "").split(",") if k.strip())


def _is_methodological(intent: str) -> int:
    return int(str(intent).strip() in MI_INTENTS)


def _remedy(path: str) -> str:
    known = next((f for f in FILES.values() if str(f.local().resolve()) == path), None)
    if known is not None:
        return known.remedy()
    return (f"a file that is not a MIR-MultiCite file cannot be read: give one with the release's columns "
            f"{list(REQUIRED_COLUMNS)} (restore it from {_SOURCE}, or build it with "
            f"pyterrier_sci.plugins.mir.proposals.build_mir_data)")


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime: float) -> Split:
    proposals: Dict[str, Proposal] = {}
    papers: Dict[str, str] = {}
    titles: Dict[str, str] = {}
    citations: List[MIRCitation] = []
    remedy = _remedy(path)
    for line, row in iter_csv(path, remedy, required=REQUIRED_COLUMNS):
        qid = (row.get("actual_ids") or row.get("paper_id") or "").strip()
        doc = (row.get("cited_paper_id") or "").strip()
        if not qid or not doc:
            raise DamagedDataError(path, "the row has no citing paper id ('actual_ids') or no cited paper id "
                                         "('cited_paper_id')", line, remedy)
        if qid not in proposals:
            proposals[qid] = Proposal(qid, (row.get("proposal") or "").strip(),
                                      (row.get("citing_paper_abstracts") or "").strip(),
                                      _split_keywords(row.get("keyword")), len(proposals))
        papers.setdefault(doc, (row.get("cited_paper_abstracts") or "").strip())
        titles.setdefault(doc, (row.get("cited_paper_title") or row.get("cited_title") or "").strip())
        intent = (row.get("intent") or "").strip()
        citations.append(MIRCitation(qid, doc, (row.get("citation_text") or "").strip(), intent,
                                     _is_methodological(intent), (row.get("gen_id") or "").strip()))
    return Split(proposals, papers, titles, citations)


def read_csv(path: Union[str, Path]) -> Split:
    """Parses a file with the release's columns (``actual_ids``, ``cited_paper_id``, ``citation_text``,
    ``intent``, ``cited_paper_abstracts``, ``proposal``; optional ``citing_paper_abstracts``,
    ``keyword``, ``gen_id``, ``cited_paper_title``) - a release split or one built with
    :func:`pyterrier_sci.plugins.mir.proposals.build_mir_data`."""
    p = Path(path)
    return _read(str(p.resolve()), p.stat().st_mtime)


def load_split(split: str) -> Split:
    """One split of the release (``train``, ``dev``, ``test``, ``train-aug``); a missing file is a
    :class:`~pyterrier_sci.data.MissingDataError` (downloaded first when a URL is known and the
    network allows)."""
    if split not in FILES:
        raise KeyError(f"unknown MIR-MultiCite split {split!r}: use one of {', '.join(SPLITS)}")
    return read_csv(FILES[split].resolve())


# ----------------------------------------------------------------------------------------------
# the chronological order of the offline protocol
# ----------------------------------------------------------------------------------------------

_ACL_MONTH = {"E": 4, "N": 6, "S": 6, "P": 7, "D": 11, "K": 11}


def proposal_date(qid: str) -> Tuple[int, int]:
    """``(year, month)`` from a citing paper id: arXiv ``YYMM``; ACL Anthology ``<venue letter><YY>-`` by
    the venue's month (E April, N/S June, P July, D/K November); month 13 when only the year is known
    (other letters, ``2020.*`` ids), ``(9999, 13)`` when the id carries no date (``CorpusID:``)."""
    q = str(qid)
    m = re.match(r"ARXIV:(\d{2})(\d{2})\.", q, re.I)
    if m:
        return 2000 + int(m.group(1)), int(m.group(2))
    m = re.match(r"ACL:([A-Z])(\d{2})-", q)
    if m:
        return 2000 + int(m.group(2)), _ACL_MONTH.get(m.group(1), 13)
    m = re.match(r"ACL:(\d{4})\.", q)
    if m:
        return int(m.group(1)), 13
    return 9999, 13


def proposal_iso_date(qid: str) -> str:
    """The date a citing paper id carries, in ISO at the precision it knows (the query's ``date``,
    ``query_dates_iter()``): arXiv ``YYYY-MM``, ACL Anthology ``YYYY`` (the venue months of
    :func:`proposal_date` order the protocol's proposals but are not dates the release gives), ``""`` for
    ``CorpusID:`` ids.  The cited papers have no date in the release (docs/dates.md)."""
    q = str(qid)
    if q.upper().startswith("ARXIV:"):
        return arxiv_id_date(q[6:])
    if q.startswith("ACL:"):
        return acl_anthology_date(q[4:])
    return ""


def chronological_order(split: Split) -> List[str]:
    """The proposal ids by :func:`proposal_date`, ties (and undated ids) in release order."""
    return sorted(split.proposals, key=lambda q: (proposal_date(q), split.proposals[q].position))


def chrono_parts(split: Split, fraction: float = CHRONO_TRAIN_FRACTION) -> Tuple[List[str], List[str]]:
    """``(train qids, test qids)``: the chronologically first ``fraction`` of the proposals and the rest."""
    return _head_and_rest(chronological_order(split), fraction)


def _head_and_rest(ids: Sequence[str], fraction: float) -> Tuple[List[str], List[str]]:
    """The first ``fraction`` of ``ids`` (rounded to a whole proposal) and the rest: the protocols' one rule."""
    n = int(round(len(ids) * fraction))
    return list(ids[:n]), list(ids[n:])


#: where the rolling-origin folds of :func:`rolling_parts` start testing (fractions of the proposals by date)
ROLLING_ORIGINS = (0.4, 0.6, 0.8)


def rolling_parts(split: Split, origins: Sequence[float] = ROLLING_ORIGINS) -> List[Tuple[List[str], List[str]]]:
    """Rolling-origin (forward-chaining) chronological folds: for each origin o, ``(train, test)`` with
    train = the proposals before o (by :func:`chronological_order`) and test = those from o to the next
    origin (the last fold to the end).  Every fold is a chronological part and the rest of its window, so
    no proposal is in the training and test side of one fold, and each proposal is tested at most once:
    with the default origins the last 60% of the proposals are tested (3x the test block of
    ``chrono_parts`` over the same 40% tail), each by a model trained only on earlier proposals."""
    cuts = [float(o) for o in origins]
    if not cuts or any(not 0 < o < 1 for o in cuts) or cuts != sorted(set(cuts)):
        raise ValueError(f"origins must be increasing fractions in (0, 1), got {list(origins)}")
    order = chronological_order(split)
    bounds = [int(round(len(order) * o)) for o in cuts] + [len(order)]
    folds = [(order[:a], order[a:b]) for a, b in zip(bounds, bounds[1:])]
    if any(not train or not test for train, test in folds):
        raise ValueError(f"origins {cuts} leave a fold without training or test proposals ({len(order)} proposals)")
    return folds


def candidate_pools(judged: Mapping[str, Mapping[str, int]], qids: Sequence[str], corpus: str,
                    training_docs: Sequence[str] = ()) -> Dict[str, List[str]]:
    """Each proposal's candidate papers in a corpus setting (§4.2), in a fixed order.  ``judged`` is
    ``{qid: {docno: label}}`` of the proposals evaluated (``Split.cited``).  Restricted: every paper
    that any of ``qids`` cites, in the order of ``judged``.  Extended: ``training_docs`` (the training
    proposals' cited papers) plus the proposal's own ground truth, in release order."""
    if corpus == "restricted":
        keep = set(qids)
        pool = list(dict.fromkeys(d for q, docs in judged.items() if q in keep for d in docs))
        return {q: pool for q in qids}
    if corpus != "extended":
        raise ValueError(f"corpus must be 'restricted' or 'extended', got {corpus!r}")
    train = list(dict.fromkeys(training_docs))
    return {q: list(dict.fromkeys(train + [d for d, rel in judged.get(q, {}).items() if rel])) for q in qids}


# ----------------------------------------------------------------------------------------------
# views: which proposals, which corpus
# ----------------------------------------------------------------------------------------------

#: the parts of the offline protocols (``View.part``) beside ``None`` (all proposals of a split)
CHRONO_PARTS = ("chrono-train", "chrono-test")
#: the chronological training proposals split again by date (sub-train / validation; never the test ones)
VALIDATION_PARTS = ("validation-train", "validation")
_ROLLING_PART = re.compile(r"rolling-(\d+)-(train|test)$")


def rolling_part_names(origins: Sequence[float] = ROLLING_ORIGINS) -> List[str]:
    """The registered parts of the rolling-origin protocol: ``rolling-K-train`` and ``rolling-K-test`` per
    fold K (1-based) and ``rolling-test``, every fold's test proposals together."""
    return [f"rolling-{k}-{side}" for k in range(1, len(origins) + 1) for side in ("train", "test")] + ["rolling-test"]


def validation_parts(train_q: Sequence[str], fraction: float = CHRONO_TRAIN_FRACTION) -> Tuple[List[str], List[str]]:
    """``(sub-train qids, validation qids)``: the chronological training proposals split again by date with
    the same rule (the ``validation-train`` / ``validation`` parts)."""
    return _head_and_rest(train_q, fraction)


@dataclass(frozen=True)
class View:
    """A registered id: proposals of ``split`` (all, or a part of an offline protocol) over a ``corpus``.

    ``part``: ``None``; ``chrono-train`` / ``chrono-test`` (the first 60% of the proposals by date and the
    rest); ``validation-train`` / ``validation`` (``chrono-train`` split again by date); ``rolling-K-train``
    / ``rolling-K-test`` (fold K of :func:`rolling_parts`) and ``rolling-test`` (every fold's test
    proposals, each proposal's candidates those of its own fold)."""
    split: str
    part: Optional[str] = None
    corpus: str = "restricted"          # "restricted" or "extended"

    def data(self) -> Split:
        return load_split(self.split)

    def qids(self) -> List[str]:
        s = self.data()
        if self.part is None:
            return list(s.proposals)
        if self.part == "rolling-test":
            return [q for v in self.folds() for q in v.qids()]
        m = _ROLLING_PART.match(self.part)
        if m:
            train, test = rolling_parts(s)[int(m.group(1)) - 1]
            return train if m.group(2) == "train" else test
        train, test = chrono_parts(s)
        if self.part in VALIDATION_PARTS:
            sub, val = validation_parts(train)
            return sub if self.part == "validation-train" else val
        return train if self.part == "chrono-train" else test

    def folds(self) -> List["View"]:
        """The test views of the rolling-origin folds that ``rolling-test`` joins (``[self]`` for any other)."""
        if self.part != "rolling-test":
            return [self]
        return [View(self.split, f"rolling-{k}-test", self.corpus) for k in range(1, len(ROLLING_ORIGINS) + 1)]

    def training_view(self) -> "View":
        """Whose cited papers make the extended corpus (and whose proposals train a model for this view)."""
        if self.part is None:
            return View("train")
        m = _ROLLING_PART.match(self.part)
        if m:
            return View(self.split, f"rolling-{m.group(1)}-train")
        if self.part in VALIDATION_PARTS:
            return View(self.split, "validation-train")
        if self.part == "rolling-test":
            raise ValueError("the rolling-origin folds train on different proposals: see View.folds()")
        return View(self.split, "chrono-train")

    def judged(self) -> Dict[str, Dict[str, int]]:
        return self.data().cited(self.qids())

    def training_docs(self) -> List[str]:
        t = self.training_view()
        return list(dict.fromkeys(d for docs in t.judged().values() for d in docs))

    def corpus_ids(self) -> List[str]:
        if self.part == "rolling-test":
            return list(dict.fromkeys(d for v in self.folds() for d in v.corpus_ids()))
        judged = self.judged()
        if self.corpus == "restricted":
            return list(dict.fromkeys(d for docs in judged.values() for d in docs))
        gt = [d for docs in judged.values() for d, rel in docs.items() if rel]
        return list(dict.fromkeys(self.training_docs() + gt))

    def pools(self) -> Iterator[Tuple[str, List[str]]]:
        if self.part == "rolling-test":
            for v in self.folds():
                yield from v.pools()
            return
        qids = self.qids()
        yield from candidate_pools(self.judged(), qids, self.corpus,
                                   self.training_docs() if self.corpus == "extended" else ()).items()

    def files(self) -> List[str]:
        keys = [self.split] + (["train"] if self.corpus == "extended" and self.part is None else [])
        return list(dict.fromkeys(keys))

    def docs(self) -> Iterator[MIRDoc]:
        sources = [self.data()] + ([load_split("train")] if self.corpus == "extended" and self.part is None else [])
        for d in self.corpus_ids():
            for s in sources:
                if d in s.papers:
                    yield MIRDoc(d, s.titles.get(d, ""), s.papers[d])
                    break


def view_of(dataset: str) -> View:
    """The :class:`View` (split, part, corpus) of a registered ``sci/mir-multicite`` id; a ``ValueError``
    names the known ids for any other."""
    ds = irds_id(dataset)
    if ds not in _VIEWS:
        raise ValueError(f"{dataset} is not a MIR-MultiCite id (known: {', '.join(sorted(_VIEWS))})")
    return _VIEWS[ds]


_view_of = view_of  # its name before issue 32 (examples/mir.py uses it)


def proposals(dataset: str) -> Dict[str, Proposal]:
    """The proposals of a ``sci/mir-multicite`` id, by query id, with citing abstract and keywords."""
    v = view_of(dataset)
    props = v.data().proposals
    return {q: props[q] for q in v.qids()}


def citations(dataset: str) -> List[MIRCitation]:
    """The citation contexts of a ``sci/mir-multicite`` id's proposals (every cited paper, both kinds)."""
    v = view_of(dataset)
    keep = set(v.qids())
    return [c for c in v.data().citations if c.query_id in keep]


class Citations:
    """The ir_datasets constituent that puts :meth:`citations_iter` on a MIR-MultiCite dataset."""

    def __init__(self, view: View):
        self._view = view

    def citations_iter(self) -> Iterator[MIRCitation]:
        keep = set(self._view.qids())
        return (c for c in self._view.data().citations if c.query_id in keep)


# ----------------------------------------------------------------------------------------------
# which files each id needs (pyterrier-sci datasets)
# ----------------------------------------------------------------------------------------------

class _Part:
    def __init__(self, keys: Sequence[str]):
        self.keys = tuple(keys)

    def missing_files(self) -> List[str]:
        return [str(FILES[k].local()) for k in self.keys if not FILES[k].exists()]


def missing_files() -> List[str]:
    return _Part(SPLITS).missing_files()


# ----------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------

_VIEWS: Dict[str, View] = {}
#: id prefix -> what it needs, most specific first (for ``registry_status``)
STATUS: Dict[str, _Part] = {}
_QREL_DEFS = {0: "cited by the proposal's paper, no methodological intent",
              1: "cited with a methodological intent (Uses / Extention) in at least one context"}


def _iter_queries(view: View):
    props = view.data().proposals
    for q in view.qids():
        yield MIRQuery(q, props[q].text)


def _iter_query_dates(view: View):
    for q in view.qids():
        yield q, proposal_iso_date(q)


def _iter_qrels(view: View):
    for q, docs in view.judged().items():
        for d, rel in docs.items():
            yield ir_datasets.formats.GenericQrel(q, d, rel)


def _iter_pool(view: View):
    for q, docs in view.pools():
        for d in docs:
            yield ir_datasets.formats.GenericScoredDoc(q, d, 0.0)


def _register(name: str, view: View, docs: FnDocs, title: str):
    _VIEWS[name] = view
    register(name, docs, FnQueries(name, functools.partial(_iter_queries, view), MIRQuery),
             FnQrels(functools.partial(_iter_qrels, view), _QREL_DEFS),
             FnScoredDocs(functools.partial(_iter_pool, view)), Citations(view),
             QueryDates(functools.partial(_iter_query_dates, view)),
             documentation={"pretty_name": title, "desc": __doc__.split("\n\n")[0]})


def _register_all():
    entries = []
    for split in SPLITS:
        base = f"{NAME}/{split}"
        restricted = View(split)
        docs = FnDocs(base, restricted.docs, MIRDoc)
        entries.append((base, restricted, docs, f"MIR-MultiCite {split} (restricted corpus)"))
        entries.append((base + "/restricted", restricted, docs, f"MIR-MultiCite {split} (restricted corpus)"))
        if split in ("dev", "test"):
            ext = View(split, corpus="extended")
            entries.append((base + "/extended", ext, FnDocs(base + "/extended", ext.docs, MIRDoc),
                            f"MIR-MultiCite {split} (extended corpus)"))
    titles = {"chrono-train": "the first 60% of the proposals by date", "chrono-test": "the other 40%",
              "validation-train": "the first 60% of chrono-train by date", "validation": "the rest of chrono-train",
              "rolling-test": "every rolling-origin fold's test proposals"}
    for k in range(1, len(ROLLING_ORIGINS) + 1):
        titles[f"rolling-{k}-train"] = (f"rolling-origin fold {k}: the proposals before origin "
                                        f"{ROLLING_ORIGINS[k - 1]:g}")
        titles[f"rolling-{k}-test"] = f"rolling-origin fold {k}: the proposals it tests"
    for part in (*CHRONO_PARTS, *VALIDATION_PARTS, *rolling_part_names()):
        base = f"{NAME}/dev/{part}"
        v = View("dev", part)
        entries.append((base, v, FnDocs(base, v.docs, MIRDoc), f"MIR-MultiCite dev, {part}: {titles[part]}"))
        if not part.endswith("train"):
            v = View("dev", part, "extended")
            entries.append((base + "/extended", v, FnDocs(base + "/extended", v.docs, MIRDoc),
                            f"MIR-MultiCite dev, {part}, extended corpus"))
    for name, view, docs, title in entries:
        _register(name, view, docs, title)
    for name, view, _, _ in sorted(entries, key=lambda e: -len(e[0])):
        STATUS[name] = _Part(view.files())


_register_all()
