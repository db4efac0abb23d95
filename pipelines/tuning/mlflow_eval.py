"""
Evaluations as MLflow's evaluation views read them.

- `log_query_set`: the query file as an MLflow dataset input of the evaluation run
  (`mlflow.data.from_pandas`), shown in the run's Datasets.
- `label_traces`: with `knowledge eval --record`, each query's lookup trace (same experiment) is
  linked to the run and carries its expected sources as an expectation and its outcome (hit@1,
  rank of the first relevant source, reciprocal rank; for an off-topic query, whether it found
  nothing) as feedback: the run's Traces tab shows the per-query outcome beside each trace.
- `run_genai_evaluation`: `knowledge eval --engine mlflow`, `mlflow.genai.evaluate` over the
  pipeline with code-based scorers (hit@1, hit@5, reciprocal rank), no LLM judge: it runs offline.

Usage example:

```python
run_id = runs.log_evaluation(evaluation, cfg)          # calls log_query_set and label_traces
result = run_genai_evaluation(cfg, queries, "eval/queries.jsonl", "lookup-knowledge-eval")
result.metrics["hit_at_1/mean"]
```

Details: docs/tracing.md ("Evaluations in MLflow").
"""

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipelines.evaluation.metrics import RECALL_DEPTH, EvalQuery, first_hit
from pipelines.evaluation.run import DEPTH, Evaluation
from pipelines.labels.mlflow_pull import EVAL_SOURCE_ID, EXPECTED_SOURCES

logger = logging.getLogger(__name__)

# MLflow links at most this many traces to a run per call.
LINK_BATCH = 100
TRACE_PAGE = 500


def query_frame(queries: list[EvalQuery]):
    """The query set as a table: one row per query, its expected sources as a list."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"id": q.id, "query": q.query, "kind": q.kind, "style": q.style, EXPECTED_SOURCES: sorted(q.relevant)}
            for q in queries
        ]
    )


def query_dataset(queries: list[EvalQuery], source: str) -> Any:
    """The query set as an MLflow dataset (name: the file's stem; MLflow digests its rows)."""
    import mlflow.data

    with warnings.catch_warnings():
        # A local path matches two of MLflow's artifact source types; both read it the same way.
        warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
        return mlflow.data.from_pandas(
            query_frame(queries), source=str(Path(source).resolve()), name=Path(source).stem, targets=EXPECTED_SOURCES
        )


def log_query_set(client: Any, run_id: str, queries: list[EvalQuery], source: str) -> None:
    """Log the query set as the run's evaluation dataset."""
    from mlflow.entities import DatasetInput, InputTag

    dataset = query_dataset(queries, source)
    context = InputTag(key="mlflow.data.context", value="evaluation")
    client.log_inputs(run_id, datasets=[DatasetInput(dataset=dataset._to_mlflow_entity(), tags=[context])])


def _code_source() -> Any:
    from mlflow.entities import AssessmentSource, AssessmentSourceType

    return AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=EVAL_SOURCE_ID)


def traces_by_invocation(client: Any, experiment_id: str, invocation_ids: set[str], since_ms: int) -> dict[str, str]:
    """Trace id of each lookup (tag `invocation_id`) traced in the experiment since `since_ms`."""
    found: dict[str, str] = {}
    token = None
    while True:
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=f"trace.timestamp_ms >= {since_ms}",
            max_results=TRACE_PAGE,
            page_token=token,
        )
        for trace in page:
            invocation = trace.info.tags.get("invocation_id")
            if invocation in invocation_ids:
                found[invocation] = trace.info.trace_id
        token = page.token
        if not token:
            return found


def query_feedback(query: EvalQuery, sources: list[str], answered: bool) -> dict[str, Any]:
    """The outcome of one query as feedback values (names as MLflow metrics spell them)."""
    if not query.answerable:
        return {"no_evidence": not answered}
    rank = first_hit(sources, query.relevant, DEPTH)
    feedback: dict[str, Any] = {
        "hit_at_1": rank == 1,
        "reciprocal_rank": round(1.0 / rank, 4) if rank is not None and rank <= RECALL_DEPTH else 0.0,
    }
    if rank is not None:  # a miss has no rank: none rather than 0, which MLflow would average in
        feedback["first_relevant_rank"] = rank
    return feedback


def label_traces(tracking_uri: str, experiment_id: str, run_id: str, evaluation: Evaluation) -> int:
    """
    Link the recorded lookup of every query to the run, with its expectation and feedback.
    Returns how many traces were labelled (queries whose lookup was not traced are skipped).
    """
    import mlflow
    from mlflow import MlflowClient

    from components.tracing.mlflow_sink import flush_all

    answers = evaluation.answers.get("pipeline") or []
    invocations = {a.details.get("invocation_id"): (q, a) for q, a in zip(evaluation.queries, answers, strict=False)}
    invocations.pop(None, None)
    if not invocations:
        return 0
    flush_all(timeout=300)
    if mlflow.get_tracking_uri() != tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri)
    traces = traces_by_invocation(client, experiment_id, set(invocations), evaluation.started_ms or 0)
    trace_ids = list(traces.values())
    for start in range(0, len(trace_ids), LINK_BATCH):
        client.link_traces_to_run(trace_ids[start : start + LINK_BATCH], run_id)
    source = _code_source()
    for invocation, trace_id in traces.items():
        query, answer = invocations[invocation]
        mlflow.log_expectation(trace_id=trace_id, name=EXPECTED_SOURCES, value=sorted(query.relevant), source=source)
        for name, value in query_feedback(query, answer.sources, answer.answered).items():
            mlflow.log_feedback(
                trace_id=trace_id, name=name, value=value, source=source, metadata={"run_id": run_id, "id": query.id}
            )
    missing = len(invocations) - len(traces)
    if missing:
        logger.warning("%d evaluated lookups have no MLflow trace in the run's experiment: not labelled", missing)
    return len(traces)


# ---------------------------------------------------------------------------------------------
# knowledge eval --engine mlflow


def genai_scorers() -> list[Any]:
    """Code-based scorers over the predicted document ranking: hit@1, hit@5, reciprocal rank (MRR@10)."""
    from mlflow.genai.scorers import scorer

    def rank_of(outputs: dict[str, Any], expectations: dict[str, Any]) -> int | None:
        return first_hit(outputs.get("sources") or [], set(expectations.get(EXPECTED_SOURCES) or []), DEPTH)

    @scorer
    def hit_at_1(outputs: dict[str, Any], expectations: dict[str, Any]) -> float:
        return 1.0 if rank_of(outputs, expectations) == 1 else 0.0

    @scorer
    def hit_at_5(outputs: dict[str, Any], expectations: dict[str, Any]) -> float:
        rank = rank_of(outputs, expectations)
        return 1.0 if rank is not None and rank <= 5 else 0.0

    @scorer
    def reciprocal_rank(outputs: dict[str, Any], expectations: dict[str, Any]) -> float:
        rank = rank_of(outputs, expectations)
        return 1.0 / rank if rank is not None and rank <= RECALL_DEPTH else 0.0

    return [hit_at_1, hit_at_5, reciprocal_rank]


def run_genai_evaluation(cfg: DictConfig, queries: list[EvalQuery], source: str, experiment: str) -> Any:
    """
    `mlflow.genai.evaluate` of the pipeline on the answerable queries (MLflow's scorers average
    per query: an off-topic query has no rank to score). Returns MLflow's `EvaluationResult`.
    """
    import mlflow

    from pipelines.evaluation.run import PipelineSystem

    if not cfg.mlflow.tracking_uri:
        raise ValueError("--engine mlflow needs MLflow: set mlflow.tracking_uri (e.g. mlflow=sqlite)")
    # The pipeline is shared by MLflow's prediction threads; one keeps it simple on few cores.
    os.environ.setdefault("MLFLOW_GENAI_EVAL_MAX_WORKERS", "1")
    system = PipelineSystem(cfg)

    def predict(query: str) -> dict[str, Any]:
        ranked = system.rank(query)
        return {"sources": ranked.sources[:RECALL_DEPTH], "found": ranked.answered}

    data = [
        {"inputs": {"query": q.query}, "expectations": {EXPECTED_SOURCES: sorted(q.relevant)}}
        for q in queries
        if q.answerable
    ]
    if not data:
        raise ValueError(f"{source} holds no answerable query to score")
    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=f"{Path(source).stem}-genai"):
        mlflow.log_input(query_dataset(queries, source), context="evaluation")
        # MLflow prints a banner: stdout keeps the command's own output (--json) clean.
        with contextlib.redirect_stdout(sys.stderr):
            return mlflow.genai.evaluate(data=data, predict_fn=predict, scorers=genai_scorers())
