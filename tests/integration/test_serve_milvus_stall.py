"""
`GET /health` while the Milvus server is stalled (its process group stopped with SIGSTOP): it
answers within its deadline, "degraded" and naming the check that timed out, even with every
lookup slot taken by lookups that wait on the stalled server.
"""

import os
import signal
import threading
from contextlib import contextmanager

import httpx
import pytest

from tests.helpers import REPO, child_env, cli_command, run_cli
from tests.integration.serving_helpers import free_port, running

pytestmark = pytest.mark.milvus_server

HEALTH_TIMEOUT_S = 2
# Far longer than the client waits below: without the health deadline, a check would wait this long.
MILVUS_TIMEOUT_MS = 120_000
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def stall_server(milvus_server, tmp_path_factory):
    state = tmp_path_factory.mktemp("stall") / "state"
    overrides = [
        "milvus=server",
        f"milvus.uri={milvus_server.uri}",
        "milvus.collection=health_stall",
        f"milvus.timeout_ms={MILVUS_TIMEOUT_MS}",
        f"paths.state_dir={state}",
        "mlflow=off",
    ]
    done = run_cli("index", "--kb", str(REPO / "knowledge"), *overrides, timeout=900)
    assert done.returncode == 0, done.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--port", str(port), *overrides)
    command += [f"serve.health_timeout_s={HEALTH_TIMEOUT_S}", "serve.max_concurrent_lookups=1"]
    with running(command, f"{url}/health", state.parent / "server.log", child_env()):
        yield url


@contextmanager
def stalled(server):
    """The Milvus server's whole process group stopped (it keeps its sockets, answers nothing)."""
    group = os.getpgid(server._process.pid)
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


def test_health_answers_degraded_naming_the_stalled_check(stall_server, milvus_server):
    assert httpx.get(f"{stall_server}/health", timeout=CLIENT_TIMEOUT_S).status_code == 200
    answers: list[int] = []

    def lookup() -> None:
        response = httpx.post(f"{stall_server}/lookup_knowledge/run", json={"query": "disk full"}, timeout=300)
        answers.append(response.status_code)

    with stalled(milvus_server):
        # Lookups that take the one slot and queue behind it, all waiting on the stalled server.
        waiting = [threading.Thread(target=lookup) for _ in range(3)]
        for thread in waiting:
            thread.start()
        first = httpx.get(f"{stall_server}/health", timeout=CLIENT_TIMEOUT_S)
        second = httpx.get(f"{stall_server}/health", timeout=CLIENT_TIMEOUT_S)  # the stalled check is not redone
    for response in (first, second):
        assert response.status_code == 503
        report = response.json()
        assert report["status"] == "degraded"
        vector_store = report["checks"]["vectorStore"]
        assert vector_store["ok"] is False and vector_store["timedOut"] is True
        assert "serve.health_timeout_s" in vector_store["detail"]
        assert report["checks"]["l0Index"]["ok"] and report["checks"]["traceStore"]["ok"]
    for thread in waiting:
        thread.join(timeout=600)
    assert answers and all(status in (200, 503) for status in answers)
