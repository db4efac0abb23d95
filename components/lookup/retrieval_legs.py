"""
The retriever's working parts that are not the component: the two query embeddings an attempt may
search with, a search started in the background, and the best hits of a leg kept for the trace.
"""

from concurrent.futures import Future
from typing import NamedTuple

from components.common.choices import RetrievalLeg
from components.contracts import AttemptHit, Candidate
from components.stores.vector_search import Bm25Hit, Embedding

BM25 = RetrievalLeg.bm25.value
# Best hits of each leg kept per attempt for the MLflow trace, and the characters of their preview.
TOP_HITS = 5
HIT_PREVIEW_CHARS = 200


class QueryVectors(NamedTuple):
    """The two embeddings an attempt may search with: the plain query's and the expanded query's."""

    query: Embedding
    expanded: Embedding


class PendingSearch:
    """
    A search started in the retriever's thread pool (with the lookup's Milvus deadline), or None
    when it was not started. `result()` waits for it and raises what it raised.
    """

    def __init__(self, future: Future | None, path: str | None = None) -> None:
        self.future = future
        self.path = path

    def result(self):
        return self.future.result() if self.future is not None else None


def top_hits(leg: str, candidates: list[Candidate], bm25: list[Bm25Hit] | None = None) -> tuple[AttemptHit, ...]:
    """The first `TOP_HITS` chunks of one leg, in its order, with its own score beside the similarity."""
    hits = []
    for rank, candidate in enumerate(candidates[:TOP_HITS], start=1):
        bm25_hit = bm25[rank - 1] if bm25 else None
        hits.append(
            AttemptHit(
                leg=leg,
                rank=bm25_hit.rank if bm25_hit else rank,
                evidence_key=candidate.evidence_key,
                source=candidate.source,
                similarity=round(candidate.similarity, 4),
                score=round(bm25_hit.score if bm25_hit else candidate.raw_score, 4),
                score_label="bm25" if bm25_hit else candidate.raw_score_label,
                preview=candidate.content[:HIT_PREVIEW_CHARS],
            )
        )
    return tuple(hits)


def bm25_top_hits(hits: list[Bm25Hit]) -> tuple[AttemptHit, ...]:
    ranked = sorted(hits, key=lambda hit: hit.rank)
    return top_hits(BM25, [hit.candidate for hit in ranked], ranked)
