"""
`knowledge labels pull`: reviewers' assessments of lookup traces in MLflow become labels.

A lookup's MLflow trace carries its `invocation_id` tag. On such a trace, a reviewer adds in the
MLflow UI (or with `mlflow.log_expectation` / `mlflow.log_feedback`):

- an expectation `expected_sources`: the right source(s), a path or a list of paths;
- an expectation `off_topic` (true): the knowledge base holds nothing for the query;
- a feedback `useful` (true or false): whether the lookup's answer helped.

Each becomes a label of origin `mlflow`, its reviewer the assessment's source id, its id the
assessment's: pulling again stores nothing twice. Assessments overridden in MLflow (not valid)
and those of other names are skipped, and so are those `knowledge eval --record` writes on the
lookups it records: they are the eval set's own labels, and taken as reviewers' they would carry
a check split's queries into the labels a model is adapted on.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from components.errors import BadInputError, KnowledgeFailure
from components.tracing.label_records import OFF_TOPIC, RIGHT_SOURCES
from components.tracing.trace_database import sqlite_path
from components.tracing.trace_store import TraceStore
from pipelines.labels.record import BadLabelError, UnknownInvocationError, feedback_verdict, label_invocation

EXPECTED_SOURCES = "expected_sources"
EVAL_SOURCE_ID = "knowledge eval"  # the source of the assessments `knowledge eval --record` writes
OFF_TOPIC_NAME = "off_topic"
USEFUL_NAME = "useful"
LABEL_ID_PREFIX = "mlflow:"
PAGE_SIZE = 500


class NoExperimentError(BadInputError):
    """The configured MLflow experiment does not exist: nothing was ever traced there."""


@dataclass
class PullReport:
    """What one pull did: assessments read, labels new, and why the others were skipped."""

    assessments: int = 0
    labels: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> assessments


def verdict_of(assessment: Any) -> tuple[str, list[str]] | None:
    """(verdict, sources) of one assessment, or None when it is not one a label is made of."""
    if assessment.name == EXPECTED_SOURCES and assessment.expectation is not None:
        value = assessment.expectation.value
        sources = [value] if isinstance(value, str) else list(value or [])
        return RIGHT_SOURCES, [str(source) for source in sources]
    if assessment.name == OFF_TOPIC_NAME and assessment.expectation is not None:
        return (OFF_TOPIC, []) if assessment.expectation.value in (True, "true") else None
    if assessment.name == USEFUL_NAME and assessment.feedback is not None:
        value = assessment.feedback.value
        if isinstance(value, bool):
            return feedback_verdict(value), []
    return None


def lookup_traces(tracking_uri: str, experiment: str) -> list[Any]:
    """Every trace of the experiment that records a lookup (it carries the invocation_id tag)."""
    from mlflow import MlflowClient

    store_file = sqlite_path(tracking_uri) if tracking_uri.startswith("sqlite:") else None
    if store_file is not None and not store_file.is_file():  # MLflow would create an empty store: nothing to read
        raise NoExperimentError(f"no MLflow store at {store_file}: no lookup was traced there")
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise NoExperimentError(f"no MLflow experiment {experiment!r} at {tracking_uri}: no lookup was traced there")
    traces, token = [], None
    while True:
        page = client.search_traces(
            locations=[found.experiment_id], include_spans=False, max_results=PAGE_SIZE, page_token=token
        )
        traces += [trace for trace in page if trace.info.tags.get("invocation_id")]
        token = page.token
        if not token:
            return traces


def pull_labels(store: TraceStore, index_path: str, tracking_uri: str, experiment: str, since: datetime | None):
    """Write the labels of the experiment's assessments (made since `since`) into the store."""
    if not tracking_uri:
        raise BadInputError("MLflow is off (mlflow.tracking_uri is null): there is no store to pull from")
    try:
        traces = lookup_traces(tracking_uri, experiment)
    except BadInputError:
        raise
    except Exception as exc:
        raise KnowledgeFailure(f"cannot read MLflow traces at {tracking_uri}: {exc}") from exc
    report = PullReport()
    before = len(store.labels())
    for trace in traces:
        for assessment in trace.info.assessments or []:
            _pull_one(store, index_path, trace.info.tags["invocation_id"], assessment, since, report)
    report.labels = len(store.labels()) - before
    return report


def _pull_one(store, index_path: str, invocation_id: str, assessment, since, report: PullReport) -> None:
    created = datetime.fromtimestamp(assessment.create_time_ms / 1000, tz=UTC)
    verdict = verdict_of(assessment)
    if since is not None and created < since:
        return
    report.assessments += 1
    if _written_by_eval(assessment):
        report.skipped["written by knowledge eval --record (the eval set's own label)"] += 1
        return
    if verdict is None or not assessment.valid:
        report.skipped["not a label (other name or value, or overridden)"] += 1
        return
    reviewer = assessment.source.source_id if assessment.source else "unknown"
    try:
        label_invocation(
            store,
            index_path,
            invocation_id,
            *verdict,
            reviewer=reviewer,
            origin="mlflow",
            label_id=LABEL_ID_PREFIX + assessment.assessment_id,
            created_at=created,
        )
    except (BadLabelError, UnknownInvocationError) as exc:
        report.skipped[str(exc)] += 1


def _written_by_eval(assessment: Any) -> bool:
    source = assessment.source
    return source is not None and source.source_type == "CODE" and source.source_id == EVAL_SOURCE_ID


def format_pull(report: PullReport) -> str:
    lines = [f"pulled {report.assessments} assessment(s): {report.labels} new label(s)"]
    lines += [f"  skipped {count}: {reason}" for reason, count in sorted(report.skipped.items())]
    return "\n".join(lines)
