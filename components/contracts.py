"""
The shared data contracts of lookup-knowledge, in one place.

Components pass these dataclasses to each other; `to_dict()` gives the agent-facing camelCase
shape (DESIGN.md) and `to_record()` the snake_case shape persisted in
`tool_invocation.retrieval_details`. Nothing else builds these dicts by hand.
"""

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from components.errors import BadInputError

# Retrieval layers and outcomes as they appear in results and traces.
LAYER_L0_L1 = "L0+L1"
LAYER_L1 = "L1"
FALLBACK_NO_EVIDENCE = "filtered_vector_no_evidence"
FALLBACK_LOW_QUALITY = "filtered_vector_low_quality"
STATUS_EVIDENCE = "evidence"
STATUS_NO_EVIDENCE = "no_evidence"
STATUS_ERROR = "error"


_ATOMIC = (str, int, float, bool, type(None))


class CheapDeepcopy:
    """
    A deep copy that is several times faster than `copy.deepcopy`'s generic one for contracts
    whose fields are scalars, lists or dicts of scalars, and tuples or frozensets, which are
    shared: a contract keeps only immutable values in those (the rest goes through
    `copy.deepcopy`). Haystack deep-copies every input of every component, element by element, so
    the candidate lists of each lookup are copied three times or more.
    """

    def __deepcopy__(self, memo: dict) -> Any:
        clone = object.__new__(type(self))
        memo[id(self)] = clone
        fields = clone.__dict__
        for name, value in self.__dict__.items():
            kind = type(value)
            if kind in _ATOMIC or kind is tuple or kind is frozenset:  # contracts keep only immutable values in these
                fields[name] = value
            elif kind is list and all(type(item) in _ATOMIC for item in value):
                fields[name] = list(value)
            elif kind is dict and all(type(item) in _ATOMIC for item in value.values()):
                fields[name] = dict(value)
            else:
                fields[name] = copy.deepcopy(value, memo)
        return clone


class InvalidQueryError(BadInputError):
    """The query cannot be looked up (empty, or over the length limit with `on_overlong=error`)."""


@dataclass
class EntityRef:
    """A named entity of a document, with the aliases that refer to it."""

    name: str
    aliases: list[str] = field(default_factory=list)


@dataclass
class SkippedFile:
    """A knowledge-base file that indexing left out, and why."""

    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class IndexPlan:
    """What an indexing run must change: decided by comparing the KB with the collection."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    stale_ids: list[str] = field(default_factory=list)
    rebuild: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IndexReport:
    """The report printed after `knowledge index`."""

    added: list[str]
    updated: list[str]
    unchanged: list[str]
    removed: list[str]
    skipped: list[SkippedFile]
    chunks_written: int
    chunks_deleted: int
    collection_count: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["skipped"] = [s.to_dict() for s in self.skipped]
        return data


@dataclass
class QueryTransform(CheapDeepcopy):
    """How the raw query was normalised and expanded before retrieval."""

    raw: str
    normalized: str
    variants: list[str]
    expansions: list[str] = field(default_factory=list)
    truncated: bool = False
    original_chars: int = 0

    @property
    def retrieval_query(self) -> str:
        """The text embedded for the first attempt: the expanded variant when there is one."""
        return self.variants[-1]

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    to_dict = to_record


@dataclass
class L0Hints(CheapDeepcopy):
    """What the L0 index recognised in the query. Hint data only: never evidence."""

    matched_titles: list[str] = field(default_factory=list)
    matched_keywords: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    matched_sources: list[str] = field(default_factory=list)
    # Documents whose name (e.g. an alert name, "KubeQuotaAlmostFull") the query quotes verbatim.
    named_sources: list[str] = field(default_factory=list)
    # Query words the knowledge base never uses and that are no common word either ("redis").
    uncovered_terms: list[str] = field(default_factory=list)

    @property
    def has_matches(self) -> bool:
        return bool(self.matched_titles or self.matched_keywords or self.domains or self.entities)

    @property
    def single_domain(self) -> str | None:
        """The category to filter on: only when exactly one nonblank domain was recognised."""
        domains = [d for d in self.domains if d and d.strip()]
        return domains[0] if len(domains) == 1 else None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    to_dict = to_record


@dataclass
class Candidate(CheapDeepcopy):
    """
    One chunk returned by a vector search, normalised to the same shape for every path.

    `raw_score` keeps what the store returned (its meaning in `raw_score_label`); `similarity`
    is the one normalized value in [0, 1] that every threshold uses.
    """

    evidence_key: str
    source: str
    content: str
    similarity: float
    raw_score: float
    raw_score_label: str
    path: str
    title: str | None = None
    breadcrumb: str | None = None
    category: str | None = None
    chunk_index: int = 0
    attempt: int = 0
    section_kind: str | None = None
    keywords: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    # Index-time chunk terms for lexical signals: a frozenset, shared rather than copied between
    # components (see CheapDeepcopy); often a hundred strings or more.
    terms: frozenset[str] = frozenset()
    hit_reasons: list[str] = field(default_factory=list)
    final_score: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)
    # Token count of `content` with the embedding model's tokenizer, counted at index time
    # (None for chunks indexed before it was recorded).
    tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RetrievalAttempt(CheapDeepcopy):
    """One L1 vector search and what came of it."""

    index: int
    category_filter: str | None
    filter_expression: str | None
    query: str
    path: str
    candidate_count: int
    usable_count: int
    top_similarity: float | None
    outcome: str
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "filter": self.filter_expression,
            "category": self.category_filter,
            "query": self.query,
            "path": self.path,
            "candidateCount": self.candidate_count,
            "usableCount": self.usable_count,
            "topSimilarity": self.top_similarity,
            "outcome": self.outcome,
            **({"error": self.error} if self.error else {}),
        }

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RetrievalTrace(CheapDeepcopy):
    """Every attempt of one lookup, the one selected, and why a retry happened."""

    attempts: list[RetrievalAttempt] = field(default_factory=list)
    selected_attempt: int | None = None
    fallback_reason: str | None = None
    vector_store_mode: str = "sdk"
    l1_enabled: bool = True
    # The similarity a candidate needed to count as evidence in this lookup.
    evidence_threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "attempts": [a.to_dict() for a in self.attempts],
            "selectedAttempt": self.selected_attempt,
            "vectorStoreMode": self.vector_store_mode,
            "l1Enabled": self.l1_enabled,
            "evidenceThreshold": self.evidence_threshold,
        }
        if self.fallback_reason:
            data["fallbackReason"] = self.fallback_reason
        return data

    def to_record(self) -> dict[str, Any]:
        return {
            "attempts": [a.to_record() for a in self.attempts],
            "selected_attempt": self.selected_attempt,
            "fallback_reason": self.fallback_reason,
            "vector_store_mode": self.vector_store_mode,
            "l1_enabled": self.l1_enabled,
            "evidence_threshold": self.evidence_threshold,
        }


@dataclass
class RerankEntry(CheapDeepcopy):
    """How one candidate earned its final rank."""

    rank: int
    source: str
    evidence_key: str
    base_score: float
    final_score: float
    boosts: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "source": self.source,
            "evidenceKey": self.evidence_key,
            "baseScore": self.base_score,
            "finalScore": self.final_score,
            "boosts": self.boosts,
        }

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DedupStats(CheapDeepcopy):
    """Counts of the post-retrieval step."""

    candidate_count: int
    final_count: int
    merged: int
    capped: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvidenceBlock(CheapDeepcopy):
    """One chunk of knowledge returned to the agent as evidence."""

    evidence_key: str
    source: str
    content: str
    retrieval_layer: str
    score: float
    score_label: str
    raw_score: float
    raw_score_label: str
    rerank_score: float
    hit_reasons: list[str]
    title: str | None = None
    breadcrumb: str | None = None
    category: str | None = None
    tokens: int | None = None  # of `content`, from the index (see Candidate.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidenceKey": self.evidence_key,
            "source": self.source,
            "title": self.title,
            "breadcrumb": self.breadcrumb,
            "category": self.category,
            "retrievalLayer": self.retrieval_layer,
            "score": self.score,
            "scoreLabel": self.score_label,
            "rawScore": self.raw_score,
            "rawScoreLabel": self.raw_score_label,
            "rerankScore": self.rerank_score,
            "content": self.content,
            "hitReasons": self.hit_reasons,
        }

    def to_summary(self, content_chars: int) -> dict[str, Any]:
        """The compact form persisted in retrieval_details: content truncated, never duplicated whole."""
        preview = self.content[:content_chars]
        return {
            "evidence_key": self.evidence_key,
            "source": self.source,
            "title": self.title,
            "breadcrumb": self.breadcrumb,
            "category": self.category,
            "retrieval_layer": self.retrieval_layer,
            "score": self.score,
            "rerank_score": self.rerank_score,
            "hit_reasons": self.hit_reasons,
            "content_preview": preview,
            "content_chars": len(self.content),
        }


@dataclass
class PackedBlock(CheapDeepcopy):
    """An evidence block as placed in the context pack."""

    evidence_key: str
    source: str
    title: str | None
    breadcrumb: str | None
    hit_reasons: list[str]
    tokens: int
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidenceKey": self.evidence_key,
            "source": self.source,
            "title": self.title,
            "breadcrumb": self.breadcrumb,
            "hitReasons": self.hit_reasons,
            "tokens": self.tokens,
            "truncated": self.truncated,
        }


@dataclass
class ContextPack(CheapDeepcopy):
    """The compact context handed to the agent, within a token budget."""

    text: str
    budget_tokens: int
    used_tokens: int
    included_sources: list[str]
    omitted_sources: list[str]
    truncated: bool
    blocks: list[PackedBlock] = field(default_factory=list)
    # Blocks left out for the budget, also those whose source is included through another block.
    omitted_evidence_keys: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "budgetTokens": self.budget_tokens,
            "usedTokens": self.used_tokens,
            "includedSources": self.included_sources,
            "omittedSources": self.omitted_sources,
            "omittedEvidenceKeys": self.omitted_evidence_keys,
            "truncated": self.truncated,
            "blocks": [b.to_dict() for b in self.blocks],
        }

    def summary(self) -> dict[str, Any]:
        """The part persisted in retrieval_details (no text)."""
        return {
            "budget_tokens": self.budget_tokens,
            "used_tokens": self.used_tokens,
            "included_sources": self.included_sources,
            "omitted_sources": self.omitted_sources,
            "truncated": self.truncated,
            "included_evidence_keys": [b.evidence_key for b in self.blocks],
            "omitted_evidence_keys": self.omitted_evidence_keys,
        }


@dataclass
class SidecarReport(CheapDeepcopy):
    """The side-by-side comparison of the main vector path with the other one."""

    status: str
    path: str | None = None
    main_path: str | None = None
    error: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    comparison: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LookupResult:
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
    dedup: DedupStats
    message: str | None = None
    sidecar: SidecarReport | None = None
    invocation_id: str | None = None
    trace_status: str | None = None
    error: dict[str, Any] | None = None

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
        if self.evidence_status == STATUS_ERROR:
            failed: dict[str, Any] = {
                "found": False,
                "evidenceStatus": STATUS_ERROR,
                "message": self.message,
                "error": self.error,
                "evidenceBlocks": [],
                "invocationId": self.invocation_id,
            }
            if self.trace_status is not None:
                failed["traceStatus"] = self.trace_status
            return failed
        data: dict[str, Any] = {
            "found": self.found,
            "evidenceStatus": self.evidence_status,
        }
        if self.message:
            data["message"] = self.message
        data.update(
            {
                "retrievalLayer": self.retrieval_layer,
                "evidenceBlocks": [b.to_dict() for b in self.evidence_blocks],
                "contextPack": self.context_pack.to_dict(),
                "retrievalTrace": self.retrieval_trace.to_dict(),
                "rerankTrace": [r.to_dict() for r in self.rerank_trace],
                "relevanceLevel": self.relevance_level,
                "completenessHint": self.completeness_hint,
                "queryTransform": self.query_transform.to_record(),
                "l0Hints": self.l0_hints.to_record(),
            }
        )
        if self.sidecar is not None:
            data["sidecar"] = self.sidecar.to_dict()
        data["invocationId"] = self.invocation_id
        if self.trace_status is not None:
            data["traceStatus"] = self.trace_status
        return data

    def retrieval_details(self, content_chars: int) -> dict[str, Any]:
        """The record persisted in tool_invocation.retrieval_details (spec keys, snake_case)."""
        details: dict[str, Any] = {
            "l0_hints": self.l0_hints.to_record(),
            "query_transform": self.query_transform.to_record(),
            "retrieval_layer": self.retrieval_layer,
            "retrieval_trace": self.retrieval_trace.to_record(),
            "fallback_reason": self.retrieval_trace.fallback_reason,
            "rerank_trace": [r.to_record() for r in self.rerank_trace],
            "context_pack_summary": self.context_pack.summary(),
            "evidence_blocks": [b.to_summary(content_chars) for b in self.evidence_blocks],
            "candidate_count": self.dedup.candidate_count,
            "final_evidence_count": self.dedup.final_count,
            "evidence_status": self.evidence_status,
            "relevance_level": self.relevance_level,
        }
        if self.sidecar is not None:
            details["sidecar"] = self.sidecar.to_dict()
        return details
