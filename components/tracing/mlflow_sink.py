"""
One MLflow trace per lookup, built and exported off the lookup path.

`TraceWriter` hands a `TraceJob` (the invocation id, the result, `retrieval_details` and the
`StageRecording` of the run: times and references, nothing serialized yet) to an
`MlflowTraceSink`, which queues it and returns at once. The sink's feeder thread turns the job
into a compact JSON trace (`build_trace`: summaries of each stage's inputs and outputs, never
embeddings or full chunk text) and pipes it to an export process
(`components.tracing.mlflow_export_worker`), which writes it to MLflow as a root span `lookup_knowledge`
(inputs: the query; outputs: a compact result; attribute `retrieval_details`) with one child span
per pipeline component in execution order, tagged with `invocation_id`, `found`,
`retrieval_layer`, `fallback_reason` and `status`.

Why explicit spans rather than `mlflow.haystack.autolog()` + `opentelemetry-haystack`: autolog
installs a global OpenTelemetry tracer provider and turns Haystack content tracing on for every
pipeline of the process (indexing included), serializes each component's inputs and outputs on
the lookup thread (embeddings and the full text of every candidate), and writes through MLflow's
SQL store in the lookup process, where each trace costs tens of milliseconds of CPU under the
GIL; and it cannot attach our invocation id, tags and `retrieval_details` without reaching into
the active span. Here the lookup thread records timestamps and references only
(`components.tracing.stage_recorder`); the rest happens in a feeder thread and a separate process at a
lower CPU priority.

Export yields to lookups: the feeder thread and the export process wait until no pipeline run
is in progress in this process (a shared 8-byte activity counter), unless `MAX_DEFERRED` traces
are waiting or a flush was asked for. Back-to-back lookups are therefore not slowed by the
export; their traces are written in the next pause, or when the backlog grows too long.

An `http(s)://` tracking server that cannot be reached (one 2 s TCP connect, at start) or a store
that cannot be set up disables MLflow tracing for the rest of the process with one warning;
lookups are never slowed or failed by MLflow.
"""

import atexit
import contextlib
import json
import logging
import mmap
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from components.contracts import (
    Candidate,
    ContextPack,
    EvidenceBlock,
    LookupResult,
)
from components.tracing import stage_recorder
from components.tracing.stage_recorder import StageRecording

logger = logging.getLogger(__name__)

ROOT_SPAN = "lookup_knowledge"
_PROBE_TIMEOUT_S = 2.0
# Export waits for a moment with no lookup in progress (lookups back to back leave none), unless
# this many traces are waiting: then it goes ahead, so a process under constant load still traces.
IDLE_SETTLE_S = 0.02
MAX_DEFERRED = 500
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


def summarize(value: Any, chars: int = 200, depth: int = 0) -> Any:  # noqa: C901 (one branch per value kind)
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
        # Candidates travel through several stages: each span names them briefly; the evidence
        # blocks (deduper output) carry the previews.
        return {
            "evidence_key": value.evidence_key,
            "source": value.source,
            "similarity": value.similarity,
            "attempt": value.attempt,
            "final_score": value.final_score,
        }
    if _is_vector(value):
        return f"<vector dim={len(value)}>"
    if isinstance(value, np.ndarray):  # query embeddings travel as one array, a row per variant
        return [f"<vector dim={value.shape[-1]}>"] * (value.shape[0] if value.ndim > 1 else 1)
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


def build_trace(job: TraceJob) -> dict[str, Any]:
    """The JSON trace the export process writes: root data and one span per pipeline component."""
    chars = job.summary_chars
    writer_outputs = {"invocation_id": job.invocation_id, "trace_status": job.trace_status}
    spans: list[dict[str, Any]] = []
    stages = list(job.recording.stages) if job.recording is not None else []
    for stage in stages:
        is_writer = stage.name == "trace_writer"
        spans.append(
            {
                "name": stage.name,
                "span_type": _SPAN_TYPES.get(stage.name, "CHAIN"),
                "component_type": stage.component_type,
                "start_ns": stage.start_ns,
                "end_ns": job.ended_ns if is_writer else (stage.end_ns or job.ended_ns),
                "inputs": summarize(stage.inputs, chars),
                "outputs": writer_outputs if is_writer else summarize(stage.outputs, chars),
                "error": None if is_writer else stage.error,
            }
        )
    if not any(span["name"] == "trace_writer" for span in spans) and job.writer_started_ns is not None:
        spans.append(
            {
                "name": "trace_writer",
                "span_type": "TASK",
                "component_type": "TraceWriter",
                "start_ns": job.writer_started_ns,
                "end_ns": job.ended_ns,
                "inputs": None,
                "outputs": writer_outputs,
                "error": None,
            }
        )
    outputs = (
        compact_result(job.result)
        if job.result is not None
        else {"invocationId": job.invocation_id, "error": job.error}
    )
    return {
        "name": ROOT_SPAN,
        "invocation_id": job.invocation_id,
        "tool_name": job.tool_name,
        "tags": job.tags,
        "start_ns": job.started_ns,
        "end_ns": job.ended_ns,
        "inputs": {"query": job.arguments.get("query"), "arguments": summarize(job.arguments, chars)},
        "outputs": outputs,
        "details": job.details,
        "error": (job.error or {}).get("message") if job.status == "error" else None,
        "spans": spans,
    }


def _import_root() -> str:
    """The folder holding the `components` package, for the export process's import path."""
    return str(Path(__file__).resolve().parents[2])


class MlflowTraceSink:
    """
    Exports `TraceJob`s to one MLflow experiment through an export process. Get one with `get_sink`.

    States: `pending` (starting), `ready`, `disabled` (unreachable or misconfigured: jobs are
    dropped; warned once). `submit` never blocks; `flush` waits for everything submitted to be
    written (tests, process exit).
    """

    def __init__(
        self, tracking_uri: str, experiment: str, artifact_location: str | None = None, max_pending: int = 5000
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.state = "pending"
        self.reason: str | None = None
        self.experiment_id: str | None = None
        self.exported = 0
        self.failed = 0
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._flushed: dict[int, threading.Event] = {}
        self._flush_token = 0
        self._flush_lock = threading.Lock()
        self._dropped_warned = False
        self._closed = False
        self._flush_requests = 0
        self._activity: mmap.mmap | None = None
        self._activity_path: str | None = None

    # -- lookup-thread side --------------------------------------------------------------------

    def submit(self, job: TraceJob) -> bool:
        """Queue a trace for export; never blocks. False when disabled or the queue is full."""
        if self.state == "disabled":
            return False
        self._ensure_thread()
        try:
            self._queue.put_nowait(("trace", job))
            return True
        except queue.Full:
            if not self._dropped_warned:
                self._dropped_warned = True
                logger.warning("MLflow trace export is behind (%d pending): dropping traces", self._queue.qsize())
            return False

    def start(self) -> None:
        """Start the export process now (MLflow's import and store set-up take seconds)."""
        if self.state != "disabled":
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._feed, name="knowledge-mlflow-feed", daemon=True)
                self._thread.start()

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every trace submitted so far is written by MLflow (or `timeout` passes)."""
        if self._thread is None or self.state == "disabled":
            return True
        with self._flush_lock:
            self._flush_token += 1
            token = self._flush_token
            event = self._flushed[token] = threading.Event()
            self._flush_requests += 1
        try:
            self._queue.put(("flush", token), timeout=timeout)
        except queue.Full:
            return False
        done = event.wait(timeout)
        return done or self.state == "disabled"

    # -- feeder thread -------------------------------------------------------------------------

    def _disable(self, reason: str) -> None:
        if self.state == "disabled":
            return
        self.state = "disabled"
        self.reason = reason
        logger.warning(
            "MLflow tracing disabled for this process: %s (mlflow.tracking_uri=%s). Lookups and their "
            "tool_invocation records are unaffected.",
            reason,
            self.tracking_uri,
        )
        for event in list(self._flushed.values()):
            event.set()
        self._ready.set()

    def _spawn(self) -> bool:
        problem = _probe(self.tracking_uri)
        if problem:
            self._disable(problem)
            return False
        try:
            fd, self._activity_path = tempfile.mkstemp(
                prefix="knowledge-mlflow-activity-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
            )
            os.ftruncate(fd, 8)
            self._activity = mmap.mmap(fd, 8)
            os.close(fd)
            stage_recorder.add_activity_listener(self._on_activity)
            self._on_activity(stage_recorder.active_runs())
        except OSError as exc:  # no shared counter: export simply does not wait for pauses
            logger.debug("No activity counter for MLflow export: %s", exc)
            self._activity, self._activity_path = None, None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_import_root(), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        # One MLflow writer thread (a SQLite store takes one writer at a time; more only add lock
        # errors and CPU) and larger span batches (fewer commits per trace). Users may override.
        env.setdefault("MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS", "1")
        env.setdefault("MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE", "64")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "components.tracing.mlflow_export_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
                encoding="utf-8",
                bufsize=1,
                start_new_session=True,  # a Ctrl-C of the command must not cut a trace write short
            )
        except OSError as exc:
            self._disable(f"cannot start the export process ({exc})")
            return False
        threading.Thread(target=self._read, name="knowledge-mlflow-read", daemon=True).start()
        return self._send(
            {
                "op": "setup",
                "tracking_uri": self.tracking_uri,
                "experiment": self.experiment,
                "artifact_location": self.artifact_location,
                "activity_path": self._activity_path,
            }
        )

    def _flush_done(self) -> None:
        with self._flush_lock:
            self._flush_requests -= 1

    def _on_activity(self, count: int) -> None:
        activity = self._activity
        if activity is not None:
            struct.pack_into("q", activity, 0, count)

    def _urgent(self) -> bool:
        return bool(self._flush_requests) or self._closed or self._queue.qsize() >= MAX_DEFERRED

    def _wait_for_pause(self) -> None:
        """Let lookups in progress (and the one that usually follows at once) finish first."""
        while stage_recorder.active_runs() and not self._urgent():
            stage_recorder.wait_idle(0.5)
            if not stage_recorder.active_runs():
                time.sleep(IDLE_SETTLE_S)

    def _send(self, message: dict[str, Any]) -> bool:
        process = self._process
        if process is None or process.stdin is None:
            return False
        try:
            process.stdin.write(json.dumps(message, ensure_ascii=False, default=str) + "\n")
            process.stdin.flush()
            return True
        except (OSError, ValueError) as exc:
            self._disable(f"the export process stopped ({exc})")
            return False

    def _feed(self) -> None:
        if not self._spawn():
            self._drain()
            return
        while True:
            kind, item = self._queue.get()
            try:
                if self.state == "disabled":
                    if kind == "flush":
                        self._flush_done()
                        self._flushed.pop(item, threading.Event()).set()
                    continue
                if kind == "trace":
                    self._wait_for_pause()
                    try:
                        trace = build_trace(item)
                    except Exception as exc:  # a job that cannot be summarized is skipped, once said
                        self.failed += 1
                        logger.warning("MLflow trace of %s skipped: %s", getattr(item, "invocation_id", "?"), exc)
                        continue
                    self._send({"op": "trace", "trace": trace})
                elif kind == "flush":
                    self._flush_done()
                    if not self._send({"op": "flush", "token": item}):
                        self._flushed.pop(item, threading.Event()).set()
                elif kind == "close":
                    if self._process is not None and self._process.stdin is not None:
                        self._process.stdin.close()
                    return
            finally:
                self._queue.task_done()

    def _drain(self) -> None:
        while True:
            kind, item = self._queue.get()
            if kind == "flush":
                self._flush_done()
                self._flushed.pop(item, threading.Event()).set()
            self._queue.task_done()

    def _read(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for line in process.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if message.get("op") == "state":
                self._forget_activity_file()  # the export process has it open (or failed)
                if message.get("state") == "ready":
                    self.experiment_id = message.get("experiment_id")
                    self.state = "ready"
                    logger.info(
                        "MLflow tracing to %s, experiment %r (%s)",
                        self.tracking_uri,
                        self.experiment,
                        self.experiment_id,
                    )
                else:
                    self._disable(message.get("reason") or "MLflow set-up failed")
                self._ready.set()
            elif message.get("op") == "flushed":
                self.exported = message.get("exported", self.exported)
                self.failed = message.get("failed", self.failed)
                event = self._flushed.pop(message.get("token"), None)
                if event is not None:
                    event.set()
        code = process.wait()
        self._forget_activity_file()
        if self.state != "disabled" and not (_closing or self._closed):
            self._disable(f"the export process exited with status {code}")

    def _forget_activity_file(self) -> None:
        if self._activity_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._activity_path)
            self._activity_path = None

    def close(self, wait: bool = False, timeout: float = 10.0) -> None:
        """
        Hand every queued trace to the export process and end its input. With `wait=False` (at
        exit) the process finishes writing on its own, so a one-shot command does not wait on
        MLflow; with `wait=True`, wait for it (up to `timeout`).
        """
        if self._thread is None or self.state == "disabled" or self._closed:
            return
        self._closed = True
        try:
            self._queue.put(("close", None), timeout=1.0)
        except queue.Full:
            return
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)
        if wait and self._process is not None:
            try:
                self._process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("MLflow export process still writing after %.0f s; left to finish", timeout)


_sinks: dict[tuple[str, str], MlflowTraceSink] = {}
_sinks_lock = threading.Lock()
_closing = False


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
def _close_at_exit() -> None:
    # A one-shot CLI lookup exits right after printing: its trace goes to the export process,
    # which writes it after this process has gone.
    global _closing
    _closing = True
    with _sinks_lock:
        sinks = list(_sinks.values())
    for sink in sinks:
        try:
            sink.close(wait=False)
        except Exception:  # never turn a successful command into an exit-time traceback
            logger.debug("MLflow export shutdown failed", exc_info=True)
