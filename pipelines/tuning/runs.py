"""
Evaluation results as MLflow runs: the resolved config as dotted params, the metrics of the
pipeline (unprefixed) and of each baseline (`dense.hit_at_1`), the per-query table as an artifact.

MLflow metric names cannot contain `@`, so `hit@1` is logged as `hit_at_1`.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipelines.config.settings import masked_value, to_container
from pipelines.evaluation.run import Evaluation

EVAL_EXPERIMENT = "lookup-knowledge-eval"
PER_QUERY_ARTIFACT = "per_query.json"
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000


def metric_name(name: str) -> str:
    """The MLflow spelling of a metric name (`hit@1` -> `hit_at_1`)."""
    return name.replace("@", "_at_")


def flatten_params(cfg: DictConfig) -> dict[str, str]:
    """The resolved config as dotted keys (`retrieval.top_k`), values as MLflow param strings."""
    flat: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            flat[prefix] = str(node)[:MAX_PARAM_CHARS]

    walk(to_container(cfg), "")
    return {key: masked_value(key, value) for key, value in flat.items()}  # credentials never reach MLflow


def flatten_metrics(system_metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric metrics of one system with MLflow names; nested groups become `group.key`."""
    flat: dict[str, float] = {}
    for name, value in system_metrics.items():
        key = prefix + metric_name(name)
        if isinstance(value, dict):
            flat.update(flatten_metrics(value, key + "."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat[key] = float(value)
    return flat


def evaluation_metrics(report: dict[str, Any]) -> dict[str, float]:
    """
    The pipeline's metrics unprefixed, each baseline's under its name (`dense.hit_at_1`), the
    domain filter's under `domain_filter.` (`domain_filter.filter_precision`), each query set's of
    a multi-set evaluation under `set.NAME.` (`set.offtopic-alerts.no_evidence_rate`).
    """
    metrics: dict[str, float] = {}
    for system, values in report["systems"].items():
        metrics.update(flatten_metrics(values, "" if system == "pipeline" else f"{system}."))
    metrics.update(flatten_metrics(report.get("domain_filter") or {}, "domain_filter."))
    metrics.update(flatten_metrics(report.get("reliability") or {}, "reliability."))
    for name, values in (report.get("sets") or {}).items():
        metrics.update(flatten_metrics(values, f"set.{name}."))
    return metrics


@dataclass
class RunLogger:
    """
    Logs evaluation runs to one MLflow experiment through an explicit `MlflowClient` (no global
    MLflow state). `tracking_uri=None` turns it off: every method then does nothing.

    Usage example:

    ```python
    runs = RunLogger.from_config(cfg)
    run_id = runs.log_evaluation(evaluation, cfg, run_name="eval")
    print(runs.ui_command())
    ```
    """

    tracking_uri: str | None
    experiment: str = EVAL_EXPERIMENT
    artifact_location: str | None = None

    @classmethod
    def from_config(cls, cfg: DictConfig, experiment: str = EVAL_EXPERIMENT) -> "RunLogger":
        return cls(cfg.mlflow.tracking_uri, experiment, cfg.mlflow.artifact_location)

    @property
    def enabled(self) -> bool:
        return bool(self.tracking_uri)

    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(self.tracking_uri)

    def experiment_id(self) -> str:
        client = self.client()
        found = client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        return client.create_experiment(self.experiment, artifact_location=_artifact_uri(self.artifact_location))

    def start(
        self,
        run_name: str,
        parent_id: str | None = None,
        tags: dict[str, str] | None = None,
        start_time: int | None = None,
    ) -> str | None:
        """
        Create a run (a child of `parent_id` when given), started at `start_time` (ms since the
        epoch; default now); returns its id, None when MLflow is off.
        """
        if not self.enabled:
            return None
        all_tags = dict(tags or {})
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        run = self.client().create_run(self.experiment_id(), run_name=run_name, tags=all_tags, start_time=start_time)
        return run.info.run_id

    def finish(self, run_id: str | None, status: str = "FINISHED", end_time: int | None = None) -> None:
        if run_id:
            self.client().set_terminated(run_id, status=status, end_time=end_time)

    def log_params(self, run_id: str | None, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        if not run_id:
            return
        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client().log_batch(run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, run_id: str | None, metrics: dict[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        if not run_id:
            return
        now = int(time.time() * 1000)
        items = [Metric(key, value, now, 0) for key, value in metrics.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH * 10):
            self.client().log_batch(run_id, metrics=items[start : start + MAX_PARAMS_PER_BATCH * 10])

    def log_evaluation(
        self,
        evaluation: Evaluation,
        cfg: DictConfig,
        run_name: str = "eval",
        parent_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> str | None:
        """
        One run over the evaluation's real start and end: the config as params, the metrics, the
        per-query table, the query set as a dataset input, and (`--record`) the lookups' traces
        linked and labelled (`pipelines.tuning.mlflow_eval`); returns the run id.
        """
        from pipelines.tuning.mlflow_eval import label_traces, log_query_set

        queries = evaluation.report["queries"]
        run_id = self.start(run_name, parent_id, {"queries": queries, **(tags or {})}, evaluation.started_ms)
        if run_id is None:
            return None
        try:
            self.log_params(run_id, flatten_params(cfg))
            self.log_metrics(run_id, evaluation_metrics(evaluation.report))
            self.log_table(run_id, evaluation.per_query_rows())
            if queries:
                log_query_set(self.client(), run_id, evaluation.queries, queries)
            label_traces(self.tracking_uri, self.experiment_id(), run_id, evaluation)
        except Exception:
            self.finish(run_id, "FAILED", evaluation.ended_ms)
            raise
        self.finish(run_id, end_time=evaluation.ended_ms)
        return run_id

    def log_table(self, run_id: str | None, rows: list[dict[str, Any]], artifact_file: str = PER_QUERY_ARTIFACT):
        import pandas as pd

        if run_id:
            self.client().log_table(run_id, data=pd.DataFrame(rows), artifact_file=artifact_file)

    def ui_command(self) -> str:
        return f"mlflow ui --backend-store-uri {self.tracking_uri}"

    def announce(self, run_id: str | None, what: str = "run") -> Iterator[str]:
        """The lines that tell where a run went, or that MLflow is off."""
        if run_id is None:
            yield "MLflow is off (mlflow.tracking_uri is null): no run logged"
            return
        yield f"MLflow {what} {run_id} in experiment {self.experiment!r} at {self.tracking_uri}"
        yield f"  open it with: {self.ui_command()}"


def _artifact_uri(location: str | None) -> str | None:
    """A plain folder as a file URI (MLflow otherwise resolves artifacts against the cwd)."""
    if not location or "://" in location:
        return location
    from pathlib import Path

    return Path(location).resolve().as_uri()


def notebook_tracking_uri(root: Path, state_dir: Path, tracking_uri: str | None, run_given: bool) -> str:
    """
    The MLflow store a notebook reads: the one given; else, for a run id given alone, the store the CLI
    logs to by default (`mlflow.tracking_uri`, relative to the project: where the run was most likely
    made); else the notebook's own state folder's. A relative sqlite path is read from the project, as
    the CLI printed it (the kernel runs in notebooks/).
    """
    from pipelines.config.settings import load_config

    if tracking_uri is None and run_given:
        tracking_uri = load_config(["mlflow=sqlite"]).mlflow.tracking_uri
    tracking_uri = tracking_uri or f"sqlite:///{state_dir}/mlflow.db"
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        tracking_uri = f"sqlite:///{root / tracking_uri.removeprefix('sqlite:///')}"
    return tracking_uri
