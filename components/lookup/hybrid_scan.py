"""
One unfiltered scan of an exact index (dense and BM25 legs, `depth` hits each) that serves every
attempt of a filtered lookup: on an exact index, a category's hits in the global order are exactly
the filtered search's (no filter changes a BM25 score: on Milvus Lite its statistics are per
segment file), the best hit is the outscored check, and the first hits are the unfiltered retry's legs.
The scan fetches keys, categories and scores only; the chunks an attempt uses are fetched by key.
See docs/architecture.md, "One scan".
"""

import dataclasses

import numpy as np

from components.common.scoring import similarity_from_sdk
from components.contracts import Candidate, QueryTransform
from components.lookup.fallback_policy import view_covers
from components.lookup.retrieval_legs import PendingSearch, QueryVectors
from components.stores.light_scan import LightScan, ScanHit
from components.stores.vector_search import Embedding, SdkVectorSearch, bm25_hits

# Index types whose dense search is exact: what it did not return scores no higher than what it did.
EXACT_INDEX_TYPES = frozenset({"FLAT"})
PATH = "sdk"


def fresh(candidate: Candidate, **changes) -> Candidate:
    """A copy of `candidate` (with `changes`) whose lists an attempt may extend on its own."""
    return dataclasses.replace(
        candidate, hit_reasons=list(candidate.hit_reasons), boosts=dict(candidate.boosts), **changes
    )


class HybridScan:
    """
    The scan's hits, best first: `dense` (the dense leg, `depth` hits) and `bm25` (the BM25 leg,
    None when it does not run), taken with `embedding` on the sdk path's `search`. An attempt needs
    `top_k` dense and `bm25_top_k` BM25 hits; the chunks they are are fetched once per lookup.
    """

    def __init__(
        self, search: SdkVectorSearch, query: str, embedding: Embedding, depth: int, top_k: int, bm25_top_k: int
    ) -> None:
        """Scans: both legs of `query` (its text and `embedding`) on the open collection of `search`."""
        self.search = search
        self.light = LightScan(search)
        self.embedding = embedding
        self.depth, self.top_k, self.bm25_top_k = depth, top_k, bm25_top_k
        with_bm25 = bm25_top_k > 0 and search.known_layout.has_sparse
        self.dense, self.bm25 = self.light.scan(query, embedding, depth, with_bm25)
        self._chunks: dict[str, Candidate] = {}

    @staticmethod
    def serves(search: SdkVectorSearch) -> bool:
        """Whether the scan can serve a filtered lookup on this open collection: exact, with a category column."""
        layout = search.known_layout
        return layout is not None and layout.index_type in EXACT_INDEX_TYPES and layout.has_category

    def first_legs(self, category: str) -> tuple[PendingSearch | None, ...]:
        """
        The filtered first attempt's two legs (the scan serves filtered lookups only), each None
        when the scan does not reach all its hits (that leg then searches with the filter).
        """
        dense = self._covered([h for h in self.dense if h.category == category], self.top_k, self.dense)
        bm25 = None
        if self.bm25 is not None:
            bm25 = self._covered([h for h in self.bm25 if h.category == category], self.bm25_top_k, self.bm25)
        return self._legs(dense, bm25)

    def retry_legs(self, query_transform: QueryTransform, embeddings: QueryVectors) -> tuple[PendingSearch | None, ...]:
        """The unfiltered retry's two legs, when it searches the scan's text and vector (else None: they run)."""
        same_vector = np.array_equal(np.asarray(embeddings.query), np.asarray(embeddings.expanded))
        if query_transform.normalized != query_transform.retrieval_query or not same_vector:
            return None, None
        return self._legs(self.dense[: self.top_k], None if self.bm25 is None else self.bm25[: self.bm25_top_k])

    def top_similarity(self) -> float:
        """The best unfiltered dense similarity (the outscored check)."""
        return similarity_from_sdk(self.dense[0].raw, self.search.layout.metric) if self.dense else 0.0

    def _covered(self, hits: list[ScanHit], needed: int, leg: list[ScanHit]) -> list[ScanHit] | None:
        return hits[:needed] if view_covers(len(hits), needed, len(leg) < self.depth) else None

    def _legs(self, dense: list[ScanHit] | None, bm25: list[ScanHit] | None) -> tuple[PendingSearch | None, ...]:
        """The hits as searches already done on the sdk path: dense candidates, BM25 hits (None: not served)."""
        self._fetch([h.key for h in (dense or []) + (bm25 or [])])
        candidates = None if dense is None else ([self._scored(h) for h in dense], PATH, None)
        hits = None if bm25 is None else bm25_hits([(fresh(self._chunks[h.key]), h.raw) for h in bm25])
        return PendingSearch.done(candidates, PATH), PendingSearch.done(hits, PATH)

    def _scored(self, hit: ScanHit) -> Candidate:
        """The chunk as the dense search returns it: its raw score is the search's distance."""
        similarity = similarity_from_sdk(hit.raw, self.search.layout.metric)
        return fresh(self._chunks[hit.key], raw_score=round(hit.raw, 6), similarity=round(similarity, 6))

    def _fetch(self, keys: list[str]) -> None:
        missing = list(dict.fromkeys(key for key in keys if key not in self._chunks))
        self._chunks.update(self.light.chunks(missing, self.embedding))
