"""
A one-shot `knowledge lookup` with MLflow configured imports MLflow only when its trace is sampled
(`mlflow_sink.defer_setup`): an unsampled lookup exits without it, a sampled one still writes its trace.
"""

import json
import subprocess
import sys

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


def _child_lookup(state, tmp_path, sample_rate: float) -> dict:
    overrides = [
        f"paths.state_dir={state}",
        f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db",
        f"mlflow.artifact_location={tmp_path}/mlflow-artifacts",
        f"mlflow.sample_rate={sample_rate}",
    ]
    done = subprocess.run(
        [sys.executable, "-c", _LOOKUP_AND_REPORT, DISK_QUERY, *overrides],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result, report = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert result["found"]
    return report


def test_an_unsampled_one_shot_lookup_never_imports_mlflow(served_index, tmp_path):
    assert _child_lookup(served_index, tmp_path, 0.0) == {"code": 0, "mlflow_imported": False, "traces": 0}


def test_a_sampled_one_shot_lookup_still_writes_its_trace(served_index, tmp_path):
    assert _child_lookup(served_index, tmp_path, 1.0) == {"code": 0, "mlflow_imported": True, "traces": 1}
