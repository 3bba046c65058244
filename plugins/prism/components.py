"""PRISM's pipeline components (``prism_paper_fields``, ``prism_query_field``, ``prism_sections``,
``prism_agents``, ``prism_single_agent``, ``prism_chunks_to_papers``, ``prism_aspect_fusion``,
``prism_exclude_query_paper``) and ``prism``, which assembles the whole method: aspect queries of the query
paper retrieved from chunk corpora, mapped back to papers and fused with RRF.  See ``docs/prism.md``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import pyterrier as pt

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.llm import pipeline_settings
from pyterrier_sci.plugins.fusion import RRFusion
from pyterrier_sci.registry import DATASET, MAX_RESULTS, Param, params

from .aggregate import AGGREGATIONS, FUSIONS, AspectScoreFusion, ChunkToPaper, ExcludeQueryPaper  # noqa: F401
from .optimisers import (  # noqa: F401
    ASPECT_COLUMNS,
    ASPECTS,
    FALLBACK_COLUMN,
    AspectAgents,
    PaperFields,
    QueryField,
    SectionAspectQueries,
    SingleAgent,
    classify_sections,
    normalise_sections,
    parse_single_agent,
)

__all__ = ["ASPECTS", "ASPECT_COLUMNS", "AspectAgents", "SingleAgent", "SectionAspectQueries", "PaperFields",
           "QueryField", "ChunkToPaper", "ExcludeQueryPaper", "AspectScoreFusion", "prism_pipeline",
           "classify_sections", "parse_single_agent"]


def prism_pipeline(optimiser: pt.Transformer, abstract_retriever: Optional[pt.Transformer],
                   chunk_retriever: pt.Transformer, *, aspects: Sequence[str] = ASPECTS, agg: str = "max",
                   k: float = 60, num_results: Optional[int] = 1000, abstract_field: str = "text",
                   paper_fields: Optional[pt.Transformer] = None,
                   exclude_column: Optional[str] = None) -> pt.Transformer:
    """PRISM (§3): ``[paper_fields >>] optimiser >> rrf(abstract branch, one branch per aspect, k=k)``.

    The abstract branch makes ``abstract_field`` the query and retrieves with
    ``abstract_retriever`` (``None`` leaves it out: "PRISM w/o A2A", Table 7); each aspect branch
    makes the aspect's column the query, retrieves chunks with ``chunk_retriever`` and maps them to
    papers (``agg``); every branch drops the query paper before fusion (``exclude_column``: see
    :class:`ExcludeQueryPaper`).  Reciprocal rank fusion with 1-based ranks, ``k`` = 60 (PRISM B.3).
    """
    unknown = [a for a in aspects if a not in ASPECT_COLUMNS]
    if unknown:
        raise ValueError(f"unknown aspects {unknown}: use some of {', '.join(ASPECTS)}")
    exclude = ExcludeQueryPaper(exclude_column)
    branches = []
    if abstract_retriever is not None:
        branches.append(QueryField(abstract_field, fallback=("abstract", "title")) >> abstract_retriever >> exclude)
    for a in aspects:
        branches.append(QueryField(ASPECT_COLUMNS[a]) >> chunk_retriever >> ChunkToPaper(agg) >> exclude)
    if not branches:
        raise ValueError("PRISM needs at least one branch (an abstract retriever or one aspect)")
    fused = RRFusion(*branches, k=k, num_results=num_results)
    front = optimiser if paper_fields is None else paper_fields >> optimiser
    return front >> fused


# ----------------------------------------------------------------------------------------------
# components (entry points in setup.cfg)
# ----------------------------------------------------------------------------------------------

def _llm(context, params: Dict[str, Any]):
    """The agents' LLM settings: the config's ``llm:`` section updated by ``llm={...}``, confined as
    every pipeline-built LLM component is (docs/llm.md, "Trust")."""
    return pipeline_settings(context, {"llm": params.pop("llm", None)})


_ASPECTS = Param(list, item=Param(str, choices=ASPECTS), min_len=1)
_AGENT = {"llm": Param(dict, optional=True), "aspects": _ASPECTS, "on_error": Param(str, choices=("raise", "flag")),
          "max_paper_tokens": Param(int, min=1, max=1_000_000, optional=True),
          "max_tokens": Param(int, min=1, max=1_000_000),
          "fallback_words": Param(int, min=1, max=1_000_000)}


def _chain(inputs, t: pt.Transformer, name: str) -> pt.Transformer:
    if len(inputs) > 1:
        raise ValueError(f"{name} takes at most one input pipeline")
    return inputs[0] >> t if inputs else t


@params(dataset=Param(DATASET, optional=True), fields=Param(list, item=str, min_len=1))
def paper_fields_component(*inputs, context=None, dataset: Optional[str] = None,
                           fields: Sequence[str] = ("text", "title", "abstract", "full_text", "sections")):
    """``prism_paper_fields``: adds the query paper's title, abstract, full text and sections (by qid)."""
    return _chain(inputs, PaperFields(dataset_of(dataset, context, "prism_paper_fields"), fields), "prism_paper_fields")


@params(field=Param(str, min_len=1), fallback=Param(str, list, item=str),
        drop=Param(str, list, item=str, optional=True))
def query_field_component(*inputs, field: str = "text", fallback: Sequence[str] = (),
                          drop: Optional[Sequence[str]] = None):
    """``prism_query_field(field=...)``: makes a column (``text``, ``full_text``, ``method_query``, ...) the query."""
    t = QueryField(field, fallback) if drop is None else QueryField(field, fallback, drop)
    return _chain(inputs, t, "prism_query_field")


@params(SectionAspectQueries, aspects=_ASPECTS, max_words=Param(int, min=1, max=1_000_000, optional=True))
def prism_sections_component(*inputs, context=None, **params):
    """``prism_sections``: LLM-free aspect queries (research question, method, experiment) from the paper's sections."""
    return _chain(inputs, SectionAspectQueries(**params), "prism_sections")


@params(AspectAgents, **_AGENT)
def prism_agents_component(*inputs, context=None, **params):
    """``prism_agents``: PRISM's aspect query optimisers f_R, f_M, f_E, one LLM agent each."""
    llm = _llm(context, params)
    return _chain(inputs, AspectAgents(llm, **params), "prism_agents")


@params(SingleAgent, **_AGENT)
def prism_single_agent_component(*inputs, context=None, **params):
    """``prism_single_agent``: one LLM agent writes the three aspect queries as JSON (PRISM Table 2)."""
    llm = _llm(context, params)
    return _chain(inputs, SingleAgent(llm, **params), "prism_single_agent")


@params(agg=Param(str, choices=AGGREGATIONS), k=Param(int, min=1, max=10_000),
        num_results=Param(int, min=1, max=MAX_RESULTS, optional=True))
def chunks_to_papers_component(*inputs, agg: str = "max", k: int = 2, num_results: Optional[int] = None):
    """``prism_chunks_to_papers(agg=max)``: a chunk ranking (docnos <paper>%p<i>) as a paper ranking."""
    return _chain(inputs, ChunkToPaper(agg, k, num_results), "prism_chunks_to_papers")


@params(column=Param(str, min_len=1, optional=True))
def exclude_query_paper_component(*inputs, column: Optional[str] = None):
    """``prism_exclude_query_paper``: drops the query paper (and its chunks) from its own ranking."""
    return _chain(inputs, ExcludeQueryPaper(column), "prism_exclude_query_paper")


@params(method=Param(str, choices=FUSIONS), num_results=Param(int, min=1, max=MAX_RESULTS, optional=True))
def aspect_fusion_component(*inputs, method: str = "maxsim", num_results: Optional[int] = 1000):
    """``prism_aspect_fusion(a, b, ..., method=maxsim|sum)``: PRISM Table 6's score-level merging of aspect
    chunk rankings."""
    return AspectScoreFusion(*inputs, method=method, num_results=num_results)


@params(aspects=_ASPECTS, agg=Param(str, choices=AGGREGATIONS), k=Param(float, min=0, max=1e6),
        num_results=Param(int, min=1, max=MAX_RESULTS, optional=True), abstract_field=Param(str, min_len=1),
        exclude_column=Param(str, min_len=1, optional=True))
def prism_component(*inputs, context=None, aspects: Sequence[str] = ASPECTS, agg: str = "max", k: float = 60,
                    num_results: Optional[int] = 1000, abstract_field: str = "text",
                    exclude_column: Optional[str] = None):
    """``prism(optimiser, abstract_retriever, chunk_retriever)``: PRISM - aspect queries, chunk
    retrieval, RRF (k=60)."""
    if len(inputs) != 3:
        raise ValueError("prism takes three input pipelines: prism(optimiser, abstract_retriever, chunk_retriever)")
    return prism_pipeline(*inputs, aspects=aspects, agg=agg, k=k, num_results=num_results,
                          abstract_field=abstract_field, exclude_column=exclude_column)
