"""MIR-MultiCite (Garikaparthi et al., ACL 2025; ``000_17ca5570851d03ea.txt`` §3-§4, §6.2):
methodology inspiration retrieval.  Queries are research *proposals* (problem + motivation, no
methodology) extracted from the abstracts of citing papers; documents are the papers they cite
(title when known, abstract); a cited paper is relevant when one of its citation contexts has a
*methodological* intent (MultiCite's ``Uses`` or ``Extention`` - sic, as in the data).

Registered ids (``pt.get_dataset("irds:<id>")``):

==============================================  ==================================================
``sci/mir-multicite/dev``                       the dev split (86 proposals, 1,004 citation contexts,
                                                179 cited papers), restricted corpus; offline in
                                                ``mir-multicite/mir_dev_chronological.csv``
``sci/mir-multicite/{train,test}``              the official train / test splits (restricted corpus),
                                                downloaded from the authors' release when reachable
``sci/mir-multicite/train-aug``                 the augmented training split (Aug-T, Table 1), not in
                                                the public release snapshot: place the file yourself
``sci/mir-multicite/{split}/restricted``        the same as ``{split}``
``sci/mir-multicite/{dev,test}/extended``       the extended corpus (needs the train split)
``sci/mir-multicite/dev/chrono-train``          offline protocol: the chronologically first 60% of the
``sci/mir-multicite/dev/chrono-test``           dev proposals (training) and the other 40% (testing,
``sci/mir-multicite/dev/chrono-test/extended``  restricted or extended corpus); no proposal is in both
==============================================  ==================================================

* queries: ``query_id`` = the citing paper's id (``ACL:W19-0804``, ``ARXIV:1906.09912``,
  ``CorpusID:...``), ``text`` = the released proposal.  The release's rows are per MultiCite
  paper id (``ABC_<hash>_<n>``); several of them can belong to one citing paper and carry the same
  proposal, so they are merged: a proposal is a citing paper (86 in dev, as Table 1 counts);
* documents: ``doc_id`` = the Semantic Scholar id of the cited paper, ``title`` (empty: the release
  has none), ``abstract``; ``default_text()`` is title and abstract;
* qrels: every (proposal, cited paper) pair, ``relevance`` 1 when some context of the pair has a
  methodological intent, else 0 (cited, but not methodologically);
* scoreddocs (``get_results()``, component ``pool``): each proposal's corpus.  Restricted: every
  cited paper of the split.  Extended: the cited papers of the training split plus the proposal's
  *own* ground truth - the release's README: the extended corpus "dynamically considers cited papers
  from both the training set and ground-truth citations associated with each test proposal".  The
  documents of an extended id are the union (training papers and every proposal's ground truth), so
  ``pool >> dense`` reproduces the per-proposal corpus and plain ``dense`` searches the union;
* the citation graph: ``ir_datasets.load(id).citations_iter()`` yields :class:`MIRCitation`
  (proposal, cited paper, context, intent, methodological); :func:`proposals` gives the proposals with
  the citing abstract and the released PL-Marker keywords.
  :class:`pyterrier_sci.plugins.dense.mag.MethodologyAdjacencyGraph` is built from either.

Measures (§6.2), registered as ``mir.R@3``, ``mir.R@5``, ``mir.R@10``, ``mir.R@20``, ``mir.mAP``;
on ``sci/mir-multicite`` ids the short names ``R@3``, ``R@5``, ``R@10``, ``R@20``, ``mAP``,
``MAP`` and ``AP`` mean these (``ps.measures.parse([...], dataset=...)``).  Per proposal they are
exactly ir_measures' ``R@k`` and ``AP`` (relevant = relevance >= 1; documents of the run without a
judgement count as not relevant; AP divides by the number of ground-truth papers, retrieved or not).
They differ in the mean: a proposal without any methodological citation has no defined recall, and
the MIR measures leave it out (18 of the 86 dev proposals), whereas ir_measures counts it as 0.

The offline chronological protocol (:func:`chronological_order`): proposals are ordered by the
date their id gives - arXiv ``YYMM``; ACL Anthology ``<venue letter><YY>-`` by the venue's month
(E April, N/S June, P July, D/K November; other letters and ``2020.*`` ids only the year, placed
after the dated proposals of that year); ``CorpusID:`` ids carry no date and come last - ties in
release order.  The first ``CHRONO_TRAIN_FRACTION`` (60%) are ``chrono-train``.
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple, Union

import ir_datasets

from pyterrier_sci import measures as _measures
from pyterrier_sci.data import DamagedDataError, DataFile, iter_csv
from ._base import FnDocs, FnQrels, FnQueries, FnScoredDocs, register

NAME = "sci/mir-multicite"
#: MultiCite intents that make a citation methodological (§4: "Uses or Extension"; the data spells it Extention)
MI_INTENTS = frozenset({"Uses", "Extention", "Extension", "Extends"})
CHRONO_TRAIN_FRACTION = 0.6

_REPO = "https://github.com/Anikethh/Methodology-Inspiration-Retrieval"
_RAW = "https://raw.githubusercontent.com/Anikethh/Methodology-Inspiration-Retrieval"
_RELEASE = "c40dca1e029150dd41b1257b8436fa7fd34332b8"    # the release with train/dev/test (CC BY 4.0 / CC BY-NC 2.0)
_SNAPSHOT = "34cf11094d7709a4d4d79af8202674bcf8157c69"   # the snapshot whose dev file is in shared/data
_SOURCE = f"the authors' release {_REPO} (data/, commit {_RELEASE[:8]}; MIR parts CC BY 4.0, MultiCite parts CC BY-NC 2.0)"

FILES = {
    "dev": DataFile("mir-multicite/mir_dev_chronological.csv", url=f"{_RAW}/{_SNAPSHOT}/data/dev_chronological.csv",
                    source=f"{_REPO} data/dev_chronological.csv (commit {_SNAPSHOT[:8]}), or the project's "
                           f"shared/data/mir-multicite",
                    sha256="90aed6fdcaa4968a6d05e652ae9772d824f1e921c1757566ff8aa82dd5cc5b75"),
    "train": DataFile("mir-multicite/train_chronological_df.csv", url=f"{_RAW}/{_RELEASE}/data/train_chronological_df.csv",
                      source=_SOURCE),
    "test": DataFile("mir-multicite/test_chronological_df.csv", url=f"{_RAW}/{_RELEASE}/data/test_chronological_df.csv",
                     source=_SOURCE),
    "train-aug": DataFile("mir-multicite/augmented_train_chronological_df.csv",
                          source=f"the MIR-MultiCite-Aug training split (Table 1, Aug-T); it is not part of the public "
                                 f"release at {_REPO} (commit {_RELEASE[:8]}): ask the authors, and save it under this name "
                                 f"with the release's columns"),
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
            f"pyterrier_sci.plugins.annotate.proposals.build_mir_data)")


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
            raise DamagedDataError(path, f"the row has no citing paper id ('actual_ids') or no cited paper id "
                                         f"('cited_paper_id')", line, remedy)
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
    :func:`pyterrier_sci.plugins.annotate.proposals.build_mir_data`."""
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
    """``(year, month)`` from a citing paper id; month 13 when only the year is known, ``(9999, 13)``
    when the id carries no date (see the module doc)."""
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


def chronological_order(split: Split) -> List[str]:
    """The proposal ids by :func:`proposal_date`, ties (and undated ids) in release order."""
    return sorted(split.proposals, key=lambda q: (proposal_date(q), split.proposals[q].position))


def chrono_parts(split: Split, fraction: float = CHRONO_TRAIN_FRACTION) -> Tuple[List[str], List[str]]:
    """``(train qids, test qids)``: the chronologically first ``fraction`` of the proposals and the rest."""
    order = chronological_order(split)
    n = int(round(len(order) * fraction))
    return order[:n], order[n:]


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

@dataclass(frozen=True)
class View:
    """A registered id: proposals of ``split`` (all, or a chronological ``part``) over a ``corpus``."""
    split: str
    part: Optional[str] = None          # None, "chrono-train" or "chrono-test"
    corpus: str = "restricted"          # "restricted" or "extended"

    def data(self) -> Split:
        return load_split(self.split)

    def qids(self) -> List[str]:
        s = self.data()
        if self.part is None:
            return list(s.proposals)
        train, test = chrono_parts(s)
        return train if self.part == "chrono-train" else test

    def training_view(self) -> "View":
        """Whose cited papers make the extended corpus."""
        return View(self.split, "chrono-train") if self.part is not None else View("train")

    def judged(self) -> Dict[str, Dict[str, int]]:
        return self.data().cited(self.qids())

    def training_docs(self) -> List[str]:
        t = self.training_view()
        return list(dict.fromkeys(d for docs in t.judged().values() for d in docs))

    def corpus_ids(self) -> List[str]:
        judged = self.judged()
        if self.corpus == "restricted":
            return list(dict.fromkeys(d for docs in judged.values() for d in docs))
        gt = [d for docs in judged.values() for d, rel in docs.items() if rel]
        return list(dict.fromkeys(self.training_docs() + gt))

    def pools(self) -> Iterator[Tuple[str, List[str]]]:
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


def _view_of(dataset: str) -> View:
    ds = dataset[5:] if dataset.startswith("irds:") else dataset
    if ds not in _VIEWS:
        raise ValueError(f"{dataset} is not a MIR-MultiCite id (known: {', '.join(sorted(_VIEWS))})")
    return _VIEWS[ds]


def proposals(dataset: str) -> Dict[str, Proposal]:
    """The proposals of a ``sci/mir-multicite`` id, by query id, with citing abstract and keywords."""
    v = _view_of(dataset)
    props = v.data().proposals
    return {q: props[q] for q in v.qids()}


def citations(dataset: str) -> List[MIRCitation]:
    """The citation contexts of a ``sci/mir-multicite`` id's proposals (every cited paper, both kinds)."""
    v = _view_of(dataset)
    keep = set(v.qids())
    return [c for c in v.data().citations if c.query_id in keep]


def citing_split(dataset: str) -> str:
    """The release split behind an id (``dev`` for ``sci/mir-multicite/dev/chrono-test``)."""
    return _view_of(dataset).split


class Citations:
    """The ir_datasets constituent that puts :meth:`citations_iter` on a MIR-MultiCite dataset."""

    def __init__(self, view: View):
        self._view = view

    def citations_iter(self) -> Iterator[MIRCitation]:
        keep = set(self._view.qids())
        return (c for c in self._view.data().citations if c.query_id in keep)

    def proposals_iter(self) -> Iterator[Proposal]:
        props = self._view.data().proposals
        return (props[q] for q in self._view.qids())


# ----------------------------------------------------------------------------------------------
# the measures of §6.2
# ----------------------------------------------------------------------------------------------

class MIRMeasure(_measures.RankingMeasure):
    """Recall@k or AP of §6.2 over the proposals that have ground truth.

    Per proposal: relevant = qrels relevance >= 1; the run's ranking is taken as given (unjudged
    documents are not relevant).  Proposals without a relevant paper are left out of the mean: in
    ``pt.Experiment`` the per-query values are weighted (n / kept, 0 for a left-out proposal) so that
    the plain mean it takes is the mean over the kept proposals; :meth:`per_query` gives unweighted
    values (NaN = left out).  A proposal of the qrels missing from the run scores 0."""
    def __init__(self, name: str, kind: str, k: Optional[int] = None):
        if kind not in ("recall", "ap"):
            raise ValueError(f"unknown MIR measure kind {kind!r}")
        super().__init__(name, f"recall at {k}: ground truth = methodologically cited papers; proposals without any left out"
                         if kind == "recall" else
                         "average precision over the ground truth (mAP of §6.2); proposals without any left out")
        self.kind = kind
        self.k = k

    def query_value(self, ranked: Sequence[str], relevant: Set[str]) -> float:
        if not relevant:
            return float("nan")
        if self.kind == "recall":
            return _measures.recall_of(ranked, relevant, int(self.k))
        return _measures.average_precision_of(ranked, relevant)

    def compute(self, relevant: Mapping[str, Set[str]], ranked: Mapping[str, Sequence[str]]) -> Dict[str, float]:
        return {q: self.query_value(ranked.get(q, []), rel) for q, rel in relevant.items()}

    def values(self, qrels, run) -> Dict[str, float]:
        relevant: Dict[str, Set[str]] = {}
        for q, d, r in zip(qrels["query_id"].astype(str), qrels["doc_id"].astype(str), qrels["relevance"]):
            s = relevant.setdefault(q, set())
            if float(r) >= 1:
                s.add(d)
        ranked = {str(q): [str(d) for d in df["doc_id"]] for q, df in run.groupby("query_id", sort=False)}
        return self.compute(relevant, ranked)


#: the measures of the paper's tables
PAPER_MEASURES = ["R@3", "R@5", "mAP"]
_DEFS = {"R@3": ("recall", 3), "R@5": ("recall", 5), "R@10": ("recall", 10), "R@20": ("recall", 20), "mAP": ("ap", None)}


def measure(name: str) -> MIRMeasure:
    short = name[len("mir."):] if name.startswith("mir.") else name
    return _measures.get("mir." + short)


def _register_measures():
    aliases = {}
    for short, (kind, k) in _DEFS.items():
        full = "mir." + short
        _measures.register(full, MIRMeasure(full, kind, k), replace=True)
        aliases[short] = full
    aliases.update({"MAP": "mir.mAP", "AP": "mir.mAP", "map": "mir.mAP"})
    _measures.register_aliases(NAME, aliases)


def evaluate(runs: Mapping[str, object], dataset: str, measures: Sequence[str] = tuple(PAPER_MEASURES),
             scale: float = 100.0):
    """The paper's table: one row per run (``{name: result frame}``), each measure's mean x``scale``
    over the proposals of ``dataset`` that have ground truth, and ``n`` (how many)."""
    import numpy as np
    import pandas as pd
    v = _view_of(dataset)
    relevant = {q: {d for d, r in docs.items() if r} for q, docs in v.judged().items()}
    for q in v.qids():
        relevant.setdefault(q, set())
    rows = []
    for name, res in runs.items():
        if "rank" in res.columns:
            res = res.sort_values(["qid", "rank"], kind="stable")
        else:
            res = res.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        ranked = {str(q): [str(d) for d in df["docno"]] for q, df in res.groupby("qid", sort=False)}
        row = {"name": name}
        for m in measures:
            vals = np.array(list(measure(m).compute(relevant, ranked).values()), dtype=float)
            row[m] = float(np.nanmean(vals)) * scale if np.any(~np.isnan(vals)) else float("nan")
        row["n"] = int(sum(1 for r in relevant.values() if r))
        rows.append(row)
    return pd.DataFrame(rows)


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
    for part in ("chrono-train", "chrono-test"):
        base = f"{NAME}/dev/{part}"
        v = View("dev", part)
        entries.append((base, v, FnDocs(base, v.docs, MIRDoc), f"MIR-MultiCite dev, {part} (offline protocol)"))
    v = View("dev", "chrono-test", "extended")
    base = f"{NAME}/dev/chrono-test/extended"
    entries.append((base, v, FnDocs(base, v.docs, MIRDoc), "MIR-MultiCite dev, chrono-test, extended corpus"))
    for name, view, docs, title in entries:
        _register(name, view, docs, title)
    for name, view, _, _ in sorted(entries, key=lambda e: -len(e[0])):
        STATUS[name] = _Part(view.files())


_register_all()
_register_measures()
