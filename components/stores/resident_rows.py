"""
A Milvus Lite collection held in this process for an exact dense leg without a search: every
chunk's row (key, category, content, metadata) and dense vector, read once and read again when
the collection's files change. One matrix product then ranks the whole collection for a query,
and any category's top hits, its best hit and the unfiltered top hits are views of it, ranked
and scored as Milvus Lite's exact (FLAT) search ranks and scores them; BM25 postings read with
the rows score its full-text search (components/stores/resident_bm25.py). See
docs/architecture.md, "One scan".
"""

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from components.common.scoring import sdk_raw_score
from components.contracts import Candidate
from components.stores.light_scan import ScanHit
from components.stores.milvus_collection import (
    CATEGORY_FIELD,
    CONTENT_FIELD,
    ID_FIELD,
    METADATA_FIELD,
    VECTOR_FIELD,
    is_local_uri,
)
from components.stores.milvus_deadline import within
from components.stores.resident_bm25 import ResidentBm25
from components.stores.vector_search import Bm25Hit, Embedding, SdkVectorSearch, bm25_hits

# Where Milvus Lite keeps a collection's files under its database directory: every write appends
# to a file there (its write-ahead log) or replaces one (its manifest), so their sizes and times change.
LITE_COLLECTIONS_DIR = "collections"
ROWS_PER_READ = 1000
# The metric whose scores `ResidentRows.ranked` reproduces.
RANKED_METRIC = "L2"
# The squared-distance estimate by a matrix product may be off by float32 rounding: every chunk whose
# estimate is within this share of the squared norms of the kth one's is measured exactly, so none is missed.
ESTIMATE_SLACK = 1e-3


def read_bm25(folder: Path, positions: dict[str, int]) -> ResidentBm25 | None:
    """The collection's BM25 from its files; None when a file went away while read (a compaction: read again then)."""
    try:
        return ResidentBm25.read(folder, positions)
    except FileNotFoundError:
        return None


def lite_folder(uri: str, collection: str) -> Path:
    return Path(uri) / LITE_COLLECTIONS_DIR / collection


def lite_files_stamp(uri: str, collection: str) -> tuple | None:
    """The sizes and times of the collection's files in a Milvus Lite directory; None when there is none."""
    folder = lite_folder(uri, collection)
    if not is_local_uri(uri) or not folder.is_dir():
        return None
    stamp = []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            stat = os.stat(os.path.join(root, name))
            stamp.append((root, name, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(stamp))


@dataclass(frozen=True)
class ResidentRows:
    """
    The collection's rows (in the order read, which breaks ties of equal distance) and their
    positions by key, their categories, and their float32 vectors with each one's squared norm; and
    their BM25 as Milvus Lite scores it (None: the BM25 legs search).
    """

    rows: list[dict]
    positions: dict[str, int]
    categories: np.ndarray
    vectors: np.ndarray
    squared_norms: np.ndarray
    bm25: ResidentBm25 | None = None

    @classmethod
    def of(cls, rows: list[dict], vectors: np.ndarray, folder: Path | None = None) -> "ResidentRows":
        """
        `rows` without their vectors, and `vectors` (float32, one row each, in the same order); with
        the BM25 of the collection's files in `folder` when they hold these rows.
        """
        categories = np.asarray([row.get(CATEGORY_FIELD) or "" for row in rows], dtype=object)
        positions = {str(row[ID_FIELD]): i for i, row in enumerate(rows)}
        bm25 = None if folder is None else read_bm25(folder, positions)
        return cls(rows, positions, categories, vectors, np.einsum("ij,ij->i", vectors, vectors), bm25)

    def __len__(self) -> int:
        return len(self.rows)

    def estimates(self, embedding: Embedding) -> np.ndarray:
        """Every row's squared L2 distance to the query by one matrix product (close, not exact)."""
        query = np.asarray(embedding, dtype=np.float32)
        return self.squared_norms - 2.0 * (self.vectors @ query) + float(query @ query)

    def ranked(self, embedding: Embedding, estimates: np.ndarray, limit: int, category: str | None) -> list[ScanHit]:
        """
        The `limit` nearest rows (of `category`, or all), best first, with the raw L2 score Milvus
        Lite returns: the float32 distance of its brute-force search, squared, as a float32.
        """
        scope = np.arange(len(self.rows)) if category is None else np.flatnonzero(self.categories == category)
        if scope.size == 0 or limit <= 0:
            return []
        query = np.asarray(embedding, dtype=np.float32)
        near = scope[self._within_reach(estimates[scope], limit, self._slack(query))]
        # As Milvus Lite measures (numpy's norm of the float32 difference), so the order and scores match.
        distances = np.linalg.norm(query[None, :] - self.vectors[near], axis=1)
        order = np.lexsort((near, distances))[:limit]
        return [self._hit(int(near[i]), float(distances[i])) for i in order]

    def bm25_ranked(self, text: str, limit: int, category: str | None) -> list[tuple[int, float]]:
        """The `limit` best (position, distance) of Milvus Lite's BM25 search of `text` (in `category`, or all)."""
        allowed = np.ones(len(self.rows), dtype=bool) if category is None else self.categories == category
        return self.bm25.ranked(text, limit, allowed)

    def _slack(self, query: np.ndarray) -> float:
        """How far an estimate may be off: rounding grows with the squared norms of the vectors."""
        return ESTIMATE_SLACK * (float(self.squared_norms.max(initial=0.0)) + float(query @ query))

    @staticmethod
    def _within_reach(estimates: np.ndarray, limit: int, slack: float) -> np.ndarray:
        """Positions of every row whose exact distance could be among the `limit` nearest."""
        if estimates.size <= limit:
            return np.arange(estimates.size)
        kth = np.partition(estimates, limit - 1)[limit - 1]
        return np.flatnonzero(estimates <= kth + slack)

    def _hit(self, position: int, distance: float) -> ScanHit:
        row = self.rows[position]
        return ScanHit(str(row[ID_FIELD]), row.get(CATEGORY_FIELD), float(np.float32(distance * distance)))

    def row(self, key: str) -> dict:
        return self.rows[self.positions[key]]


class ResidentCollection:
    """
    The rows of one sdk search's Milvus Lite collection in memory, up to `max_chunks` of them:
    `current()` reads them on first use and again after the collection's files changed.
    """

    def __init__(self, search: SdkVectorSearch, max_chunks: int) -> None:
        self.search = search
        self.max_chunks = max_chunks
        self._rows: ResidentRows | None = None
        self._stamp: tuple | None = None
        self._lock = threading.Lock()

    def current(self) -> ResidentRows | None:
        """The rows as the collection holds them now; None off Milvus Lite, with another metric, or over `max_chunks` rows."""
        store = self.search.store
        stamp = lite_files_stamp(store.uri, store.collection)
        if stamp is None or self.search.layout.metric != RANKED_METRIC:
            return None
        with self._lock:
            if stamp != self._stamp:
                # The stamp before the read: a write during it changes the stamp, so it is read again.
                self._rows, self._stamp = within(store.uri, store.timeout_ms, self._read), stamp
            return self._rows

    def _read(self) -> ResidentRows | None:
        client = self.search._ready_client()
        fields = [ID_FIELD, CONTENT_FIELD, METADATA_FIELD, VECTOR_FIELD]
        fields += [CATEGORY_FIELD] if self.search.layout.has_category else []
        if client.get_collection_stats(self.search.collection).get("row_count", 0) > self.max_chunks:
            return None
        iterator = client.query_iterator(
            self.search.collection, batch_size=ROWS_PER_READ, filter="", output_fields=fields
        )
        rows: list[dict] = []
        # Each batch's vectors become float32 at once: as Python floats they take eight times the memory.
        vectors: list[np.ndarray] = []
        try:
            while batch := iterator.next():
                vectors.append(np.asarray([row.pop(VECTOR_FIELD) for row in batch], dtype=np.float32))
                rows.extend(batch)
        finally:
            iterator.close()
        if len(rows) > self.max_chunks:
            return None
        store, layout = self.search.store, self.search.layout
        return ResidentRows.of(
            rows,
            np.concatenate(vectors) if vectors else np.zeros((0, layout.dim), np.float32),
            lite_folder(store.uri, store.collection) if layout.has_sparse else None,
        )

    def candidate(self, rows: ResidentRows, hit: ScanHit) -> Candidate:
        """The chunk of `hit` as the dense search returns it: its raw score is the search's distance."""
        return self.search._hit_candidate(rows.row(hit.key), hit.raw)

    def bm25_hits(
        self, rows: ResidentRows, text: str, embedding: np.ndarray, limit: int, category: str | None
    ) -> list[Bm25Hit]:
        """What the BM25 search of `text` returns from `rows`: each chunk with the dense score of its stored vector."""
        metric = self.search.layout.metric
        scored = [
            (self.search._hit_candidate(rows.rows[at], sdk_raw_score(embedding, rows.vectors[at], metric)), distance)
            for at, distance in rows.bm25_ranked(text, limit, category)
        ]
        return bm25_hits(scored)
