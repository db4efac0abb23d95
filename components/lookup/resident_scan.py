"""
Every dense leg of a filtered lookup served from the collection held in memory on Milvus Lite
(components/stores/resident_rows.py): one matrix product per query vector ranks every chunk, the
filtered attempt takes its category's first hits, the outscored check the best hit, the unfiltered
retry the first hits. Ranked and scored as the exact (FLAT) search ranks and scores, so each is
what that search returns. The BM25 legs search apart (a filter there scans only the category).
See docs/architecture.md, "One scan".
"""

import numpy as np

from components.common.scoring import similarity_from_sdk
from components.contracts import QueryTransform
from components.lookup.hybrid_scan import PATH
from components.lookup.retrieval_legs import PendingSearch, QueryVectors
from components.stores.resident_rows import ResidentCollection, ResidentRows
from components.stores.vector_search import Embedding


class ResidentScan:
    """The dense legs of one lookup's attempts, from `rows` of `resident`, `top_k` hits each."""

    def __init__(self, resident: ResidentCollection, rows: ResidentRows, embedding: Embedding, top_k: int) -> None:
        self.resident, self.rows = resident, rows
        self.embedding = np.asarray(embedding, dtype=np.float32)
        self.top_k = top_k
        self._estimates: dict[bytes, np.ndarray] = {}

    def filtered_legs(self, category: str) -> tuple[PendingSearch | None, ...]:
        """The filtered attempt's dense leg; its BM25 leg searches (None)."""
        return self._dense(self.embedding, category), None

    def retry_legs(self, query_transform: QueryTransform, embeddings: QueryVectors) -> tuple[PendingSearch | None, ...]:
        """The unfiltered retry's dense leg (with the query's own vector); its BM25 leg searches (None)."""
        return self._dense(np.asarray(embeddings.query, dtype=np.float32), None), None

    def top_similarity(self) -> float:
        """The best unfiltered dense similarity (the outscored check)."""
        best = self.rows.ranked(self.embedding, self._estimated(self.embedding), 1, None)
        return similarity_from_sdk(best[0].raw, self.resident.search.layout.metric) if best else 0.0

    def _dense(self, embedding: np.ndarray, category: str | None) -> PendingSearch | None:
        hits = self.rows.ranked(embedding, self._estimated(embedding), self.top_k, category)
        candidates = [self.resident.candidate(self.rows, hit) for hit in hits]
        return PendingSearch.done((candidates, PATH, None), PATH)

    def _estimated(self, embedding: np.ndarray) -> np.ndarray:
        """The matrix product of `embedding`, once per lookup: every attempt with that vector shares it."""
        key = embedding.tobytes()
        if key not in self._estimates:
            self._estimates[key] = self.rows.estimates(embedding)
        return self._estimates[key]
