"""
The server path, for real: a Milvus standalone server started by the session fixture, the sample
KB indexed into it, and lookups compared with the same KB on Milvus Lite.
"""

import pytest

from pipelines.lookup import LookupService
from tests.helpers import derived_config
from tests.integration.conftest import SERVER_QUERIES, evidence, server_overrides

pytestmark = pytest.mark.milvus_server


@pytest.fixture(scope="module")
def server_cfg(milvus_server, indexed_server_cfg):
    return indexed_server_cfg(milvus_server)


@pytest.mark.parametrize("mode", ["sdk", "haystack", "auto"])
def test_lookups_on_the_server_match_milvus_lite(server_cfg, milvus_server, sample_service, mode):
    on_server = LookupService(
        derived_config(server_cfg, *server_overrides(milvus_server), f"retrieval.vector_store_mode={mode}")
    )
    # The 2.3.5 server has no BM25 function: its collection is dense-only, so Lite's is compared dense-only.
    on_lite = LookupService(
        derived_config(sample_service.cfg, f"retrieval.vector_store_mode={mode}", "retrieval.bm25_top_k=0")
    )
    for query in SERVER_QUERIES:
        server_result, lite_result = on_server.lookup(query), on_lite.lookup(query)
        assert server_result.found == lite_result.found, query
        server_blocks, lite_blocks = evidence(server_result), evidence(lite_result)
        assert [key for key, _ in server_blocks] == [key for key, _ in lite_blocks], query
        for (_, server_score), (_, lite_score) in zip(server_blocks, lite_blocks, strict=True):
            assert server_score == pytest.approx(lite_score, abs=1e-5), query


def test_a_server_without_bm25_functions_gets_a_dense_only_collection_and_says_why(milvus_server):
    from components.stores.milvus_collection import connect, create_collection, describe_layout

    client = connect(milvus_server.uri)
    reason = create_collection(client, "full_text_probe", dim=8, full_text=True)
    try:
        assert reason is not None and "cannot create a BM25 function" in reason and "dense-only" in reason
        assert not describe_layout(client, "full_text_probe").has_sparse
    finally:
        client.drop_collection("full_text_probe")


def test_lookups_on_the_server_run_dense_only_and_the_trace_says_why(server_cfg, milvus_server):
    service = LookupService(derived_config(server_cfg, *server_overrides(milvus_server)))
    trace = service.lookup(SERVER_QUERIES[0]).retrieval_trace
    assert (
        trace.legs == ["dense"]
        and trace.bm25_skipped == "collection has no sparse field; run knowledge index --rebuild"
    )


def test_an_ivf_flat_collection_is_created_with_the_configured_index(milvus_server):
    from components.stores.milvus_collection import connect, create_collection

    client = connect(milvus_server.uri)
    create_collection(client, "ivf_probe", dim=8, index_type="IVF_FLAT", index_params={"nlist": 16})
    try:
        [index_name] = client.list_indexes("ivf_probe")
        described = client.describe_index("ivf_probe", index_name)
        assert described["index_type"] == "IVF_FLAT" and described["metric_type"] == "L2"
        assert int(described["nlist"]) == 16
    finally:
        client.drop_collection("ivf_probe")
