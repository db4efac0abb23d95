"""
Milvus credentials, for real against the Milvus server: a token from the environment and a user
and password from the config reach the client of every path, and never appear in the log output,
the trace rows, `/health`, a rendered pipeline file or an MLflow run's params.
"""

import json
import logging
import sqlite3
import uuid

import pytest

from pipelines.cli import main
from pipelines.config.settings import knowledge_store, load_config
from pipelines.indexing import run_indexing
from pipelines.lookup import LookupService
from pipelines.serving.health import HealthCheck
from tests.conftest import SAMPLE_KB, state_overrides

pytestmark = pytest.mark.milvus_server

TOKEN = f"env-token-{uuid.uuid4().hex[:10]}"  # not secrets: throwaway values this test looks for
PASSWORD = f"cfg-password-{uuid.uuid4().hex[:10]}"
USER = f"cfg-user-{uuid.uuid4().hex[:6]}"
SECRETS = (TOKEN, PASSWORD, USER)


@pytest.fixture
def credentialed(milvus_server, tmp_path, monkeypatch, mlflow_store):
    """Overrides with the user and password in the config, the token in the environment."""
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    overrides = state_overrides(
        tmp_path / "state",
        f"kb.path={SAMPLE_KB}",
        "milvus=server",
        f"milvus.uri={milvus_server.uri}",
        "milvus.collection=credentials_probe",
        "milvus.index_type=FLAT",
        f"milvus.user={USER}",
        f"milvus.password={PASSWORD}",
        f"mlflow.tracking_uri={mlflow_store}",
    )
    return overrides


def test_the_credentials_reach_the_client_of_each_path(credentialed):
    cfg = load_config(credentialed)
    assert knowledge_store(cfg).credentials() == {"token": TOKEN, "user": USER, "password": PASSWORD}
    service = LookupService(cfg)
    retriever = service.pipeline.get_component("retriever")
    for path in ("sdk", "haystack"):
        search = retriever._search(path)
        assert search.store.credentials() == {"token": TOKEN, "user": USER, "password": PASSWORD}
    # The pipeline file names the environment variable, never a value; config values are refused.
    from pipelines.serialized import ConfigError, render_pipeline_yaml

    with pytest.raises(ConfigError, match="cannot be written to a pipeline file"):
        render_pipeline_yaml(cfg, "lookup")
    env_only = load_config([o for o in credentialed if not o.startswith(("milvus.user", "milvus.password"))])
    rendered = render_pipeline_yaml(env_only, "lookup")
    assert "MILVUS_TOKEN" in rendered and TOKEN not in rendered


def test_the_credentials_never_show_in_logs_traces_health_or_mlflow(credentialed, caplog, capsys, tmp_path):
    cfg = load_config(credentialed)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "q1", "query": "disk almost full", "relevant": ["disk/disk-full.md"]}) + "\n")
    with caplog.at_level(logging.DEBUG):
        run_indexing(cfg, rebuild=True)  # the writer and planner connect with the credentials
        service = LookupService(cfg)
        results = [service.lookup(q) for q in ("disk almost full", "postgres replica lag")]
        health = HealthCheck(cfg, trace_store=service.trace_writer.store, auth=False).report()
        assert main(["eval", "--queries", str(queries), "--no-baselines", *credentialed]) == 0
    assert all(r.found for r in results)
    assert health["status"] == "ok", health
    printed = capsys.readouterr()
    logged = "\n".join(record.getMessage() for record in caplog.records) + printed.out + printed.err
    with sqlite3.connect(cfg.trace.db_url.removeprefix("sqlite:///")) as connection:
        rows = json.dumps(connection.execute("SELECT * FROM tool_invocation").fetchall())
    from mlflow import MlflowClient

    client = MlflowClient(cfg.mlflow.tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string="params.`milvus.collection` = 'credentials_probe'")
    [run] = runs
    params = json.dumps(run.data.params)
    assert run.data.params["milvus.password"] == "***" and run.data.params["milvus.user"] == "***"
    for secret in SECRETS:
        assert secret not in logged
        assert secret not in rows
        assert secret not in json.dumps(health)
        assert secret not in params
    collection_client = service.pipeline.get_component("retriever")._search("sdk")._client
    collection_client.drop_collection("credentials_probe")
