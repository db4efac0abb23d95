"""
An unreachable Milvus server: a lookup and an index return one line within the timeout (exit 1),
and the failed lookup leaves its error trace row. Errors that are their own cause end the walk.
"""

import socket

import grpc
import pytest
from pymilvus import MilvusClient

from components.stores.milvus_collection import connect
from components.stores.milvus_errors import MilvusUnavailableError, exception_chain
from tests.conftest import sample_overrides, state_overrides
from tests.helpers import run_cli, stderr_lines


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_pymilvus_refused_connection_is_a_cycle_and_connect_turns_it_into_one_error():
    uri = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(Exception) as raised:
        MilvusClient(uri=uri, timeout=2)
    # The stack's own behaviour that made the old walk spin: grpc's error is its own cause.
    assert any(isinstance(e, grpc.RpcError) and e.__cause__ is e for e in exception_chain(raised.value))
    with pytest.raises(MilvusUnavailableError, match=f"cannot open Milvus at {uri}"):
        connect(uri, timeout_ms=2000)


def test_lookup_against_an_unreachable_server_fails_in_one_line_and_is_traced(sample_cfg, tmp_path):
    uri = f"http://127.0.0.1:{closed_port()}"
    db = tmp_path / "traces.db"
    overrides = state_overrides(
        tmp_path / "state",
        *sample_overrides(sample_cfg, f"milvus.uri={uri}", "milvus.timeout_ms=3000", f"trace.db_url=sqlite:///{db}"),
    )
    result = run_cli("lookup", "--compact", "disk full", *overrides, cwd=tmp_path, timeout=180)
    lines = stderr_lines(result)
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("knowledge: error: "), result.stderr
    assert "Traceback" not in result.stderr

    from components.tracing.trace_store import TraceStore

    rows = TraceStore(f"sqlite:///{db}", spool_path=str(tmp_path / "spool.jsonl")).latest(last=5)
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert uri in rows[0]["error"]


def test_index_into_an_unreachable_server_fails_in_one_line(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# A\n\nThe service restarts cleanly.\n", encoding="utf-8")
    uri = f"http://127.0.0.1:{closed_port()}"
    overrides = state_overrides(tmp_path / "state", "milvus=server", f"milvus.uri={uri}", "milvus.timeout_ms=3000")
    result = run_cli("index", "--kb", str(kb), *overrides, cwd=tmp_path, timeout=180)
    lines = stderr_lines(result)
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and f"cannot open Milvus at {uri}" in lines[0], result.stderr


def test_a_server_that_never_answers_fails_the_connection_at_the_timeout():
    """A port that accepts connections and never speaks: without a limit the attempt would wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(MilvusUnavailableError, match=f"cannot open Milvus at {uri}: Fail connecting"):
            connect(uri, timeout_ms=1000)


def test_timeout_reaches_the_client_arguments():
    from components.stores.milvus_collection import connection_args

    assert connection_args("http://127.0.0.1:19530", 2500)["timeout"] == 2.5
    assert "timeout" not in connection_args("http://127.0.0.1:19530", 0)
