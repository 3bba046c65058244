"""The MCP server of ``pyterrier-sci serve`` on the official ``mcp`` SDK (``MCPServer``, mcp 2.x): tools for
research agents - ``search``, ``get_paper``, ``similar_papers`` (paper-to-paper, as PRISM's A2A),
``suggest_citations`` (papers to cite for a passage) and ``list_pipelines`` - over stdio
(``pyterrier-sci serve CONFIG --mcp-stdio``) or streamable HTTP (mounted at ``/mcp`` of the HTTP server).
The tools call the same :class:`~.api.SearchAPI` as the HTTP routes; a bad request is a tool error whose
text names the cause."""
from typing import Any, Dict, List, Optional

from pyterrier_sci.errors import LLMBudgetExceeded, one_line

from .api import SearchAPI
from .batching import DeadlineExceededError, OverloadedError, ShuttingDownError
from .service import ServeError

__all__ = ["create_mcp", "INSTRUCTIONS"]

INSTRUCTIONS = ("Search a collection of scientific papers with the retrieval pipelines this server loaded. "
                "search: papers for a query; get_paper: a paper's record by docno; similar_papers: papers like a "
                "given paper; suggest_citations: papers to cite for a passage; list_pipelines: the pipelines.")


def result_models():
    """The tools' result types (pydantic, imported here: the CLI starts without it)."""
    from pydantic import BaseModel, ConfigDict

    class Hit(BaseModel):
        docno: str
        score: float
        rank: int
        title: str
        snippet: str

    class SearchResult(BaseModel):
        """The top ``k`` papers of a pipeline; ``query``, ``paper`` or ``passage`` says what was asked."""
        pipeline: str
        k: int
        results: List[Hit]
        took_ms: float
        query: Optional[str] = None
        paper: Optional[str] = None
        passage: Optional[str] = None

    class Paper(BaseModel):
        """A paper's record: its docno, title, abstract and the collection's other fields."""
        model_config = ConfigDict(extra="allow")
        docno: str
        title: Optional[str] = None
        abstract: Optional[str] = None

    class Pipelines(BaseModel):
        pipelines: List[Dict[str, Any]]
        dataset: Optional[str] = None
        expressions_allowed: bool
        limits: Dict[str, int]

    return Hit, SearchResult, Paper, Pipelines


def create_mcp(api: SearchAPI, name: str = "pyterrier-sci"):
    """An ``mcp.server.mcpserver.MCPServer`` whose tools search through ``api``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    _, SearchResult, Paper, Pipelines = result_models()  # noqa: N806 (classes)
    server = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    async def call(coro):
        try:
            return await coro
        except ServeError as e:
            raise ToolError(f"{e.code}: {e.message}") from None
        except OverloadedError as e:
            raise ToolError(f"busy: {e}") from None
        except (DeadlineExceededError, ShuttingDownError) as e:
            raise ToolError(str(e)) from None
        except LLMBudgetExceeded as e:
            raise ToolError(f"llm_budget_spent: {one_line(str(e), 400)}") from None

    async def immediate(value):
        return value

    @server.tool(description="Search the papers: the top k papers (docno, score, rank, title, snippet) for a query.")
    async def search(query: str, k: int = 10, pipeline: Optional[str] = None) -> SearchResult:
        return SearchResult(**await call(api.search(query=query, k=k, pipeline=pipeline)))

    @server.tool(description="A paper's record (title, abstract and the collection's other fields) by its docno.")
    async def get_paper(docno: str) -> Paper:
        try:
            return Paper(**api.paper(docno))
        except ServeError as e:
            raise ToolError(f"{e.code}: {e.message}") from None

    @server.tool(description="Papers similar to a paper (paper-to-paper): its title and abstract are the query; "
                             "the paper itself is left out.")
    async def similar_papers(docno: str, k: int = 10, pipeline: Optional[str] = None) -> SearchResult:
        return SearchResult(**await call(api.similar(docno, k=k, pipeline=pipeline)))

    @server.tool(description="Papers to cite for a passage of a draft (the passage is the query).")
    async def suggest_citations(passage: str, k: int = 10, pipeline: Optional[str] = None) -> SearchResult:
        return SearchResult(**await call(api.suggest_citations(passage, k=k, pipeline=pipeline)))

    @server.tool(description="The retrieval pipelines this server serves, with their descriptions and limits.")
    async def list_pipelines() -> Pipelines:
        return Pipelines(**await call(immediate(api.pipelines())))

    return server
