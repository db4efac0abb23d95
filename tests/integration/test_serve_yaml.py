"""
The lookup served by a stock hayhooks: the serialized pipeline deployed with `hayhooks pipeline
deploy-yaml`, and the wrapper folder of `knowledge serve` deployed by `hayhooks run` at start-up.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import httpx
import yaml

from pipelines.config.settings import load_config
from pipelines.serving.deploy_yaml import ALLOWLIST_ENV, deployable_yaml
from pipelines.serving.service import OVERRIDES_ENV
from tests.helpers import REPO, child_env
from tests.integration.serving_helpers import copy_state, free_port, running

HAYHOOKS = str(Path(sys.executable).parent / "hayhooks")


def test_the_dumped_lookup_pipeline_deploys_with_hayhooks_deploy_yaml(served_index, tmp_path_factory, tmp_path):
    state = copy_state(served_index, tmp_path_factory, "yaml")
    pipeline_file = tmp_path / "lookup_knowledge.yml"
    pipeline_file.write_text(deployable_yaml(load_config([f"paths.state_dir={state}", "mlflow=off"])))
    assert {"inputs", "outputs", "components"} <= set(yaml.safe_load(pipeline_file.read_text()))
    pipelines_dir = tmp_path / "hayhooks-pipelines"
    pipelines_dir.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = child_env(**ALLOWLIST_ENV, HAYHOOKS_HOST="127.0.0.1", HAYHOOKS_PORT=str(port))
    command = [HAYHOOKS, "run", "--host", "127.0.0.1", "--port", str(port), "--pipelines-dir", str(pipelines_dir)]
    command += ["--additional-python-path", str(REPO)]
    with running(command, f"{url}/status", tmp_path / "hayhooks.log", env):
        deploy = _run(
            [HAYHOOKS, "pipeline", "deploy-yaml", "--name", "lookup_yaml", "--no-save-file", str(pipeline_file)], env
        )
        assert deploy.returncode == 0 and "successfully deployed" in deploy.stdout, deploy.stdout + deploy.stderr
        response = httpx.post(f"{url}/lookup_yaml/run", json={"query": "disk almost full"}, timeout=120.0)
    assert response.status_code == 200, response.text
    result = response.json()["result"]["trace_writer"]["result"]
    assert result["found"] is True
    assert result["evidence_blocks"][0]["source"].startswith("disk/")
    assert result["invocation_id"]


def test_the_wrapper_folder_deploys_with_hayhooks_run(served_index, tmp_path_factory, tmp_path):
    state = copy_state(served_index, tmp_path_factory, "wrapper")
    pipelines_dir = tmp_path / "hayhooks-pipelines"
    shutil.copytree(REPO / "pipelines" / "serving" / "wrappers", pipelines_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    overrides = json.dumps([f"paths.state_dir={state}", "mlflow=off"])
    env = child_env(**{OVERRIDES_ENV: overrides}, HAYHOOKS_STARTUP_DEPLOY_STRATEGY="sequential")
    command = [HAYHOOKS, "run", "--host", "127.0.0.1", "--port", str(port), "--pipelines-dir", str(pipelines_dir)]
    command += ["--additional-python-path", str(REPO)]
    with running(command, f"{url}/status/lookup_knowledge", tmp_path / "hayhooks.log", env):
        response = httpx.post(f"{url}/lookup_knowledge/run", json={"query": "disk almost full"}, timeout=120.0)
    assert response.status_code == 200, response.text
    result = response.json()["result"]  # hayhooks' envelope around the wrapper's LookupResponse
    assert result["found"] is True and result["evidenceBlocks"][0]["source"].startswith("disk/")
    assert result["invocationId"]


def _run(command: list[str], env: dict[str, str]):
    import subprocess

    return subprocess.run(command, cwd=os.fspath(REPO), env=env, capture_output=True, text=True, timeout=300)


def test_deploy_yaml_refuses_a_value_a_component_refuses_naming_the_config_key(tmp_path, capsys):
    from pipelines.serving.deploy_yaml import main

    target = tmp_path / "lookup_knowledge.yml"
    assert main([str(target), f"paths.state_dir={tmp_path}", "retrieval.top_k=-3"]) == 2
    assert capsys.readouterr().err == "error: retrieval.top_k=-3: must be at least 1\n"
    assert not target.exists()
