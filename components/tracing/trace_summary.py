"""
What one lookup's MLflow trace holds: a root span with the compact decision and one child span
per pipeline component with its timings and a brief of its inputs and outputs (scalars, short
previews, counts). Plain data, built from a `TraceJob`; `components.tracing.mlflow_sink` writes it.

Usage example:

```python
trace = build_trace(job)
trace["tags"]["found"], [span["name"] for span in trace["spans"]]   # "true", ["query_transformer", ...]
```
"""

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from components.contracts import LookupResult
from components.tracing.stage_recorder import StageRecording

ROOT_SPAN = "lookup_knowledge"
WRITER_STAGE = "trace_writer"
PREVIEW_CHARS = 200

# Span types by component name; anything else is a CHAIN step.
SPAN_TYPES = {
    "query_transformer": "PARSER",
    "l0_hints": "RETRIEVER",
    "query_embedder": "EMBEDDING",
    "retriever": "RETRIEVER",
    "sidecar": "RETRIEVER",
    "reranker": "RERANKER",
    "deduper": "CHAIN",
    "context_packer": "CHAIN",
    "assembler": "CHAIN",
    WRITER_STAGE: "TASK",
}


@dataclass
class TraceJob:
    """One lookup as handed over by `TraceWriter`: references only, nothing summarized yet."""

    invocation_id: str
    tool_name: str
    status: str
    arguments: dict[str, Any]
    started_ns: int
    ended_ns: int
    details: dict[str, Any]
    trace_status: str
    result: LookupResult | None = None
    recording: StageRecording | None = None
    writer_started_ns: int | None = None
    error: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)


def preview(text: str, chars: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= chars else text[:chars] + f"... [{len(text)} chars]"


def brief(value: Any, depth: int = 0) -> Any:
    """
    A value as a span shows it: scalars as they are, text as a preview, sequences as their
    length, arrays as their shape, and one level of mappings and dataclasses (deeper: type name).
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return preview(value)
    if isinstance(value, LookupResult):
        return compact_result(value)
    if isinstance(value, np.ndarray):
        return f"<array {'x'.join(str(n) for n in value.shape)}>"
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value)
    if depth > 0:
        return type(value).__name__
    if isinstance(value, dict):
        return {str(key): brief(item, depth + 1) for key, item in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: brief(getattr(value, f.name), depth + 1) for f in fields(value)}
    return type(value).__name__


def stage_data(data: Any) -> dict[str, Any] | None:
    """A component's inputs or outputs (a mapping of socket names) with each value briefed."""
    if data is None:
        return None
    if isinstance(data, dict):
        return {str(key): brief(value) for key, value in data.items()}
    return {"value": brief(data)}


def compact_result(result: LookupResult) -> dict[str, Any]:
    """The result as the root span's output: the decision, not the content."""
    return {
        "invocationId": result.invocation_id,
        "found": result.found,
        "evidenceStatus": result.evidence_status,
        "retrievalLayer": result.retrieval_layer,
        "relevanceLevel": result.relevance_level,
        "completenessHint": result.completeness_hint,
        "message": result.message,
        "evidenceSources": [b.source for b in result.evidence_blocks],
        "fallbackReason": result.retrieval_trace.fallback_reason,
        "traceStatus": result.trace_status,
        **({"error": result.error} if result.error else {}),
    }


def _span(name: str, component_type: str | None, start_ns: int, end_ns: int, **data: Any) -> dict[str, Any]:
    return {
        "name": name,
        "span_type": SPAN_TYPES.get(name, "CHAIN"),
        "component_type": component_type or "",
        "start_ns": start_ns,
        "end_ns": end_ns,
        "inputs": data.get("inputs"),
        "outputs": data.get("outputs"),
        "error": data.get("error"),
    }


def stage_spans(job: TraceJob) -> list[dict[str, Any]]:
    """One span per component run, in start order; the trace writer's ends with the trace."""
    writer_outputs = {"invocation_id": job.invocation_id, "trace_status": job.trace_status}
    spans = []
    for stage in job.recording.stages if job.recording is not None else []:
        is_writer = stage.name == WRITER_STAGE
        spans.append(
            _span(
                stage.name,
                stage.component_type,
                stage.start_ns,
                job.ended_ns if is_writer else stage.end_ns or job.ended_ns,
                inputs=stage_data(stage.inputs),
                outputs=writer_outputs if is_writer else stage_data(stage.outputs),
                error=None if is_writer else stage.error,
            )
        )
    if job.writer_started_ns is not None and not any(span["name"] == WRITER_STAGE for span in spans):
        spans.append(_span(WRITER_STAGE, "TraceWriter", job.writer_started_ns, job.ended_ns, outputs=writer_outputs))
    return spans


def build_trace(job: TraceJob) -> dict[str, Any]:
    """The trace of one lookup: root data (tags, query, decision, brief retrieval details) and its spans."""
    outputs = compact_result(job.result) if job.result is not None else {"invocationId": job.invocation_id}
    if job.error:
        outputs["error"] = job.error
    return {
        "name": ROOT_SPAN,
        "invocation_id": job.invocation_id,
        "tool_name": job.tool_name,
        "tags": job.tags,
        "start_ns": job.started_ns,
        "end_ns": job.ended_ns,
        "inputs": {"query": brief(job.arguments.get("query"))},
        "outputs": outputs,
        "details": brief(job.details),
        "error": (job.error or {}).get("message") if job.status == "error" else None,
        "spans": stage_spans(job),
    }
