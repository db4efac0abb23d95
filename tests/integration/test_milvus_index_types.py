"""
Index types from config (FLAT, AUTOINDEX, IVF_FLAT with nlist/nprobe, HNSW with M/efConstruction/ef):
the collection is built with them, lookups find the evidence, and the index type the collection
really has is recorded in the trace (`retrievalTrace.indexType`, `retrieval_details`).
"""

import pytest

from components.stores.milvus_collection import connect
from pipelines.lookup import LookupService

INDEX_OVERRIDES = {
    "FLAT": [],
    "AUTOINDEX": [],
    "IVF_FLAT": ["milvus.index_params={nlist:16}", "milvus.search_params={nprobe:8}"],
    "HNSW": ["milvus.index_params={M:8,efConstruction:64}", "milvus.search_params={ef:32}"],
}


def index_and_look_up(index_kb, small_kb, index_type: str, *extra: str):
    cfg, _ = index_kb(small_kb, f"milvus.index_type={index_type}", *INDEX_OVERRIDES[index_type], *extra)
    service = LookupService(cfg)
    result = service.lookup("disk almost full on a worker node")
    record = service.trace_writer.store.get(result.invocation_id)
    return cfg, result, record


@pytest.mark.parametrize(
    ("index_type", "mode"), [("FLAT", "sdk"), ("AUTOINDEX", "sdk"), ("HNSW", "sdk"), ("HNSW", "haystack")]
)
def test_milvus_lite_builds_and_records_the_configured_index(index_kb, small_kb, index_type, mode):
    _, result, record = index_and_look_up(index_kb, small_kb, index_type, f"retrieval.vector_store_mode={mode}")
    assert result.retrieval_trace.attempts[0].path == mode
    assert result.found and result.evidence_blocks[0].source.startswith("disk/")
    assert result.to_dict()["retrievalTrace"]["indexType"] == index_type
    assert record["retrieval_details"]["retrieval_trace"]["index_type"] == index_type


@pytest.mark.milvus_server
@pytest.mark.parametrize("index_type", ["IVF_FLAT", "HNSW"])
def test_the_milvus_server_builds_and_records_the_configured_index(index_kb, small_kb, milvus_server, index_type):
    collection = f"index_{index_type.lower()}"
    server = ["milvus=server", f"milvus.uri={milvus_server.uri}", f"milvus.collection={collection}"]
    cfg, result, record = index_and_look_up(index_kb, small_kb, index_type, *server)
    client = connect(milvus_server.uri)
    try:
        assert result.found and result.evidence_blocks[0].source.startswith("disk/")
        assert result.to_dict()["retrievalTrace"]["indexType"] == index_type
        assert record["retrieval_details"]["retrieval_trace"]["index_type"] == index_type
        [index_name] = client.list_indexes(collection)
        described = client.describe_index(collection, index_name)
        expected = {"nlist": "16"} if index_type == "IVF_FLAT" else {"M": "8", "efConstruction": "64"}
        assert {key: str(described[key]) for key in expected} == expected
    finally:
        client.drop_collection(collection)
        client.close()
