"""
`traces rerun` and `eval` next to a running `knowledge serve` that holds the Milvus Lite store:
they read a snapshot copy of it (and remove it after). Lookups recorded by `eval --record` are
tagged and left out of a replay of production traffic unless asked for.
"""

import json

import httpx
import pytest

from pipelines.cli import main
from tests.conftest import EVAL_DIR
from tests.helpers import child_env, cli_command
from tests.integration.serving_helpers import copy_state, free_port, running

QUERIES = str(EVAL_DIR / "sample-kb.jsonl")


@pytest.fixture(scope="module")
def served(served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "replay")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*cli_command("serve", "--port", str(port)), f"paths.state_dir={state}", "mlflow=off"]
    with running(command, f"{url}/health", state.parent / "server.log", child_env()):
        yield url, state


def test_rerun_eval_and_compare_work_while_the_server_holds_the_store_and_replay_production_traffic(
    served, tmp_path, capsys
):
    url, state = served
    response = httpx.post(
        f"{url}/lookup_knowledge/run", json={"query": "disk almost full on a worker node"}, timeout=60
    )
    assert response.status_code == 200 and response.json()["found"] is True
    options = [f"paths.state_dir={state}", "mlflow=off", "guard.sets=[]"]

    # An evaluation recorded next to the server: its lookups are tagged as evaluation traffic.
    assert main(["eval", "--queries", QUERIES, "--no-baselines", "--record", *options]) == 0
    captured = capsys.readouterr()
    assert "held by another process" in captured.err and "snapshot copy" in captured.err

    assert main(["traces", "rerun", "--json", *options]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["totals"]["queries"] == 1 and payload["totals"]["changed"] == 0  # the client's lookup only
    assert "snapshot copy" in captured.err and captured.err.count("\n") == 1

    assert main(["traces", "rerun", "--json", "--include-evaluation", *options]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["queries"] == 1 + 10
    ab = [
        "compare",
        "--queries",
        QUERIES,
        "--b",
        "retrieval.evidence_threshold=0.45",
        "--report",
        str(tmp_path / "ab.html"),
    ]
    assert main([*ab, *options]) == 0
    captured = capsys.readouterr()
    assert "snapshot copy" in captured.err and "A = (defaults); B = retrieval.evidence_threshold=0.45" in captured.out
    assert list((state / "lite-snapshots").iterdir()) == []  # each copy is removed when its command ends
