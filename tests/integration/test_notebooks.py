"""The notebooks run top to bottom against the real pipeline, and show what they claim to show."""

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_notebook(path: Path) -> dict:
    """Execute the code cells of a notebook in order, in one namespace, from the notebook's folder."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__notebook__"}
    for number, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}[{number}]", "exec"), namespace)
    return namespace


def test_threshold_tuning_notebook(tmp_path, monkeypatch):
    monkeypatch.chdir(NOTEBOOKS)
    monkeypatch.setenv("KNOWLEDGE_NOTEBOOK_STATE", str(tmp_path / "state"))

    ns = run_notebook(NOTEBOOKS / "threshold_tuning.ipynb")

    assert ns["STATE_DIR"] == tmp_path / "state"
    assert ns["report"].chunks_written > 0 and not ns["report"].skipped

    by_reference = ns["by_reference"]
    fallbacks = by_reference.groupby("reference_threshold")["fallback_reason"].count()
    # Raising the reference threshold can only send more filtered attempts to the unfiltered retry.
    assert list(fallbacks) == sorted(fallbacks)
    assert fallbacks[0.7] > fallbacks[0.3]

    off_topic = "best sourdough bread recipe for beginners"
    by_evidence = ns["by_evidence"]
    found = by_evidence.pivot(index="query", columns="evidence_threshold", values="found")
    assert not found.loc[off_topic].any()
    assert found.loc["disk almost full on a worker node"].all()
    assert list(found.sum()) == sorted(found.sum(), reverse=True)

    lookups = len(by_reference) + len(by_evidence)
    assert len(ns["store"].latest(last=None)) == lookups
    assert {"l0_hints", "retrieval_trace", "rerank_trace", "evidence_blocks"} <= set(ns["details"])
