"""
One MLflow trace per lookup, built and exported off the lookup thread.

`TraceWriter` hands a `TraceJob` (the invocation id, the result, `retrieval_details` and the
`StageRecording` of the run: times and references, nothing serialized yet) to an
`MlflowTraceSink`, which returns at once. The sink's background thread turns the job into an
MLflow trace with explicit start/end times: a root span `lookup_knowledge` (inputs: the query;
outputs: a compact result; attribute `retrieval_details`) and one child span per pipeline
component in execution order with compact summaries of its inputs and outputs, tagged with
`invocation_id`, `found`, `retrieval_layer`, `fallback_reason`, `status`. MLflow's own
asynchronous trace logging then writes it to the store.

Why explicit spans rather than `mlflow.haystack.autolog()` + `opentelemetry-haystack`: autolog
installs a global OpenTelemetry tracer provider and turns on Haystack content tracing for every
pipeline of the process (indexing included), serializes every component's inputs and outputs to
JSON on the lookup thread (embeddings and the full text of all candidates), and cannot attach
our invocation id, tags and `retrieval_details` without reaching into the active span. Here the
lookup thread only records timestamps and references (`components.stage_recorder`); everything
else, including compaction of the span payloads, happens on the sink's thread.

MLflow's tracking URI is process-global: a process exports lookup traces to one MLflow store,
the first one configured. An `http(s)://` tracking server that cannot be reached (checked once,
with a 2 s TCP connect) disables MLflow tracing for the rest of the process with one warning;
lookups are never slowed or failed by MLflow.
"""

import atexit
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from components.contracts import (
    Candidate,
    ContextPack,
    EvidenceBlock,
    LookupResult,
)
from components.stage_recorder import StageRecording

logger = logging.getLogger(__name__)

ROOT_SPAN = "lookup_knowledge"
_PROBE_TIMEOUT_S = 2.0
_MAX_LIST_ITEMS = 25
_MAX_TEXT_CHARS = 2000

# Span types by component name; anything else is a CHAIN step.
_SPAN_TYPES = {
    "query_transformer": "PARSER",
    "l0_hints": "RETRIEVER",
    "query_embedder": "EMBEDDING",
    "retriever": "RETRIEVER",
    "sidecar": "RETRIEVER",
    "reranker": "RERANKER",
    "deduper": "CHAIN",
    "context_packer": "CHAIN",
    "assembler": "CHAIN",
    "trace_writer": "TASK",
}


@dataclass
class TraceJob:
    """What the sink needs to build one MLflow trace; built on the lookup thread, cheaply."""

    invocation_id: str
    tool_name: str
    status: str
    arguments: dict[str, Any]
    started_ns: int
    ended_ns: int
    details: dict[str, Any]
    trace_status: str
    summary_chars: int
    result: LookupResult | None = None
    recording: StageRecording | None = None
    writer_started_ns: int | None = None
    error: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)


def _text(value: str, chars: int) -> str:
    return value if len(value) <= chars else value[:chars] + f"... [{len(value)} chars]"


def _is_vector(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 16 and all(isinstance(v, float) for v in value[:16])


def summarize(value: Any, chars: int = 200, depth: int = 0) -> Any:
    """
    A compact, JSON-ready picture of a stage's data: embeddings become their dimension, chunk
    content a preview of `chars` characters, long lists their first items and a count.
    """
    if depth > 6:
        return repr(value)[:chars]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _text(value, _MAX_TEXT_CHARS)
    if isinstance(value, LookupResult):
        return compact_result(value)
    if isinstance(value, EvidenceBlock):
        return value.to_summary(chars)
    if isinstance(value, ContextPack):
        return value.summary()
    if isinstance(value, Candidate):
        return {
            "evidence_key": value.evidence_key,
            "source": value.source,
            "title": value.title,
            "category": value.category,
            "similarity": value.similarity,
            "raw_score": value.raw_score,
            "raw_score_label": value.raw_score_label,
            "path": value.path,
            "attempt": value.attempt,
            "final_score": value.final_score,
            "hit_reasons": value.hit_reasons,
            "content_preview": value.content[:chars],
        }
    if _is_vector(value):
        return f"<vector dim={len(value)}>"
    if isinstance(value, dict):
        return {str(k): summarize(v, chars, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [summarize(v, chars, depth + 1) for v in value[:_MAX_LIST_ITEMS]]
        if len(value) > _MAX_LIST_ITEMS:
            items.append(f"... {len(value) - _MAX_LIST_ITEMS} more")
        return items
    if is_dataclass(value) and not isinstance(value, type):
        for method in ("to_record", "to_dict"):
            if hasattr(value, method):
                return summarize(getattr(value, method)(), chars, depth + 1)
        return summarize(vars(value), chars, depth + 1)
    return _text(repr(value), chars)


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


def _probe(tracking_uri: str) -> str | None:
    """None when the tracking URI looks usable; otherwise why not (one TCP connect for servers)."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme not in ("http", "https"):
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", port), timeout=_PROBE_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"cannot connect to {parsed.hostname}:{port} ({exc.strerror or exc})"


class MlflowTraceSink:
    """
    Exports `TraceJob`s to one MLflow experiment from a daemon thread. Get one with `get_sink`.

    States: `pending` (not set up yet), `ready`, `disabled` (unreachable or misconfigured: jobs
    are dropped; warned once).
    """

    def __init__(
        self, tracking_uri: str, experiment: str, artifact_location: str | None = None, max_pending: int = 2000
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.state = "pending"
        self.reason: str | None = None
        self.experiment_id: str | None = None
        self.exported = 0
        self.failed = 0
        self._queue: queue.Queue[TraceJob | None] = queue.Queue(maxsize=max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._dropped_warned = False
        self._export_warned = False

    # -- lookup-thread side --------------------------------------------------------------------

    def submit(self, job: TraceJob) -> bool:
        """Queue a trace for export; never blocks. False when disabled or the queue is full."""
        if self.state == "disabled":
            return False
        self._ensure_thread()
        try:
            self._queue.put_nowait(job)
            return True
        except queue.Full:
            if not self._dropped_warned:
                self._dropped_warned = True
                logger.warning("MLflow trace export is behind (%d pending): dropping traces", self._queue.qsize())
            return False

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="knowledge-mlflow-export", daemon=True)
                self._thread.start()

    def start(self) -> None:
        """Start setting up in the background now (MLflow's import and store migrations are slow)."""
        if self.state != "disabled":
            self._ensure_thread()

    def flush(self, timeout: float = 60.0) -> bool:
        """
        Wait until every submitted trace has been handed to MLflow and MLflow has written it.
        For tests and process exit; lookups never call it.
        """
        if self._thread is None:
            return True
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.state == "ready":
            import mlflow

            mlflow.flush_trace_async_logging()
        return not self._queue.unfinished_tasks

    # -- export thread -------------------------------------------------------------------------

    def _run(self) -> None:
        self._setup()
        while True:
            job = self._queue.get()
            try:
                if job is not None and self.state == "ready":
                    self._export(job)
            except Exception as exc:  # a trace that cannot be built never stops the exporter
                self.failed += 1
                if not self._export_warned:
                    self._export_warned = True
                    logger.warning("MLflow trace export failed (%s); further failures are logged at debug level", exc)
                else:
                    logger.debug("MLflow trace export failed", exc_info=True)
            finally:
                self._queue.task_done()

    def _disable(self, reason: str) -> None:
        self.state = "disabled"
        self.reason = reason
        logger.warning(
            "MLflow tracing disabled for this process: %s (mlflow.tracking_uri=%s). Lookups and their "
            "tool_invocation records are unaffected.",
            reason,
            self.tracking_uri,
        )

    def _setup(self) -> None:
        problem = _probe(self.tracking_uri)
        if problem:
            self._disable(problem)
            return
        try:
            import mlflow
            from mlflow import MlflowClient

            with _uri_lock:
                global _process_uri
                if _process_uri is None:
                    _process_uri = self.tracking_uri
                    if mlflow.get_tracking_uri() != self.tracking_uri:
                        mlflow.set_tracking_uri(self.tracking_uri)
                elif _process_uri != self.tracking_uri:
                    self._disable(f"this process already traces to {_process_uri} (MLflow's tracking URI is global)")
                    return
            client = MlflowClient(self.tracking_uri)
            experiment = client.get_experiment_by_name(self.experiment)
            if experiment is None:
                artifact = Path(self.artifact_location).resolve().as_uri() if self.artifact_location else None
                try:
                    self.experiment_id = client.create_experiment(self.experiment, artifact_location=artifact)
                except Exception:  # created meanwhile by another process
                    experiment = client.get_experiment_by_name(self.experiment)
                    if experiment is None:
                        raise
                    self.experiment_id = experiment.experiment_id
            else:
                self.experiment_id = experiment.experiment_id
        except Exception as exc:
            text = str(exc).strip().splitlines()
            self._disable(f"{type(exc).__name__}: {text[0] if text else ''}")
            return
        self.state = "ready"
        logger.info("MLflow tracing to %s, experiment %r (%s)", self.tracking_uri, self.experiment, self.experiment_id)

    def _export(self, job: TraceJob) -> None:
        import mlflow
        from mlflow.entities import SpanStatus, SpanStatusCode

        current = mlflow.get_tracking_uri()
        if current != self.tracking_uri:
            # Someone else in this process moved MLflow's global tracking URI: exporting now would
            # put our trace in their store, and moving it back would move their runs. Skip, say so once.
            self.failed += 1
            if not self._export_warned:
                self._export_warned = True
                logger.warning(
                    "MLflow tracking URI changed to %s in this process: lookup traces for %s are skipped",
                    current,
                    self.tracking_uri,
                )
            return

        chars = job.summary_chars
        root = mlflow.start_span_no_context(
            name=ROOT_SPAN,
            span_type="TOOL",
            inputs={"query": job.arguments.get("query"), "arguments": summarize(job.arguments, chars)},
            attributes={"invocation_id": job.invocation_id, "tool_name": job.tool_name},
            tags=job.tags,
            experiment_id=self.experiment_id,
            start_time_ns=job.started_ns,
        )
        stages = list(job.recording.stages) if job.recording is not None else []
        writer_seen = False
        for stage in stages:
            if stage.name == "trace_writer":
                writer_seen = True
                start_ns = stage.start_ns
                outputs: Any = {"invocation_id": job.invocation_id, "trace_status": job.trace_status}
                end_ns = job.ended_ns
                error = None
            else:
                start_ns, end_ns, outputs, error = stage.start_ns, stage.end_ns or job.ended_ns, stage.outputs, stage.error
                outputs = summarize(outputs, chars)
            span = mlflow.start_span_no_context(
                name=stage.name,
                span_type=_SPAN_TYPES.get(stage.name, "CHAIN"),
                parent_span=root,
                inputs=summarize(stage.inputs, chars),
                attributes={"component_type": stage.component_type or ""},
                start_time_ns=start_ns,
            )
            status = SpanStatus(SpanStatusCode.ERROR, error) if error else "OK"
            span.end(outputs=outputs, status=status, end_time_ns=end_ns)
        if not writer_seen and job.writer_started_ns is not None:
            span = mlflow.start_span_no_context(
                name="trace_writer", span_type="TASK", parent_span=root, start_time_ns=job.writer_started_ns
            )
            span.end(
                outputs={"invocation_id": job.invocation_id, "trace_status": job.trace_status},
                end_time_ns=job.ended_ns,
            )
        if job.result is not None:
            root_outputs: Any = compact_result(job.result)
        else:
            root_outputs = {"invocationId": job.invocation_id, "error": job.error}
        root_status: Any = (
            SpanStatus(SpanStatusCode.ERROR, (job.error or {}).get("message", "")) if job.status == "error" else "OK"
        )
        root.end(
            outputs=root_outputs,
            attributes={"retrieval_details": job.details},
            status=root_status,
            end_time_ns=job.ended_ns,
        )
        self.exported += 1


_sinks: dict[tuple[str, str], MlflowTraceSink] = {}
_sinks_lock = threading.Lock()
_uri_lock = threading.Lock()
_process_uri: str | None = None


def get_sink(tracking_uri: str, experiment: str, artifact_location: str | None = None) -> MlflowTraceSink:
    """
    The process's sink for one tracking URI and experiment (created on first use). Sharing it
    keeps the "detect once, warn once, disable for the process" promise for a bad URI.
    """
    key = (tracking_uri, experiment)
    with _sinks_lock:
        sink = _sinks.get(key)
        if sink is None:
            sink = _sinks[key] = MlflowTraceSink(tracking_uri, experiment, artifact_location)
        return sink


def flush_all(timeout: float = 60.0) -> bool:
    """Flush every sink of the process (tests; process exit)."""
    with _sinks_lock:
        sinks = list(_sinks.values())
    return all([sink.flush(timeout) for sink in sinks])


@atexit.register
def _flush_at_exit() -> None:
    # A one-shot CLI lookup exits right after printing: give its trace a bounded chance to land.
    try:
        flush_all(timeout=15.0)
    except Exception:  # never turn a successful command into an exit-time traceback
        logger.debug("MLflow flush at exit failed", exc_info=True)
