"""Which one scan serves a filtered lookup on a Milvus Lite file: the collection in memory, a scan in Milvus, or none."""

import pytest

from components.contracts import IndexPlan, QueryTransform
from components.indexing.milvus_writer import MilvusChunkWriter
from components.lookup.hybrid_scan import HybridScan
from components.lookup.one_scan import OneScan
from components.lookup.resident_scan import ResidentScan
from components.lookup.retrieval_legs import QueryVectors
from components.stores.knowledge_store import KnowledgeStore
from components.stores.vector_search import SdkVectorSearch
from tests.components.chunks import chunk

CHUNKS = [
    chunk("disk/full.md", 0, [1, 0, 0, 0], "disk"),
    chunk("disk/inodes.md", 0, [1, 1, 0, 0], "disk"),
    chunk("db/lag.md", 0, [0, 1, 0, 0], "db"),
]
QUERY = [0.6, 0.8, 0.0, 0.0]


@pytest.fixture(scope="module")
def search(tmp_path_factory) -> SdkVectorSearch:
    store = KnowledgeStore(uri=str(tmp_path_factory.mktemp("one-scan") / "milvus.db"), collection="kb")
    MilvusChunkWriter(store=store).run(documents=CHUNKS, plan=IndexPlan())
    search = SdkVectorSearch(store)
    assert search.layout.index_type == "FLAT"  # open, as the retriever's is once it searched
    return search


@pytest.mark.parametrize(
    ("scan_depth", "resident_max_chunks", "kind"),
    [(0, 100, ResidentScan), (10, 100, ResidentScan), (10, 0, HybridScan), (10, 2, HybridScan), (0, 2, type(None))],
)
def test_the_collection_in_memory_serves_when_it_fits_else_the_scan_else_none(
    search, scan_depth, resident_max_chunks, kind
):
    scan = OneScan(scan_depth, resident_max_chunks, top_k=2, bm25_top_k=2).start(search, "disk", QUERY)
    assert type(scan) is kind


def test_the_legs_in_memory_are_the_searches_and_the_bm25_legs_search(search):
    scan = OneScan(0, 100, top_k=2, bm25_top_k=2).start(search, "disk", QUERY)
    dense, bm25 = scan.filtered_legs("disk")
    assert dense.result() == (search.search(QUERY, 2, "disk"), "sdk", None) and bm25 is None
    transform = QueryTransform(raw="disk", normalized="disk", variants=["disk"])
    retry_dense, retry_bm25 = scan.retry_legs(transform, QueryVectors([1.0, 0.0, 0.0, 0.0], QUERY))
    assert retry_dense.result()[0] == search.search([1.0, 0.0, 0.0, 0.0], 2, None) and retry_bm25 is None
    assert scan.top_similarity() == search.top_similarity(QUERY, None)
