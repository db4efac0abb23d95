"""
Retrieval evaluation on a labelled query set, beside two baselines over the same chunks.

Query file: JSONL read by pipelines/evaluation/queries.py (`query`, `relevant`, `kind`).

Systems, all on the chunks of the configured collection:
- `pipeline`: the full lookup_knowledge pipeline (L0 hints, filtered/fallback L1, rule rerank).
- `unfiltered`: the same pipeline without the L0 category filter (`pipeline=no_l0_filter`), for
  the domain filter's report: filter precision (the share of filtered queries whose filter's
  category holds a relevant document) and hit@1 of the filtered queries with and without it.
- `dense`: the same model, one unfiltered vector search, no L0, no rerank.
- `hybrid`: BM25 over the same chunk texts fused with the dense ranking by reciprocal rank (k=60).

A system "answers" when its best chunk reaches `retrieval.evidence_threshold` (the pipeline:
found=true), so the answer rate and the no-evidence rate are comparable across systems; the
metrics and their table are in pipelines/evaluation/metrics.py.
"""

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Pipeline
from omegaconf import DictConfig

from components.common.text import unique
from components.contracts import InvalidQueryError
from components.stores.milvus_collection import CONTENT_FIELD, METADATA_FIELD
from pipelines.config.manifest import check_sources_indexed
from pipelines.config.settings import embedder_params, knowledge_store
from pipelines.evaluation.metrics import RECALL_DEPTH, EvalQuery, Ranked, filter_report, first_hit, score
from pipelines.evaluation.queries import load_queries
from pipelines.evaluation.reliability import reliability

logger = logging.getLogger(__name__)
# How often `evaluate` reports its progress, in queries: a line every few seconds on a loaded machine.
PROGRESS_EVERY = 20

RRF_K = 60
DEPTH = 50
# The `unfiltered` system: the configured pipeline without the L0 category filter.
UNFILTERED = {"retrieval": {"category_filter": False}}


# ---------------------------------------------------------------------------------------------
# systems


def sender_of(pipeline: Pipeline, receiver: str) -> tuple[str, str]:
    """The (component, output socket) connected to `receiver` ("component.input")."""
    name, socket = receiver.split(".", 1)
    for sender, _, data in pipeline.graph.in_edges(name, data=True):
        if data["to_socket"].name == socket:
            return sender, data["from_socket"].name
    raise ValueError(f"nothing is connected to {receiver}")


class PipelineSystem:
    """The full pipeline; the ranking is the reranked usable candidates' sources."""

    name = "pipeline"

    def __init__(self, cfg: DictConfig, record: bool = False) -> None:
        from pipelines.lookup import build_lookup_pipeline

        self.cfg = cfg
        # Recording makes each evaluated query a tool_invocation row (and an MLflow trace tagged
        # with its invocation id) that the per-query table links to.
        self.record = record
        self.pipeline = build_lookup_pipeline(cfg, record=record)
        self.pipeline.warm_up()
        # The reranker, or whatever a variant wires into the deduper in its place (pipeline=no_rerank).
        self.ranker, self.ranker_socket = sender_of(self.pipeline, "deduper.candidates")

    def rank(self, query: str) -> Ranked:
        from components.tracing.trace_writer import EVALUATION_ORIGIN

        data: dict[str, Any] = {"query_transformer": {"query": query}}
        if self.record:  # a recorded evaluation lookup is told apart from production traffic
            data["trace_writer"] = {"origin": EVALUATION_ORIGIN}
        outputs = self.pipeline.run(data, include_outputs_from={self.ranker})
        result = outputs["trace_writer" if self.record else "assembler"]["result"]
        threshold = self.cfg.retrieval.evidence_threshold
        ranked = [c.source for c in outputs[self.ranker][self.ranker_socket] if c.similarity >= threshold]
        sources = unique([b.source for b in result.evidence_blocks] + ranked) if result.found else []
        return Ranked(
            sources=sources,
            answered=result.found,
            details={
                "fallback": result.retrieval_trace.fallback_reason,
                "filter": result.retrieval_trace.attempts[0].category_filter
                if result.retrieval_trace.attempts
                else None,
                "top_similarity": max((b.score for b in result.evidence_blocks), default=None),
                "l0": result.l0_hints.to_record(),
                "invocation_id": result.invocation_id,
                # For the reliability table (pipelines/evaluation/reliability.py).
                "level": result.relevance_level,
                "ambiguous": result.competition is not None,
                "cited": unique(b.source for b in result.evidence_blocks),
            },
        )


class UnfilteredSystem(PipelineSystem):
    """The full pipeline without the L0 category filter: what the filter changes, query by query."""

    name = "unfiltered"

    def __init__(self, cfg: DictConfig) -> None:
        from omegaconf import OmegaConf

        super().__init__(OmegaConf.merge(cfg, UNFILTERED))


class DenseSystem:
    """Plain dense retrieval: one unfiltered search with the raw query's embedding."""

    name = "dense"

    def __init__(self, cfg: DictConfig) -> None:
        from components.common.text import clean
        from components.lookup.query_embedder import KnowledgeQueryEmbedder

        self.cfg = cfg
        self.clean = clean
        self.embedder = KnowledgeQueryEmbedder(**embedder_params(cfg))
        self.embedder.warm_up()
        self.search = knowledge_store(cfg).vector_search("sdk")

    def chunks(self, query: str):
        embedding = self.embedder.run(query=self.clean(query))["query_embedding"]
        return self.search.search(embedding, DEPTH, None)

    def rank(self, query: str) -> Ranked:
        candidates = self.chunks(query)
        answered = bool(candidates) and candidates[0].similarity >= self.cfg.retrieval.evidence_threshold
        return Ranked(sources=unique(c.source for c in candidates) if answered else [], answered=answered)


class HybridSystem:
    """BM25 (Haystack in-memory) + dense, fused by reciprocal rank; answers when dense would."""

    name = "hybrid"

    def __init__(self, cfg: DictConfig, dense: DenseSystem) -> None:
        from haystack import Document
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        self.cfg = cfg
        self.dense = dense
        store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi")
        store.write_documents(
            [Document(id=key, content=text, meta={"source": source}) for key, source, text in _all_chunks(cfg)]
        )
        self.bm25 = InMemoryBM25Retriever(document_store=store, top_k=DEPTH)

    def rank(self, query: str) -> Ranked:
        dense = self.dense.chunks(query)
        answered = bool(dense) and dense[0].similarity >= self.cfg.retrieval.evidence_threshold
        if not answered:
            return Ranked(sources=[], answered=False)
        lexical = self.bm25.run(query=query)["documents"]
        scores: dict[str, float] = {}
        source_of: dict[str, str] = {}
        for rank, candidate in enumerate(dense, start=1):
            scores[candidate.evidence_key] = scores.get(candidate.evidence_key, 0.0) + 1.0 / (RRF_K + rank)
            source_of[candidate.evidence_key] = candidate.source
        for rank, document in enumerate(lexical, start=1):
            scores[document.id] = scores.get(document.id, 0.0) + 1.0 / (RRF_K + rank)
            source_of[document.id] = document.meta["source"]
        fused = sorted(scores, key=lambda key: (-scores[key], key))
        return Ranked(sources=unique(source_of[key] for key in fused), answered=True)


def _all_chunks(cfg: DictConfig):
    """(evidence key, source, embedded text) of every chunk in the collection."""
    for row in knowledge_store(cfg).rows([CONTENT_FIELD, METADATA_FIELD]):
        meta = row[METADATA_FIELD] or {}
        header = " > ".join(filter(None, [meta.get("title"), meta.get("breadcrumb")]))
        yield meta.get("evidence_key") or row["id"], meta.get("source", ""), f"{header}\n{row[CONTENT_FIELD]}"


# ---------------------------------------------------------------------------------------------
# entry point


@dataclass
class Evaluation:
    """The answers of every system to every query of one evaluation, and their metrics."""

    queries: list[EvalQuery]
    answers: dict[str, list[Ranked]]
    report: dict[str, Any]
    # When the questions started and ended (ms since the epoch): the MLflow run's real times.
    started_ms: int | None = None
    ended_ms: int | None = None

    def per_query_rows(self, system: str = "pipeline") -> list[dict[str, Any]]:
        """One row per query for `system`: what was expected, what came back, where the first hit was."""
        rows = []
        for query, answer in zip(self.queries, self.answers[system], strict=True):
            rows.append(
                {
                    "id": query.id,
                    "query": query.query,
                    "kind": query.kind,
                    "expected": "; ".join(sorted(query.relevant)),
                    "retrieved": "; ".join(answer.sources[:RECALL_DEPTH]),
                    "first_relevant_rank": first_hit(answer.sources, query.relevant, DEPTH),
                    "found": answer.answered,
                    "fallback_reason": answer.details.get("fallback"),
                    "latency_ms": answer.latency_ms,
                    "invocation_id": answer.details.get("invocation_id"),
                }
            )
        return rows


def build_systems(cfg: DictConfig, baselines: bool = True, record: bool = False) -> list[Any]:
    """The pipeline system, and with `baselines` the dense and hybrid systems, over one collection."""
    systems: list[Any] = [PipelineSystem(cfg, record=record)]
    if baselines:
        dense = DenseSystem(cfg)
        systems += [UnfilteredSystem(cfg), dense, HybridSystem(cfg, dense)]
    return systems


def evaluate(
    cfg: DictConfig,
    queries: list[EvalQuery],
    systems: list[Any],
    label: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """
    Ask every system every query (timing each answer) and score them; refuse sources the index lacks.
    `progress(done, total)` is called every `PROGRESS_EVERY` queries and at the end.
    """
    check_sources_indexed(cfg, [query.relevant for query in queries])
    answers: dict[str, list[Ranked]] = {system.name: [] for system in systems}
    started_ms = int(time.time() * 1000)
    for number, query in enumerate(queries, start=1):
        for system in systems:
            started = time.perf_counter()
            try:
                ranked = system.rank(query.query)
            except InvalidQueryError:
                ranked = Ranked(sources=[], answered=False)
            ranked.latency_ms = (time.perf_counter() - started) * 1000.0
            answers[system.name].append(ranked)
        if progress is not None and (number % PROGRESS_EVERY == 0 or number == len(queries)):
            progress(number, len(queries))
    report: dict[str, Any] = {
        "queries": label,
        "collection": cfg.milvus.collection,
        "evidence_threshold": cfg.retrieval.evidence_threshold,
        "systems": {name: score(queries, ranked) for name, ranked in answers.items()},
    }
    if "pipeline" in answers:
        report["domain_filter"] = filter_report(queries, answers, cfg.l0.index_path)
        report["reliability"] = reliability(queries, answers["pipeline"])
    return Evaluation(
        queries=queries, answers=answers, report=report, started_ms=started_ms, ended_ms=int(time.time() * 1000)
    )


def index_first(cfg: DictConfig, kb_path: str, replace: bool = False) -> DictConfig:
    """
    Index `kb_path` into the configured collection; returns the config pointing at it. An index
    of another knowledge base is refused unless `replace` (`knowledge index --kb DIR --rebuild`).
    """
    from omegaconf import OmegaConf

    from pipelines.config.manifest import kb_to_index
    from pipelines.indexing import run_indexing

    cfg = OmegaConf.merge(cfg, {"kb": {"path": kb_to_index(cfg, kb_path, rebuild=replace)}})
    report = run_indexing(cfg)
    logger.info("Indexed %s: %d chunks in the collection", kb_path, report.collection_count)
    return cfg


def run_evaluation_full(
    cfg: DictConfig,
    queries_path: str,
    kb_path: str | None = None,
    baselines: bool = True,
    details_path: str | None = None,
    record: bool = False,
    append_details: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """
    Evaluate the pipeline (and the baselines) on a query file: metrics per system and every answer.
    `append_details` adds this set's rows to `details_path` rather than replacing the file (several
    sets in one `knowledge eval`).
    """
    queries = load_queries(queries_path)
    if kb_path:
        cfg = index_first(cfg, kb_path)
    check_sources_indexed(cfg, [query.relevant for query in queries])  # before the model loads
    if progress is not None:
        progress(0, len(queries))  # the input is good: the slow part (model load, the queries) starts
    systems = build_systems(cfg, baselines, record)
    evaluation = evaluate(cfg, queries, systems, label=str(queries_path), progress=progress)
    if details_path:
        _write_details(details_path, queries, evaluation.answers, Path(queries_path).stem, append_details)
    return evaluation


def _write_details(
    path: str, queries: list[EvalQuery], answers: dict[str, list[Ranked]], query_set: str, append: bool
) -> None:
    with open(path, "a" if append else "w", encoding="utf-8") as out:
        for position, query in enumerate(queries):
            row = {"set": query_set, "id": query.id, "query": query.query, "relevant": sorted(query.relevant)}
            row["kind"] = query.kind
            for name, ranked in answers.items():
                answer = ranked[position]
                row[name] = {"answered": answer.answered, "top": answer.sources[:5], **answer.details}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
