"""
Fixtures of the serving tests: the sample knowledge base indexed once per session in a child
process, so this process never opens (and locks) the Milvus Lite db the servers use.
"""

import subprocess
from pathlib import Path

import pytest

from tests.integration.serving_helpers import PYTHON, REPO, child_env


@pytest.fixture(scope="session")
def served_index(tmp_path_factory) -> Path:
    """A state folder with knowledge/ indexed into it (Milvus Lite db, L0 index), mlflow off."""
    state = tmp_path_factory.mktemp("served-index") / "state"
    done = subprocess.run(
        [
            PYTHON,
            "-m",
            "pipelines.cli",
            "index",
            "--kb",
            str(REPO / "knowledge"),
            f"paths.state_dir={state}",
            "mlflow=off",
        ],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    return state
