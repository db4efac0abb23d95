"""
BM25 over the collection held in memory: scored and ranked exactly as Milvus Lite's own inverted
index and search (per segment statistics, rows deleted or replaced since counted, float32 sums,
ties in the order first scored), and none while rows are not flushed or without a BM25 field.
"""

import numpy as np
import pytest
from milvus_lite.analyzer import sparse_to_bytes
from milvus_lite.index.sparse_inverted import SparseInvertedIndex

from components.contracts import IndexPlan
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from components.stores.resident_bm25 import Bm25Segment
from components.stores.resident_rows import ResidentCollection
from components.stores.vector_search import SdkVectorSearch
from tests.components.chunks import chunk
from tests.components.stores.test_resident_rows import written

WORDS = ["disk", "full", "lag", "lock", "replica", "node", "pod", "restart", "alert", "fire"]
QUERIES = ["disk full", "lag lag replica", "pod restart alert disk", "fire", "nothing known here", ""]


def rows_of(generator, count: int) -> list[dict[int, float]]:
    """Sparse rows of few terms and small counts (many ties), some of them empty."""
    rows = []
    for _ in range(count):
        terms = generator.choice(40, size=generator.integers(0, 6), replace=False)
        rows.append({int(term): float(generator.integers(1, 4)) for term in terms})
    return rows


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.3), (2.0, 1.0)])
def test_a_segment_scores_and_ranks_as_milvus_lites_inverted_index(k1, b):
    generator = np.random.default_rng(7)
    rows = rows_of(generator, 300)
    index = SparseInvertedIndex(k1=k1, b=b)
    index.build(rows)
    positions = np.arange(len(rows), dtype=np.int64) * 3  # where each row sits among the resident ones
    positions[::7] = -1  # deleted or replaced: counted in the statistics, never returned
    segment = Bm25Segment.of([sparse_to_bytes(row) for row in rows], positions)
    for _ in range(40):
        query = {
            int(t): float(w) for t, w in zip(generator.choice(45, 3), generator.integers(1, 3, size=3), strict=True)
        }
        allowed = generator.random(3 * len(rows)) < 0.6
        valid = (positions >= 0) & allowed[np.maximum(positions, 0)]
        for limit in (1, 10, 500):
            ids, distances = index.search([query], limit, valid_mask=valid)
            expected = [(-float(d), int(positions[i])) for i, d in zip(ids[0], distances[0], strict=True) if i >= 0]
            assert [(float(score), at) for score, at in segment.ranked(query, limit, allowed, k1, b)] == expected


def test_the_bm25_in_memory_is_milvus_lites_search_over_segments_with_rows_replaced_and_deleted(tmp_path):
    texts = [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} {WORDS[(i * 7) % 10]} " * (1 + i % 3) for i in range(24)]
    chunks = [
        chunk(f"{'ab'[i % 2]}/doc{i}.md", 0, [1, i, 0, 0], "ab"[i % 2], content=text) for i, text in enumerate(texts)
    ]
    search = written(str(tmp_path / "milvus.db"), chunks[:12])
    writer = MilvusChunkWriter(store=search.store)
    writer.run(documents=chunks[12:18], plan=IndexPlan())
    replaced = [chunk("a/doc0.md", 0, [1, 0, 1, 0], "a", content="disk disk full fire")]
    writer.run(documents=replaced + chunks[18:], plan=IndexPlan(stale_ids=["a/doc0.md#0", "b/doc3.md#0"]))
    rows = ResidentCollection(search, 100).current()
    assert len(rows) == len(chunks) - 1 and len(rows.bm25.segments) == 3
    for query in QUERIES + ["disk full " * 3]:
        for category in (None, "a", "b", "none such"):
            for limit in (1, 5, 30):
                mine = [(rows.rows[p]["id"], distance) for p, distance in rows.bm25_ranked(query, limit, category)]
                hits = search.search_text(query, limit, search.describe_filter(category) or "", ["id"])
                assert mine == [(hit["id"], hit["distance"]) for hit in hits], (query, category, limit)


def test_rows_not_flushed_leave_the_bm25_legs_to_search(tmp_path):
    search = written(str(tmp_path / "milvus.db"), [chunk("a/x.md", 0, [1, 0, 0, 0], "a", content="disk full")])
    assert ResidentCollection(search, 100).current().bm25 is not None
    row = {"id": "a/y.md#0", "content": "disk lag", "vector": [0.0, 1.0, 0.0, 0.0], "metadata": {}, "category": "a"}
    search._ready_client().insert("kb", [row])  # in Milvus Lite's write-ahead log, not in a segment
    rows = ResidentCollection(search, 100).current()
    assert len(rows) == 2 and rows.bm25 is None


def test_a_collection_without_the_bm25_field_has_no_bm25_in_memory(tmp_path):
    store = KnowledgeStore(uri=str(tmp_path / "milvus.db"), collection="kb", full_text=False)
    MilvusChunkWriter(store=store).run(documents=[chunk("a/x.md", 0, [1, 0, 0, 0], "a")], plan=IndexPlan())
    rows = ResidentCollection(SdkVectorSearch(store), 100).current()
    assert len(rows) == 1 and rows.bm25 is None
