"""
The retriever's working parts that are not the component: the two query embeddings an attempt may
search with, a search started in the background, and the best hits of a leg kept for the trace.
"""

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from components.common.choices import DecisionScope, RetrievalLeg, check_choice, check_named_or_none
from components.common.decision_scale import DecisionVectorsFile, on_decision_scale
from components.common.evidence import usable
from components.contracts import AttemptHit, Candidate
from components.errors import ParameterError
from components.stores.vector_search import Bm25Hit, Embedding

BM25 = RetrievalLeg.bm25.value
# Best hits of each leg kept per attempt for the MLflow trace, and the characters of their preview.
TOP_HITS = 5
HIT_PREVIEW_CHARS = 200
# Threads of a retriever for the searches it waits on side by side.
LEG_THREADS = 8


class QueryVectors(NamedTuple):
    """The two embeddings an attempt may search with: the plain query's and the expanded query's."""

    query: Embedding
    expanded: Embedding
    # The decision model's of both (components/common/decision_scale.py), None without one.
    decision_query: Embedding | None = None
    decision_expanded: Embedding | None = None


class DecisionScale:
    """
    The retriever's decision model (components/common/decision_scale.py): candidates rescored on
    its scale, and the best similarity of an unfiltered search on it, or (`scope="answer"`) only a
    gate on the answer; without one, nothing changes.
    """

    def __init__(self, model: str | None, vectors: str | None, scope: str = DecisionScope.answer.value) -> None:
        check_named_or_none(decision_model=model, decision_vectors=vectors)
        if model is not None and not vectors:
            raise ParameterError("decision_vectors", repr(vectors), f"must name the file of {model}'s chunk vectors")
        check_choice("decision_scope", scope, DecisionScope.values())
        self.model = model
        self.answer_only = scope == DecisionScope.answer
        self._file = None if model is None else DecisionVectorsFile(vectors, model)

    def query_vectors(self, query, expanded, decision_query, decision_expanded) -> QueryVectors:
        if self._file is None:
            return QueryVectors(query, expanded)
        if decision_query is None:
            raise ValueError(f"the retriever decides with {self.model} but got no decision query embedding")
        return QueryVectors(
            query, expanded, decision_query, decision_query if decision_expanded is None else decision_expanded
        )

    def searched(self, embeddings: QueryVectors) -> QueryVectors:
        """What the attempts search and decide with: without the decision model's when it only gates the answer."""
        return QueryVectors(embeddings.query, embeddings.expanded) if self.answer_only else embeddings

    def gated(self, found: dict, embeddings: QueryVectors, bar: float, trace) -> dict:
        """
        Answer-only gating: no evidence when the decision model reaches the bar with no chunk, for the
        query or its expanded form (what its own attempts search with). It only ever takes evidence
        away, so a ranking model that is the decision model gives exactly the results it gives alone.
        """
        if not self.answer_only or embeddings.decision_query is None or not usable(found["candidates"], bar):
            return found
        vectors = self._file.get()
        best = max(vectors.best(embeddings.decision_query), vectors.best(embeddings.decision_expanded))
        if best >= bar:
            return found
        trace.gate_similarity = round(best, 6)
        return {**found, "candidates": []}

    def apply(self, candidates: list[Candidate], decision: Embedding | None) -> list[Candidate]:
        """The candidates on the decision model's scale (as they are without a decision embedding)."""
        return candidates if decision is None else on_decision_scale(candidates, decision, self._file.get())

    def best(self, embeddings: QueryVectors) -> float | None:
        """The best decision similarity over every chunk; None without a decision model (search instead)."""
        return None if embeddings.decision_expanded is None else self._file.get().best(embeddings.decision_expanded)


class LegPool:
    """
    The threads of a retriever for the searches it waits on side by side (BM25 legs, a speculative
    retry), started on first use; each search runs in a copy of the caller's context (the Milvus deadline).
    """

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, function, *args) -> Future:
        with self._lock:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=LEG_THREADS, thread_name_prefix="retrieval-leg")
        return self.pool.submit(contextvars.copy_context().run, function, *args)


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

    @classmethod
    def done(cls, value, path: str) -> "PendingSearch | None":
        """A search whose result is known already (a view of the lookup's scan); None: none known."""
        if value is None:
            return None
        future: Future = Future()
        future.set_result(value)
        return cls(future, path)


class DeferredSearch(PendingSearch):
    """A leg served from memory, in the caller's thread, when its result is first asked for (if ever)."""

    def __init__(self, run: Callable[[], Any], path: str) -> None:
        super().__init__(Future(), path)
        self._run = run

    def result(self):
        if not self.future.done():
            try:
                self.future.set_result(self._run())
            except Exception as exc:
                self.future.set_exception(exc)
        return self.future.result()


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


def merge_bm25(dense: list[Candidate], hits: list[Bm25Hit], attempt: int, reason: str) -> list[Candidate]:
    """
    Label the dense candidates the BM25 leg found too, and return the chunks only it found (in BM25
    rank order, with the dense similarity of their stored vectors, marked with their `attempt`).
    Each chunk found gets its BM25 score and rank, and `reason` with the rank as a hit reason.
    """
    by_key = {candidate.evidence_key: candidate for candidate in dense}
    extra = []
    for hit in hits:
        candidate = by_key.get(hit.key)
        if candidate is None:
            candidate = hit.candidate
            candidate.attempt = attempt
            extra.append(candidate)
        candidate.bm25_score, candidate.bm25_rank = hit.score, hit.rank
    for candidate in dense + extra:
        if candidate.bm25_rank is not None:
            candidate.hit_reasons.append(f"{reason} rank {candidate.bm25_rank}")
    return extra
