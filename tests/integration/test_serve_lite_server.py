"""
The one-machine multi-worker option, for real: `knowledge serve --workers 2` (REST) and
`knowledge serve --mcp` beside it, all on the Milvus Lite gRPC server (BM25 included) of the
session and one PostgreSQL trace store: both workers answer, every REST and MCP call leaves
one trace row, and lookups run both retrieval legs.
"""

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from tests.conftest import SHARED_SERVER_TIMEOUT
from tests.helpers import REPO, child_env, cli_command, run_cli
from tests.integration.serving_helpers import concurrent_lookups, free_port, running

pytestmark = pytest.mark.postgres

MCP_CALLS = 10


@pytest.fixture(scope="module")
def lite_server_index(lite_server, tmp_path_factory):
    """knowledge/ indexed into the session's Lite gRPC server with full text (in a child process)."""
    state = tmp_path_factory.mktemp("serve-lite-server") / "state"
    overrides = [
        "milvus=server",
        f"milvus.uri={lite_server.uri}",
        "milvus.full_text=true",
        "milvus.collection=serve_lite",
        SHARED_SERVER_TIMEOUT,
        f"paths.state_dir={state}",
        "mlflow=off",
    ]
    done = run_cli("index", "--kb", str(REPO / "knowledge"), *overrides, timeout=900)
    assert done.returncode == 0, done.stderr
    return overrides


def pg_rows(db_url: str) -> int:
    from components.tracing.trace_store import TraceStore

    return TraceStore(db_url, "/dev/null").count()


async def mcp_lookups(url: str, count: int) -> list[dict]:
    async with (
        streamablehttp_client(f"{url}/mcp/") as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        results = []
        for call in range(count):
            outcome = await session.call_tool("lookup_knowledge", {"query": f"disk almost full {call}"})
            assert not outcome.isError, outcome.content
            results.append(json.loads(outcome.content[0].text))
        return results


def worker_pids(url: str, workers: int) -> set[int]:
    pids: set[int] = set()
    deadline = time.monotonic() + 300  # the second worker may still be loading the model
    while len(pids) < workers and time.monotonic() < deadline:
        report = httpx.get(f"{url}/health", timeout=30.0).json()
        assert report["status"] == "ok", report
        pids.add(report["pid"])
        time.sleep(0.2)
    return pids


def test_two_rest_workers_and_an_mcp_process_share_the_lite_server_with_a_trace_row_per_call(
    lite_server_index, pg_schema_url, tmp_path
):
    overrides = [*lite_server_index, f"trace.db_url='{pg_schema_url}'"]
    rest_port, mcp_port = free_port(), free_port()
    rest, mcp = f"http://127.0.0.1:{rest_port}", f"http://127.0.0.1:{mcp_port}"
    rest_command = cli_command("serve", "--port", str(rest_port), "--workers", "2", *overrides)
    mcp_command = cli_command("serve", "--mcp", "--port", str(mcp_port), *overrides)
    with (
        running(rest_command, f"{rest}/health", tmp_path / "rest.log", child_env()),
        running(mcp_command, f"{mcp}/health", tmp_path / "mcp.log", child_env()),
    ):
        assert len(worker_pids(rest, 2)) == 2
        before = pg_rows(pg_schema_url)
        with ThreadPoolExecutor(max_workers=1) as pool:  # MCP calls while the REST load runs
            mcp_results = pool.submit(asyncio.run, mcp_lookups(mcp, MCP_CALLS))
            answers = concurrent_lookups(rest, calls=5)
            mcp_answers = mcp_results.result(timeout=600)
    assert [status for _, status, _ in answers] == [200] * len(answers)
    assert all(body["retrievalTrace"]["legs"] == ["dense", "bm25"] for _, _, body in answers)
    assert all("bm25Skipped" not in body["retrievalTrace"] for _, _, body in answers)
    assert all(result["invocationId"] for result in mcp_answers)
    assert pg_rows(pg_schema_url) - before == len(answers) + MCP_CALLS
