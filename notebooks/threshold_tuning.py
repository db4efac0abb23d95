# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tuning the retrieval thresholds
#
# This notebook reads the MLflow runs of a threshold sweep, plots hit@1, the answer rate, the
# off-topic rejection rate and the fallback rate against the thresholds, and recommends a setting
# as the override line to use.
#
# The sweep is the one `knowledge eval -m` runs (one child run per combination under a parent run):
#
# ```bash
# knowledge eval --queries eval/sample-kb.jsonl --kb knowledge -m \
#     retrieval.evidence_threshold=0.2,0.35,0.5,0.65 retrieval.reference_threshold=0.3,0.6
# ```
#
# Give its parent run id as `PARENT_RUN_ID` (and the store as `TRACKING_URI`) to read that sweep;
# left empty, the notebook runs the same sweep itself on the bundled `knowledge/` base, in a
# throw-away state folder (or `$KNOWLEDGE_NOTEBOOK_STATE`).

# %% tags=["parameters"]
STATE_DIR = None  # the state folder (Milvus Lite db, MLflow store); None: $KNOWLEDGE_NOTEBOOK_STATE or a temp folder
TRACKING_URI = None  # the MLflow store of an existing sweep; None: the state folder's
PARENT_RUN_ID = None  # the parent run of an existing sweep; None: run the sweep below
EXPERIMENT = "lookup-knowledge-eval"
QUERIES = "eval/sample-kb.jsonl"
KB = "knowledge"
EVIDENCE_THRESHOLDS = "0.2,0.35,0.5,0.65"
REFERENCE_THRESHOLDS = "0.3,0.6"
MIN_REJECTION = 1.0  # the off-topic rejection rate a recommended setting must keep

# %%
import os
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import mlflow


def project_root(start: Path) -> Path:
    for folder in [start, *start.parents]:
        if (folder / "pyproject.toml").exists() and (folder / "knowledge").is_dir():
            return folder
    raise FileNotFoundError("run this notebook from inside the lookup-knowledge project")


ROOT = project_root(Path.cwd())
sys.path.insert(0, str(ROOT))  # this checkout's code, whichever project the kernel's venv installed
STATE_DIR = Path(STATE_DIR or os.environ.get("KNOWLEDGE_NOTEBOOK_STATE") or tempfile.mkdtemp(prefix="knowledge-nb-"))
TRACKING_URI = TRACKING_URI or f"sqlite:///{STATE_DIR}/mlflow.db"
if TRACKING_URI.startswith("sqlite:///") and not TRACKING_URI.startswith("sqlite:////"):
    # The CLI prints the store relative to the project (`sqlite:///.knowledge/mlflow.db`); the kernel runs in notebooks/.
    TRACKING_URI = f"sqlite:///{ROOT / TRACKING_URI.removeprefix('sqlite:///')}"
print("state:", STATE_DIR, "| MLflow:", TRACKING_URI)

# %% [markdown]
# ## The sweep
#
# Skipped when `PARENT_RUN_ID` names an existing sweep. Otherwise: index `knowledge/` (once; later
# runs skip unchanged documents) and evaluate every combination of the two thresholds.

# %%
if PARENT_RUN_ID is None:
    from pipelines.evaluation import load_queries
    from pipelines.tuning.sweep import run_sweep

    overrides = [
        f"paths.state_dir={STATE_DIR}",
        f"mlflow.tracking_uri={TRACKING_URI}",
        f"retrieval.evidence_threshold={EVIDENCE_THRESHOLDS}",
        f"retrieval.reference_threshold={REFERENCE_THRESHOLDS}",
    ]
    result = run_sweep(
        overrides, load_queries(ROOT / QUERIES), QUERIES, kb_path=str(ROOT / KB), experiment=EXPERIMENT
    )
    PARENT_RUN_ID = result.parent_run_id
print("sweep parent run:", PARENT_RUN_ID)

# %% [markdown]
# ## The runs, read back from MLflow

# %%
mlflow.set_tracking_uri(TRACKING_URI)
runs = mlflow.search_runs(
    experiment_names=[EXPERIMENT], filter_string=f"tags.mlflow.parentRunId = '{PARENT_RUN_ID}'"
)
table = runs.assign(
    evidence_threshold=runs["params.retrieval.evidence_threshold"].astype(float),
    reference_threshold=runs["params.retrieval.reference_threshold"].astype(float),
    hit_at_1=runs["metrics.hit_at_1"],
    answer_rate=runs["metrics.answer_rate"],
    rejection=runs["metrics.no_evidence_rate"],
    fallback_rate=runs["metrics.fallback_rate"],
)[["run_id", "evidence_threshold", "reference_threshold", "hit_at_1", "answer_rate", "rejection", "fallback_rate"]]
table = table.sort_values(["reference_threshold", "evidence_threshold"]).reset_index(drop=True)
table

# %% [markdown]
# ## The trade-off
#
# Raising `evidence_threshold` rejects more off-topic queries and, past a point, answerable ones
# too (the answer rate and hit@1 drop); raising `reference_threshold` sends more filtered attempts
# to the unfiltered retry (the fallback rate rises).

# %%
panels = [
    ("hit_at_1", "hit@1 (answerable)"),
    ("answer_rate", "answer rate (answerable)"),
    ("rejection", "rejection rate (off-topic)"),
    ("fallback_rate", "fallback rate"),
]
figure, axes = plt.subplots(1, len(panels), figsize=(16, 3.6), sharex=True)
for axis, (column, title) in zip(axes, panels, strict=True):
    for reference, group in table.groupby("reference_threshold"):
        axis.plot(group["evidence_threshold"], group[column], marker="o", label=f"reference {reference}")
    axis.set_title(title)
    axis.set_xlabel("retrieval.evidence_threshold")
    axis.set_ylim(-0.05, 1.05)
axes[0].legend()
figure.tight_layout()
plt.show()

# %% [markdown]
# ## Recommendation
#
# Among the settings that keep the off-topic rejection rate at `MIN_REJECTION` or above, the one
# with the best hit@1, then the best answer rate, then the lowest fallback rate (ties: the lower
# thresholds).

# %%
keeping = table[table["rejection"] >= MIN_REJECTION]
if keeping.empty:  # a recommendation must keep the guard: none rather than a setting that breaks it
    RECOMMENDED = None
    print(f"no setting keeps the off-topic rejection rate at {MIN_REJECTION} or above: no recommendation")
else:
    best = keeping.sort_values(
        ["hit_at_1", "answer_rate", "fallback_rate", "evidence_threshold", "reference_threshold"],
        ascending=[False, False, True, True, True],
    ).iloc[0]
    RECOMMENDED = (
        f"retrieval.evidence_threshold={best['evidence_threshold']} "
        f"retrieval.reference_threshold={best['reference_threshold']}"
    )
    print(
        f"hit@1 {best['hit_at_1']:.3f}, answer rate {best['answer_rate']:.3f}, rejection {best['rejection']:.3f}, "
        f"fallback rate {best['fallback_rate']:.3f} (run {best['run_id']})"
    )
    print("recommended override line:", RECOMMENDED)
