"""
Which one scan serves a lookup's attempts on an exact index (FLAT, a `category` column), once its
collection is open: the collection held in memory on Milvus Lite (`ResidentScan`, up to
`resident_max_chunks` chunks), for every lookup; else, for a filtered lookup only, an unfiltered
scan in Milvus `scan_depth` hits deep (`HybridScan`); else none (every attempt searches apart).
See docs/architecture.md, "One scan".
"""

from components.lookup.hybrid_scan import HybridScan
from components.lookup.resident_scan import ResidentScan
from components.stores.resident_rows import ResidentCollection
from components.stores.vector_search import Embedding, SdkVectorSearch


class OneScan:
    """The choice for one retriever: `top_k` dense and `bm25_top_k` BM25 hits per attempt."""

    def __init__(self, scan_depth: int, resident_max_chunks: int, top_k: int, bm25_top_k: int) -> None:
        self.scan_depth, self.resident_max_chunks = scan_depth, resident_max_chunks
        self.top_k, self.bm25_top_k = top_k, bm25_top_k
        self._resident: ResidentCollection | None = None

    def start(
        self, search: SdkVectorSearch, query: str, embedding: Embedding, filtered: bool = True
    ) -> HybridScan | ResidentScan | None:
        """
        The scan of `query` (its text and `embedding`) on the open collection of `search`; None:
        searches apart. An unfiltered lookup has one attempt: a scan in Milvus, deeper than its
        searches, would only cost more.
        """
        if not HybridScan.serves(search):
            return None
        if self.resident_max_chunks > 0:
            if self._resident is None or self._resident.search is not search:
                self._resident = ResidentCollection(search, self.resident_max_chunks)
            if (rows := self._resident.current()) is not None:
                return ResidentScan(self._resident, rows, query, embedding, self.top_k, self.bm25_top_k)
        if self.scan_depth == 0 or not filtered:
            return None
        return HybridScan(search, query, embedding, self.scan_depth, self.top_k, self.bm25_top_k)
