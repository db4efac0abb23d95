import dataclasses
import hashlib
import logging
import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from haystack import component, default_from_dict, default_to_dict

from components.common.choices import check_at_least, check_named, check_named_or_none, check_unit_interval
from components.common.masking import masked
from components.contracts import STATUS_ERROR
from components.lookup_result import LookupResult
from components.tracing import stage_recorder
from components.tracing.finished_stages import with_finished_stages
from components.tracing.mlflow_sink import MlflowTraceSink, get_sink
from components.tracing.trace_database import DEFAULT_TIMEOUT_S
from components.tracing.trace_records import STATUS_OK, TRACE_LOST
from components.tracing.trace_store import TraceStore
from components.tracing.trace_summary import TraceJob

logger = logging.getLogger(__name__)

# Where a lookup came from when not a client (`evaluation`): a key of retrieval_details.
ORIGIN_KEY = "origin"
EVALUATION_ORIGIN = "evaluation"
# The raw query kept in retrieval_details.query_transform.
RAW_QUERY_CHARS = 2000
# The most of a query the `arguments` column keeps; a longer one keeps its length and sha256 beside it.
ARGUMENT_QUERY_CHARS = 4000


def new_invocation_id() -> str:
    return str(uuid.uuid4())


def bounded_arguments(arguments: dict[str, Any], used_query: str | None = None) -> dict[str, Any]:
    """
    The call's arguments as recorded: a query longer than the pipeline used (`used_query`, the
    query cut to `query.max_chars`) or than `ARGUMENT_QUERY_CHARS` is stored cut, with
    `query_chars` (its original length) and `query_sha256` (of its UTF-8 text) beside it.
    """
    query = arguments.get("query")
    if not isinstance(query, str):
        return arguments
    stored = used_query if used_query is not None and len(used_query) < len(query) else query
    stored = stored[:ARGUMENT_QUERY_CHARS]
    if stored == query:
        return arguments
    digest = hashlib.sha256(query.encode("utf-8", errors="surrogatepass")).hexdigest()
    return {**arguments, "query": stored, "query_chars": len(query), "query_sha256": digest}


def error_info(exc: BaseException, component_name: str | None = None) -> dict[str, Any]:
    """The `error` of a failed call, as recorded and returned: type, one-line message, component."""
    # Whole, on one line: a message cut at its first line can stop mid-sentence.
    text = " ".join(masked(str(exc)).split())
    return {
        "type": type(exc).__name__,
        "message": text or type(exc).__name__,
        "component": component_name,
    }


def sidecar_tags(sidecar: dict[str, Any] | None) -> dict[str, str]:
    """
    The sidecar comparison as trace tags that `mlflow.search_traces` can filter on (tags are
    strings): `sidecar_status`, and when it ran, `sidecar_top1_agreement` ("true"/"false"),
    `sidecar_overlap` (shared hits over depth) and `sidecar_rbo`. None or disabled adds nothing.
    """
    if not sidecar or sidecar.get("status") in (None, "disabled"):
        return {}
    tags = {"sidecar_status": str(sidecar["status"]), "sidecar_path": str(sidecar.get("path") or "none")}
    comparison = sidecar.get("comparison") or {}
    if comparison:
        tags["sidecar_top1_agreement"] = "true" if comparison.get("same_top1") else "false"
        tags["sidecar_overlap"] = f"{comparison.get('overlap_ratio', 0.0):.4f}"
        if "rbo" in comparison:
            tags["sidecar_rbo"] = f"{comparison['rbo']:.4f}"
    return tags


@component
class TraceWriter:
    """
    Records every lookup: one `tool_invocation` row and, when MLflow is configured, one MLflow
    trace. The last step of the query pipeline, after `ResultAssembler`.

    The row holds the call's `arguments`, `status`, `found`, `retrieval_layer`, `latency_ms`,
    `created_at`, `error` and `retrieval_details` (L0 hints, query transform, every retrieval
    attempt and the selected one, fallback reason, rerank trace, context pack summary, compact
    evidence summaries with content cut to `summary_chars`, candidate and final counts). The
    returned result is the same `LookupResult` with its `invocation_id` and `trace_status`
    (`recorded`, or `spooled` when the database is unavailable: the record then waits in the
    local spool and is replayed later). Recording never fails the lookup.

    The MLflow trace (`components.tracing.trace_summary`: the decision, and one span per pipeline
    component as recorded by `components.tracing.stage_recorder`, tagged with the invocation id,
    `found`, the retrieval layer and the fallback reason) is handed to MLflow's asynchronous
    trace logging (`components.tracing.mlflow_sink`); `sample_rate` traces only a share of lookups.

    Usage example:

    ```python
    >>> import tempfile, time
    >>> folder = tempfile.mkdtemp()
    >>> writer = TraceWriter(db_url=f"sqlite:///{folder}/traces.db", spool_path=f"{folder}/trace-spool.jsonl",
    ...                      tracking_uri=None, artifact_location=None)  # no MLflow trace
    >>> writer.warm_up()
    >>> # A lookup's result goes through `run`; a call that failed through `record_error`:
    >>> failed = writer.record_error("disk full", ConnectionError("vector store went away"), time.time(), "retriever")
    >>> failed.trace_status, failed.evidence_status
    ('recorded', 'error')
    >>> row = writer.store.get(failed.invocation_id)
    >>> row["status"], row["error"]
    ('error', 'ConnectionError: vector store went away (in retriever)')

    ```
    """

    def __init__(
        self,
        db_url: str,
        spool_path: str,
        tracking_uri: str | None,
        artifact_location: str | None,
        summary_chars: int = 200,
        tool_name: str = "lookup_knowledge",
        experiment: str = "lookup-knowledge",
        retry_interval: float = 5.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        sample_rate: float = 0.05,
        model_verdict: str | None = None,
    ) -> None:
        """
        :param db_url: SQLAlchemy URL of the `tool_invocation` database (SQLite file, PostgreSQL ...).
        :param spool_path: Append-only JSONL file for records the database cannot take.
        :param tracking_uri: MLflow tracking URI; None: no MLflow.
        :param artifact_location: Artifact folder of the experiment when it is created (else
            MLflow would use the current directory); None with no MLflow.
        :param summary_chars: Evidence content kept per block in `retrieval_details` (0: none).
        :param tool_name: The `tool_name` column.
        :param experiment: MLflow experiment of the traces.
        :param retry_interval: Seconds to spool without retrying after the database failed.
        :param timeout_s: Longest wait on a server trace database per call before spooling.
        :param sample_rate: Share of lookups that get an MLflow trace (0 to 1); failed calls always do.
        :param model_verdict: `knowledge adapt`'s verdict when it did not recommend the model in use
            (the `model_verdict` tag of every MLflow trace); None: nothing to say.
        """
        check_at_least(0, summary_chars=summary_chars, retry_interval=retry_interval, timeout_s=timeout_s)
        check_unit_interval(sample_rate=sample_rate)
        check_named(tool_name=tool_name, experiment=experiment)  # db_url and spool_path: checked by the store below
        check_named_or_none(tracking_uri=tracking_uri, artifact_location=artifact_location, model_verdict=model_verdict)
        self.db_url = db_url
        self.spool_path = spool_path
        self.summary_chars = summary_chars
        self.tool_name = tool_name
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.retry_interval = retry_interval
        self.timeout_s = timeout_s
        self.sample_rate = sample_rate
        self.model_verdict = model_verdict
        self.store = TraceStore(db_url, spool_path, retry_interval=retry_interval, timeout_s=timeout_s)
        self._sink: MlflowTraceSink | None = None
        self._mlflow_at_warm_up = True
        self._warm = False

    def defer_mlflow_setup(self) -> None:
        """Set MLflow up on the first sampled trace instead of at warm-up (a one-lookup process)."""
        self._mlflow_at_warm_up = False

    def trace_every_call(self) -> None:
        """Trace every call whatever `sample_rate`: a lookup someone typed is one they look for in MLflow."""
        self.sample_rate = 1.0

    def warm_up(self) -> None:
        """
        Create or migrate the schema (a database that is down is not an error: records spool
        until it is back) and start MLflow set-up in the background (on the first sampled trace
        instead after `defer_mlflow_setup`). Idempotent.
        """
        if self._warm:
            return
        try:
            self.store.ensure_schema()
        except Exception as exc:  # one warning per outage, whether warm-up or a write meets it first
            self.store.mark_down(exc)
        # The recorder keeps each finished stage's outputs (references only), so that a failed
        # lookup still records and returns what ran before the failure.
        stage_recorder.install()
        if self.tracking_uri:
            self._sink = get_sink(self.tracking_uri, self.experiment, self.artifact_location)
            if self._mlflow_at_warm_up:
                self._sink.start()
        self._warm = True

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            db_url=self.db_url,
            spool_path=self.spool_path,
            summary_chars=self.summary_chars,
            tool_name=self.tool_name,
            tracking_uri=self.tracking_uri,
            experiment=self.experiment,
            artifact_location=self.artifact_location,
            retry_interval=self.retry_interval,
            timeout_s=self.timeout_s,
            sample_rate=self.sample_rate,
            model_verdict=self.model_verdict,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TraceWriter":
        return default_from_dict(cls, data)

    @component.output_types(result=LookupResult)
    def run(
        self,
        result: LookupResult,
        arguments: dict[str, Any] | None = None,
        started_at: float | None = None,
        origin: str | None = None,
    ) -> dict[str, Any]:
        """
        :param result: The assembled result.
        :param arguments: The tool call's arguments (default: `{"query": <raw query>}`).
        :param started_at: When the call started (`time.time()`), for `latency_ms` and the trace.
        :param origin: Who asked, when not a client: `evaluation` for `knowledge eval --record`, kept as
            `retrieval_details.origin` so that replays of production traffic can leave it out.
        :returns: `result`: the same result with `invocation_id` and `trace_status` set.
        """
        writer_started_ns = time.time_ns()
        self.warm_up()
        invocation_id = new_invocation_id()
        arguments = dict(arguments) if arguments else {"query": result.query_transform.raw}
        transform = result.query_transform
        arguments = bounded_arguments(arguments, transform.normalized if transform.truncated else None)
        started = started_at if started_at is not None else writer_started_ns / 1e9
        try:
            details = self.details(result)
            if origin:
                details[ORIGIN_KEY] = origin
            record = {
                "id": invocation_id,
                "tool_name": self.tool_name,
                "arguments": arguments,
                "status": STATUS_OK,
                "found": result.found,
                "retrieval_layer": result.retrieval_layer,
                "latency_ms": round((writer_started_ns / 1e9 - started) * 1000.0, 3),
                "created_at": datetime.fromtimestamp(started, tz=UTC),
                "error": None,
                "retrieval_details": details,
            }
            trace_status = self.store.write(record)
        except Exception:  # a record that cannot even be built must not cost the caller its evidence
            logger.exception("Lookup %s could not be recorded", invocation_id)
            details, trace_status = {}, TRACE_LOST
        recorded = dataclasses.replace(result, invocation_id=invocation_id, trace_status=trace_status)
        if trace_status == TRACE_LOST:
            logger.error("Lookup %s was not recorded (trace database and spool both failed)", invocation_id)
            return {"result": recorded}
        try:
            self._submit_trace(
                invocation_id, STATUS_OK, arguments, started, details, trace_status, recorded, None, writer_started_ns
            )
        except Exception:  # MLflow is optional: never fail the lookup for it
            logger.debug("MLflow trace of %s not submitted", invocation_id, exc_info=True)
        return {"result": recorded}

    def details(self, result: LookupResult) -> dict[str, Any]:
        """The compact `retrieval_details` of a result (spec keys, evidence content cut)."""
        details = result.retrieval_details(self.summary_chars)
        transform = details.get("query_transform") or {}
        raw = transform.get("raw")
        if isinstance(raw, str) and len(raw) > RAW_QUERY_CHARS:
            transform["raw"] = raw[:RAW_QUERY_CHARS]
            transform["raw_truncated"] = True
        if self.summary_chars == 0:
            for block in details.get("evidence_blocks", []):
                block.pop("content_preview", None)
        return details

    def record_error(
        self,
        query: Any,
        error: BaseException,
        started_at: float,
        component_name: str | None = None,
        arguments: dict[str, Any] | None = None,
        partial_outputs: dict[str, Any] | None = None,
    ) -> LookupResult:
        """
        Record a failed call (`status=error`, the error text) and return the structured error
        result the caller gets instead of an exception. Never raises.

        :param component_name: The pipeline component that failed (None: outside the pipeline).
        :param partial_outputs: What that component produced before it failed, as returned in its
            `ComponentFailure` (the retriever's `retrieval_trace`): recorded like finished stages' outputs.
        """
        ended_ns = time.time_ns()
        try:
            self.warm_up()
        except Exception:  # recording must not fail because MLflow set-up did
            logger.debug("TraceWriter warm-up failed while recording an error", exc_info=True)
        invocation_id = new_invocation_id()
        info = error_info(error, component_name)
        arguments = dict(arguments) if arguments else {"query": query if isinstance(query, str) else repr(query)}
        arguments = bounded_arguments(arguments)
        recording = stage_recorder.until_failed(stage_recorder.last_recording(), component_name, error)
        completed = [s.name for s in recording.stages if s.end_ns and not s.error] if recording else []
        failure = LookupResult.failure(query if isinstance(query, str) else "", info)
        failure, finished_keys = with_finished_stages(failure, recording, component_name, partial_outputs)
        details = {
            **{k: v for k, v in self.details(failure).items() if k in finished_keys},
            "error": info,
            "completed_stages": completed,
            "evidence_status": STATUS_ERROR,
        }
        record = {
            "id": invocation_id,
            "tool_name": self.tool_name,
            "arguments": arguments,
            "status": STATUS_ERROR,
            "found": False,
            "retrieval_layer": None,
            "latency_ms": round((ended_ns / 1e9 - started_at) * 1000.0, 3),
            "created_at": datetime.fromtimestamp(started_at, tz=UTC),
            "error": f"{info['type']}: {info['message']}" + (f" (in {component_name})" if component_name else ""),
            "retrieval_details": details,
        }
        trace_status = self.store.write(record)
        # Evidence of a failed lookup is never returned as evidence: its summaries stay in the row only.
        failure = dataclasses.replace(
            failure,
            evidence_blocks=[],
            completed_parts=[p for p in failure.completed_parts or [] if p != "evidence_blocks"],
            invocation_id=invocation_id,
            trace_status=trace_status,
        )
        try:
            self._submit_trace(
                invocation_id,
                STATUS_ERROR,
                arguments,
                started_at,
                details,
                trace_status,
                failure,
                info,
                None,
                recording,
            )
        except Exception:  # MLflow is optional: the error result still goes back
            logger.debug("MLflow trace of %s not submitted", invocation_id, exc_info=True)
        logger.info("Lookup %s failed and was recorded (%s): %s", invocation_id, trace_status, record["error"])
        return failure

    def _submit_trace(
        self,
        invocation_id: str,
        status: str,
        arguments: dict[str, Any],
        started_at: float,
        details: dict[str, Any],
        trace_status: str,
        result: LookupResult | None,
        error: dict[str, Any] | None,
        writer_started_ns: int | None,
        recording: stage_recorder.StageRecording | None = None,
    ) -> None:
        if self._sink is None or (status != STATUS_ERROR and random.random() >= self.sample_rate):
            return
        if recording is None:
            recording = stage_recorder.current_recording()
        fallback = details.get("fallback_reason")
        tags = {
            "invocation_id": invocation_id,
            "tool_name": self.tool_name,
            "status": status,
            "found": "true" if result is not None and result.found else "false",
            "retrieval_layer": str(details.get("retrieval_layer") or "none"),
            "fallback_reason": str(fallback) if fallback else "none",
            "trace_status": trace_status,
            **sidecar_tags(details.get("sidecar")),
            **({"model_verdict": self.model_verdict} if self.model_verdict else {}),
        }
        job = TraceJob(
            invocation_id=invocation_id,
            tool_name=self.tool_name,
            status=status,
            arguments=arguments,
            started_ns=int(started_at * 1e9),
            ended_ns=time.time_ns(),
            details=details,
            trace_status=trace_status,
            result=result,
            recording=recording,
            writer_started_ns=writer_started_ns,
            error=error,
            tags=tags,
        )
        self._sink.submit(job)
