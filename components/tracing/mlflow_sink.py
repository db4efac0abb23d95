"""
Writes lookup traces (`components.tracing.trace_summary`) to MLflow with MLflow's own tracing API,
in this process: the spans are built on the calling thread and MLflow's asynchronous trace
logging queue writes them to the store. `get_sink` gives one sink per tracking URI and
experiment; `flush_all` waits until every trace is written (tests, benchmarks, process exit).

Why this design rather than an export process, and what a trace costs: docs/tracing.md.
"""

import atexit
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from components.common.masking import masked
from components.errors import first_line
from components.tracing.trace_summary import TraceJob, build_trace

logger = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 2.0
# Traces of lookups that finish before MLflow's set-up (its import alone takes seconds) wait here.
_MAX_EARLY = 1000
# One writer (a SQLite store takes one at a time; more only add lock retries and CPU) and large
# span batches: the SQL store's cost is mostly per write, not per span (docs/tracing.md).
# Environment variables of the same names override these.
_ASYNC_DEFAULTS = {
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS": "1",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "200",
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


def _status(error: str | None) -> Any:
    from mlflow.entities import SpanStatus, SpanStatusCode

    return SpanStatus(SpanStatusCode.ERROR, error) if error else "OK"


def _write_span(span_data: dict[str, Any], parent: Any) -> None:
    """One span and its child spans (retrieval attempts), with its attributes and events."""
    import mlflow
    from mlflow.entities import SpanEvent

    span = mlflow.start_span_no_context(
        name=span_data["name"],
        span_type=span_data["span_type"],
        parent_span=parent,
        inputs=span_data["inputs"],
        attributes={"component_type": span_data["component_type"], **span_data["attributes"]},
        start_time_ns=span_data["start_ns"],
    )
    for name, attributes in span_data["events"]:
        span.add_event(SpanEvent(name=name, timestamp=span_data["end_ns"], attributes=attributes))
    for child in span_data["children"]:
        _write_span(child, span)
    span.end(outputs=span_data["outputs"], status=_status(span_data["error"]), end_time_ns=span_data["end_ns"])


def _write(trace: dict[str, Any], experiment_id: str) -> None:
    """Hand one trace to MLflow: a root span and one child span per component, explicit times."""
    import mlflow

    root = mlflow.start_span_no_context(
        name=trace["name"],
        span_type="TOOL",
        inputs=trace["inputs"],
        attributes={"invocation_id": trace["invocation_id"], "tool_name": trace["tool_name"]},
        tags=trace["tags"],
        experiment_id=experiment_id,
        start_time_ns=trace["start_ns"],
    )
    for child in trace["spans"]:
        _write_span(child, root)
    root.end(
        outputs=trace["outputs"],
        attributes={"retrieval_details": trace["details"]},
        status=_status(trace["error"]),
        end_time_ns=trace["end_ns"],
    )


class MlflowTraceSink:
    """
    Writes `TraceJob`s to one MLflow experiment. Get one with `get_sink`.

    States: `pending` (MLflow's import and the experiment's set-up run on a background thread;
    traces wait), `ready`, `disabled` (unreachable, misconfigured, or another tracking URI
    already in use by this process: traces are dropped, warned once). `submit` never raises.
    """

    def __init__(self, tracking_uri: str, experiment: str, artifact_location: str | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.state = "pending"
        self.reason: str | None = None
        self.experiment_id: str | None = None
        self.exported = 0
        self.failed = 0
        self._early: list[TraceJob] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure_warned = False

    def start(self) -> None:
        """Set MLflow up in the background (idempotent); the first submitted trace starts it too."""
        with self._lock:
            if self._thread is None and self.state == "pending":
                self._thread = threading.Thread(target=self._set_up, name="knowledge-mlflow-setup", daemon=True)
                self._thread.start()

    def submit(self, job: TraceJob) -> bool:
        """Write the trace of one lookup (queued while MLflow sets up). False when it is dropped."""
        if self.state == "pending":
            self.start()
            with self._lock:
                if self.state == "pending":
                    if len(self._early) >= _MAX_EARLY:
                        return False
                    self._early.append(job)
                    return True
        if self.state != "ready":
            return False
        return self._export(job)

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every trace submitted so far is written (or `timeout` passes)."""
        if self._thread is None:
            return True
        if not self._ready.wait(timeout):
            return False
        if self.state != "ready":
            return True
        import mlflow

        mlflow.flush_trace_async_logging()
        return True

    def _export(self, job: TraceJob) -> bool:
        try:
            _write(build_trace(job), self.experiment_id or "")
        except Exception as exc:  # one bad trace never fails a lookup nor stops the others
            self.failed += 1
            if not self._failure_warned:
                self._failure_warned = True
                logger.warning(
                    "MLflow trace of %s not written (%s); later failures are not reported", job.invocation_id, exc
                )
            return False
        self.exported += 1
        return True

    def _set_up(self) -> None:
        try:
            problem = _probe(self.tracking_uri)
            if problem is None:
                problem = self._open_experiment()
        except Exception as exc:
            problem = first_line(exc, typed=True)
        with self._lock:
            early, self._early = self._early, []
            if problem:
                self._disable(problem)
            else:
                self.state = "ready"
                logger.info(
                    "MLflow tracing to %s, experiment %r (%s)", self.tracking_uri, self.experiment, self.experiment_id
                )
        for job in early if not problem else []:
            self._export(job)
        self._ready.set()

    def _open_experiment(self) -> str | None:
        """Point this process's MLflow at the tracking URI and get or create the experiment."""
        for name, value in _ASYNC_DEFAULTS.items():
            os.environ.setdefault(name, value)
        import mlflow
        from mlflow import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        with _uri_lock:
            global _process_uri
            if _process_uri not in (None, self.tracking_uri):
                return f"this process already traces to {_process_uri} (MLflow takes one tracking URI per process)"
            mlflow.set_tracking_uri(self.tracking_uri)
            _process_uri = self.tracking_uri
        client = MlflowClient(self.tracking_uri)
        found = client.get_experiment_by_name(self.experiment)
        if found is None:
            artifacts = Path(self.artifact_location).resolve().as_uri() if self.artifact_location else None
            try:
                self.experiment_id = client.create_experiment(self.experiment, artifact_location=artifacts)
                return None
            except Exception:  # created meanwhile by another process
                found = client.get_experiment_by_name(self.experiment)
                if found is None:
                    raise
        self.experiment_id = found.experiment_id
        return None

    def _disable(self, reason: str) -> None:
        self.state = "disabled"
        self.reason = reason
        logger.warning(
            "MLflow tracing disabled for this process: %s (mlflow.tracking_uri=%s). Lookups and their "
            "tool_invocation records are unaffected.",
            masked(reason),
            masked(self.tracking_uri),
        )


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
    """Flush every sink of the process (tests; benchmarks; process exit)."""
    with _sinks_lock:
        sinks = list(_sinks.values())
    return all([sink.flush(timeout) for sink in sinks])


def release_all(timeout: float = 60.0) -> bool:
    """
    Flush every sink, then forget the sinks and the process's tracking URI, so the process may
    trace to another store afterwards (a benchmark's own store, removed with its folder, then the
    user's). Sinks handed out before must not be used again.
    """
    global _process_uri
    flushed = flush_all(timeout)
    with _sinks_lock, _uri_lock:
        _sinks.clear()
        _process_uri = None
    return flushed


def _export_queues() -> list[Any]:
    """MLflow's asynchronous trace-writing queues (private attributes of MLflow 3.17; [] if they move)."""
    from mlflow.tracing.processor import base_mlflow
    from mlflow.tracing.provider import _get_trace_exporter

    processors = list(base_mlflow._batch_processor_registry)
    for processor in processors:  # spans held in a span batch go to the queue first
        processor.force_flush()
    exporters = [p.span_exporter for p in processors] + [_get_trace_exporter()]
    return [queue for e in exporters if (queue := getattr(e, "_async_queue", None)) is not None]


def drain(timeout: float = 60.0) -> bool:
    """
    Wait until MLflow has written every trace handed to it so far, its writer left running. A
    long-running process never flushes; `mlflow.flush_trace_async_logging` stops and restarts the
    writer, whose restart first sits out a 1 s poll: a benchmark that flushes after every block
    would count that wait as tracing's cost. Falls back to `flush_all` when MLflow's queue is
    not where this expects it.
    """
    deadline = time.monotonic() + timeout
    with _sinks_lock:
        sinks = list(_sinks.values())
    for sink in sinks:  # traces of lookups that finished before MLflow's set-up are handed over then
        if sink._thread is not None and not sink._ready.wait(max(0.0, deadline - time.monotonic())):
            return False
    try:
        pending = [queue._queue for queue in _export_queues()]
    except Exception:
        return flush_all(timeout)
    while any(q.unfinished_tasks for q in pending):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@atexit.register
def _flush_at_exit() -> None:
    # A one-shot CLI lookup exits right after printing: its trace is written before it goes.
    try:
        flush_all(timeout=60.0)
    except Exception:  # never turn a successful command into an exit-time traceback
        logger.debug("MLflow flush at exit failed", exc_info=True)
