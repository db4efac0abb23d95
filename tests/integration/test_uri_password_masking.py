"""
A password written into `milvus.uri` or `mlflow.tracking_uri` never leaves the process: not in
the CLI's error line, the result JSON, the trace row (SQLite and PostgreSQL), the log, a served
lookup's 503 body or the server log; `***` stands where it was.
"""

import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager

import httpx
import psycopg
import pytest

from tests.conftest import SHARED_SERVER_TIMEOUT
from tests.helpers import REPO, child_env, cli_command, run_cli
from tests.integration.serving_helpers import free_port, running

PASSWORD = f"pw-{uuid.uuid4().hex[:12]}"  # a throwaway value this test looks for
MLFLOW_PASSWORD = f"mlpw-{uuid.uuid4().hex[:12]}"


def nowhere(password: str) -> str:
    """A URL with a password, to a loopback port where nothing listens."""
    return f"http://probe:{password}@127.0.0.1:{free_port()}"


def assert_masked(*texts: str) -> None:
    joined = "\n".join(texts)
    assert PASSWORD not in joined and MLFLOW_PASSWORD not in joined
    assert "probe:***@127.0.0.1" in joined


def one_shot_lookup(state, *overrides: str):
    done = run_cli(
        "lookup",
        "disk full",
        f"paths.state_dir={state}",
        f"milvus.uri={nowhere(PASSWORD)}",
        "milvus.timeout_ms=3000",
        f"mlflow.tracking_uri={nowhere(MLFLOW_PASSWORD)}",
        *overrides,
    )
    assert done.returncode == 1, done.stderr
    return done


@pytest.fixture
def state(served_index, tmp_path):
    target = tmp_path / "state"
    shutil.copytree(served_index, target)
    return target


def test_a_failed_one_shot_lookup_shows_and_records_the_uri_masked(state):
    done = one_shot_lookup(state)
    result = json.loads(done.stdout)
    assert result["evidenceStatus"] == "error"
    assert "Fail connecting" in result["error"]["message"]
    with sqlite3.connect(state / "traces.db") as connection:
        [(error,)] = connection.execute("SELECT error FROM tool_invocation").fetchall()
    assert_masked(done.stdout, done.stderr, error)
    assert_masked(result["message"])
    assert "mlflow.tracking_uri=http://probe:***@127.0.0.1" in done.stderr


def test_the_mlflow_trace_of_a_failed_lookup_holds_the_uri_masked(state, mlflow_store, tmp_path):
    from mlflow import MlflowClient

    experiment = f"masking-{tmp_path.name}"
    done = run_cli(
        "lookup",
        "disk full",
        f"paths.state_dir={state}",
        f"milvus.uri={nowhere(PASSWORD)}",
        f"mlflow.tracking_uri={mlflow_store}",
        f"mlflow.experiment={experiment}",
        f"mlflow.artifact_location={tmp_path}/mlflow-artifacts",
    )
    assert done.returncode == 1, done.stderr
    client = MlflowClient(mlflow_store)
    [trace] = client.search_traces(locations=[client.get_experiment_by_name(experiment).experiment_id])
    exported = trace.to_json()
    assert_masked(exported)


@pytest.mark.postgres
def test_the_postgresql_trace_row_holds_the_uri_masked(state, pg_schema_url):
    done = one_shot_lookup(state, f"trace.db_url='{pg_schema_url}'")
    schema = pg_schema_url.rsplit("%3D", 1)[1]
    plain = pg_schema_url.split("?")[0].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as connection:
        [(error,)] = connection.execute(f'SELECT error FROM "{schema}".tool_invocation').fetchall()
    assert_masked(done.stderr, error)


class PausableProxy:
    """A TCP forwarder to a Milvus server; paused, it keeps its connections but passes nothing on."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.flowing = threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.flowing.set()
        self.listener.close()


@contextmanager
def proxied(port: int):
    proxy = PausableProxy(port)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_served_lookup_that_times_out_answers_and_logs_the_uri_masked(lite_server, tmp_path):
    state = tmp_path / "state"
    common = ["milvus=server", "milvus.collection=uri_masking", f"paths.state_dir={state}", "mlflow=off"]
    done = run_cli(
        "index", "--kb", str(REPO / "knowledge"), *common, f"milvus.uri={lite_server.uri}", SHARED_SERVER_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    target_port = int(lite_server.uri.rsplit(":", 1)[1])
    with proxied(target_port) as proxy:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = tmp_path / "server.log"
        command = cli_command("serve", "--port", str(port), *common)
        command += [f"milvus.uri=http://probe:{PASSWORD}@127.0.0.1:{proxy.port}", "milvus.timeout_ms=4000"]
        with running(command, f"{url}/health", log, child_env()):
            proxy.flowing.clear()
            response = httpx.post(f"{url}/lookup_knowledge/run", json={"query": "disk full"}, timeout=60)
            proxy.flowing.set()
        body = response.text
    assert response.status_code == 503, body
    assert "did not answer within milvus.timeout_ms" in body
    with sqlite3.connect(state / "traces.db") as connection:
        [(error,)] = connection.execute("SELECT error FROM tool_invocation").fetchall()
    assert_masked(body, error)
    logged = log.read_text()
    assert_masked(logged)  # the failed lookup's warning names the URI, masked


def test_every_log_record_of_the_cli_is_masked_whoever_logs_it():
    """A record of any logger (a library's too) passes the root handler's filter before it is written."""
    script = (
        "import logging; from pipelines.config.logs import configure_logging; configure_logging(0); "
        f"logging.getLogger('some.library').warning('connecting to %s', 'http://probe:{PASSWORD}@127.0.0.1:1')"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=child_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_masked(done.stderr)


def test_the_debug_traceback_of_a_failed_index_shows_the_uri_masked(tmp_path):
    done = run_cli(
        "index",
        "--kb",
        str(REPO / "knowledge"),
        f"paths.state_dir={tmp_path / 'state'}",
        "milvus=server",
        f"milvus.uri={nowhere(PASSWORD)}",
        "milvus.timeout_ms=3000",
        "mlflow=off",
        KNOWLEDGE_DEBUG="1",
    )
    assert done.returncode == 1 and "Traceback" in done.stderr
    assert_masked(done.stderr)
