"""
`knowledge serve` on the scale-out path, for real: several worker processes sharing a Milvus
server and PostgreSQL, the refusal of several workers on Milvus Lite, and the Milvus server
stopping and coming back while a server process keeps serving.
"""

import time

import httpx
import pytest

from tests.helpers import REPO, child_env, cli_command, run_cli
from tests.integration.serving_helpers import concurrent_lookups, free_port, running

TIMEOUT_MS = 3000


def serve_args(port: int, *overrides: str, workers: int = 1) -> list[str]:
    workers_args = ["--workers", str(workers)] if workers > 1 else []
    return ["serve", "--port", str(port), "mlflow=off", *overrides, *workers_args]


@pytest.fixture(scope="module")
def server_index(milvus_server, tmp_path_factory):
    """knowledge/ indexed into the session's Milvus server (in a child process), with its state folder."""
    state = tmp_path_factory.mktemp("scaleout") / "state"
    overrides = [
        "milvus=server",
        f"milvus.uri={milvus_server.uri}",
        "milvus.collection=serve_scaleout",
        f"milvus.timeout_ms={TIMEOUT_MS}",
        f"paths.state_dir={state}",
    ]
    done = run_cli("index", "--kb", str(REPO / "knowledge"), "mlflow=off", *overrides, timeout=900)
    assert done.returncode == 0, done.stderr
    return {"state": state, "overrides": overrides}


def pg_rows(db_url: str) -> int:
    from components.tracing.trace_store import TraceStore

    return TraceStore(db_url, "/dev/null").count()


def lookup(url: str, query: str, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(f"{url}/lookup_knowledge/run", json={"query": query}, timeout=timeout)


def test_several_workers_on_milvus_lite_are_refused_with_what_to_use(tmp_path):
    done = run_cli(*serve_args(free_port(), f"paths.state_dir={tmp_path}", workers=2), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "Milvus Lite is one process per db file" in done.stderr
    assert "milvus=server milvus.uri=" in done.stderr


@pytest.mark.milvus_server
@pytest.mark.postgres
def test_two_workers_share_the_milvus_server_and_postgres(server_index, pg_schema_url, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command(*serve_args(port, *server_index["overrides"], f"trace.db_url='{pg_schema_url}'", workers=2))
    with running(command, f"{url}/health", tmp_path / "workers.log", child_env()):
        pids = set()
        deadline = time.monotonic() + 300  # the second worker may still be loading the model
        while len(pids) < 2 and time.monotonic() < deadline:
            report = httpx.get(f"{url}/health", timeout=30.0).json()
            assert report["status"] == "ok", report
            pids.add(report["pid"])
            time.sleep(0.2)
        assert len(pids) == 2, f"one worker answered only: {pids}"
        before = pg_rows(pg_schema_url)

        answers = concurrent_lookups(url)
    assert [status for _, status, _ in answers] == [200] * 200, [a for a in answers if a[1] != 200][:1]
    assert all(body["queryTransform"]["raw"] == query for query, _, body in answers)
    assert len({body["invocationId"] for _, _, body in answers}) == 200
    assert pg_rows(pg_schema_url) - before == 200


@pytest.mark.milvus_server
def test_the_milvus_server_going_away_and_back_while_serving(server_index, milvus_server, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command(*serve_args(port, *server_index["overrides"]))
    with running(command, f"{url}/health", tmp_path / "serve.log", child_env()):
        assert lookup(url, "disk almost full").status_code == 200
        try:
            milvus_server.stop()
            started = time.monotonic()
            failed = lookup(url, "disk almost full")
            elapsed_s = time.monotonic() - started
            health = httpx.get(f"{url}/health", timeout=30.0)
        finally:
            milvus_server.start()  # the same port and data folder: the collection comes back
        assert failed.status_code == 503
        body = failed.json()
        assert body["evidenceStatus"] == "error" and body["found"] is False and body["error"]["message"]
        assert elapsed_s < TIMEOUT_MS / 1000 + 2.0, elapsed_s  # bounded by milvus.timeout_ms, not hanging
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        assert health.json()["checks"]["vectorStore"]["ok"] is False
        rows = trace_rows(server_index["state"], body["invocationId"])
        assert rows == [("error",)]
        # The restarted server reloads the collection (some seconds): lookups recover by themselves,
        # and each one meanwhile answers within milvus.timeout_ms (503 with the reason), not later.
        deadline, slowest_s = time.monotonic() + 180, 0.0
        while True:
            started = time.monotonic()
            again = lookup(url, "disk almost full")
            slowest_s = max(slowest_s, time.monotonic() - started)
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            assert again.status_code == 503 and again.json()["error"]["message"], again.text
            time.sleep(0.5)
        assert again.status_code == 200 and again.json()["found"] is True
        assert slowest_s < TIMEOUT_MS / 1000 + 2.0, slowest_s
        assert httpx.get(f"{url}/health", timeout=30.0).json()["status"] == "ok"


def trace_rows(state, invocation_id: str) -> list[tuple]:
    import sqlite3

    with sqlite3.connect(state / "traces.db") as connection:
        return connection.execute("SELECT status FROM tool_invocation WHERE id = ?", (invocation_id,)).fetchall()


@pytest.mark.milvus_server
@pytest.mark.postgres
def test_bench_serve_with_one_and_two_workers_counts_one_trace_row_per_request(server_index, pg_schema_url, capsys):
    from pipelines.cli import main

    overrides = [*server_index["overrides"], f"trace.db_url='{pg_schema_url}'", "mlflow=off"]
    argv = ["bench", "serve", "--workers", "1,2", "--duration", "3", "--clients", "4", *overrides]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("trace rows") == 2 and "DIFFER" not in out, out
    assert "errors 0;" in out and "scaling: 2 vs 1 worker(s)" in out and "bound: " in out, out


@pytest.mark.postgres
def test_postgres_cut_while_serving_spools_and_replays_each_row_once(served_index, tmp_path_factory, pg_schema_url):
    """The trace database behind a TCP proxy that is cut and restored (the machine's PostgreSQL keeps running)."""
    from tests.integration.serving_helpers import copy_state
    from tests.integration.test_trace_failures import TcpProxy

    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.start()
    db_url = pg_schema_url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/")
    state = copy_state(served_index, tmp_path_factory, "pg-cut")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    overrides = [f"paths.state_dir={state}", f"trace.db_url='{db_url}'", "trace.retry_interval_s=0"]
    try:
        with running(
            cli_command(*serve_args(port, *overrides)), f"{url}/health", state.parent / "serve.log", child_env()
        ):
            first = lookup(url, "certificate expiry").json()
            proxy.stop()  # PostgreSQL unreachable from the server
            during = [lookup(url, q) for q in ("disk full on /var", "pg replica lag", "how to bake sourdough bread")]
            health = httpx.get(f"{url}/health", timeout=30.0)
            proxy.start()
            after = lookup(url, "runaway process high cpu").json()  # its write replays the spool first
    finally:
        proxy.stop()
    assert [r.status_code for r in during] == [200, 200, 200]  # lookups keep answering
    assert [r.json()["traceStatus"] for r in during] == ["spooled"] * 3
    assert health.json()["checks"]["traceStore"]["ok"] is False and health.json()["status"] == "degraded"
    assert first["traceStatus"] == after["traceStatus"] == "recorded"
    from components.tracing.trace_store import TraceStore

    rows = TraceStore(pg_schema_url, str(tmp_path_factory.mktemp("spool") / "none.jsonl")).iter_all()
    expected = [first["invocationId"], *(r.json()["invocationId"] for r in during), after["invocationId"]]
    assert sorted(row["id"] for row in rows) == sorted(expected)  # each exactly once
