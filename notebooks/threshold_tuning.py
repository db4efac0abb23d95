# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tuning the retrieval thresholds
#
# This notebook reads the MLflow runs of a threshold sweep, plots hit@1, the answer rate, the
# off-topic rejection rate (on the worst query set, the guard sets of `conf/guard/` included) and the
# fallback rate against the thresholds, and gives the verdict of the same recommendation rule as
# `knowledge eval -m`: a setting only when it keeps every guard and beats the current settings by a
# paired test, else "keep the current settings" and why.
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
# temporary state folder removed when the kernel exits (or `$KNOWLEDGE_NOTEBOOK_STATE`, kept).

# %% tags=["parameters"]
STATE_DIR = None  # the state folder (Milvus Lite db, MLflow store); None: $KNOWLEDGE_NOTEBOOK_STATE or a temp folder
TRACKING_URI = None  # the MLflow store of the sweep; None: the CLI's default store for a PARENT_RUN_ID, else the state folder's
PARENT_RUN_ID = None  # the parent run of an existing sweep; None: run the sweep below
EXPERIMENT = "lookup-knowledge-eval"
QUERIES = "eval/sample-kb.jsonl"
KB = "knowledge"
EVIDENCE_THRESHOLDS = "0.2,0.35,0.5,0.65"
REFERENCE_THRESHOLDS = "0.3,0.6"
GUARD_OVERRIDES = []  # e.g. ["guard.sets=[eval/my-guard.jsonl]"]: the guard (conf/guard/) of the sweep run here
ADAPTED_MODEL = None  # a model folder `knowledge adapt` wrote, compared with the packaged model at the end; None: skipped

# %%
import os
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt


def project_root(start: Path) -> Path:
    for folder in [start, *start.parents]:
        if (folder / "pyproject.toml").exists() and (folder / "knowledge").is_dir():
            return folder
    raise FileNotFoundError("run this notebook from inside the lookup-knowledge project")


ROOT = project_root(Path.cwd())
sys.path.insert(0, str(ROOT))  # this checkout's code, whichever project the kernel's venv installed
# A temporary folder is removed when the kernel exits: the notebook leaves nothing outside its output.
_TEMPORARY = None if STATE_DIR or os.environ.get("KNOWLEDGE_NOTEBOOK_STATE") else tempfile.TemporaryDirectory()
STATE_DIR = Path(STATE_DIR or os.environ.get("KNOWLEDGE_NOTEBOOK_STATE") or _TEMPORARY.name)
from pipelines.tuning.runs import notebook_tracking_uri

TRACKING_URI = notebook_tracking_uri(ROOT, STATE_DIR, TRACKING_URI, run_given=PARENT_RUN_ID is not None)
print("state:", STATE_DIR, "| MLflow:", TRACKING_URI)

# %% [markdown]
# ## The sweep
#
# Skipped when `PARENT_RUN_ID` names an existing sweep. Otherwise: index `knowledge/` (once; later
# runs skip unchanged documents) and evaluate every combination of the two thresholds.

# %%
if PARENT_RUN_ID is None:
    from pipelines.tuning.sweep import run_guarded_sweep

    overrides = [
        f"paths.state_dir={STATE_DIR}",
        f"mlflow.tracking_uri={TRACKING_URI}",
        *GUARD_OVERRIDES,
        f"retrieval.evidence_threshold={EVIDENCE_THRESHOLDS}",
        f"retrieval.reference_threshold={REFERENCE_THRESHOLDS}",
    ]
    result = run_guarded_sweep(overrides, [str(ROOT / QUERIES)], kb_path=str(ROOT / KB), experiment=EXPERIMENT)
    PARENT_RUN_ID = result.parent_run_id
print("sweep parent run:", PARENT_RUN_ID)

# %% [markdown]
# ## The runs, read back from MLflow

# %%
import pandas as pd

from pipelines.tuning.review import read_sweep

review = read_sweep(TRACKING_URI, PARENT_RUN_ID, EXPERIMENT)
for line in review.guard:
    print(line)
# The guard's rejection where one is in effect, else the swept query file's own off-topic queries.
REJECTION = next((c.label for c in review.constraints if c.metric == "no_evidence_rate"), "no_evidence_rate")
# Whatever the sweep swept (evidence x reference here; the docs' loop sweeps evidence x uncovered): x, then lines.
SWEPT = review.swept_keys
table = pd.DataFrame(review.table).rename(columns={"hit@1": "hit_at_1", REJECTION: "rejection"})
table = table.sort_values(SWEPT[::-1]).reset_index(drop=True)
table

# %% [markdown]
# ## The trade-off
#
# Raising `evidence_threshold` rejects more off-topic queries and, past a point, answerable ones
# too (the answer rate and hit@1 drop); raising `reference_threshold` sends more filtered attempts
# to the unfiltered retry (the fallback rate rises). The rejection rate is the worst query set's,
# the guard sets included: the swept file's generic off-topic queries alone guard little.

# %%
panels = [
    ("hit_at_1", "hit@1 (answerable)"),
    ("answer_rate", "answer rate (answerable)"),
    ("rejection", "rejection rate (off-topic, worst set)"),
    ("fallback_rate", "fallback rate"),
]
X, LINES = SWEPT[0], SWEPT[1:2]
groups = table.groupby(LINES[0]) if LINES else [("", table)]
figure, axes = plt.subplots(1, len(panels), figsize=(16, 3.6), sharex=True)
for axis, (column, title) in zip(axes, panels, strict=True):
    for value, group in groups:
        label = f"{LINES[0].rsplit('.', 1)[-1]} {value}" if LINES else None
        axis.plot(group[X], group[column], marker="o", label=label)
    axis.set_title(title)
    axis.set_xlabel(X)
    axis.set_ylim(-0.05, 1.05)
if LINES:
    axes[0].legend()
figure.tight_layout()
plt.show()

# %% [markdown]
# ## Recommendation
#
# The verdict of `pipelines/tuning/recommend.py`, as `knowledge eval -m` printed it for this sweep:
# the best combination that keeps every constraint on every set is recommended only when a paired
# sign test over the tuning queries finds it better than the current settings at `guard.level`.

# %%
for line in review.verdict.lines():
    print(line)
RECOMMENDED = review.verdict.recommended.label if review.verdict.recommended else None

# %% [markdown]
# ## Base against adapted model
#
# `knowledge adapt` (docs/adapt.md) writes a model folder that carries its own calibration. Given as
# `ADAPTED_MODEL`, it is compared with the packaged model in MLflow: a sweep over `embedder.model`,
# one child run per model on the same query set, each model indexed into its own folder and with its
# own thresholds, and the verdict of the same rule. Left empty, nothing runs: the notebook trains
# nothing.

# %%
if ADAPTED_MODEL:
    from pipelines.tuning.sweep import run_guarded_sweep

    models = run_guarded_sweep(
        [
            f"paths.state_dir={STATE_DIR}",
            f"mlflow.tracking_uri={TRACKING_URI}",
            *GUARD_OVERRIDES,
            f"embedder.model=packaged:all-MiniLM-L6-v2,{ADAPTED_MODEL}",
        ],
        [str(ROOT / QUERIES)],
        kb_path=str(ROOT / KB),
        experiment=EXPERIMENT,
    )
    print("model comparison parent run:", models.parent_run_id)
    for line in models.verdict.lines() if models.verdict else []:
        print(line)
    columns = ("hit@1", "hit@5", "answer_rate", "no_evidence_rate", "fallback_rate")
    model_table = pd.DataFrame(
        [{"model": " ".join(trial.swept), **{name: trial.value(name) for name in columns}} for trial in models.trials]
    )
    print(model_table.to_string(index=False))
else:
    print("ADAPTED_MODEL not given: no model comparison")
