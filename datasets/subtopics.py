"""Subtopic qrels of the benchmarks judged per aspect or facet, for the diversity measures (alpha-nDCG, ERR-IA,
subtopic recall: ``docs/evaluation.md``).  A qrel's ``iteration`` is the subtopic, as in the qrels of TREC's
diversity tasks that ir_measures' ``pyndeval`` provider reads:

* ``sci/doris-mae/aspects[/train,/test]``: DORIS-MAE's queries; a subtopic is one of the query's aspects or
  sub-aspects (the set Q of Eq. 1, ``iteration`` = its aspect id), the relevance Anno-GPT's 0-2 score of the
  (aspect, abstract) pair (0 when the release has none, as Eq. 1 counts it).  The five abstracts the paper's
  evaluation never counts as relevant (``REMOVED_ABSTRACTS``) are left out.  From the full release (Zenodo): the
  offline part keeps only the sums of the scores.
* ``sci/csfcube/facets``: the 16 CSFCube query papers judged for two facets; a query is the paper (its id, its
  title and abstract as the text), a subtopic a facet it was judged for (``background``, ``method``,
  ``result``), the relevance the facet's adjudicated 0-3 grade.  Both facets of a paper were judged on one pool.

Documents and candidate pools (``scoreddocs``) are the benchmarks' own.
"""

import functools
from typing import Dict, Iterator, List

import ir_datasets
from ir_datasets.formats import GenericScoredDoc, TrecQrel

from pyterrier_sci.datasets import csfcube, doris_mae
from pyterrier_sci.irds import FnQrels, FnQueries, FnScoredDocs, register

DORIS_ASPECTS = doris_mae.NAME + "/aspects"
CSFCUBE_FACETS = csfcube.NAME + "/facets"
#: the DORIS-MAE query sets with aspect qrels: suffix of ``sci/doris-mae/aspects`` -> the id its queries are from
DORIS_VARIANTS = {"": doris_mae.NAME, "train": doris_mae.NAME + "/train", "test": doris_mae.NAME + "/test"}


# ----------------------------------------------------------------------------------------------
# DORIS-MAE: aspects
# ----------------------------------------------------------------------------------------------

def _doris_queries(source: str) -> List[doris_mae.AspectQuery]:
    return list(doris_mae.aspect_queries(source).values())


def doris_aspect_judgements(source: str = doris_mae.NAME) -> Iterator[TrecQrel]:
    """``TrecQrel(query id, docno, score, iteration=aspect id)`` for every aspect and sub-aspect of every query of
    ``source`` (a full-release DORIS-MAE id) and every abstract of its pool, in pool order."""
    rel = doris_mae.release()
    for q in _doris_queries(source):
        for docno in rel.pool(q.parent_id):
            if docno in doris_mae.REMOVED_ABSTRACTS:
                continue
            for aspect in q.aspect_ids():
                yield TrecQrel(q.query_id, docno, int(rel.scores.get((aspect, docno), 0)), aspect)


def _doris_query_iter(source: str):
    for q in _doris_queries(source):
        yield doris_mae.DorisQuery(q.query_id, q.text)


def _doris_pool(source: str):
    rel = doris_mae.release()
    for q in _doris_queries(source):
        for docno in rel.pool(q.parent_id):
            yield GenericScoredDoc(q.query_id, docno, 0.0)


# ----------------------------------------------------------------------------------------------
# CSFCube: facets
# ----------------------------------------------------------------------------------------------

def csfcube_facets_of() -> Dict[str, Dict[str, dict]]:
    """``{paper id: {facet: its annotation}}`` of the query papers judged for two or more facets."""
    papers: Dict[str, Dict[str, dict]] = {}
    for facet in csfcube.FACETS:
        for pid, ann in csfcube.annotations(facet).items():
            papers.setdefault(str(pid), {})[facet] = ann
    return {pid: facets for pid, facets in papers.items() if len(facets) >= 2}


def csfcube_facet_judgements() -> Iterator[TrecQrel]:
    """``TrecQrel(paper id, candidate, adjudicated grade, iteration=facet)`` of the papers of ``sci/csfcube/facets``,
    in the release's order (paper, facet, candidate)."""
    for pid, facets in csfcube_facets_of().items():
        for facet, ann in facets.items():
            for cand, grade in zip(ann["cands"], ann["relevance_adju"]):
                yield TrecQrel(pid, str(cand), int(grade), facet)


def _csfcube_query_iter():
    docs = csfcube.docs()
    for pid in csfcube_facets_of():
        d = docs.get(pid)
        yield csfcube.CSFCubeQuery(pid, d.default_text() if d is not None else pid)


def _csfcube_pool():
    for pid, facets in csfcube_facets_of().items():
        seen = set()
        for ann in facets.values():
            for cand in ann["cands"]:
                if str(cand) not in seen:
                    seen.add(str(cand))
                    yield GenericScoredDoc(pid, str(cand), 0.0)


# ----------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------

_DORIS_DEFS = {0: "the aspect (iteration) is not met", 1: "the aspect is partly met", 2: "the aspect is met "
               "(Anno-GPT's 0-2 score of the aspect or sub-aspect and the abstract)"}
_CSFCUBE_DEFS = {0: "Dissimilar in the facet (iteration)", 1: "Somewhat similar", 2: "Near-identical",
                 3: "Identical"}


def _register_all() -> None:
    doris_docs = ir_datasets.registry[doris_mae.NAME].docs_handler()
    for suffix, source in DORIS_VARIANTS.items():
        name = DORIS_ASPECTS + ("/" + suffix if suffix else "")
        register(name, doris_docs,
                 FnQueries(source, functools.partial(_doris_query_iter, source), doris_mae.DorisQuery),
                 FnQrels(functools.partial(doris_aspect_judgements, source), _DORIS_DEFS, TrecQrel),
                 FnScoredDocs(functools.partial(_doris_pool, source)),
                 doris_mae.AspectQueries(source[len(doris_mae.NAME) + 1:]),
                 documentation={"pretty_name": f"DORIS-MAE aspect qrels{' (' + suffix + ')' if suffix else ''}",
                                "desc": "subtopic qrels: iteration = the aspect or sub-aspect, relevance = Anno-GPT's "
                                        "0-2 score (full release)"})
    register(CSFCUBE_FACETS, ir_datasets.registry[csfcube.NAME].docs_handler(),
             FnQueries(CSFCUBE_FACETS, _csfcube_query_iter, csfcube.CSFCubeQuery),
             FnQrels(csfcube_facet_judgements, _CSFCUBE_DEFS, TrecQrel),
             FnScoredDocs(_csfcube_pool),
             documentation={"pretty_name": "CSFCube facet qrels",
                            "desc": "subtopic qrels: the 16 query papers judged for two facets; iteration = the "
                                    "facet, relevance = its adjudicated 0-3 grade"})


_register_all()
