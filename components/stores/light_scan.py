"""
A light scan of the sdk path: a dense and a BM25 search that fetch only each hit's key, category
and raw score, many hits deep, and the chunks an attempt uses fetched apart by key (one `get`).
Serves the one scan of a filtered lookup (components/lookup/hybrid_scan.py).
"""

from dataclasses import dataclass

import numpy as np

from components.common.scoring import sdk_raw_score
from components.contracts import Candidate
from components.stores.milvus_collection import CATEGORY_FIELD, ID_FIELD, VECTOR_FIELD
from components.stores.milvus_deadline import within
from components.stores.vector_search import Embedding, SdkVectorSearch


@dataclass(frozen=True)
class ScanHit:
    """One hit of a light scan: the chunk's primary key, its category and the leg's raw score."""

    key: str
    category: str | None
    raw: float


def scan_hits(hits: list[dict]) -> list[ScanHit]:
    return [
        ScanHit(str(hit[ID_FIELD]), hit.get("entity", hit).get(CATEGORY_FIELD), float(hit["distance"])) for hit in hits
    ]


class LightScan:
    """The light scans and chunk fetches of one `SdkVectorSearch` (its client, deadline and layout)."""

    def __init__(self, search: SdkVectorSearch) -> None:
        self.search = search

    def scan(self, text: str, embedding: Embedding, depth: int, bm25: bool) -> tuple[list[ScanHit] | None, ...]:
        """
        Both legs unfiltered, `depth` hits each: the dense leg's and, when `bm25`, the BM25 leg's
        (else None), best first.
        """
        store = self.search.store
        return within(store.uri, store.timeout_ms, lambda: self._scan(text, embedding, depth, bm25))

    def _scan(self, text: str, embedding: Embedding, depth: int, bm25: bool) -> tuple[list[ScanHit] | None, ...]:
        dense = self.search._search_vector(embedding, depth, "", [CATEGORY_FIELD])
        return scan_hits(dense), self._bm25(text, depth) if bm25 else None

    def _bm25(self, text: str, depth: int) -> list[ScanHit]:
        return scan_hits(self.search.search_text(text, depth, "", [CATEGORY_FIELD]))

    def chunks(self, keys: list[str], embedding: Embedding) -> dict[str, Candidate]:
        """The chunks of `keys` by key, scored from their stored vectors (as a BM25 hit is)."""
        if not keys:
            return {}
        store = self.search.store
        return within(store.uri, store.timeout_ms, lambda: self._chunks(keys, embedding))

    def _chunks(self, keys: list[str], embedding: Embedding) -> dict[str, Candidate]:
        search = self.search
        query = np.asarray(embedding, dtype=np.float32)
        rows = search.fetch(keys, search._fields() + [VECTOR_FIELD])
        metric = search.layout.metric
        return {
            str(row[ID_FIELD]): search._hit_candidate(row, sdk_raw_score(query, row[VECTOR_FIELD], metric))
            for row in rows
        }
