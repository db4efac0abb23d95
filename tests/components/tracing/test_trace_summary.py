"""What a lookup's MLflow trace holds: briefs (scalars, previews, counts, shapes), spans in order."""

from dataclasses import dataclass

import numpy as np

from components.contracts import Candidate
from components.tracing.stage_recorder import Stage, StageRecording
from components.tracing.trace_summary import PREVIEW_CHARS, TraceJob, brief, build_trace, stage_data


@dataclass
class _Attempt:
    category: str | None
    hits: list[str]


def test_brief_keeps_scalars_and_previews_text_and_counts_sequences():
    assert brief(None) is None and brief(3) == 3 and brief(0.5) == 0.5 and brief(True) is True
    assert brief("short") == "short"
    long = brief("x" * 5000)
    assert long.startswith("x" * PREVIEW_CHARS) and long.endswith("[5000 chars]") and len(long) < 300
    assert brief([0.1] * 384) == 384
    assert brief(np.zeros((2, 384), dtype=np.float32)) == "<array 2x384>"


def test_brief_opens_one_level_of_mappings_and_dataclasses_only():
    assert brief({"attempt": _Attempt("disk", ["a", "b"]), "n": 2}) == {"attempt": "_Attempt", "n": 2}
    assert brief(_Attempt("disk", ["a", "b"])) == {"category": "disk", "hits": 2}
    assert stage_data({"documents": [object()] * 7, "query": "pg lag"}) == {"documents": 7, "query": "pg lag"}
    assert stage_data(None) is None


def _job(stages: list[Stage], writer_started_ns: int | None = None, **extra) -> TraceJob:
    return TraceJob(
        invocation_id="inv-1",
        tool_name="lookup_knowledge",
        status=extra.pop("status", "ok"),
        arguments={"query": "disk full"},
        started_ns=100,
        ended_ns=1000,
        details={"retrieval_layer": "L1", "evidence_blocks": [{}, {}], "fallback_reason": None},
        trace_status="recorded",
        recording=StageRecording(start_ns=100, stages=stages),
        writer_started_ns=writer_started_ns,
        tags={"invocation_id": "inv-1"},
        **extra,
    )


def _candidate(key: str, similarity: float, content: str = "text") -> Candidate:
    return Candidate(
        evidence_key=key,
        source=f"{key}.md",
        content=content,
        similarity=similarity,
        raw_score=similarity,
        raw_score_label="cosine",
        path="sdk",
    )


def test_a_trace_has_the_details_and_one_span_per_stage_in_order_with_retriever_documents():
    from mlflow.entities import Document

    candidates = [_candidate("a", 0.4, "y" * 1000), _candidate("b", 0.9)]
    stages = [
        Stage("query_transformer", "QueryTransformer", 110, 120, {"query": "disk full"}, {"query": "disk full"}),
        Stage("retriever", "Retriever", 130, 400, {"embeddings": np.zeros((1, 384))}, {"candidates": candidates}),
        Stage("trace_writer", "TraceWriter", 900, None, {"arguments": {"query": "disk full"}}),
    ]
    trace = build_trace(_job(stages))
    assert trace["inputs"] == {"query": "disk full"}
    assert trace["details"] == {"retrieval_layer": "L1", "evidence_blocks": [{}, {}], "fallback_reason": None}
    assert [s["name"] for s in trace["spans"]] == ["query_transformer", "retriever", "trace_writer"]
    retriever = trace["spans"][1]
    assert retriever["span_type"] == "RETRIEVER" and (retriever["start_ns"], retriever["end_ns"]) == (130, 400)
    assert retriever["inputs"] == {"embeddings": "<array 1x384>"}
    documents = [Document(**d) for d in retriever["outputs"]]
    assert [d.id for d in documents] == ["b", "a"], "best first"
    assert documents[0].metadata["doc_uri"] == "b.md" and documents[0].metadata["score"] == 0.9
    # Not in the context pack: a preview only.
    assert documents[1].page_content.startswith("y" * PREVIEW_CHARS) and len(documents[1].page_content) < 300
    writer = trace["spans"][2]
    assert writer["end_ns"] == 1000, "the writer's span ends with the trace"
    assert writer["outputs"] == {"invocation_id": "inv-1", "trace_status": "recorded"}


def test_a_failed_call_is_an_error_trace_with_the_failed_stage_and_a_writer_span():
    stages = [Stage("context_packer", "ContextPacker", 200, 300, error="RuntimeError: out of paper")]
    error = {"type": "RuntimeError", "message": "out of paper", "component": "context_packer"}
    trace = build_trace(_job(stages, writer_started_ns=950, status="error", error=error))
    assert trace["error"] == "out of paper" and trace["outputs"]["error"] == error
    assert trace["spans"][0]["error"] == "RuntimeError: out of paper"
    assert trace["spans"][-1]["name"] == "trace_writer" and trace["spans"][-1]["start_ns"] == 950


def test_a_fallbacks_retriever_span_lists_each_chunk_once_at_its_best_similarity():
    from components.tracing.trace_summary import retriever_decision
    from tests.helpers import candidate

    # The filtered attempt and the unfiltered retry both returned chunk a#0.
    filtered, unfiltered = candidate("a#0", "a.md", 0.41), candidate("a#0", "a.md", 0.52)
    outputs = {"candidates": [filtered, candidate("b#0", "b.md", 0.47), unfiltered]}
    documents = retriever_decision(outputs, packed=set(), start_ns=0, end_ns=1)["outputs"]
    assert [d["id"] for d in documents] == ["a#0", "b#0"]
    assert documents[0]["metadata"]["score"] == 0.52


def test_the_rerank_span_shows_the_rerank_trace_that_traces_show_prints():
    from components.contracts import RerankEntry
    from components.tracing.trace_summary import rerank_decision
    from tests.helpers import candidate

    # The reranker's order holds two chunks of a.md; the lookup's rerank trace (after the cap) one.
    ranked = [candidate("a#0", "a.md", 0.6), candidate("a#1", "a.md", 0.59), candidate("b#0", "b.md", 0.5)]
    trace = [RerankEntry(1, "a.md", "a#0", 0.6, 0.7, {"bm25": 0.1}), RerankEntry(2, "b.md", "b#0", 0.5, 0.55, {})]
    top = rerank_decision({"candidates": ranked}, rerank_trace=trace)["outputs"]["top"]
    assert [(t["rank"], t["chunk_id"], t["final_score"]) for t in top] == [(1, "a#0", 0.7), (2, "b#0", 0.55)]
    assert [t["chunk_id"] for t in rerank_decision({"candidates": ranked})["outputs"]["top"]] == ["a#0", "a#1", "b#0"]
