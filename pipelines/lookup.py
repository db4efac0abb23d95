"""
The `lookup_knowledge` query pipeline (wired in pipelines/yaml/lookup_knowledge.yml), in the spec's order:

    query -> QueryTransformer -> L0HintExtractor -> KnowledgeQueryEmbedder -> FallbackRetriever
          -> (SidecarComparator, when enabled) -> RuleReranker -> CompetitionDetector -> EvidenceDeduper
          -> ContextPacker -> ResultAssembler -> TraceWriter

QueryTransformer reads the L0 index file (once per lookup) and passes the index on: every
component of one lookup sees the same version of it, even when a re-index lands meanwhile.

loaded from the YAML file the Hydra config names, and `LookupService`, which runs it for one query or many.
"""

import threading
import time
from typing import Any

from haystack import Pipeline
from omegaconf import DictConfig

from components.contracts import InvalidQueryError
from components.errors import failed_component
from components.lookup_result import LookupResult
from components.tracing import stage_recorder
from components.tracing.trace_writer import TraceWriter
from pipelines.config.errors import unwrap_pipeline_error
from pipelines.serialized import ALLOWED_MODULES, load_pipeline

__all__ = ["ALLOWED_MODULES", "LookupService", "build_lookup_pipeline"]


def build_lookup_pipeline(cfg: DictConfig, record: bool = True) -> Pipeline:
    """
    The lookup pipeline of a config: the YAML file `cfg.pipeline.lookup` resolved against `cfg`
    (the sidecar only when `sidecar.enabled`). `record=False` leaves out the TraceWriter, for
    measurement runs (evaluation) that are not agent calls and must not fill the tool_invocation table.
    """
    return load_pipeline(cfg, "lookup", leave_out=() if record else ("trace_writer",))


class LookupService:
    """
    Runs the lookup pipeline: built and warmed up once, then one `lookup` per query. Safe to
    share between threads.

    Every call leaves one `tool_invocation` row (and, with MLflow configured, one MLflow trace)
    and returns its `invocationId`. A failure inside the pipeline (a component raising, a vector
    store that does not answer) is recorded with `status=error` and returned as a structured
    error result (`evidenceStatus="error"`); an invalid query is recorded, then raised. With a
    TraceWriter, a component that can return its failure as an output instead of raising it (the
    retriever's `raise_on_failure`) is set to, so that the record keeps what it did before the
    error (the trace of the attempts that ran).

    Usage example:

    ```python
    service = LookupService(load_config())
    result = service.lookup("disk almost full on a worker node")
    print(result.to_dict()["found"], result.invocation_id)
    ```
    """

    def __init__(
        self, cfg: DictConfig, pipeline: Pipeline | None = None, one_shot: bool = False, trace_every_call: bool = False
    ) -> None:
        """
        :param one_shot: The process runs one lookup and exits: MLflow is set up on the first
            sampled trace rather than at warm-up (its import takes longer than the lookup).
        :param trace_every_call: Trace every lookup in MLflow whatever `mlflow.sample_rate` (a lookup
            typed by a person, who then looks for it; sampling spreads a server's or an agent's).
        """
        self.cfg = cfg
        self.pipeline = pipeline or build_lookup_pipeline(cfg)
        self._warm = False
        self._warm_lock = threading.Lock()
        if one_shot and self.trace_writer is not None:
            self.trace_writer.defer_mlflow_setup()
        if trace_every_call and self.trace_writer is not None:
            self.trace_writer.trace_every_call()
        for name in self.pipeline.graph.nodes if self.trace_writer is not None else ():
            instance = self.pipeline.get_component(name)
            if getattr(instance, "raise_on_failure", None) is True:
                instance.raise_on_failure = False

    @property
    def trace_writer(self) -> TraceWriter | None:
        writer = self.pipeline.get_component("trace_writer") if "trace_writer" in self.pipeline.graph.nodes else None
        return writer if isinstance(writer, TraceWriter) else None

    def warm_up(self) -> None:
        if self._warm:
            return
        with self._warm_lock:
            if not self._warm:
                # Fail before the model loads when nothing has been indexed yet.
                self.pipeline.get_component("query_transformer").warm_up()
                self.pipeline.warm_up()
                self._warm = True

    def lookup(self, query: str) -> LookupResult:
        """
        :returns: The result, with `invocation_id` and `trace_status`; `evidence_status="error"`
            when the pipeline failed (the error is in `result.error`).
        :raises InvalidQueryError: Empty query, or over the limit with `query.on_overlong=error`
            (recorded first).
        """
        entered = time.time()
        arguments: dict[str, Any] = {"query": query}
        stage_recorder.clear_last_recording()
        if not isinstance(query, str) or not query.strip():
            error = InvalidQueryError("query is empty: give the question or alert text to look up")
            self._record_error(query, error, entered, "query_transformer")
            raise error
        try:
            self.warm_up()
        except Exception as exc:  # not indexed yet, model missing: a setup problem, raised after recording
            self._record_error(query, exc, entered, None)
            raise
        # latency_ms and the MLflow trace cover the lookup itself, not the one-off warm-up.
        started = time.time()
        inputs = {"query_transformer": {"query": query}}
        writer = self.trace_writer
        if writer is not None:
            inputs["trace_writer"] = {"arguments": arguments, "started_at": started}
        try:
            outputs = self.pipeline.run(inputs)
        except Exception as exc:
            error = unwrap_pipeline_error(exc)
            failure = self._record_error(query, error, started, getattr(exc, "component_name", None))
            if isinstance(error, InvalidQueryError) or failure is None:
                raise error from exc
            return failure
        failed = failed_component(outputs)
        if failed is not None:
            name, returned = failed
            failure = self._record_error(query, returned.error, started, name, returned.outputs)
            if failure is None:
                raise returned.error
            return failure
        if writer is None:
            return outputs["assembler"]["result"]
        return outputs["trace_writer"]["result"]

    def _record_error(
        self,
        query: Any,
        error: BaseException,
        started: float,
        component_name: str | None,
        partial_outputs: dict[str, Any] | None = None,
    ) -> LookupResult | None:
        writer = self.trace_writer
        if writer is None:
            return None
        return writer.record_error(
            query, error, started, component_name=component_name, partial_outputs=partial_outputs
        )
