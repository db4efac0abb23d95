"""
A sweep read back from its MLflow runs, for the threshold notebook: each combination with its guard
metrics (the worst set of each constraint, guard sets included) and the verdict of the one
recommendation rule (pipelines/tuning/recommend.py), given from the runs as the sweep gave it.

    review = read_sweep("sqlite:///.knowledge/mlflow.db", parent_run_id)
    review.table, review.verdict.lines()
"""

import json
from dataclasses import dataclass, field
from typing import Any

from pipelines.tuning.guards import Constraint
from pipelines.tuning.recommend import Policy, Verdict
from pipelines.tuning.runs import EVAL_EXPERIMENT
from pipelines.tuning.sweep import CURRENT_TAG, PAIRED_VALUES_ARTIFACT, SweepResult, Trial, sweep_verdict


@dataclass
class SweepReview:
    trials: list[Trial]
    constraints: list[Constraint]
    verdict: Verdict
    guard: list[str] = field(default_factory=list)  # the guard in effect, as the sweep printed it
    swept_keys: list[str] = field(default_factory=list)  # the keys the sweep swept, in its order

    @property
    def table(self) -> list[dict[str, Any]]:
        """One row per combination: its swept values, the pipeline's metrics and each constraint's worst set."""
        rows = []
        for trial in self.trials:
            row: dict[str, Any] = {"run_id": trial.run_id, "current": trial.current, "feasible": trial.feasible}
            row.update({o.split("=", 1)[0]: float(o.split("=", 1)[1]) for o in trial.swept})
            for name in ("hit@1", "answer_rate", "fallback_rate", "no_evidence_rate"):
                row[name] = trial.value(name)
            row.update({c.label: c.value(trial.sets) for c in self.constraints})
            rows.append(row)
        return rows


def read_sweep(tracking_uri: str, parent_run_id: str, experiment: str = EVAL_EXPERIMENT) -> SweepReview:
    """The combinations of a `knowledge eval -m` sweep and its verdict, from its parent and child runs."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_run_id)
    tags = parent.data.tags
    constraints = [Constraint.parse(text, "the sweep") for text in tags.get("sweep.constraints", "").split()]
    found = client.get_experiment_by_name(experiment)
    children = client.search_runs([found.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'")
    trials = [_trial(client, run, constraints, number) for number, run in enumerate(reversed(children))]
    result = SweepResult(trials, parent_run_id, tags.get("sweep.rank_by", "hit@1"), None, constraints)
    policy = Policy(tags["verdict.metric"], float(tags["verdict.level"]))
    verdict = sweep_verdict(result, policy, int(tags["verdict.min_off_topic"]), tags["verdict.tuning_sets"].split())
    guard = [line for line in tags.get("sweep.guard", "").splitlines() if line]
    swept = list(dict.fromkeys(o.split("=", 1)[0] for trial in trials for o in trial.swept))
    return SweepReview(trials, constraints, verdict, guard, swept)


def _trial(client, run, constraints: list[Constraint], number: int) -> Trial:
    """One child run as the sweep's trial: metrics unprefixed, each set's under `set.NAME.`, its paired values."""
    from pipelines.tuning.guards import feasible

    metrics, sets = {}, {}
    for key, value in run.data.metrics.items():
        if key.startswith("set."):
            name, metric = key.removeprefix("set.").split(".", 1)
            if "." not in metric:  # a group (fallback_rate_by_reason.*) is no constraint's metric
                sets.setdefault(name, {})[metric.replace("_at_", "@")] = value
        elif "." not in key:
            metrics[key.replace("_at_", "@")] = value
    swept = run.data.tags.get("sweep.combination", "").split()
    trial = Trial(
        swept, swept, metrics, run.info.run_id, sets=sets, feasible=feasible(constraints, sets), number=number
    )
    trial.current = run.data.tags.get(CURRENT_TAG) == "true"
    trial.values = json.loads(_artifact_text(client, run.info.run_id, PAIRED_VALUES_ARTIFACT))
    return trial


def _artifact_text(client, run_id: str, name: str) -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="knowledge-review-") as folder:
        return Path(client.download_artifacts(run_id, name, folder)).read_text(encoding="utf-8")
