"""`knowledge serve --mcp`: a real MCP client session (streamable HTTP) against a real server process."""

import asyncio
import json
import sqlite3

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from tests.helpers import child_env, cli_command
from tests.integration.serving_helpers import copy_state, free_port, running

API_KEY = "mcp-test-key-27b1"  # not a secret: a throwaway key of this test server


@pytest.fixture(scope="module")
def mcp_served(served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "mcp")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--mcp", "--port", str(port), f"paths.state_dir={state}")
    command.append("mlflow=off")
    with running(command, f"{url}/health", state.parent / "mcp.log", child_env(KNOWLEDGE_API_KEY=API_KEY)):
        yield {"url": url, "state": state}


@pytest.fixture(scope="module")
def mcp_server(mcp_served):
    return mcp_served["url"]


async def _session(url: str, calls):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with (
        streamablehttp_client(f"{url}/mcp/", headers=headers) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await calls(session)


async def _sse_session(url: str, calls):
    from mcp.client.sse import sse_client

    async with (
        sse_client(f"{url}/sse", headers={"Authorization": f"Bearer {API_KEY}"}) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await calls(session)


def test_list_tools_shows_lookup_knowledge_with_its_schema(mcp_server):
    tools = asyncio.run(_session(mcp_server, lambda s: s.list_tools())).tools
    # No hayhooks status or deploy tools.
    assert [tool.name for tool in tools] == ["lookup_knowledge", "lookup_knowledge_feedback"]
    tool = next(tool for tool in tools if tool.name == "lookup_knowledge")
    assert tool.inputSchema["required"] == ["query"]
    assert tool.inputSchema["properties"]["query"]["type"] == "string"
    assert "found=false" in tool.description


def test_call_tool_returns_evidence(mcp_server):
    async def call(session):
        return await session.call_tool("lookup_knowledge", {"query": "disk almost full on a worker node"})

    outcome = asyncio.run(_session(mcp_server, call))
    assert not outcome.isError
    result = json.loads(outcome.content[0].text)
    # The agent view by default: the packed context and its citations, no traces.
    assert result["found"] is True and result["relevanceLevel"] and result["completenessHint"]
    assert result["citations"][0]["source"].startswith("disk/") and result["context"]
    assert not {"retrievalTrace", "rerankTrace", "evidenceBlocks", "queryTransform"} & set(result)
    assert result["invocationId"]


def test_call_tool_with_the_full_view_returns_everything(mcp_server):
    async def call(session):
        return await session.call_tool("lookup_knowledge", {"query": "disk almost full", "view": "full"})

    result = json.loads(asyncio.run(_session(mcp_server, call)).content[0].text)
    assert result["evidenceBlocks"][0]["source"].startswith("disk/") and "retrievalTrace" in result


def test_the_sse_transport_serves_the_same_tools_and_results(mcp_server):
    async def calls(session):
        return await session.list_tools(), await session.call_tool("lookup_knowledge", {"query": "disk almost full"})

    tools, outcome = asyncio.run(_sse_session(mcp_server, calls))
    assert [tool.name for tool in tools.tools] == ["lookup_knowledge", "lookup_knowledge_feedback"]
    assert not outcome.isError
    result = json.loads(outcome.content[0].text)
    assert result["found"] is True and result["citations"][0]["source"].startswith("disk/")


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"query": "disk full", "top_k": 3}, "unknown argument(s) top_k"),
        ({}, "query is missing"),
        ({"query": 42}, "query must be a string"),
        ({"query": "disk full", "view": "tiny"}, "view must be one of full, agent"),
    ],
)
def test_a_bad_call_is_a_tool_error_with_its_reason(mcp_server, arguments, reason):
    async def call(session):
        return await session.call_tool("lookup_knowledge", arguments)

    outcome = asyncio.run(_session(mcp_server, call))
    assert outcome.isError
    assert reason in outcome.content[0].text and "General unhandled error" not in outcome.content[0].text


def test_an_empty_query_is_a_tool_error(mcp_server):
    async def call(session):
        return await session.call_tool("lookup_knowledge", {"query": "  "})

    outcome = asyncio.run(_session(mcp_server, call))
    assert outcome.isError
    assert "query is empty" in outcome.content[0].text
    assert "General unhandled error" not in outcome.content[0].text


def test_mcp_requests_without_the_key_get_401(mcp_server):
    response = httpx.post(f"{mcp_server}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 401


def test_a_query_over_the_body_limit_is_a_tool_error_and_the_session_goes_on(mcp_server):
    async def calls(session):
        huge = await session.call_tool("lookup_knowledge", {"query": "disk full " * 10_000})  # 100,000 characters
        after = await session.call_tool("lookup_knowledge", {"query": "disk almost full"})
        return huge, after

    huge, after = asyncio.run(_session(mcp_server, calls))
    assert huge.isError
    assert "over serve.max_body_bytes (16384 bytes)" in huge.content[0].text and "shorter query" in huge.content[0].text
    assert not after.isError and json.loads(after.content[0].text)["found"] is True


def test_an_over_size_call_that_stalls_gets_408(mcp_server):
    import socket

    host, port = mcp_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=120) as client:
        client.sendall(
            f"POST /mcp/ HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
            + b"Content-Type: application/json\r\nAccept: application/json\r\n"
            + f"Authorization: Bearer {API_KEY}\r\nContent-Length: 100000\r\n\r\n".encode()
            + b'{"method": "tools/call", "params": {"arguments": {"query": "'
            + b"x" * 20_000  # over the limit, then nothing more
        )
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and b'"error": "body_timeout"' in answer


def label_rows(state, invocation_id: str) -> list[tuple]:
    with sqlite3.connect(state / "traces.db") as connection:
        return connection.execute(
            "SELECT verdict, sources, reviewer, origin FROM lookup_label WHERE invocation_id = ?", (invocation_id,)
        ).fetchall()


def test_feedback_through_the_tool_is_one_label(mcp_served):
    async def calls(session):
        found = await session.call_tool("lookup_knowledge", {"query": "disk almost full on a worker node"})
        invocation_id = json.loads(found.content[0].text)["invocationId"]
        return invocation_id, await session.call_tool(
            "lookup_knowledge_feedback", {"invocationId": invocation_id, "useful": True}
        )

    invocation_id, outcome = asyncio.run(_session(mcp_served["url"], calls))
    assert not outcome.isError, outcome.content[0].text
    label = json.loads(outcome.content[0].text)
    assert label["invocationId"] == invocation_id and label["verdict"] == "useful"
    assert label["sources"][0].startswith("disk/") and label["traceStatus"] == "recorded"
    assert label_rows(mcp_served["state"], invocation_id) == [("useful", json.dumps(label["sources"]), "agent", "mcp")]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"invocationId": "00000000-nope", "useful": True}, "no invocation '00000000-nope'"),
        ({"useful": True}, "invocationId is missing"),
        ({"invocationId": "00000000-nope", "useful": "yes"}, "useful must be true or false"),
        ({"invocationId": "00000000-nope", "useful": True, "why": "x"}, "unknown argument(s) why"),
    ],
)
def test_a_bad_feedback_call_is_a_tool_error_with_its_reason(mcp_server, arguments, reason):
    async def call(session):
        return await session.call_tool("lookup_knowledge_feedback", arguments)

    outcome = asyncio.run(_session(mcp_server, call))
    assert outcome.isError
    assert reason in outcome.content[0].text and "General unhandled error" not in outcome.content[0].text


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
MCP_HEADERS = {"Authorization": f"Bearer {API_KEY}", "Accept": "application/json, text/event-stream"}


def test_a_rebinding_host_or_a_foreign_origin_cannot_initialize(mcp_server):
    port = mcp_server.rsplit(":", 1)[1]
    for extra in (
        {"Host": f"evil.example:{port}"},
        {"Origin": f"http://evil.example:{port}"},
        {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"},
    ):
        response = httpx.post(f"{mcp_server}/mcp/", json=INITIALIZE, headers={**MCP_HEADERS, **extra})
        assert response.status_code == 403, extra
        assert response.json()["error"] in ("forbidden_host", "forbidden_origin")
    sse = httpx.get(f"{mcp_server}/sse", headers={**MCP_HEADERS, "Host": f"evil.example:{port}"})
    assert sse.status_code == 403  # the older SSE transport alike


def test_initialize_from_loopback_with_or_without_its_own_origin(mcp_server):
    port = mcp_server.rsplit(":", 1)[1]
    for extra in ({}, {"Host": f"localhost:{port}"}, {"Origin": f"http://127.0.0.1:{port}"}):
        response = httpx.post(f"{mcp_server}/mcp/", json=INITIALIZE, headers={**MCP_HEADERS, **extra})
        assert response.status_code == 200, (extra, response.text)
        assert '"serverInfo"' in response.text  # the initialize result (JSON or one event)


def test_an_unknown_path_gets_the_documented_404(mcp_server):
    response = httpx.get(f"{mcp_server}/nosuch", headers=MCP_HEADERS)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "/nosuch is not served here"}
