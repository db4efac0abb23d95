"""
The evidence-first result of one `lookup_knowledge` call: the contract the agent receives (its
camelCase shape, docs/architecture.md, "The result"), its error form, and the record it leaves in
`tool_invocation.retrieval_details`. Built from the contracts of `components.contracts`.
"""

from dataclasses import dataclass, field
from typing import Any

from components.common.serialization import RECORD, Contract, camel, serialize, wire
from components.contracts import (
    STATUS_ERROR,
    Competition,
    ContextPack,
    DedupStats,
    EvidenceBlock,
    L0Hints,
    QueryTransform,
    RerankEntry,
    RetrievalTrace,
    SidecarReport,
)

_FAILURE_KEYS = ("found", "evidenceStatus", "message", "error", "evidenceBlocks", "invocationId", "traceStatus")


@dataclass
class LookupResult(Contract):
    """The evidence-first result of one lookup_knowledge call."""

    found: bool
    evidence_status: str
    retrieval_layer: str
    evidence_blocks: list[EvidenceBlock]
    context_pack: ContextPack
    retrieval_trace: RetrievalTrace
    rerank_trace: list[RerankEntry]
    relevance_level: str
    completeness_hint: str
    query_transform: QueryTransform
    l0_hints: L0Hints
    dedup: DedupStats = field(metadata=wire(json=None))
    message: str | None = field(default=None, metadata=wire(omit_none=True))
    sidecar: SidecarReport | None = field(default=None, metadata=wire(omit_none=True))
    invocation_id: str | None = None
    trace_status: str | None = field(default=None, metadata=wire(omit_none=True))
    error: dict[str, Any] | None = field(default=None, metadata=wire(omit_none=True))
    competition: Competition | None = field(default=None, metadata=wire(omit_none=True))
    # Error results only: the result fields that stages finished before the failure filled in.
    completed_parts: list[str] | None = field(default=None, metadata=wire(json=None, record=None))

    @classmethod
    def failure(
        cls,
        query: str,
        error: dict[str, Any],
        invocation_id: str | None = None,
        trace_status: str | None = None,
    ) -> "LookupResult":
        """
        The structured result of a lookup that failed inside the pipeline: `found=false`,
        `evidenceStatus="error"`, the error (`type`, `message`, `component`) and the invocation id
        of the row that records it. Empty evidence, traces and pack, so every consumer of
        `LookupResult` can read it like a no-evidence result.
        """
        text = str(query) if isinstance(query, str) else ""
        where = f" in {error['component']}" if error.get("component") else ""
        return cls(
            found=False,
            evidence_status=STATUS_ERROR,
            retrieval_layer="none",
            evidence_blocks=[],
            context_pack=ContextPack(
                text="", budget_tokens=0, used_tokens=0, included_sources=[], omitted_sources=[], truncated=False
            ),
            retrieval_trace=RetrievalTrace(),
            rerank_trace=[],
            relevance_level="none",
            completeness_hint="none: the lookup failed; do not answer from the knowledge base",
            query_transform=QueryTransform(raw=text, normalized="", variants=[""], original_chars=len(text)),
            l0_hints=L0Hints(),
            dedup=DedupStats(candidate_count=0, final_count=0, merged=0, capped=0),
            message=f"Knowledge lookup failed{where}: {error.get('message') or error.get('type')}",
            invocation_id=invocation_id,
            trace_status=trace_status,
            error=error,
        )

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if self.evidence_status == STATUS_ERROR:
            # A failed lookup shows the error, its invocation id, and what the stages before the
            # failure produced: the spec's traceability holds for errors too.
            kept = set(_FAILURE_KEYS) | {camel(part) for part in self.completed_parts or ()}
            return {key: value for key, value in data.items() if key in kept}
        return data

    def retrieval_details(self, content_chars: int) -> dict[str, Any]:
        """The record persisted in tool_invocation.retrieval_details (spec keys, snake_case)."""
        details: dict[str, Any] = {
            "l0_hints": self.l0_hints.to_record(),
            "query_transform": self.query_transform.to_record(),
            "retrieval_layer": self.retrieval_layer,
            "retrieval_trace": self.retrieval_trace.to_record(),
            "fallback_reason": self.retrieval_trace.fallback_reason,
            "rerank_trace": serialize(self.rerank_trace, RECORD),
            "context_pack_summary": self.context_pack.summary(),
            "evidence_blocks": [b.to_summary(content_chars) for b in self.evidence_blocks],
            "candidate_count": self.dedup.candidate_count,
            "final_evidence_count": self.dedup.final_count,
            "evidence_status": self.evidence_status,
            "relevance_level": self.relevance_level,
            "competition": self.competition.to_record() if self.competition else None,
        }
        if self.sidecar is not None:
            details["sidecar"] = self.sidecar.to_record()
        return details
