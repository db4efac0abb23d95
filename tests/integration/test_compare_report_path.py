"""`knowledge compare --report`: a path that cannot be written exits 2 before the A/B runs."""

import shutil
import subprocess

import pytest

from tests.conftest import EVAL_DIR, REPO
from tests.helpers import child_env, run_cli, stderr_lines
from tests.integration.test_damaged_state import read_only_mount_command

AB = ["--queries", str(EVAL_DIR / "sample-kb.jsonl"), "--a", "retrieval.top_k=5", "--b", "retrieval.top_k=10"]


def test_a_report_onto_a_folder_exits_2_before_the_work(tmp_path):
    state = tmp_path / "state"  # nothing indexed: the A/B itself would fail otherwise, later
    result = run_cli("compare", *AB, "--report", str(tmp_path), f"paths.state_dir={state}", "mlflow=off")
    assert result.returncode == 2, result.stderr
    assert stderr_lines(result) == [f"knowledge: error: cannot write {tmp_path}: it is a folder, give a file name"]
    assert not state.exists()


def test_a_report_into_a_read_only_folder_exits_2_before_the_work(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed for a read-only mount")
    folder = tmp_path / "reports"
    folder.mkdir()
    report = folder / "ab.html"
    args = ["compare", *AB, "--report", str(report), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off"]
    done = subprocess.run(
        read_only_mount_command(folder, *args), cwd=REPO, capture_output=True, text=True, env=child_env(), timeout=300
    )
    if "unshare" in done.stderr and done.returncode != 2:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 2, done.stderr
    assert stderr_lines(done) == [f"knowledge: error: cannot write {report}: its folder {folder} is read-only"]
