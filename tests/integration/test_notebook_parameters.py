"""
The notebooks with the docs' own parameters, through papermill as a user runs them: the threshold
notebook on the docs' evidence x uncovered sweep, the sidecar notebook given a run id alone.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import EVAL_DIR, REPO
from tests.helpers import run_main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOTEBOOKS = REPO / "notebooks"


def _papermill(notebook: Path, output: Path, cwd: Path, *parameters: str) -> str:
    """papermill in a clean environment (no PYTHONPATH), the stdout of the executed copy."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1")
    argv = [str(Path(sys.executable).parent / "papermill"), str(notebook), str(output), *parameters]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(output, as_version=4)
    streams = [o for cell in executed.cells if cell.cell_type == "code" for o in cell.outputs]
    return "".join(o.text for o in streams if o.output_type == "stream" and o.name == "stdout")


def test_the_threshold_notebook_reads_the_docs_evidence_by_uncovered_sweep(served_index, tmp_path, capsys):
    state = tmp_path / "state"
    shutil.copytree(served_index, state)
    sweep = [
        "eval", "--queries", str(EVAL_DIR / "sample-kb.jsonl"), "--no-baselines", "-m",
        "retrieval.evidence_threshold=0.3,0.45", "retrieval.uncovered_evidence_threshold=0.4,0.52",
        f"paths.state_dir={state}", "mlflow=sqlite",
    ]  # fmt: skip
    done = run_main(capsys, *sweep)
    assert done.returncode == 0, done.stderr
    (parent,) = re.findall(r"MLflow parent run of \d+ child runs (\w+)", done.stdout)
    store = f"sqlite:///{state / 'mlflow.db'}"
    printed = _papermill(
        NOTEBOOKS / "threshold_tuning.ipynb", tmp_path / "out.ipynb", REPO,
        "-r", "PARENT_RUN_ID", parent, "-r", "TRACKING_URI", store,
    )  # fmt: skip
    # The shipped guard does not fit knowledge/: left out and named, so not every setting fails it.
    assert "guard offtopic-alerts left out" in printed
    (verdict,) = [line for line in printed.splitlines() if line.startswith(("keep the current", "best setting"))]
    assert "no setting tried met the constraints" not in verdict


def test_the_sidecar_notebook_reads_a_run_given_by_its_id_alone(served_index, tmp_path, capsys):
    """`knowledge compare` from a project with its default state, then the documented papermill line."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    for name in ("pyproject.toml", "knowledge", "pipelines", "components", "conf", "eval"):
        (project / name).symlink_to(REPO / name)
    shutil.copy(NOTEBOOKS / "sidecar_comparison.ipynb", project / "notebooks")
    shutil.copytree(served_index, project / ".knowledge")
    done = run_main(capsys, "compare", "--queries", str(EVAL_DIR / "sample-kb.jsonl"), cwd=project)
    assert done.returncode == 0, done.stderr
    (run_id,) = re.findall(r"MLflow run (\w+) \(experiment", done.stdout)

    text = (REPO / "docs" / "tuning.md").read_text(encoding="utf-8").replace("\\\n", " ")
    (documented,) = [" ".join(line.split()) for line in text.splitlines() if "papermill notebooks/sidecar" in line]
    argv = shlex.split(documented.replace("<compare run id>", run_id))
    assert argv[3:] == ["-r", "RUN_ID", run_id]  # the run id alone
    printed = _papermill(project / argv[1], tmp_path / "sidecar.ipynb", project, *argv[3:])
    assert f"MLflow: sqlite:///{project / '.knowledge' / 'mlflow.db'}" in printed
