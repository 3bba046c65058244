"""The MCP server of ``pyterrier-sci serve`` on the official ``mcp`` SDK (``MCPServer``, mcp 2.x): tools for
research agents - ``search``, ``get_paper``, ``similar_papers`` (paper-to-paper, as PRISM's A2A),
``suggest_citations`` (papers to cite for a passage) and ``list_pipelines`` - over stdio
(``pyterrier-sci serve CONFIG --mcp-stdio``) or streamable HTTP (mounted at ``/mcp`` of the HTTP server).
The tools call the same :class:`~.api.SearchAPI` as the HTTP routes; a bad request is a tool error whose
text starts with the cause's code, as the HTTP API's ``error.code`` (``unknown_pipeline: ...``,
``k_out_of_range: ...``; an argument the tool does not take: ``unknown_argument: ...``; one of a wrong type:
``invalid_argument: ...``; an unexpected failure: ``internal_error: ...``, its details in the server's log)."""
import inspect
import logging
import re
from typing import Any, Dict, List, Mapping, Optional

from pyterrier_sci.errors import BuildRefused, LLMBudgetExceeded, TrainingDeferred, one_line
from pyterrier_sci.llm.trust import redact

from .api import SearchAPI
from .batching import DeadlineExceededError, OverloadedError, ShuttingDownError
from .service import ServeError, refused_message

__all__ = ["create_mcp", "INSTRUCTIONS", "tool_error_text"]

LOGGER = logging.getLogger("pyterrier_sci.serve")
#: the SDK's prefix of a tool error's text (``Error executing tool NAME: ...``)
_SDK_PREFIX = re.compile(r"^Error executing tool [^:\s]+(?::\s*(?P<rest>.*))?$", re.S)
_CODE = re.compile(r"^[a-z][a-z0-9_]*: ")

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


def tool_error_text(text: str) -> str:
    """A tool error's text starting with its code: the SDK's ``Error executing tool NAME: `` prefix dropped
    from an error of ours (which starts with its code), an argument the SDK's validation refused made
    ``invalid_argument: ...``, anything else ``internal_error: ...``."""
    if _CODE.match(text):
        return text
    m = _SDK_PREFIX.match(text)
    rest = (m.group("rest") or "") if m else text
    if _CODE.match(rest):
        return rest
    if "validation error" in rest:
        fields = re.findall(r"^(\w[\w.]*)\n\s+(.+?)(?: \[type=|$)", rest, re.M)
        detail = "; ".join(f"{f}: {why}" for f, why in fields[:5]) or one_line(rest, 300)
        return f"invalid_argument: {detail}"
    return "internal_error: the tool failed; the server's log names the cause"


def create_mcp(api: SearchAPI, name: str = "pyterrier-sci"):
    """An ``mcp.server.mcpserver.MCPServer`` whose tools search through ``api``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent

    _, SearchResult, Paper, Pipelines = result_models()  # noqa: N806 (classes)
    server = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    def failed(code: str, message: str):
        return ToolError(f"{code}: {one_line(redact(message), 600)}")

    async def call(coro):
        try:
            return await coro
        except ServeError as e:
            raise failed(e.code, e.message) from None
        except OverloadedError as e:
            raise failed("overloaded", f"{e}; retry after {e.retry_after} s") from None
        except DeadlineExceededError as e:
            raise failed("deadline_exceeded", str(e)) from None
        except ShuttingDownError as e:
            raise failed("shutting_down", str(e)) from None
        except LLMBudgetExceeded as e:
            raise failed("llm_budget_spent", str(e)) from None
        except (BuildRefused, TrainingDeferred) as e:
            raise failed("build_refused", refused_message(e)) from None

    async def immediate(value):
        return value

    async def immediate_call(fn, *args):
        return fn(*args)

    @server.tool(description="Search the papers: the top k papers (docno, score, rank, title, snippet) for a query.")
    async def search(query: str, k: int = 10, pipeline: Optional[str] = None) -> SearchResult:
        return SearchResult(**await call(api.search(query=query, k=k, pipeline=pipeline)))

    @server.tool(description="A paper's record (title, abstract and the collection's other fields) by its docno.")
    async def get_paper(docno: str) -> Paper:
        return Paper(**await call(immediate_call(api.paper, docno)))

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

    takes = {fn.__name__: set(inspect.signature(fn).parameters)
             for fn in (search, get_paper, similar_papers, suggest_citations, list_pipelines)}

    def error_result(text: str):
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    async def strict_tools(ctx, call_next):
        """``tools/call``: an argument the tool does not take is an error (the SDK would drop it), and every
        tool error's text starts with its code."""
        if ctx.method != "tools/call" or not isinstance(ctx.params, Mapping):
            return await call_next(ctx)
        tool, args = ctx.params.get("name"), ctx.params.get("arguments") or {}
        if tool in takes and isinstance(args, Mapping):
            unknown = sorted(str(a) for a in set(args) - takes[tool])
            if unknown:
                return error_result(f"unknown_argument: {tool} takes no argument "
                                    f"{', '.join(repr(a[:60]) for a in unknown[:5])} (it takes: "
                                    f"{', '.join(sorted(takes[tool])) or 'none'})")
        result = await call_next(ctx)   # the wire form: a mapping (isError, content: [{type, text}, ...])
        if isinstance(result, CallToolResult):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        content = result.get("content") if isinstance(result, Mapping) and result.get("isError") else None
        if content and isinstance(content[0], Mapping) and content[0].get("type") == "text":
            given = str(content[0].get("text", ""))
            text = tool_error_text(given)
            if text.startswith("internal_error:"):
                LOGGER.error("MCP tool %r failed: %s", tool, one_line(redact(given), 400))
            result = {**result, "content": [{**content[0], "text": text}, *content[1:]]}
        return result

    server.middleware.append(strict_tools)
    return server
