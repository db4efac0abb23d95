"""
The server path with full text, for real: the Milvus Lite gRPC server (`milvus-lite server`,
started by the session fixture from the installed package, on 127.0.0.1), the sample KB indexed
into it with the BM25 function, and lookups compared with the same KB in the Milvus Lite file.
"""

import pytest

from pipelines.lookup import LookupService
from tests.helpers import derived_config
from tests.integration.conftest import SERVER_QUERIES, evidence, server_overrides


def lite_server_overrides(server) -> list[str]:
    """The Lite gRPC server with full text and the Lite file's exact (FLAT) index, so results compare."""
    return server_overrides(server, full_text=True)


@pytest.fixture(scope="module")
def lite_server_cfg(lite_server, indexed_server_cfg):
    return indexed_server_cfg(lite_server, full_text=True)


def bm25_ranks(result) -> list[tuple[str, int | None]]:
    return [(block.evidence_key, block.bm25_rank) for block in result.evidence_blocks]


def bm25_values(result) -> list[float]:
    return [block.bm25_score for block in result.evidence_blocks if block.bm25_score is not None]


@pytest.mark.parametrize("mode", ["sdk", "haystack"])
def test_lookups_on_the_lite_server_run_both_legs_and_match_the_lite_file(
    lite_server_cfg, lite_server, sample_service, mode
):
    on_server = LookupService(
        derived_config(lite_server_cfg, *lite_server_overrides(lite_server), f"retrieval.vector_store_mode={mode}")
    )
    on_file = LookupService(derived_config(sample_service.cfg, f"retrieval.vector_store_mode={mode}"))
    for query in SERVER_QUERIES:
        server_result, file_result = on_server.lookup(query), on_file.lookup(query)
        trace = server_result.retrieval_trace
        assert trace.legs == ["dense", "bm25"] and trace.bm25_skipped is None, query
        assert server_result.found == file_result.found, query
        server_blocks, file_blocks = evidence(server_result), evidence(file_result)
        assert [key for key, _ in server_blocks] == [key for key, _ in file_blocks], query
        for (_, server_score), (_, file_score) in zip(server_blocks, file_blocks, strict=True):
            assert server_score == pytest.approx(file_score, abs=1e-5), query
        assert bm25_ranks(server_result) == bm25_ranks(file_result), query
        # Where both engines' BM25 sign could differ, the project's `bm25Score` must not.
        assert bm25_values(server_result) == pytest.approx(bm25_values(file_result), abs=1e-4), query


def test_the_lite_server_returns_positive_labelled_bm25_scores(lite_server_cfg):
    result = LookupService(lite_server_cfg).lookup("disk almost full on a worker node")
    scored = [block for block in result.evidence_blocks if block.bm25_rank is not None]
    assert scored, "the BM25 leg found none of the evidence"
    assert all(block.bm25_score > 0 for block in scored)  # Milvus Lite's negated distance, made a score
    bm25_hits = [hit for attempt in result.retrieval_trace.attempts for hit in attempt.top_hits if hit.leg == "bm25"]
    assert bm25_hits and all(hit.score_label == "bm25" and hit.score > 0 for hit in bm25_hits)
    assert [hit.rank for hit in bm25_hits[:3]] == [1, 2, 3]


def test_the_lite_server_gets_a_collection_with_the_bm25_function(lite_server):
    from components.stores.milvus_collection import connect, create_collection, describe_layout

    client = connect(lite_server.uri)
    reason = create_collection(client, "full_text_probe", dim=8, full_text=True)
    try:
        assert reason is None and describe_layout(client, "full_text_probe").has_sparse
    finally:
        client.drop_collection("full_text_probe")
