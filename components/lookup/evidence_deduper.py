from dataclasses import replace
from typing import Any

from haystack import component

from components.common.choices import check_at_least
from components.common.evidence import EvidenceBar, usable
from components.common.scoring import SIMILARITY_LABEL
from components.common.text import unique
from components.contracts import (
    LAYER_L0_L1,
    LAYER_L1,
    Candidate,
    Competition,
    DedupStats,
    EvidenceBlock,
    QueryTransform,
    RerankEntry,
)

L0_REASON_PREFIX = "l0_"


@component
class EvidenceDeduper:
    """
    Turns reranked candidates into the final evidence blocks.

    - Only usable candidates (similarity at or above the bar the retriever applied,
      `evidence_bar.applied`) become evidence.
    - One block per `evidence_key` (chunk identity): when two candidates share a key (found by a
      filtered and an unfiltered attempt, say) one block stays, with the hit reasons of both.
    - Chunks of the same source with different keys stay separate blocks, up to
      `per_document_cap` per source; at most `max_evidence` blocks in all.
    - The best block of a competing document (`competition`) stays whatever the caps: it takes the
      place of the last block of a third document when `max_evidence` would drop it.
    - The leading document's blocks include a block of each section the query needs (those it asks
      for, else the mitigation; see docs/architecture.md) when a usable candidate has one: it takes
      the place of the leader's later blocks of other sections, never of its first.

    Also emits the rerank trace of the final blocks (final rank, source, base score, boosts).

    Usage example:

    ```python
    >>> from components.common.evidence import EvidenceBar
    >>> from components.contracts import Candidate
    >>> def chunk(key, source, similarity):
    ...     return Candidate(key, source, f"text of {key}", similarity, 2 - 2 * similarity, "l2", "sdk")
    >>> ranked = [chunk("a#0", "a.md", 0.8), chunk("a#0", "a.md", 0.8), chunk("a#1", "a.md", 0.7),
    ...           chunk("a#2", "a.md", 0.6), chunk("b#0", "b.md", 0.5), chunk("c#0", "c.md", 0.2)]
    >>> deduper = EvidenceDeduper(per_document_cap=2, max_evidence=5)
    >>> out = deduper.run(candidates=ranked, evidence_bar=EvidenceBar(configured=0.35, applied=0.35))
    >>> [block.evidence_key for block in out["evidence_blocks"]]
    ['a#0', 'a#1', 'b#0']
    >>> out["dedup"].candidate_count, out["dedup"].merged, out["dedup"].capped
    (6, 1, 1)

    ```
    """

    def __init__(self, per_document_cap: int = 2, max_evidence: int = 5) -> None:
        """
        :param per_document_cap: Most blocks from one source.
        :param max_evidence: Most blocks in all.
        """
        check_at_least(1, per_document_cap=per_document_cap, max_evidence=max_evidence)
        self.per_document_cap = per_document_cap
        self.max_evidence = max_evidence

    @component.output_types(evidence_blocks=list[EvidenceBlock], rerank_trace=list[RerankEntry], dedup=DedupStats)
    def run(
        self,
        candidates: list[Candidate],
        evidence_bar: EvidenceBar,
        competition: Competition | None = None,
        query_transform: QueryTransform | None = None,
    ) -> dict[str, Any]:
        """
        :param candidates: Candidates in rank order (from `RuleReranker`).
        :param evidence_bar: The retriever's; its applied bar decides which candidates are evidence.
        :param competition: A document competing with the best one: its best block is kept.
        :param query_transform: The query, for the sections of the leading document it needs (`needed_sections`).
        :returns: `evidence_blocks`, `rerank_trace` and `dedup` counts.
        """
        merged: dict[str, Candidate] = {}
        for candidate in candidates:
            kept = merged.get(candidate.evidence_key)
            merged[candidate.evidence_key] = candidate if kept is None else _merged(kept, candidate)
        per_source: dict[str, int] = {}
        final: list[Candidate] = []
        capped = 0
        candidates_usable = usable(list(merged.values()), evidence_bar.applied)
        for candidate in candidates_usable:
            if per_source.get(candidate.source, 0) >= self.per_document_cap:
                capped += 1
                continue
            if len(final) >= self.max_evidence:
                break
            per_source[candidate.source] = per_source.get(candidate.source, 0) + 1
            final.append(candidate)
        if competition is not None:
            final = _with_competitor(final, merged.get(competition.evidence_key or ""), self.max_evidence)
        if query_transform is not None and final:
            final = _with_needed_sections(final, candidates_usable, query_transform.needed_sections)

        blocks = [_block(c) for c in final]
        trace = [
            RerankEntry(
                rank=rank,
                source=c.source,
                evidence_key=c.evidence_key,
                base_score=c.similarity,
                final_score=c.final_score,
                boosts=dict(c.boosts),
            )
            for rank, c in enumerate(final, start=1)
        ]
        stats = DedupStats(
            candidate_count=len(candidates),
            final_count=len(blocks),
            merged=len(candidates) - len(merged),
            capped=capped,
        )
        return {"evidence_blocks": blocks, "rerank_trace": trace, "dedup": stats}


def _merged(kept: Candidate, other: Candidate) -> Candidate:
    """A new candidate: `kept` with the hit reasons of both and, when only `other` has one, its BM25 score."""
    bm25 = {} if kept.bm25_score is not None else {"bm25_score": other.bm25_score, "bm25_rank": other.bm25_rank}
    return replace(kept, hit_reasons=unique([*kept.hit_reasons, *other.hit_reasons]), **bm25)


def _with_competitor(final: list[Candidate], best: Candidate | None, max_evidence: int) -> list[Candidate]:
    """
    The final blocks with the competitor's best one; when they are full, it takes the place of the
    last block of a third document, else of the leader's last one (the leader's first always stays).
    """
    if best is None or any(c.evidence_key == best.evidence_key for c in final):
        return final
    kept = list(final)
    if len(kept) >= max_evidence:
        leader = kept[0].source
        others = [c for c in kept if c.source != leader] or kept[1:]
        if others:
            kept.remove(others[-1])
    return sorted([*kept, best], key=lambda c: (-c.final_score, -c.similarity, c.evidence_key))


def _with_needed_sections(
    final: list[Candidate], candidates: list[Candidate], needed: frozenset[str]
) -> list[Candidate]:
    """
    The final blocks with the leading document's best candidate of each needed section kind it
    lacks, each in the place of the leader's last block of a section not needed (its first stays).
    """
    leader = final[0].source
    own = [c for c in final if c.source == leader]
    missing = set(needed) - {c.section_kind for c in own}
    spare = [c for c in own[1:] if c.section_kind not in needed]
    chosen = {c.evidence_key for c in final}
    kept = final
    for candidate in candidates:
        if not (missing and spare):
            break
        if candidate.source == leader and candidate.section_kind in missing and candidate.evidence_key not in chosen:
            replaced = spare.pop()
            kept = [candidate if c is replaced else c for c in kept]
            missing.discard(candidate.section_kind)
    if kept is final:  # nothing swapped: the order stays as it came
        return final
    return sorted(kept, key=lambda c: (-c.final_score, -c.similarity, c.evidence_key))


def _block(candidate: Candidate) -> EvidenceBlock:
    layer = LAYER_L0_L1 if any(r.startswith(L0_REASON_PREFIX) for r in candidate.hit_reasons) else LAYER_L1
    return EvidenceBlock(
        evidence_key=candidate.evidence_key,
        source=candidate.source,
        content=candidate.content,
        retrieval_layer=layer,
        score=candidate.similarity,
        score_label=SIMILARITY_LABEL,
        raw_score=candidate.raw_score,
        raw_score_label=candidate.raw_score_label,
        rerank_score=candidate.final_score,
        hit_reasons=list(candidate.hit_reasons),
        title=candidate.title,
        breadcrumb=candidate.breadcrumb,
        category=candidate.category,
        tokens=candidate.tokens,
        bm25_score=candidate.bm25_score,
        bm25_rank=candidate.bm25_rank,
    )
