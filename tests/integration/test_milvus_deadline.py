"""
`milvus.timeout_ms` bounds a whole lookup's wait on a Milvus server, through a CLI child and a
server process: behind a relay that holds every chunk a while (as a server loading after a
restart answers), each call is well under the limit but opening the collection and searching it
together is not. The lookup answers at the limit with the reason, not when pymilvus is done.
"""

import contextlib
import socket
import sqlite3
import threading
import time

import httpx
import pytest

from tests.helpers import REPO, child_env, cli_command, run_cli, stderr_lines
from tests.integration.serving_helpers import free_port, running

pytestmark = pytest.mark.milvus_server

TIMEOUT_MS = 3000
# Each chunk of either direction waits this long: one call takes about a second, well under the
# limit, and opening the collection and searching it (seven calls or more) about twice the limit.
HOLD_S = 0.4
# The lookup's other steps (query embedding, trace row) and a loaded machine.
MARGIN_S = 2.0
REASON = f"did not answer within milvus.timeout_ms ({TIMEOUT_MS} ms)"


class SlowRelay:
    """A TCP relay on loopback to the Milvus server that holds each chunk `hold_s` once slowed."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.hold_s = 0.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self.target_port))
                for source, sink in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                time.sleep(self.hold_s)
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture(scope="module")
def slow_milvus(milvus_server, tmp_path_factory):
    """knowledge/ indexed into the session's server (directly), and a relay to it, fast until slowed."""
    state = tmp_path_factory.mktemp("deadline") / "state"
    common = ["milvus=server", "milvus.collection=deadline", f"paths.state_dir={state}", "mlflow=off"]
    done = run_cli("index", "--kb", str(REPO / "knowledge"), f"milvus.uri={milvus_server.uri}", *common, timeout=900)
    assert done.returncode == 0, done.stderr
    relay = SlowRelay(milvus_server.port)
    try:
        yield relay, state, [*common, f"milvus.uri=http://127.0.0.1:{relay.port}", f"milvus.timeout_ms={TIMEOUT_MS}"]
    finally:
        relay.close()


def test_a_cli_lookup_on_a_slow_server_ends_at_the_timeout_in_one_line(slow_milvus):
    relay, state, overrides = slow_milvus
    relay.hold_s = HOLD_S
    try:
        done = run_cli("lookup", "--compact", "disk almost full", *overrides, timeout=300)
    finally:
        relay.hold_s = 0.0
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = stderr_lines(done)
    assert REASON in line and "Traceback" not in done.stderr
    with sqlite3.connect(state / "traces.db") as connection:
        status, latency_ms = connection.execute(
            "SELECT status, latency_ms FROM tool_invocation ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
    assert status == "error" and latency_ms < TIMEOUT_MS + MARGIN_S * 1000, latency_ms


def test_a_served_lookup_on_a_slow_server_answers_503_at_the_timeout(slow_milvus, tmp_path):
    relay, _, overrides = slow_milvus
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--port", str(port), *overrides)
    with running(command, f"{url}/health", tmp_path / "serve.log", child_env()):
        relay.hold_s = HOLD_S
        try:
            started = time.monotonic()
            slow = httpx.post(f"{url}/lookup_knowledge/run", json={"query": "disk almost full"}, timeout=120)
            elapsed_s = time.monotonic() - started
        finally:
            relay.hold_s = 0.0
        assert slow.status_code == 503, slow.text
        assert REASON in slow.json()["error"]["message"]
        assert elapsed_s < TIMEOUT_MS / 1000 + MARGIN_S, elapsed_s
        # Fast again: the next lookup opens a new client and answers.
        again = httpx.post(f"{url}/lookup_knowledge/run", json={"query": "disk almost full"}, timeout=120)
        assert again.status_code == 200 and again.json()["found"] is True
