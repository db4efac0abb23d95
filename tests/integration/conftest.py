"""
Fixtures of the serving tests: the sample knowledge base indexed once per session in a child
process, so this process never opens (and locks) the Milvus Lite db the servers use.
"""

from pathlib import Path

import pytest

from tests.helpers import REPO, run_cli


@pytest.fixture(scope="session")
def served_index(tmp_path_factory) -> Path:
    """A state folder with knowledge/ indexed into it (Milvus Lite db, L0 index), mlflow off."""
    state = tmp_path_factory.mktemp("served-index") / "state"
    done = run_cli("index", "--kb", str(REPO / "knowledge"), f"paths.state_dir={state}", "mlflow=off", timeout=900)
    assert done.returncode == 0, done.stderr
    return state
