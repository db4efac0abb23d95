"""
What one lookup's MLflow trace holds: a root span whose outputs are the lookup's result JSON and
one child span per pipeline component with its timings, a brief of its inputs and outputs, and
its decision as attributes and events (L0 matches, query variants, each retrieval attempt as a
child span with its filter, legs and best scores, fallback reason, rerank boosts, dedup counts,
packing). The retriever span outputs MLflow retriever documents. Plain data, built from a
`TraceJob`; `components.tracing.mlflow_sink` writes it. What each span shows: docs/tracing.md.

Usage example:

```python
trace = build_trace(job)
trace["tags"]["found"], [span["name"] for span in trace["spans"]]   # "true", ["query_transformer", ...]
```
"""

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from components.contracts import (
    Candidate,
    ContextPack,
    DedupStats,
    L0Hints,
    QueryTransform,
    RerankEntry,
    RetrievalAttempt,
    RetrievalTrace,
)
from components.lookup_result import LookupResult
from components.tracing.stage_recorder import StageRecording

ROOT_SPAN = "lookup_knowledge"
WRITER_STAGE = "trace_writer"
PREVIEW_CHARS = 200

# Span types by component name; anything else is a CHAIN step.
SPAN_TYPES = {
    "query_transformer": "PARSER",
    # Only the retriever is a RETRIEVER at the top: MLflow's retrieval scorers read the documents
    # of top-level RETRIEVER spans, and L0 hints or the sidecar's comparison are not evidence.
    "l0_hints": "PARSER",
    "query_embedder": "EMBEDDING",
    "retriever": "RETRIEVER",
    "sidecar": "CHAIN",
    "reranker": "RERANKER",
    "deduper": "CHAIN",
    "context_packer": "CHAIN",
    "assembler": "CHAIN",
    WRITER_STAGE: "TASK",
}
ATTEMPT_SPAN_TYPE = "RETRIEVER"
# Reranked candidates whose per-signal boosts the reranker span shows.
RERANK_TOP = 5


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
    """The decision of a result in a few keys (the assembler span's output)."""
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
        **({"competition": result.competition.to_dict()} if result.competition else {}),
        **({"error": result.error} if result.error else {}),
    }


def _span(name: str, component_type: str | None, start_ns: int, end_ns: int, **data: Any) -> dict[str, Any]:
    return {
        "name": name,
        "span_type": data.get("span_type") or SPAN_TYPES.get(name, "CHAIN"),
        "component_type": component_type or "",
        "start_ns": start_ns,
        "end_ns": end_ns,
        "inputs": data.get("inputs"),
        "outputs": data.get("outputs"),
        "attributes": data.get("attributes") or {},
        "events": data.get("events") or [],
        "error": data.get("error"),
        "children": data.get("children") or [],
    }


# ---------------------------------------------------------------------------------------------
# the decision of each component


def retriever_document(candidate: Candidate, packed: set[str]) -> dict[str, Any]:
    """
    A candidate as an MLflow retriever document (`mlflow.entities.Document`: page_content,
    metadata, id). The text is whole for chunks in the context pack, a preview otherwise: a trace
    holds no more document text than the lookup handed out.
    """
    content = candidate.content if candidate.evidence_key in packed else preview(candidate.content)
    metadata = {
        "doc_uri": candidate.source,
        "source": candidate.source,
        "chunk_id": candidate.evidence_key,
        "score": round(candidate.similarity, 4),
        "raw_score": round(candidate.raw_score, 4),
        "raw_score_label": candidate.raw_score_label,
        "attempt": candidate.attempt,
        "title": candidate.title,
        "breadcrumb": candidate.breadcrumb,
        "in_context_pack": candidate.evidence_key in packed,
    }
    if candidate.bm25_rank is not None:
        metadata.update(bm25_score=round(candidate.bm25_score or 0.0, 4), bm25_rank=candidate.bm25_rank)
    return {"page_content": content, "metadata": metadata, "id": candidate.evidence_key}


def attempt_reason(attempt: RetrievalAttempt) -> str | None:
    """Why an attempt was retried (its fallback reason), None when it was selected."""
    outcome = attempt.outcome or ""
    return outcome.split(": ", 1)[1] if outcome.startswith("retried: ") else None


def bm25_skip_reason(attempt: RetrievalAttempt, trace: RetrievalTrace) -> str | None:
    if "bm25" in attempt.legs:
        return None
    return attempt.bm25_skipped or trace.bm25_skipped or "not run"


def attempt_span(attempt: RetrievalAttempt, trace: RetrievalTrace, start_ns: int, end_ns: int) -> dict[str, Any]:
    """One retrieval attempt: its filter, legs (run or skipped, and why), best scores per leg, outcome."""
    scores: dict[str, list[dict[str, Any]]] = {}
    for hit in attempt.top_hits:
        scores.setdefault(hit.leg, []).append(
            {"rank": hit.rank, "chunk_id": hit.evidence_key, "similarity": hit.similarity, hit.score_label: hit.score}
        )
    attributes = {
        "attempt": attempt.index,
        "category_filter": attempt.category_filter,
        "filter_expression": attempt.filter_expression,
        "path": attempt.path,
        "legs_run": list(attempt.legs),
        "bm25_skipped": bm25_skip_reason(attempt, trace),
        "candidate_count": attempt.candidate_count,
        "usable_count": attempt.usable_count,
        "evidence_threshold": trace.evidence_threshold,
        # The bar a filtered attempt's top similarity had to reach to stand (else: low quality).
        "reference_threshold": trace.reference_threshold if attempt.category_filter else None,
        "top_similarity": attempt.top_similarity,
        "unfiltered_top_similarity": attempt.unfiltered_top_similarity,
        "outcome": attempt.outcome,
        "fallback_reason": attempt_reason(attempt),
        **{f"top_{leg}": hits for leg, hits in scores.items()},
    }
    if attempt.error:
        attributes["note"] = attempt.error
    documents = [
        {
            "page_content": hit.preview,
            "metadata": {
                "doc_uri": hit.source,
                "source": hit.source,
                "chunk_id": hit.evidence_key,
                "score": hit.similarity,
                "leg": hit.leg,
                "rank": hit.rank,
                hit.score_label: hit.score,
            },
            "id": hit.evidence_key,
        }
        for hit in attempt.top_hits
    ]
    scope = f"category={attempt.category_filter}" if attempt.category_filter else "unfiltered"
    return _span(
        f"attempt {attempt.index} ({scope})",
        "RetrievalAttempt",
        attempt.started_ns or start_ns,
        attempt.ended_ns or end_ns,
        span_type=ATTEMPT_SPAN_TYPE,
        inputs={"query": preview(attempt.query), "filter": attempt.filter_expression},
        outputs=documents,
        attributes={key: value for key, value in attributes.items() if value is not None},
    )


def retriever_decision(outputs: dict[str, Any], packed: set[str], start_ns: int, end_ns: int) -> dict[str, Any]:
    trace = outputs.get("retrieval_trace")
    candidates = sorted(_each_chunk_once(outputs.get("candidates") or []), key=lambda c: -c.similarity)
    data: dict[str, Any] = {"outputs": [retriever_document(c, packed) for c in candidates]}
    if not isinstance(trace, RetrievalTrace):
        return data
    data["attributes"] = {
        "attempts": len(trace.attempts),
        "selected_attempt": trace.selected_attempt,
        "fallback_reason": trace.fallback_reason,
        "evidence_threshold": trace.evidence_threshold,
        "calibration": trace.calibration,
        "legs": list(trace.legs),
        "bm25_skipped": trace.bm25_skipped,
        "vector_store_mode": trace.vector_store_mode,
        "index_type": trace.index_type,
        "l1_enabled": trace.l1_enabled,
        "candidate_count": len(candidates),
    }
    data["children"] = [attempt_span(attempt, trace, start_ns, end_ns) for attempt in trace.attempts]
    if trace.fallback_reason and trace.attempts:
        first = trace.attempts[0]
        data["events"] = [
            (
                "fallback",
                {
                    "reason": trace.fallback_reason,
                    "filter": first.filter_expression or "",
                    "usable_count": first.usable_count,
                    "top_similarity": first.top_similarity if first.top_similarity is not None else -1.0,
                },
            )
        ]
    return data


def _each_chunk_once(candidates: list[Candidate]) -> list[Candidate]:
    """A fallback's attempts can return one chunk twice: the span lists it once, at its best similarity."""
    best: dict[str, Candidate] = {}
    for candidate in candidates:
        if candidate.evidence_key not in best or candidate.similarity > best[candidate.evidence_key].similarity:
            best[candidate.evidence_key] = candidate
    return list(best.values())


def l0_decision(outputs: dict[str, Any], **_: Any) -> dict[str, Any]:
    hints = outputs.get("hints")
    if not isinstance(hints, L0Hints):
        return {}
    record = hints.to_record()
    return {
        "outputs": {"hints": record, "filter_category": hints.single_domain},
        "attributes": {**record, "filter_category": hints.single_domain},
        "events": [("domain_rule", {"rule": rule}) for rule in hints.domain_rules],
    }


def transform_decision(outputs: dict[str, Any], **_: Any) -> dict[str, Any]:
    transform = outputs.get("query_transform")
    if not isinstance(transform, QueryTransform):
        return {}
    return {
        "attributes": {
            "normalized": preview(transform.normalized),
            "variants": [preview(v) for v in transform.variants],
            "expansions": list(transform.expansions),
            "truncated": transform.truncated,
            "original_chars": transform.original_chars,
        }
    }


def rerank_decision(outputs: dict[str, Any], rerank_trace: list[RerankEntry] | None = None, **_: Any) -> dict[str, Any]:
    """
    The reranked top 5: the lookup's rerank trace when it has one (after the per-document cap, the
    list `knowledge traces show` prints), else the reranker's own order (a lookup that failed later).
    """
    ranked = outputs.get("candidates") or []
    rows = (
        [(e.rank, e.source, e.evidence_key, "base_score", e.base_score, e.final_score, e.boosts) for e in rerank_trace]
        if rerank_trace
        else [
            (rank, c.source, c.evidence_key, "similarity", c.similarity, c.final_score, c.boosts)
            for rank, c in enumerate(ranked, start=1)
        ]
    )
    top = [
        {
            "rank": rank,
            "source": source,
            "chunk_id": key,
            score_name: round(score, 4),
            "final_score": round(final, 4),
            "boosts": {signal: round(boost, 4) for signal, boost in boosts.items() if boost},
        }
        for rank, source, key, score_name, score, final, boosts in rows[:RERANK_TOP]
    ]
    return {"outputs": {"candidates": len(ranked), "top": top}, "attributes": {"candidate_count": len(ranked)}}


def dedup_decision(outputs: dict[str, Any], **_: Any) -> dict[str, Any]:
    dedup = outputs.get("dedup")
    return {"attributes": dedup.to_record()} if isinstance(dedup, DedupStats) else {}


def packing_decision(outputs: dict[str, Any], **_: Any) -> dict[str, Any]:
    pack = outputs.get("context_pack")
    if not isinstance(pack, ContextPack):
        return {}
    kept = [
        {"chunk_id": b.evidence_key, "source": b.source, "tokens": b.tokens, "truncated": b.truncated}
        for b in pack.blocks
    ]
    summary = pack.summary()
    return {
        "outputs": {**summary, "blocks": kept, "text": preview(pack.text)},
        "attributes": {**summary, "kept": len(kept)},
    }


DECISIONS = {
    "query_transformer": transform_decision,
    "l0_hints": l0_decision,
    "reranker": rerank_decision,
    "deduper": dedup_decision,
    "context_packer": packing_decision,
}


def packed_keys(job: TraceJob) -> set[str]:
    """Evidence keys of the chunks in the context pack (their text is in the lookup's result)."""
    if job.result is not None:
        return {b.evidence_key for b in job.result.context_pack.blocks}
    stage = job.recording.stage("context_packer") if job.recording else None
    pack = stage.outputs.get("context_pack") if stage and isinstance(stage.outputs, dict) else None
    return {b.evidence_key for b in pack.blocks} if isinstance(pack, ContextPack) else set()


def stage_span(stage: Any, job: TraceJob, packed: set[str]) -> dict[str, Any]:
    end_ns = stage.end_ns or job.ended_ns
    data: dict[str, Any] = {"inputs": stage_data(stage.inputs), "outputs": stage_data(stage.outputs)}
    if isinstance(stage.outputs, dict) and not stage.error:
        if stage.name == "retriever":
            data.update(retriever_decision(stage.outputs, packed, stage.start_ns, end_ns))
        elif stage.name in DECISIONS:
            rerank_trace = job.result.rerank_trace if job.result is not None else None
            decision = DECISIONS[stage.name](stage.outputs, rerank_trace=rerank_trace)
            data["attributes"] = decision.get("attributes")
            data["events"] = decision.get("events")
            if "outputs" in decision:
                data["outputs"] = {**(data["outputs"] or {}), **decision["outputs"]}
    return _span(stage.name, stage.component_type, stage.start_ns, end_ns, error=stage.error, **data)


def stage_spans(job: TraceJob) -> list[dict[str, Any]]:
    """One span per component run, in start order; the trace writer's ends with the trace."""
    writer_outputs = {"invocation_id": job.invocation_id, "trace_status": job.trace_status}
    packed = packed_keys(job)
    spans = []
    for stage in job.recording.stages if job.recording is not None else []:
        if stage.name == WRITER_STAGE:
            spans.append(
                _span(
                    stage.name,
                    stage.component_type,
                    stage.start_ns,
                    job.ended_ns,
                    inputs=stage_data(stage.inputs),
                    outputs=writer_outputs,
                )
            )
        else:
            spans.append(stage_span(stage, job, packed))
    if job.writer_started_ns is not None and not any(span["name"] == WRITER_STAGE for span in spans):
        spans.append(_span(WRITER_STAGE, "TraceWriter", job.writer_started_ns, job.ended_ns, outputs=writer_outputs))
    return spans


def build_trace(job: TraceJob) -> dict[str, Any]:
    """
    The trace of one lookup: the root (tags, query, the result JSON as outputs, the recorded
    `retrieval_details` as an attribute) and its spans.
    """
    if job.result is not None:
        outputs = job.result.to_dict()
    else:
        outputs = {"invocationId": job.invocation_id, "found": False, "evidenceStatus": "error"}
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
        "details": job.details,
        "error": (job.error or {}).get("message") if job.status == "error" else None,
        "spans": stage_spans(job),
    }
