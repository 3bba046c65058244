"""The Methodology Adjacency Graph (MAG) of MIR (§4.1, §5.1): proposals -> cited papers, each edge
carrying its citation contexts and intents; methodological when one intent is (``MI_INTENTS``).  It
answers what MAG-guided sampling (Eqs. 2-4) and the few-shot exemplar selection (§5.2.2) need.
Built from a ``sci/mir-multicite`` id, a release-style CSV or frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import pandas as pd

from pyterrier_sci.datasets import mir_multicite as mir_data
from pyterrier_sci.datasets.mir_multicite import MI_INTENTS  # noqa: F401 (re-exported)

__all__ = ["Edge", "Sample", "MethodologyAdjacencyGraph"]


@dataclass(frozen=True)
class Edge:
    """P -> l with its contexts and intents (parallel tuples)."""
    proposal: str
    paper: str
    contexts: Tuple[str, ...]
    intents: Tuple[str, ...]

    @property
    def methodological(self) -> bool:
        return any(i in MI_INTENTS for i in self.intents)

    def methodological_contexts(self) -> List[str]:
        return [c for c, i in zip(self.contexts, self.intents) if i in MI_INTENTS]


@dataclass(frozen=True)
class Sample:
    """One (P, l+, c+) of Algorithm 1: a proposal, a paper it cites methodologically, and one
    methodological context of that citation."""
    proposal: str
    paper: str
    context: str


@dataclass
class MethodologyAdjacencyGraph:
    """Proposals, cited papers and the intent-annotated edges between them.

    Attributes:
        proposals: proposal id -> proposal text (problem + motivation).
        papers: paper id -> text (title and abstract).
        edges: (proposal id, paper id) -> :class:`Edge`, in insertion order.
        abstracts: proposal id -> the citing paper's abstract (when known).
        keywords: proposal id -> released keywords (when known).
    """
    proposals: Dict[str, str]
    papers: Dict[str, str]
    edges: Dict[Tuple[str, str], Edge]
    abstracts: Dict[str, str] = field(default_factory=dict)
    keywords: Dict[str, Tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self):
        self._out: Dict[str, List[str]] = {}
        self._in: Dict[str, List[str]] = {}
        for (p, cited) in self.edges:
            self._out.setdefault(p, []).append(cited)
            self._in.setdefault(cited, []).append(p)
        unknown = [cited for cited in self._in if cited not in self.papers]
        if unknown:
            raise ValueError(f"{len(unknown)} cited paper(s) without text, e.g. {unknown[0]!r}")
        unknown = [p for p in self._out if p not in self.proposals]
        if unknown:
            raise ValueError(f"{len(unknown)} citing proposal(s) without text, e.g. {unknown[0]!r}")

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_citations(cls, proposals: Mapping[str, str], papers: Mapping[str, str],
                       citations: Iterable[Tuple[str, str, str, str]], abstracts: Optional[Mapping[str, str]] = None,
                       keywords: Optional[Mapping[str, Sequence[str]]] = None) -> "MethodologyAdjacencyGraph":
        """From ``(proposal id, paper id, context, intent)`` tuples; contexts of the same pair are merged
        into one edge (a repeated (context, intent) is kept once)."""
        grouped: Dict[Tuple[str, str], List[Tuple[str, str]]] = {}
        for p, cited, c, i in citations:
            pair = grouped.setdefault((str(p), str(cited)), [])
            ci = (str(c or ""), str(i or "").strip())
            if ci not in pair:
                pair.append(ci)
        edges = {k: Edge(k[0], k[1], tuple(c for c, _ in v), tuple(i for _, i in v)) for k, v in grouped.items()}
        return cls(dict(proposals), dict(papers), edges, dict(abstracts or {}),
                   {k: tuple(v) for k, v in (keywords or {}).items()})

    @classmethod
    def from_dataset(cls, dataset: str) -> "MethodologyAdjacencyGraph":
        """The graph of a ``sci/mir-multicite`` id's proposals (its citation contexts and cited papers).
        For a training graph use a training id (``sci/mir-multicite/train``, ``.../dev/chrono-train``)."""
        v = mir_data.view_of(dataset)
        data = v.data()
        props = mir_data.proposals(dataset)
        cites = mir_data.citations(dataset)
        docs = dict.fromkeys(c.doc_id for c in cites)   # citation order (a set's order changes with PYTHONHASHSEED)
        papers = {d: f"{data.titles.get(d, '')} {data.papers[d]}".strip() for d in docs}
        return cls.from_citations({q: p.text for q, p in props.items()}, papers,
                                  ((c.query_id, c.doc_id, c.context, c.intent) for c in cites),
                                  {q: p.citing_abstract for q, p in props.items()},
                                  {q: p.keywords for q, p in props.items()})

    @classmethod
    def from_csv(cls, path, proposals: Optional[Iterable[str]] = None) -> "MethodologyAdjacencyGraph":
        """The graph of a file with the release's columns (optionally only some proposals)."""
        data = mir_data.read_csv(path)
        keep = set(data.proposals) if proposals is None else {str(p) for p in proposals}
        cites = [c for c in data.citations if c.query_id in keep]
        docs = dict.fromkeys(c.doc_id for c in cites)
        props = {q: p for q, p in data.proposals.items() if q in keep}
        return cls.from_citations({q: p.text for q, p in props.items()},
                                  {d: f"{data.titles.get(d, '')} {data.papers[d]}".strip() for d in docs},
                                  ((c.query_id, c.doc_id, c.context, c.intent) for c in cites),
                                  {q: p.citing_abstract for q, p in props.items()},
                                  {q: p.keywords for q, p in props.items()})

    @classmethod
    def from_frames(cls, proposals: pd.DataFrame, papers: pd.DataFrame,
                    citations: pd.DataFrame) -> "MethodologyAdjacencyGraph":
        """``proposals``: ``qid``, ``proposal``; ``papers``: ``docno``, ``text`` (or ``title``/``abstract``);
        ``citations``: ``qid``, ``docno``, ``context``, ``intent``."""
        for frame, cols, what in ((proposals, ("qid", "proposal"), "proposals"),
                                  (citations, ("qid", "docno", "context", "intent"), "citations")):
            missing = [c for c in cols if c not in frame.columns]
            if missing:
                raise ValueError(f"{what} frame lacks columns {missing}")
        if "text" in papers.columns:
            texts = papers["text"].fillna("").astype(str)
        elif "abstract" in papers.columns:
            texts = (papers.get("title", pd.Series("", index=papers.index)).fillna("").astype(str) + " "
                     + papers["abstract"].fillna("").astype(str)).str.strip()
        else:
            raise ValueError("papers frame needs a 'text' or an 'abstract' column")
        return cls.from_citations(dict(zip(proposals["qid"].astype(str), proposals["proposal"].astype(str))),
                                  dict(zip(papers["docno"].astype(str), texts)),
                                  citations[["qid", "docno", "context", "intent"]].itertuples(index=False, name=None))

    # -- queries -------------------------------------------------------------------------------
    def cited(self, proposal: str) -> List[str]:
        """L_P: the papers ``proposal`` cites (insertion order)."""
        return list(self._out.get(proposal, []))

    def citing(self, paper: str) -> List[str]:
        """The proposals citing ``paper``."""
        return list(self._in.get(paper, []))

    def edge(self, proposal: str, paper: str) -> Optional[Edge]:
        return self.edges.get((proposal, paper))

    def methodological(self, proposal: str) -> List[str]:
        """The papers ``proposal`` cites with a methodological intent (its ground truth)."""
        return [cited for cited in self._out.get(proposal, []) if self.edges[(proposal, cited)].methodological]

    def non_methodological(self, proposal: str) -> List[str]:
        """Cited papers all of whose contexts are non-methodological (Eq. 4's p--)."""
        return [cited for cited in self._out.get(proposal, []) if not self.edges[(proposal, cited)].methodological]

    def overlapping_proposals(self, proposal: str) -> List[str]:
        """P' != P citing at least one paper P cites (Eq. 3's p--), in graph order."""
        seen: Dict[str, None] = {}
        for cited in self._out.get(proposal, []):
            for p in self._in.get(cited, []):
                if p != proposal:
                    seen.setdefault(p, None)
        return list(seen)

    def uncited(self, proposal: str) -> List[str]:
        """D - L_P: corpus papers ``proposal`` does not cite (the soft negatives of Eqs. 2 and 4)."""
        cited = set(self._out.get(proposal, []))
        return [p for p in self.papers if p not in cited]

    def other_proposals(self, proposal: str) -> List[str]:
        """Q - P (Eq. 3's soft negatives)."""
        return [p for p in self.proposals if p != proposal]

    def samples(self) -> List[Sample]:
        """Every (P, l+, c+) with a methodological context c+ (Algorithm 1's positives)."""
        return [Sample(e.proposal, e.paper, c) for e in self.edges.values() for c in e.methodological_contexts()]

    def subgraph(self, proposals: Iterable[str]) -> "MethodologyAdjacencyGraph":
        """The graph of some proposals (their edges and cited papers)."""
        keep = {str(p) for p in proposals}
        edges = {k: e for k, e in self.edges.items() if k[0] in keep}
        docs = {k[1] for k in edges}
        return MethodologyAdjacencyGraph({p: t for p, t in self.proposals.items() if p in keep},
                                         {d: t for d, t in self.papers.items() if d in docs}, edges,
                                         {p: a for p, a in self.abstracts.items() if p in keep},
                                         {p: k for p, k in self.keywords.items() if p in keep})

    def qrels(self) -> pd.DataFrame:
        """``qid``, ``docno``, ``label`` (1 methodological, 0 other) for every edge."""
        rows = [(p, cited, int(e.methodological)) for (p, cited), e in self.edges.items()]
        return pd.DataFrame(rows, columns=["qid", "docno", "label"])

    def exemplar_frame(self) -> pd.DataFrame:
        """The few-shot training set of §5.2.2: ``qid``, ``query`` (proposal), ``docno``, ``title``,
        ``text`` (paper), ``label`` for every edge - for ``MIRPointwise(exemplars=...)``, whose
        selector retrieves the most similar training proposals and shows their relevant and
        non-relevant cited papers."""
        q = self.qrels()
        return q.assign(query=q["qid"].map(self.proposals), title="", text=q["docno"].map(self.papers))[
            ["qid", "query", "docno", "title", "text", "label"]]

    def stats(self) -> Dict[str, int]:
        """Counts in the form of the paper's Table 1."""
        mi_papers = {cited for (p, cited), e in self.edges.items() if e.methodological}
        other_papers = {cited for (p, cited), e in self.edges.items() if not e.methodological}
        n_ctx = sum(len(e.contexts) for e in self.edges.values())
        n_mi = sum(len(e.methodological_contexts()) for e in self.edges.values())
        return {"proposals": len(self.proposals), "citations_mi": n_mi, "citations_other": n_ctx - n_mi,
                "citations": n_ctx, "papers_mi": len(mi_papers), "papers_other": len(other_papers),
                "papers": len(self._in), "edges_mi": sum(e.methodological for e in self.edges.values()),
                "edges": len(self.edges)}

    def to_networkx(self):
        """A ``networkx.DiGraph``: nodes ``("P", id)`` / ``("L", id)``, edges with ``contexts``,
        ``intents`` and ``methodological``."""
        import networkx as nx
        g = nx.DiGraph()
        for p, t in self.proposals.items():
            g.add_node(("P", p), kind="proposal", text=t)
        for cited, t in self.papers.items():
            g.add_node(("L", cited), kind="paper", text=t)
        for (p, cited), e in self.edges.items():
            g.add_edge(("P", p), ("L", cited), contexts=e.contexts, intents=e.intents, methodological=e.methodological)
        return g

    def __repr__(self) -> str:
        s = self.stats()
        return (f"MethodologyAdjacencyGraph({s['proposals']} proposals, {s['papers']} cited papers, "
                f"{s['edges']} edges ({s['edges_mi']} methodological), {s['citations']} contexts)")
