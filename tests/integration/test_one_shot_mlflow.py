"""
A one-shot `knowledge lookup` typed at a terminal (or given `--trace`) traces its lookup whatever
`mlflow.sample_rate`; one an agent runs (no terminal) is sampled, and an unsampled one never imports
MLflow. With MLflow off it never imports MLflow.
"""

import json
import os
import subprocess
import sys

from components.tracing.mlflow_sink import get_sink
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides
from tests.helpers import REPO, child_env

DISK_QUERY = "disk almost full on a worker node"

# A one-shot lookup in a child process; then every trace flushed (as at exit) and what was imported.
_LOOKUP_AND_REPORT = """
import json, sys
from pipelines.cli import main
code = main(["lookup", sys.argv[1], "--compact", *sys.argv[2:]])
from components.tracing import mlflow_sink
mlflow_sink.flush_all()
exported = sum(sink.exported for sink in mlflow_sink._sinks.values())
print(json.dumps({"code": code, "mlflow_imported": "mlflow" in sys.modules, "traces": exported}))
"""


def _child_lookup(state, *overrides: str, at_a_terminal: bool = False) -> dict:
    terminal, typed_on = os.openpty() if at_a_terminal else (None, None)
    done = subprocess.run(
        [sys.executable, "-c", _LOOKUP_AND_REPORT, DISK_QUERY, f"paths.state_dir={state}", *overrides],
        cwd=REPO,
        env=child_env(),
        stdin=typed_on if at_a_terminal else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    for fd in (terminal, typed_on):
        if fd is not None:
            os.close(fd)
    assert done.returncode == 0, done.stderr[-2000:]
    result, report = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert result["found"]
    return report


def test_a_one_shot_lookup_with_mlflow_off_never_imports_mlflow(served_index):
    assert _child_lookup(served_index, "mlflow=off") == {"code": 0, "mlflow_imported": False, "traces": 0}


def test_an_unsampled_lookup_an_agent_runs_never_imports_mlflow(served_index, tmp_path):
    overrides = [f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db", "mlflow.sample_rate=0.0"]
    report = _child_lookup(served_index, *overrides, f"mlflow.artifact_location={tmp_path}/mlflow-artifacts")
    assert report == {"code": 0, "mlflow_imported": False, "traces": 0}


def test_lookups_typed_at_a_terminal_or_with_trace_are_each_traced(served_index, mlflow_store, tmp_path):
    from mlflow import MlflowClient

    experiment = f"one-shot-{tmp_path.name}"
    overrides = [f"mlflow.tracking_uri={mlflow_store}", f"mlflow.experiment={experiment}", "mlflow.sample_rate=0.0"]
    overrides.append(f"mlflow.artifact_location={tmp_path}/mlflow-artifacts")
    reports = [
        _child_lookup(served_index, *overrides, at_a_terminal=True),
        _child_lookup(served_index, "--trace", *overrides),
    ]
    assert reports == [{"code": 0, "mlflow_imported": True, "traces": 1}] * 2
    client = MlflowClient(mlflow_store)
    found = client.get_experiment_by_name(experiment)
    assert len(client.search_traces(locations=[found.experiment_id])) == 2


def test_a_one_shot_service_defers_only_its_own_mlflow_setup(sample_cfg, tmp_path):
    """A one-shot lookup run in-process (the CLI's) must not change when other services set MLflow up."""
    unreachable = "http://127.0.0.1:9"

    def warmed(experiment: str, **options) -> LookupService:
        overrides = sample_overrides(
            sample_cfg,
            f"trace.db_url=sqlite:///{tmp_path}/{experiment}.db",
            f"mlflow.tracking_uri='{unreachable}'",
            f"mlflow.experiment={experiment}",
        )
        service = LookupService(load_config(state_overrides(tmp_path / experiment, *overrides)), **options)
        service.warm_up()
        return service

    warmed("one-shot", one_shot=True)
    warmed("long-running")
    assert get_sink(unreachable, "one-shot").state == "pending"  # no trace sampled: MLflow never set up
    long_running = get_sink(unreachable, "long-running")
    assert long_running.flush(timeout=30)
    assert long_running.state == "disabled"  # set up (and found unreachable) at warm-up, without a trace
