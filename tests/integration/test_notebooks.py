"""The notebooks execute top to bottom in a real kernel (nbclient) and show what they claim to show."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers import shifted_model

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return notebook


def outputs(notebook, kind: str) -> list:
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == kind]


def test_threshold_tuning_notebook_reads_the_sweep_runs_plots_and_gives_the_sweeps_verdict(tmp_path, monkeypatch):
    # No state folder given: the notebook's temporary one must be gone when the kernel exits.
    monkeypatch.delenv("KNOWLEDGE_NOTEBOOK_STATE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    notebook = execute(NOTEBOOKS / "threshold_tuning.ipynb")

    printed = "".join(o.text for o in outputs(notebook, "stream") if o.name == "stdout")
    assert f"state: {tmp_path / 'tmp'}" in printed
    # The verdict of the recommendation rule: 8 answerable queries cannot show a setting better than the
    # current one at level 0.05, so the notebook keeps them and prints no setting line.
    verdict = [line for line in printed.splitlines() if line.startswith(("keep the current settings", "best setting"))]
    assert len(verdict) == 1 and verdict[0].startswith("keep the current settings: "), printed
    # The runs table holds the 4 x 2 combinations of the sweep (the defaults, 0.35 / 0.5, are not among them: + 1).
    (table,) = [o for o in outputs(notebook, "execute_result") if "text/html" in o.data]
    assert table.data["text/html"].count("</tr>") == 1 + 8 + 1
    # One figure with the four panels.
    assert len([o for o in outputs(notebook, "display_data") if "image/png" in o.data]) == 1
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_notebook_is_committed_without_outputs_and_paired_with_its_script():
    notebook = json.loads((NOTEBOOKS / "threshold_tuning.ipynb").read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert all(not cell["outputs"] and cell["execution_count"] is None for cell in code)
    assert notebook["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    script = (NOTEBOOKS / "threshold_tuning.py").read_text(encoding="utf-8")
    assert all("".join(cell["source"]).strip() in script for cell in code)
    assert any("parameters" in cell["metadata"].get("tags", []) for cell in code)


def documented_commands(prefix: str) -> list[str]:
    """The shell commands of docs/tuning.md that start with `prefix`, continuation lines joined."""
    text = (NOTEBOOKS.parent / "docs" / "tuning.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
def test_the_documented_notebook_commands_run_and_take_the_parent_run_on_the_command_line(tmp_path):
    """Both papermill lines of docs/tuning.md, as written, in a clean environment (no PYTHONPATH), from the project."""
    own_sweep, given_sweep = documented_commands(".venv/bin/papermill notebooks/threshold_tuning.ipynb")
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(KNOWLEDGE_NOTEBOOK_STATE=str(tmp_path / "state"), HF_HUB_OFFLINE="1")

    def run(command: str, output: Path) -> str:
        argv = shlex.split(
            command.replace(".venv/bin/", f"{bin_dir}/").replace("/tmp/threshold_tuning.ipynb", str(output))
        )
        subprocess.run(argv, cwd=NOTEBOOKS.parent, env=env, check=True, capture_output=True, timeout=1800)
        executed = nbformat.read(output, as_version=4)
        return "".join(o.text for o in outputs(executed, "stream") if o.name == "stdout")

    printed = run(own_sweep, tmp_path / "own.ipynb")
    (parent,) = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith("sweep parent run: ")]
    (verdict,) = [
        line for line in printed.splitlines() if line.startswith(("keep the current settings", "best setting"))
    ]
    assert not list(NOTEBOOKS.glob("*.out.ipynb"))  # the executed notebook went where the command said

    store = f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"
    command = given_sweep.replace("<parent run id>", parent).replace("sqlite:///.knowledge/mlflow.db", store)
    # The section "Base against adapted models" too: model folders that carry a calibration.
    adapted, labelled = shifted_model(tmp_path / "adapted"), shifted_model(tmp_path / "labelled", shift=3.0)
    printed = run(f"{command} -p ADAPTED_MODEL {adapted} -p LABELS_MODEL {labelled}", tmp_path / "given.ipynb")
    assert f"sweep parent run: {parent}" in printed and verdict in printed.splitlines()  # the same verdict, read back
    assert f"MLflow: {store}" in printed
    (models,) = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith("model comparison parent")]
    table = printed[printed.index("model comparison parent run") :]
    roles = ("base", "kb-adapted", "label-adapted")
    rows = [line.split()[:2] for line in table.splitlines() if line.split()[:1] and line.split()[0] in roles]
    assert rows == [
        ["base", "embedder.model=packaged\\:all-MiniLM-L6-v2"],
        ["kb-adapted", f"embedder.model={adapted}"],
        ["label-adapted", f"embedder.model={labelled}"],
    ]  # as swept, each named by its role
    import mlflow

    client = mlflow.MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("lookup-knowledge-eval").experiment_id])
    parents = sorted(r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parents == sorted([parent, models])  # no second threshold sweep; one model comparison
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == models]
    assert len(children) == 3  # one run per model, on the same query set
