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
# # The two vector-store paths side by side
#
# `knowledge compare --queries FILE` searches the same collection through both vector-store paths
# (`sdk`: pymilvus `MilvusClient.search`; `haystack`: milvus-haystack's retriever) with the same query
# embeddings, and logs one MLflow run: agreement metrics, a per-query table (`comparison.json`,
# `comparison.csv`) and an HTML report. This notebook reads such a run back with MLflow and plots
# the agreement per query and the score pairs by path.
#
# It reads the run `RUN_ID` (from `TRACKING_URI`, by default the store `knowledge compare` logs to),
# or the latest run of the `lookup-knowledge-compare` experiment in the MLflow store under `STATE_DIR`. When that store holds no run yet, it makes one on the bundled
# `knowledge/` base with a handful of queries, so that it runs top to bottom anywhere.

# %% tags=["parameters"]
STATE_DIR = None  # folder with mlflow.db; None: $KNOWLEDGE_NOTEBOOK_STATE, else a temporary folder
TRACKING_URI = None  # the MLflow store of the run; None: the CLI's default store for a RUN_ID, else the state folder's
RUN_ID = None  # a `knowledge compare` run id; None: the latest run of the experiment
EXPERIMENT = "lookup-knowledge-compare"

# %%
import json
import os
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import mlflow
import pandas as pd


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

TRACKING_URI = notebook_tracking_uri(ROOT, STATE_DIR, TRACKING_URI, run_given=RUN_ID is not None)
print("state:", STATE_DIR, "| MLflow:", TRACKING_URI)
client = mlflow.MlflowClient(TRACKING_URI)


def latest_run_id() -> str | None:
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


# %% [markdown]
# ## A run to read
#
# The run given, else the latest one; with none in the store, a small comparison of the sample
# knowledge base is indexed and logged first (the same code as `knowledge compare`).

# %%
SAMPLE_QUERIES = [
    {"id": "disk", "query": "disk almost full on a worker node"},
    {"id": "replica", "query": "database replica is minutes behind the primary"},
    {"id": "cert", "query": "TLS certificate expires in three days"},
    {"id": "cpu", "query": "one process is eating all the CPU"},
    {"id": "bread", "query": "best sourdough bread recipe for beginners"},
]

run_id = RUN_ID or latest_run_id()
if run_id is None:
    from pipelines.evaluation.compare import run_comparison
    from pipelines.indexing import run_indexing
    from pipelines.config.settings import load_config

    cfg = load_config([f"paths.state_dir={STATE_DIR}", f"kb.path={ROOT / 'knowledge'}"])
    run_indexing(cfg, rebuild=True)
    run_id = run_comparison(cfg, SAMPLE_QUERIES, queries_file="(notebook sample)", top_k=10)["run_id"]

run = client.get_run(run_id)
pd.Series(run.data.metrics).sort_index().to_frame("value")

# %% [markdown]
# ## Agreement per query
#
# Overlap@k, Jaccard and rank-biased overlap (RBO, p = 0.9) of the two top-k lists, and whether the
# top hit is the same. Both paths query the same collection with the same vector, so anything short
# of 1.0 is a difference in how a path searches or returns hits.

# %%
with tempfile.TemporaryDirectory(prefix="compare-run-") as folder:
    details = json.loads(Path(client.download_artifacts(run_id, "comparison.json", folder)).read_text(encoding="utf-8"))
agreement = pd.DataFrame(
    [
        {
            "id": d["id"],
            "overlap_at_k": d["comparison"]["overlap_at_k"],
            "jaccard": d["comparison"]["jaccard"],
            "rbo": d["comparison"]["rbo"],
            "top1_agreement": d["comparison"]["same_top1"],
        }
        for d in details
    ]
).set_index("id")

# One row per query, the lowest agreement at the top: the chart grows with the queries, so its labels
# stay readable at 40 queries and more (a vertical bar per query would overlap its labels).
shown = agreement.sort_values(["rbo", "overlap_at_k"], ascending=False)
axes = shown[["overlap_at_k", "jaccard", "rbo"]].plot.barh(
    figsize=(8, max(3, 0.3 * len(shown) + 1)), xlim=(0, 1.05), width=0.8
)
axes.set_title(f"Agreement per query (run {run_id[:8]})")
axes.set_xlabel("share")
axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
plt.tight_layout()
plt.show()
agreement

# %% [markdown]
# ## Score pairs by path
#
# For every chunk both paths returned: its normalized similarity on each path (left: on the
# diagonal when the paths agree), and its raw scores, which mean different things (right: the
# sdk path's L2 squared distance `d` against milvus-haystack's `1 - d/4`, a straight line).

# %%
pairs = pd.DataFrame(
    [
        {
            "id": d["id"],
            "evidence_key": key,
            "sdk_similarity": sdk[key]["similarity"],
            "haystack_similarity": haystack[key]["similarity"],
            "sdk_raw": sdk[key]["score_value"],
            "haystack_raw": haystack[key]["score_value"],
        }
        for d in details
        for sdk, haystack in [
            (
                {r["evidence_key"]: r for r in d["results"]["sdk"]},
                {r["evidence_key"]: r for r in d["results"]["haystack"]},
            )
        ]
        for key in sdk.keys() & haystack.keys()
    ]
)
labels = {path: run.data.params[f"{path}_score_label"] for path in ("sdk", "haystack")}

figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
left.scatter(pairs["sdk_similarity"], pairs["haystack_similarity"], s=12)
left.plot([0, 1], [0, 1], linestyle=":", color="grey")
left.set(xlabel="sdk similarity", ylabel="haystack similarity", title="Normalized similarity")
right.scatter(pairs["sdk_raw"], pairs["haystack_raw"], s=12, color="tab:orange")
right.set(xlabel=f"sdk raw: {labels['sdk']}", ylabel=f"haystack raw: {labels['haystack']}", title="Raw scores")
figure.tight_layout()
plt.show()
similarity_gap = (pairs["sdk_similarity"] - pairs["haystack_similarity"]).abs()
print(f"{len(pairs)} shared hits; max |similarity difference| {similarity_gap.max():.2e}")
