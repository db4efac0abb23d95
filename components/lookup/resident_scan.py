"""
Every leg of a lookup served from the collection held in memory on Milvus Lite
(components/stores/resident_rows.py): one matrix product per query vector ranks every chunk, a
filtered attempt takes its category's first hits, the outscored check the best hit, an unfiltered
attempt (the lookup's only one, or the retry) the first hits. Ranked and scored as the exact (FLAT)
search ranks and scores, so each is what that search returns. The BM25 legs are scored in memory as
Milvus Lite scores them (components/stores/resident_bm25.py), when they run at all; where that does
not hold (rows not flushed) they search. See docs/architecture.md, "One scan".
"""

import numpy as np

from components.common.scoring import similarity_from_sdk
from components.contracts import QueryTransform
from components.lookup.hybrid_scan import PATH
from components.lookup.retrieval_legs import DeferredSearch, PendingSearch, QueryVectors
from components.stores.resident_rows import ResidentCollection, ResidentRows
from components.stores.vector_search import Embedding


class ResidentScan:
    """
    The legs of one lookup's attempts, from `rows` of `resident`: `top_k` dense hits and
    `bm25_top_k` BM25 hits each, the first attempt's of `query` (its text) and `embedding`.
    """

    def __init__(
        self,
        resident: ResidentCollection,
        rows: ResidentRows,
        query: str,
        embedding: Embedding,
        top_k: int,
        bm25_top_k: int,
    ) -> None:
        self.resident, self.rows = resident, rows
        self.query = query
        self.embedding = np.asarray(embedding, dtype=np.float32)
        self.top_k, self.bm25_top_k = top_k, bm25_top_k
        self._estimates: dict[bytes, np.ndarray] = {}

    def first_legs(self, category: str | None) -> tuple[PendingSearch | None, ...]:
        """The first attempt's dense and BM25 legs, filtered on `category` or not (BM25 None: it searches)."""
        return self._dense(self.embedding, category), self._bm25_leg(self.query, self.embedding, category)

    def retry_legs(self, query_transform: QueryTransform, embeddings: QueryVectors) -> tuple[PendingSearch | None, ...]:
        """The unfiltered retry's legs: the query's own text and vector (BM25 None: it searches)."""
        embedding = np.asarray(embeddings.query, dtype=np.float32)
        return self._dense(embedding, None), self._bm25_leg(query_transform.normalized, embedding, None)

    def top_similarity(self) -> float:
        """The best unfiltered dense similarity (the outscored check)."""
        best = self.rows.ranked(self.embedding, self._estimated(self.embedding), 1, None)
        return similarity_from_sdk(best[0].raw, self.resident.search.layout.metric) if best else 0.0

    def _dense(self, embedding: np.ndarray, category: str | None) -> PendingSearch | None:
        hits = self.rows.ranked(embedding, self._estimated(embedding), self.top_k, category)
        candidates = [self.resident.candidate(self.rows, hit) for hit in hits]
        return PendingSearch.done((candidates, PATH, None), PATH)

    def _bm25_leg(self, text: str, embedding: np.ndarray, category: str | None) -> PendingSearch | None:
        """The BM25 leg from memory, scored when the attempt asks for it; None when it searches or does not run."""
        if self.rows.bm25 is None or self.bm25_top_k <= 0 or not self.resident.search.layout.has_sparse:
            return None
        return DeferredSearch(
            lambda: self.resident.bm25_hits(self.rows, text, embedding, self.bm25_top_k, category), PATH
        )

    def _estimated(self, embedding: np.ndarray) -> np.ndarray:
        """The matrix product of `embedding`, once per lookup: every attempt with that vector shares it."""
        key = embedding.tobytes()
        if key not in self._estimates:
            self._estimates[key] = self.rows.estimates(embedding)
        return self._estimates[key]
