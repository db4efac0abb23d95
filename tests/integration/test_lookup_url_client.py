"""
`knowledge lookup --url` is a thin client: asking a real served server, its process imports none of
the pipeline stack (Haystack, Milvus, ONNX Runtime, MLflow, torch, Hydra), so it answers in about the
time of the HTTP call instead of the stack's import time.
"""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, child_env, cli_command
from tests.integration.serving_helpers import copy_state, free_port, running

HEAVY = ("haystack", "pymilvus", "milvus_lite", "onnxruntime", "mlflow", "torch", "hydra", "omegaconf", "numpy")

# The client path in a child process, then which of the heavy packages it imported.
_ASK_AND_REPORT = """
import json, sys
from pipelines.cli import main
code = main(["lookup", "--url", sys.argv[1], "--view", "agent", "--compact", "disk almost full on a worker node"])
heavy = sorted(name for name in sys.argv[2].split(",") if name in sys.modules)
print(json.dumps({"code": code, "imported": heavy}))
"""


@pytest.fixture(scope="module")
def server_url(served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "url-client")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--port", str(port), f"paths.state_dir={state}", "mlflow=off")
    with running(command, f"{url}/health", state.parent / "server.log", child_env()):
        yield url


def test_the_url_client_imports_none_of_the_pipeline_stack(server_url):
    done = subprocess.run(
        [sys.executable, "-c", _ASK_AND_REPORT, server_url, ",".join(HEAVY)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result, report = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert result["found"] and result["citations"] and "evidenceBlocks" not in result
    assert report == {"code": 0, "imported": []}
