"""
The collection held in memory on Milvus Lite: ranked and scored as the exact search ranks and
scores, read again when the collection changes, and none off Milvus Lite or over its bound.
"""

import numpy as np
import pytest

from components.contracts import IndexPlan
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from components.stores.resident_rows import ResidentCollection, ResidentRows, lite_files_stamp
from components.stores.vector_search import SdkVectorSearch
from tests.components.chunks import chunk

CHUNKS = [
    chunk("disk/full.md", 0, [1, 0, 0, 0], "disk"),
    chunk("disk/full.md", 1, [1, 1, 0, 0], "disk"),
    chunk("db/lag.md", 0, [0, 1, 0, 0], "db"),
    chunk("db/lock.md", 0, [0, 0, 1, 0], "db"),
]
QUERY = [0.6, 0.8, 0.0, 0.0]


def written(uri: str, chunks) -> SdkVectorSearch:
    store = KnowledgeStore(uri=uri, collection="kb")
    MilvusChunkWriter(store=store).run(documents=chunks, plan=IndexPlan())
    return SdkVectorSearch(store)


def in_memory(rows: ResidentRows, search: SdkVectorSearch, query, limit: int, category: str | None) -> list:
    resident = ResidentCollection(search, 100)
    hits = rows.ranked(query, rows.estimates(query), limit, category)
    return [resident.candidate(rows, hit) for hit in hits]


@pytest.mark.parametrize("category", [None, "disk", "db", "none such"])
def test_the_rows_in_memory_rank_and_score_as_the_search(tmp_path, category):
    search = written(str(tmp_path / "milvus.db"), CHUNKS)
    rows = ResidentCollection(search, 100).current()
    assert len(rows) == len(CHUNKS)
    for limit in (1, 2, 3, 10):
        assert in_memory(rows, search, QUERY, limit, category) == search.search(QUERY, limit, category)


def test_a_change_of_the_collection_is_read_again(tmp_path):
    search = written(str(tmp_path / "milvus.db"), CHUNKS)
    resident = ResidentCollection(search, 100)
    before = resident.current()
    assert resident.current() is before  # unchanged: not read again
    written(search.store.uri, [chunk("db/slow.md", 0, QUERY, "db")])
    after = resident.current()
    assert len(after) == len(CHUNKS) + 1
    assert in_memory(after, search, QUERY, 1, "db")[0].evidence_key == "db/slow.md#0"


def test_over_its_bound_or_off_milvus_lite_nothing_is_held(tmp_path):
    search = written(str(tmp_path / "milvus.db"), CHUNKS)
    assert ResidentCollection(search, len(CHUNKS) - 1).current() is None
    assert ResidentCollection(search, len(CHUNKS)).current() is not None
    assert lite_files_stamp("http://127.0.0.1:19530", "kb") is None
    assert lite_files_stamp(str(tmp_path / "milvus.db"), "other") is None


def test_the_estimate_misses_no_row_of_the_exact_order():
    """Vectors far from unit length and near ties: the matrix product only picks whom to measure exactly."""
    generator = np.random.default_rng(3)
    vectors = generator.normal(size=(2000, 16)).astype(np.float32) * 40
    vectors[1000:1100] = vectors[0] + generator.normal(size=(100, 16)).astype(np.float32) * 1e-3
    rows = ResidentRows.of([{"id": f"k{i}", "category": "ab"[i % 2]} for i in range(len(vectors))], vectors)
    for query in (vectors[0] + 1e-4, generator.normal(size=16).astype(np.float32) * 40):
        exact = np.linalg.norm(query[None, :] - vectors, axis=1)
        for category in (None, "a"):
            scope = np.arange(len(vectors)) if category is None else np.arange(0, len(vectors), 2)
            expected = scope[np.lexsort((scope, exact[scope]))][:50]
            hits = rows.ranked(query, rows.estimates(query), 50, category)
            assert [hit.key for hit in hits] == [f"k{i}" for i in expected]
