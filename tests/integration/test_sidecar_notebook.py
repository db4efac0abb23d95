"""
notebooks/sidecar_comparison.ipynb runs top to bottom in a real kernel (nbclient) on the sample
knowledge base, reads its `knowledge compare` run back from MLflow and draws both figures; the
committed notebook carries no outputs and matches its jupytext pair.
"""

import json
import os
from pathlib import Path

import jupytext
import mlflow
import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "sidecar_comparison.ipynb"


def test_sidecar_notebook_runs_and_reads_the_latest_compare_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLEDGE_NOTEBOOK_STATE", str(tmp_path / "state"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # what the notebook writes besides its state folder
    # The kernel imports this checkout's code, whatever the interpreter has installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2, "one agreement chart and one score-pair figure"
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "shared hits; max |similarity difference|" in printed

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'state'}/mlflow.db")
    experiment = client.get_experiment_by_name("lookup-knowledge-compare")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].data.metrics["queries"] == 5
    assert list((tmp_path / "tmp").iterdir()) == []  # the downloaded artifact's folder is gone


def test_committed_notebook_has_no_outputs_and_matches_its_pair():
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert all(not cell["outputs"] and cell["execution_count"] is None for cell in code)
    assert any("parameters" in cell["metadata"].get("tags", []) for cell in code)
    paired = jupytext.read(NOTEBOOK.with_suffix(".py"))
    assert [c.source for c in paired.cells] == ["".join(c["source"]) for c in notebook["cells"]]
