"""
Which one scan serves a lookup on a Milvus Lite file: the collection in memory, a scan in Milvus
(filtered lookups only), or none.
"""

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


@pytest.mark.parametrize(
    ("scan_depth", "resident_max_chunks", "kind"),
    [(0, 100, ResidentScan), (10, 100, ResidentScan), (10, 0, type(None)), (0, 0, type(None))],
)
def test_an_unfiltered_lookup_is_served_from_memory_only(search, scan_depth, resident_max_chunks, kind):
    scan = OneScan(scan_depth, resident_max_chunks, top_k=2, bm25_top_k=2).start(search, "disk", QUERY, filtered=False)
    assert type(scan) is kind


def test_the_unfiltered_legs_in_memory_are_the_searches(search):
    scan = OneScan(0, 100, top_k=2, bm25_top_k=2).start(search, "disk full", QUERY, filtered=False)
    dense, bm25 = scan.first_legs(None)
    assert dense.result() == (search.search(QUERY, 2, None), "sdk", None)
    assert bm25.result() == search.bm25_search("disk full", QUERY, 2, None)


def test_the_legs_in_memory_are_the_searches(search):
    scan = OneScan(0, 100, top_k=2, bm25_top_k=2).start(search, "disk full", QUERY)
    dense, bm25 = scan.first_legs("disk")
    assert dense.result() == (search.search(QUERY, 2, "disk"), "sdk", None)
    assert bm25.result() == search.bm25_search("disk full", QUERY, 2, "disk")
    transform = QueryTransform(raw="disk lag", normalized="of lag", variants=["disk lag"])
    retry_dense, retry_bm25 = scan.retry_legs(transform, QueryVectors([1.0, 0.0, 0.0, 0.0], QUERY))
    assert retry_dense.result()[0] == search.search([1.0, 0.0, 0.0, 0.0], 2, None)
    assert retry_bm25.result() == search.bm25_search("of lag", [1.0, 0.0, 0.0, 0.0], 2, None)
    assert scan.top_similarity() == search.top_similarity(QUERY, None)


def test_the_bm25_legs_in_memory_search_when_off_or_not_needed(search):
    off = OneScan(0, 100, top_k=2, bm25_top_k=0).start(search, "disk", QUERY)
    assert off.first_legs("disk")[1] is None
    on = OneScan(0, 100, top_k=2, bm25_top_k=2).start(search, "disk", QUERY)
    scored = []
    on.resident.bm25_hits = lambda *args: scored.append(args) or []
    _, bm25 = on.first_legs("disk")
    assert scored == []  # an attempt that skips its BM25 leg never asks for it
    assert bm25.result() == [] and len(scored) == 1  # one that asks, scores it once
    bm25.result()
    assert len(scored) == 1
