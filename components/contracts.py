"""
The shared data contracts of lookup-knowledge, in one place (the whole result of a lookup,
`LookupResult`, in `components.lookup_result`).

Components pass these dataclasses to each other. Both dict shapes come from the field
declarations (`components.common.serialization`): `to_dict()` gives the agent-facing camelCase
shape (docs/architecture.md, "The result"), `to_record()` the snake_case shape persisted in `tool_invocation.retrieval_details`.
"""

from dataclasses import dataclass, field
from typing import Any

from components.common.choices import FallbackReason
from components.common.serialization import CheapDeepcopy, Contract, RecordContract, wire
from components.errors import BadInputError

# Retrieval layers and outcomes as they appear in results and traces.
LAYER_L0_L1 = "L0+L1"
LAYER_L1 = "L1"
FALLBACK_NO_EVIDENCE = FallbackReason.filtered_vector_no_evidence.value
FALLBACK_LOW_QUALITY = FallbackReason.filtered_vector_low_quality.value
FALLBACK_OUTSCORED = FallbackReason.filtered_vector_outscored.value
STATUS_EVIDENCE = "evidence"
STATUS_NO_EVIDENCE = "no_evidence"
STATUS_ERROR = "error"


class InvalidQueryError(BadInputError):
    """The query cannot be looked up (empty, or over the length limit with `on_overlong=error`)."""


@dataclass
class EntityRef(RecordContract):
    """A named entity of a document, with the aliases that refer to it."""

    name: str
    aliases: list[str] = field(default_factory=list)


@dataclass
class SkippedFile(RecordContract):
    """A knowledge-base file that indexing left out, and why."""

    source: str
    reason: str


@dataclass
class IndexPlan(RecordContract):
    """What an indexing run must change: decided by comparing the KB with the collection."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    stale_ids: list[str] = field(default_factory=list)
    rebuild: bool = False


@dataclass
class IndexReport(RecordContract):
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
    # What the run could not do as configured, and how to get it (e.g. the full-text field).
    notes: list[str] = field(default_factory=list)


@dataclass
class QueryTransform(Contract, CheapDeepcopy):
    """How the raw query was normalised and expanded before retrieval."""

    raw: str
    normalized: str
    variants: list[str]
    expansions: list[str] = field(default_factory=list)
    truncated: bool = False
    original_chars: int = 0
    # The section kinds the query needs of its leading document (`needed_section_kinds`), for the
    # deduper and the assembler: in neither the result nor the row.
    needed_sections: frozenset[str] = field(default=frozenset(), metadata=wire(json=None, record=None))

    @property
    def retrieval_query(self) -> str:
        """The text embedded for the first attempt: the expanded variant when there is one."""
        return self.variants[-1]


@dataclass
class L0Hints(Contract, CheapDeepcopy):
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
    # Domain rules that fired, e.g. "named_as_subject_elsewhere: alertmanager (<source>)": a named
    # category left out of `domains` because another category's document is about it.
    domain_rules: list[str] = field(default_factory=list)

    @property
    def has_matches(self) -> bool:
        return bool(self.matched_titles or self.matched_keywords or self.domains or self.entities)

    @property
    def single_domain(self) -> str | None:
        """The category to filter on: only when exactly one nonblank domain was recognised."""
        domains = [d for d in self.domains if d and d.strip()]
        return domains[0] if len(domains) == 1 else None


@dataclass
class Candidate(RecordContract, CheapDeepcopy):
    """
    One chunk returned by a vector search, normalised to the same shape for every path.

    `raw_score` keeps what the store returned (its meaning in `raw_score_label`); `similarity` is the one normalized value in [0, 1] that every threshold uses.
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
    # Index-time chunk terms for lexical signals: a frozenset shared, not copied (CheapDeepcopy); often 100+ strings.
    terms: frozenset[str] = frozenset()
    hit_reasons: list[str] = field(default_factory=list)
    final_score: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)
    # Token count of `content` with the embedding model's tokenizer, at index time (None: not recorded).
    tokens: int | None = None
    # The BM25 leg's score (Milvus's BM25, higher is better; not a similarity) and rank, when it found the chunk.
    bm25_score: float | None = None
    bm25_rank: int | None = None
    # The ranking model's similarity when a decision model scored `similarity` (common/decision_scale.py).
    rank_similarity: float | None = None


@dataclass(frozen=True)
class AttemptHit:
    """
    One of the best chunks of one leg of a retrieval attempt, for the MLflow trace: `score` is the
    leg's own score (the store's raw dense score, or Milvus's BM25 score), `similarity` the
    normalized dense similarity every threshold uses. Immutable, so contracts share it.
    """

    leg: str
    rank: int
    evidence_key: str
    source: str
    similarity: float
    score: float
    score_label: str
    preview: str


@dataclass
class RetrievalAttempt(Contract, CheapDeepcopy):
    """One L1 vector search and what came of it."""

    index: int
    category_filter: str | None = field(metadata=wire(json="category"))
    filter_expression: str | None = field(metadata=wire(json="filter"))
    query: str
    path: str
    candidate_count: int
    usable_count: int
    top_similarity: float | None
    outcome: str
    error: str | None = field(default=None, metadata=wire(omit_none=True))
    # Legs that ran ("dense", "bm25"), chunks the BM25 leg returned, and how many of them the dense
    # leg had not found (their similarity comes from their stored vectors).
    legs: list[str] = field(default_factory=list)
    bm25_count: int | None = field(default=None, metadata=wire(omit_none=True))
    bm25_only_count: int | None = field(default=None, metadata=wire(omit_none=True))
    # Why this attempt did not run the BM25 leg although the collection has it (None when it ran).
    bm25_skipped: str | None = field(default=None, metadata=wire(omit_none=True))
    # A filtered attempt's check: the best dense similarity of the same search without the filter.
    unfiltered_top_similarity: float | None = field(default=None, metadata=wire(omit_none=True))
    # For the MLflow trace only (neither the result nor the row): the best hits of each leg and
    # when the attempt ran (ns since the epoch).
    top_hits: tuple[AttemptHit, ...] = field(default=(), metadata=wire(json=None, record=None))
    started_ns: int | None = field(default=None, metadata=wire(json=None, record=None))
    ended_ns: int | None = field(default=None, metadata=wire(json=None, record=None))


@dataclass
class RetrievalTrace(Contract, CheapDeepcopy):
    """Every attempt of one lookup, the one selected, and why a retry happened."""

    attempts: list[RetrievalAttempt] = field(default_factory=list)
    selected_attempt: int | None = None
    fallback_reason: str | None = field(default=None, metadata=wire(omit_none=True))
    vector_store_mode: str = "sdk"
    l1_enabled: bool = True
    # The similarity a candidate needed to count as evidence in this lookup.
    evidence_threshold: float | None = None
    # The vector index the collection really has (described from Milvus, not the configured one).
    index_type: str | None = field(default=None, metadata=wire(omit_none=True))
    # The legs the attempts ran, and why the BM25 leg did not (None when it ran).
    legs: list[str] = field(default_factory=list)
    bm25_skipped: str | None = field(default=None, metadata=wire(omit_none=True))
    # MLflow trace only: the top similarity a filtered attempt needed, where the thresholds came from, and
    # the decision model's best similarity when it refused the ranking model's evidence (answer-only gating).
    reference_threshold: float | None = field(default=None, metadata=wire(json=None, record=None))
    calibration: str | None = field(default=None, metadata=wire(json=None, record=None))
    gate_similarity: float | None = field(default=None, metadata=wire(json=None, record=None))


@dataclass
class RerankEntry(Contract, CheapDeepcopy):
    """How one candidate earned its final rank."""

    rank: int
    source: str
    evidence_key: str
    base_score: float
    final_score: float
    boosts: dict[str, float]


@dataclass
class DedupStats(RecordContract, CheapDeepcopy):
    """Counts of the post-retrieval step."""

    candidate_count: int
    final_count: int
    merged: int
    capped: int


@dataclass
class EvidenceBlock(Contract, CheapDeepcopy):
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
    tokens: int | None = field(default=None, metadata=wire(json=None))  # of `content`, from the index
    # Milvus's BM25 score and rank of the chunk in the full-text leg, when that leg found it; the
    # rerank signal `bm25`, never part of `score`.
    bm25_score: float | None = field(default=None, metadata=wire(omit_none=True))
    bm25_rank: int | None = field(default=None, metadata=wire(omit_none=True))

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
            "bm25_score": self.bm25_score,
            "bm25_rank": self.bm25_rank,
            "content_preview": preview,
            "content_chars": len(self.content),
        }


@dataclass
class PackedBlock(Contract, CheapDeepcopy):
    """An evidence block as placed in the context pack."""

    evidence_key: str
    source: str
    title: str | None
    breadcrumb: str | None
    hit_reasons: list[str]
    tokens: int
    truncated: bool


@dataclass
class ContextPack(Contract, CheapDeepcopy):
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
class SidecarReport(Contract, CheapDeepcopy):
    """The side-by-side comparison of the main vector path with the other one."""

    status: str
    path: str | None = None
    main_path: str | None = None
    error: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list, metadata=wire(camel_keys=True))
    comparison: dict[str, Any] = field(default_factory=dict, metadata=wire(camel_keys=True))


@dataclass
class Competition(Contract, CheapDeepcopy):
    """Another document close to the best one (the leader): the agent must see both (docs/architecture.md)."""

    leader: str
    competitor: str
    margin: float  # the leader's best rerank score minus the competitor's
    reasons: list[str]  # why they compete
    evidence_key: str | None = None  # the competitor's best block: packed and cited whatever the caps
