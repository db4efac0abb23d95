"""
The `lookup_knowledge` query pipeline, in the spec's order:

    query -> QueryTransformer -> L0HintExtractor -> KnowledgeQueryEmbedder -> FallbackRetriever
          -> (SidecarComparator, when enabled) -> RuleReranker -> EvidenceDeduper -> ContextPacker -> ResultAssembler
          -> TraceWriter

built from the Hydra config, and `LookupService`, which runs it for one query or many.
"""

import logging
import threading
import time
from typing import Any

from haystack import Pipeline
from omegaconf import DictConfig

from components.contracts import InvalidQueryError, LookupResult
from components.lookup.context_packer import ContextPacker
from components.lookup.evidence_deduper import EvidenceDeduper
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.l0_hint_extractor import L0HintExtractor
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.lookup.query_transformer import QueryTransformer
from components.lookup.result_assembler import ResultAssembler
from components.lookup.rule_reranker import RuleReranker
from components.lookup.sidecar_comparator import SidecarComparator
from components.stores.l0_index_file import L0IndexHandle
from components.tracing import stage_recorder
from components.tracing.trace_writer import TraceWriter
from pipelines.errors import unwrap_pipeline_error

logger = logging.getLogger(__name__)

# Module allowlist for Pipeline.loads of the serialized YAML.
ALLOWED_MODULES = ["components", "pipelines", "milvus_haystack", "haystack_integrations"]


def build_trace_writer(cfg: DictConfig) -> TraceWriter:
    """The TraceWriter of the config (also used alone by `knowledge traces`)."""
    return TraceWriter(
        db_url=cfg.trace.db_url,
        spool_path=cfg.trace.spool_path,
        summary_chars=cfg.trace.summary_chars,
        tracking_uri=cfg.mlflow.tracking_uri,
        experiment=cfg.mlflow.experiment,
        artifact_location=cfg.mlflow.artifact_location,
        retry_interval=float(cfg.trace.retry_interval_s),
        sample_rate=float(cfg.mlflow.sample_rate),
    )


def build_lookup_pipeline(cfg: DictConfig, record: bool = True) -> Pipeline:
    """
    The lookup pipeline of a config. `record=False` leaves out the TraceWriter, for measurement
    runs (evaluation) that are not agent calls and must not fill the tool_invocation table.
    """
    retrieval = cfg.retrieval
    milvus = cfg.milvus
    l0_path = cfg.l0.index_path
    pipeline = Pipeline()
    pipeline.add_component(
        "query_transformer",
        QueryTransformer(
            l0_index_path=l0_path,
            max_chars=cfg.query.max_chars,
            on_overlong=cfg.query.on_overlong,
            expand_entities=cfg.query.expand_entities,
        ),
    )
    pipeline.add_component(
        "l0_hints",
        L0HintExtractor(
            l0_index_path=l0_path,
            title_min_overlap=cfg.l0.title_min_overlap,
            domain_from_matches=cfg.l0.domain_from_matches,
            domain_min_precision=cfg.l0.domain_min_precision,
            tokenizer_model=cfg.embedder.model,
        ),
    )
    pipeline.add_component(
        "query_embedder", KnowledgeQueryEmbedder(model=cfg.embedder.model, device=cfg.embedder.device)
    )
    pipeline.add_component(
        "retriever",
        FallbackRetriever(
            uri=milvus.uri,
            collection=milvus.collection,
            top_k=retrieval.top_k,
            reference_threshold=retrieval.reference_threshold,
            evidence_threshold=retrieval.evidence_threshold,
            l1_enabled=retrieval.l1_enabled,
            vector_store_mode=retrieval.vector_store_mode,
            index_type=milvus.index_type,
            search_params=dict(milvus.search_params),
            uncovered_evidence_threshold=retrieval.uncovered_evidence_threshold,
        ),
    )
    if cfg.sidecar.enabled:
        # Disabled (the default), the sidecar is not part of the runtime path at all; the
        # assembler then reports it as disabled.
        pipeline.add_component(
            "sidecar",
            SidecarComparator(
                enabled=cfg.sidecar.enabled,
                path=cfg.sidecar.path,
                uri=milvus.uri,
                collection=milvus.collection,
                top_k=retrieval.top_k,
                index_type=milvus.index_type,
                search_params=dict(milvus.search_params),
            ),
        )
    pipeline.add_component(
        "reranker",
        RuleReranker(
            l0_index_path=l0_path, weights=dict(cfg.rerank.weights), evidence_threshold=retrieval.evidence_threshold
        ),
    )
    pipeline.add_component(
        "deduper",
        EvidenceDeduper(
            evidence_threshold=retrieval.evidence_threshold,
            per_document_cap=retrieval.per_document_cap,
            max_evidence=retrieval.max_evidence,
        ),
    )
    pipeline.add_component(
        "context_packer", ContextPacker(budget_tokens=cfg.context.budget_tokens, tokenizer_model=cfg.embedder.model)
    )
    pipeline.add_component(
        "assembler",
        ResultAssembler(
            high_relevance=retrieval.high_relevance,
            reference_threshold=retrieval.reference_threshold,
            evidence_threshold=retrieval.evidence_threshold,
        ),
    )
    if record:
        pipeline.add_component("trace_writer", build_trace_writer(cfg))
    connections = [
        ("query_transformer.query", "l0_hints.query"),
        ("query_transformer.variants", "query_embedder.texts"),
        ("query_transformer.query_transform", "retriever.query_transform"),
        ("l0_hints.hints", "retriever.hints"),
        ("query_embedder.embeddings", "retriever.embeddings"),
        ("query_transformer.query_transform", "reranker.query_transform"),
        ("l0_hints.hints", "reranker.hints"),
        ("retriever.candidates", "reranker.candidates"),
        ("query_embedder.embeddings", "reranker.embeddings"),
        ("reranker.candidates", "deduper.candidates"),
        ("retriever.retrieval_trace", "deduper.retrieval_trace"),
        ("deduper.evidence_blocks", "context_packer.evidence_blocks"),
        ("query_transformer.query_transform", "assembler.query_transform"),
        ("l0_hints.hints", "assembler.hints"),
        ("retriever.retrieval_trace", "assembler.retrieval_trace"),
        ("deduper.rerank_trace", "assembler.rerank_trace"),
        ("deduper.evidence_blocks", "assembler.evidence_blocks"),
        ("deduper.dedup", "assembler.dedup"),
        ("context_packer.context_pack", "assembler.context_pack"),
    ]
    if cfg.sidecar.enabled:
        connections += [
            ("query_embedder.embeddings", "sidecar.embeddings"),
            ("retriever.candidates", "sidecar.candidates"),
            ("retriever.retrieval_trace", "sidecar.retrieval_trace"),
            ("sidecar.sidecar", "assembler.sidecar"),
        ]
    if record:
        connections.append(("assembler.result", "trace_writer.result"))
    for sender, receiver in connections:
        pipeline.connect(sender, receiver)
    return pipeline


class LookupService:
    """
    Runs the lookup pipeline: built and warmed up once, then one `lookup` per query. Safe to
    share between threads.

    Every call leaves one `tool_invocation` row (and, with MLflow configured, one MLflow trace)
    and returns its `invocationId`. A failure inside the pipeline (a component raising, a vector
    store that does not answer) is recorded with `status=error` and returned as a structured
    error result (`evidenceStatus="error"`); an invalid query is recorded, then raised.

    Usage example:

    ```python
    service = LookupService(load_config())
    result = service.lookup("disk almost full on a worker node")
    print(result.to_dict()["found"], result.invocation_id)
    ```
    """

    def __init__(self, cfg: DictConfig, pipeline: Pipeline | None = None) -> None:
        self.cfg = cfg
        self.pipeline = pipeline or build_lookup_pipeline(cfg)
        self._warm = False
        self._warm_lock = threading.Lock()

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
                L0IndexHandle(self.cfg.l0.index_path).get()
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
        if writer is None:
            return outputs["assembler"]["result"]
        return outputs["trace_writer"]["result"]

    def _record_error(
        self, query: Any, error: BaseException, started: float, component_name: str | None
    ) -> LookupResult | None:
        writer = self.trace_writer
        if writer is None:
            return None
        return writer.record_error(query, error, started, component_name=component_name)
