from pathlib import PurePosixPath
from typing import Any

from haystack import component

from components.common.choices import check_at_least, check_flags, check_unit_interval
from components.common.evidence import EvidenceBar
from components.common.l0_words import is_identifier_name
from components.common.markdown_sections import section_kind
from components.contracts import (
    LAYER_L0_L1,
    LAYER_L1,
    STATUS_EVIDENCE,
    STATUS_NO_EVIDENCE,
    Competition,
    ContextPack,
    DedupStats,
    EvidenceBlock,
    L0Hints,
    PackedBlock,
    QueryTransform,
    RerankEntry,
    RetrievalTrace,
    SidecarReport,
)
from components.lookup_result import LookupResult
from components.stores.l0_index import L0Index

LAYER_L0 = "L0"
LAYER_NONE = "none"


def retrieval_layer(hints: L0Hints, trace: RetrievalTrace) -> str:
    """
    `L0+L1` when L0 hint data and L1 candidates both took part, `L1` for candidates without
    hints, `L0` for hints without any L1 candidate (L1 disabled or empty), `none` otherwise.
    """
    had_candidates = any(a.candidate_count > 0 for a in trace.attempts)
    if had_candidates:
        return LAYER_L0_L1 if hints.has_matches else LAYER_L1
    return LAYER_L0 if hints.has_matches else LAYER_NONE


def relevance_level(
    blocks: list[EvidenceBlock],
    high: float,
    medium: float,
    runner_up_margin: float | None = None,
    high_margin: float = 0.0,
    competing: bool = False,
    similarity_disagrees: bool = False,
) -> str:
    """
    From the best block's normalized similarity s: `high` when s >= `high`, no document competes,
    the runner-up document trails by at least `high_margin` (or there is none) and the similarity
    order does not disagree on the leader; `medium` when s >= `medium` (the reference
    threshold); `low` for any other evidence; `none` without.
    """
    if not blocks:
        return "none"
    best = max(b.score for b in blocks)
    leads = runner_up_margin is None or runner_up_margin >= high_margin
    sure = not competing and leads and not similarity_disagrees
    if best >= high and sure:
        return "high"
    if best >= medium:
        return "medium"
    return "low"


def sections_left_out(needed_sections: frozenset[str], headings: list[str], blocks: list[PackedBlock]) -> list[str]:
    """
    The headings of the leading document's sections the query needs (`QueryTransform.needed_sections`)
    that no packed block of it comes from; only kinds the document has.
    """
    kinds = {section_kind([h]): h for h in reversed(headings[1:])}
    needed = needed_sections & set(kinds)
    covered = {section_kind((b.breadcrumb or "").split(" > ")) for b in blocks}
    return [kinds[kind] for kind in sorted(needed - covered)]


def document_name(source: str) -> str:
    return PurePosixPath(source).stem


def budget_cut(pack: ContextPack) -> str:
    """What the context budget cut, as a clause of the hint ("" when nothing)."""
    if pack.omitted_sources:
        missing = f"{len(pack.omitted_sources)} source(s) omitted"
    elif pack.omitted_evidence_keys:
        missing = f"{len(pack.omitted_evidence_keys)} block(s) omitted"
    elif pack.truncated:
        missing = "content truncated"
    else:
        return ""
    return f"; the context budget cut some of it ({missing})"


def completeness_hint(
    blocks: list[EvidenceBlock],
    pack: ContextPack,
    level: str,
    competition: Competition | None = None,
    left_out: list[str] | None = None,
) -> str:
    """One sentence telling the agent how far to trust the evidence as a complete answer."""
    if not blocks:
        return "none: no knowledge evidence was found; do not answer from the knowledge base"
    sources = len({b.source for b in blocks})
    base = f"{len(blocks)} evidence block(s) from {sources} source(s)"
    sections = ""
    if left_out:
        sections = f"; not in the context: {', '.join(left_out)} of {document_name(blocks[0].source)}; read the source"
    cut = budget_cut(pack)
    if competition is not None:
        packed = {b.source for b in pack.blocks}
        both = "both included" if {competition.leader, competition.competitor} <= packed else "both cited"
        names = f"{document_name(competition.leader)} vs {document_name(competition.competitor)}"
        return f"ambiguous: {names}; {both}; {base}; check which one matches before acting{cut}{sections}"
    if cut:
        return f"partial: {base}{cut}{sections or '; read the sources for details'}"
    if level == "low":
        return f"weak: {base}, all of low relevance; verify before relying on it{sections}"
    if left_out:
        return f"partial: {base}{sections}"
    return f"complete: {base}, all within the context budget"


@component
class ResultAssembler:
    """
    Assembles the evidence-first `LookupResult` (docs/architecture.md, "The result").

    With evidence: `found=true`, the blocks, context pack, retrieval and rerank traces,
    `relevanceLevel` and `completenessHint`. Without: `found=false`,
    `evidenceStatus="no_evidence"`, a message saying so and the trace of every attempt; L0 matches
    stay hint data in the trace and never appear as evidence.

    Usage example:

    ```python
    >>> from components.common.evidence import EvidenceBar
    >>> from components.contracts import ContextPack, DedupStats, L0Hints, QueryTransform, RetrievalTrace
    >>> qt = QueryTransform(raw="bake bread", normalized="bake bread", variants=["bake bread"])
    >>> assembler = ResultAssembler(high_relevance=0.5)
    >>> result = assembler.run(query_transform=qt, hints=L0Hints(), retrieval_trace=RetrievalTrace(),
    ...                        evidence_bar=EvidenceBar(configured=0.35, applied=0.35), rerank_trace=[],
    ...                        evidence_blocks=[], dedup=DedupStats(0, 0, 0, 0),
    ...                        context_pack=ContextPack("", 1200, 0, [], [], False))["result"]
    >>> result.to_dict()["found"], result.to_dict()["evidenceStatus"]
    (False, 'no_evidence')

    ```
    """

    def __init__(
        self,
        high_relevance: float = 0.5,
        reference_threshold: float = 0.5,
        high_margin: float = 0.1,
        high_needs_agreement: bool = True,
    ) -> None:
        """
        :param high_relevance: Best similarity for `relevanceLevel="high"`.
        :param reference_threshold: Best similarity for `"medium"`.
        :param high_margin: How far the runner-up document must trail for `"high"`.
        :param high_needs_agreement: `"high"` only when the leader is also first by vector
            similarity alone (`CompetitionDetector`'s `similarity_agrees`).
        """
        check_unit_interval(high_relevance=high_relevance, reference_threshold=reference_threshold)
        check_at_least(0, high_margin=high_margin)
        check_flags(high_needs_agreement=high_needs_agreement)
        self.high_relevance = high_relevance
        self.reference_threshold = reference_threshold
        self.high_margin = high_margin
        self.high_needs_agreement = high_needs_agreement

    @component.output_types(result=LookupResult)
    def run(
        self,
        query_transform: QueryTransform,
        hints: L0Hints,
        retrieval_trace: RetrievalTrace,
        evidence_bar: EvidenceBar,
        rerank_trace: list[RerankEntry],
        evidence_blocks: list[EvidenceBlock],
        dedup: DedupStats,
        context_pack: ContextPack,
        sidecar: SidecarReport | None = None,
        competition: Competition | None = None,
        runner_up_margin: float | None = None,
        similarity_agrees: bool | None = None,
        l0_index: L0Index | None = None,
    ) -> dict[str, Any]:
        """
        :param evidence_bar: The retriever's, quoted in the no-evidence message.
        :param competition: A document competing with the best one (from `CompetitionDetector`).
        :param runner_up_margin: How far the second document trails the best one.
        :param similarity_agrees: Whether the best document is also first by similarity alone.
        :param l0_index: The L0 index the lookup read, for the sections of the leading document;
            None leaves the sections out of the completeness hint.
        :returns: `result`, the `LookupResult`.
        """
        found = bool(evidence_blocks)
        level = relevance_level(
            evidence_blocks,
            self.high_relevance,
            self.reference_threshold,
            runner_up_margin,
            self.high_margin,
            competing=competition is not None,
            similarity_disagrees=self.high_needs_agreement and similarity_agrees is False,
        )
        message = None if found else self._no_evidence_message(retrieval_trace, hints, evidence_bar)
        result = LookupResult(
            found=found,
            evidence_status=STATUS_EVIDENCE if found else STATUS_NO_EVIDENCE,
            retrieval_layer=retrieval_layer(hints, retrieval_trace),
            evidence_blocks=evidence_blocks,
            context_pack=context_pack,
            retrieval_trace=retrieval_trace,
            rerank_trace=rerank_trace,
            relevance_level=level,
            completeness_hint=completeness_hint(
                evidence_blocks,
                context_pack,
                level,
                competition,
                self._left_out(l0_index, query_transform, evidence_blocks, context_pack),
            ),
            query_transform=query_transform,
            l0_hints=hints,
            dedup=dedup,
            message=message,
            # No sidecar wired into the pipeline: it is disabled (the default).
            sidecar=sidecar if sidecar is not None else SidecarReport(status="disabled"),
            competition=competition,
        )
        return {"result": result}

    @staticmethod
    def _left_out(
        index: L0Index | None, query: QueryTransform, blocks: list[EvidenceBlock], pack: ContextPack
    ) -> list[str]:
        """The needed sections of the leading document that the pack lacks (see `sections_left_out`)."""
        if index is None or not blocks:
            return []
        entry = index.entry(blocks[0].source)
        if entry is None:
            return []
        packed = [b for b in pack.blocks if b.source == entry.source]
        return sections_left_out(query.needed_sections, entry.headings, packed)

    def _no_evidence_message(self, trace: RetrievalTrace, hints: L0Hints, evidence_bar: EvidenceBar) -> str:
        if not trace.l1_enabled:
            return "No knowledge evidence found: semantic (L1) retrieval is disabled, and L0 hints are never evidence."
        attempts = len(trace.attempts)
        bar = evidence_bar.applied
        if trace.gate_similarity is not None:
            return (
                f"No knowledge evidence found: the deciding model's best similarity to any chunk is "
                f"{trace.gate_similarity:.3f}, under the {bar} a chunk needs to count as evidence. "
                "The knowledge base does not seem to cover this query."
            )
        if hints.uncovered_terms and evidence_bar.raised:
            best = max((a.top_similarity or 0.0 for a in trace.attempts), default=0.0)
            uncovered = _uncovered_phrase(hints.uncovered_terms)
            return (
                f"No knowledge evidence found: the knowledge base {uncovered}, so a chunk needed a "
                f"similarity of at least {bar} to count as evidence; the best of {attempts} retrieval attempt(s) "
                f"reached {best:.3f}. The knowledge base does not seem to cover this query."
            )
        return (
            f"No knowledge evidence found: {attempts} retrieval attempt(s) returned no chunk with a similarity "
            f"of at least {evidence_bar.configured}. The knowledge base does not seem to cover this query."
        )


def _uncovered_phrase(uncovered_terms: list[str]) -> str:
    """What the uncovered terms say of the knowledge base: words it never uses, alert names no document has."""
    names = [t for t in uncovered_terms if is_identifier_name(t)]
    words = [t for t in uncovered_terms if t not in names]
    phrases = []
    if words:
        phrases.append("never mentions " + ", ".join(map(repr, words)))
    if names:
        phrases.append("has no document named " + ", ".join(map(repr, names)))
    return " and ".join(phrases)
