"""The MCP server of pyterrier-sci serve, driven by the official SDK's own client (``mcp.Client``):
over streamable HTTP (``/mcp`` of the HTTP server, with and without a bearer token) and over stdio
(``pyterrier-sci serve --mcp-stdio``); its tools answer as the pipelines called in-process."""
import asyncio
import os
import sys

import pytest
from conftest import needs_data
from serve_helpers import CONFIG, LiveServer, csfcube_service

from pyterrier_sci.serve import SearchAPI, ServeSettings

pytestmark = needs_data("csfcube")
mcp = pytest.importorskip("mcp")

TOOLS = {"search", "get_paper", "similar_papers", "suggest_citations", "list_pipelines"}
QUERY = "sentiment analysis of movie reviews"


@pytest.fixture(scope="module")
def service():
    return csfcube_service(["bm25"]).load()


def expected(service, query, k, exclude=()):
    return service.hits(service.run("bm25", [query]), query, k, exclude)


async def exercise(client, service):
    """Calls every tool through ``client``; asserts the answers."""
    tools = await client.list_tools()
    assert TOOLS <= {t.name for t in tools.tools}
    search = next(t for t in tools.tools if t.name == "search")
    assert {"query", "k", "pipeline"} <= set(search.input_schema["properties"])
    res = await client.call_tool("search", {"query": QUERY, "k": 5})
    assert not res.is_error
    hits = res.structured_content["results"]
    assert [h["docno"] for h in hits] == [h["docno"] for h in expected(service, QUERY, 5)]
    assert all(h["title"] and h["snippet"] for h in hits)
    paper = (await client.call_tool("get_paper", {"docno": "388"})).structured_content
    assert paper["title"].startswith("A Sentimental Education")
    sim = (await client.call_tool("similar_papers", {"docno": "388", "k": 4})).structured_content
    text = service.paper_text("388")
    assert [h["docno"] for h in sim["results"]] == [h["docno"] for h in expected(service, text, 4, ["388"])]
    assert "388" not in [h["docno"] for h in sim["results"]]
    passage = "We classify reviews by the polarity of their subjective sentences, found with minimum cuts."
    cite = (await client.call_tool("suggest_citations", {"passage": passage, "k": 3})).structured_content
    assert [h["docno"] for h in cite["results"]] == [h["docno"] for h in expected(service, passage, 3)]
    listed = (await client.call_tool("list_pipelines", {})).structured_content
    assert [p["name"] for p in listed["pipelines"]] == ["bm25"]
    # bad requests are tool errors whose text starts with the cause's code (as the HTTP API's error.code), not
    # crashes; an argument a tool does not take is one too (the SDK dropped it silently)
    for tool, args, cause in (("search", {"query": QUERY, "pipeline": "nope"}, "unknown_pipeline: "),
                              ("search", {"query": QUERY, "k": 0}, "k_out_of_range: "),
                              ("search", {"query": "x" * 5000}, "query_too_long: "),
                              ("search", {"query": QUERY, "k": "ten"}, "invalid_argument: k: "),
                              ("search", {"query": QUERY, "expression": "bm25 % 1"}, "unknown_argument: "),
                              ("similar_papers", {"docno": "388", "kk": 3}, "unknown_argument: "),
                              ("get_paper", {"docno": "../../etc/passwd"}, "unknown_docno: "),
                              ("list_pipelines", {"verbose": True}, "unknown_argument: ")):
        bad = await client.call_tool(tool, args)
        text = bad.content[0].text
        assert bad.is_error and text.startswith(cause) and "Traceback" not in text, (tool, args, text)
    bad = await client.call_tool("search", {"query": QUERY, "top": 3})
    assert "'top'" in bad.content[0].text and "k, pipeline, query" in bad.content[0].text


def test_mcp_over_streamable_http(service):
    from mcp import Client
    with LiveServer(SearchAPI(service, ServeSettings())) as srv:
        async def main():
            async with Client(srv.url + "/mcp") as client:
                await exercise(client, service)
        asyncio.run(main())


def test_mcp_over_http_needs_the_bearer_token(service):
    import httpx2
    from mcp import Client
    token = "mcp-token-" + "x1y2" * 5
    with LiveServer(SearchAPI(service, ServeSettings(token=token))) as srv:
        async def main():
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                from mcp.client.streamable_http import streamable_http_client
                async with Client(streamable_http_client(srv.url + "/mcp", http_client=http)) as client:
                    res = await client.call_tool("search", {"query": QUERY, "k": 2})
                    assert not res.is_error and len(res.structured_content["results"]) == 2
            async with httpx2.AsyncClient(timeout=30) as http:
                r = await http.post(srv.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                    headers={"Accept": "application/json, text/event-stream"})
                assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorised"
        asyncio.run(main())


def test_mcp_over_stdio(service):
    from mcp import Client, StdioServerParameters
    env = {k: v for k, v in os.environ.items() if k.startswith(("PYTERRIER_SCI_", "HF_", "TOKENIZERS", "PATH",
                                                                 "HOME", "IR_DATASETS"))}
    env["PYTHONSAFEPATH"] = "1"
    params = StdioServerParameters(command=sys.executable, env=env,
                                   args=["-m", "pyterrier_sci.cli", "serve", CONFIG, "--pipelines", "bm25",
                                         "--mcp-stdio"])

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            await exercise(client, service)
    asyncio.run(main())
