"""
Query side, the two vector-store paths and the sidecar (spec: "prefer the framework VectorStore
when configured", "preserve SDK fallback", "keep score semantics explicit", "reuse the existing
Milvus collection", "disabled-by-default sidecar", "normalize sidecar results for comparison").

The spec's "Spring AI VectorStore" is milvus-haystack here (path "haystack"); "SDK" is pymilvus.
"""

import dataclasses

import pytest

from components.common.scoring import HAYSTACK_SCORE_LABEL, SDK_SCORE_LABEL
from components.lookup.fallback_retriever import FallbackRetriever
from components.stores.knowledge_store import KnowledgeStore
from components.stores.vector_search import HaystackVectorSearch
from pipelines.lookup import LookupService, build_lookup_pipeline
from tests.helpers import collection_rows, derived_config, lookup_with

QUERY = "how much should I water tomato plants in the garden"
UNFILTERED_QUERY = "how do I hand over the on-call pager"
STAGES = ("query_transformer", "l0_hints", "query_embedder", "retriever")


@pytest.fixture(scope="module")
def by_mode(topics_cfg):
    """The same query through each vector_store_mode, with the retriever's candidates."""
    return {
        mode: lookup_with(topics_cfg, QUERY, f"retrieval.vector_store_mode={mode}", include=STAGES)
        for mode in ("sdk", "haystack", "auto")
    }


def _candidates(outputs) -> dict:
    return {c.evidence_key: c for c in outputs["retriever"]["candidates"]}


def test_sdk_mode_uses_the_milvus_sdk_path(by_mode):
    result, outputs = by_mode["sdk"]
    assert result.retrieval_trace.vector_store_mode == "sdk"
    assert [a.path for a in result.retrieval_trace.attempts] == ["sdk"]
    assert result.found
    for block in result.evidence_blocks:
        # SDK score remains the L2 squared distance, normalised as 1 - d/2.
        assert block.raw_score_label == SDK_SCORE_LABEL == "l2_squared_distance"
        assert block.score == pytest.approx(1 - block.raw_score / 2, abs=1e-5)
    assert {c.path for c in outputs["retriever"]["candidates"]} == {"sdk"}


def test_haystack_mode_uses_milvus_haystack(by_mode):
    result, outputs = by_mode["haystack"]
    assert result.retrieval_trace.vector_store_mode == "haystack"
    assert [a.path for a in result.retrieval_trace.attempts] == ["haystack"]
    assert result.retrieval_trace.attempts[0].error is None
    assert result.found
    for block in result.evidence_blocks:
        # Mapped into the same result shape, distinguishable as the framework's score.
        assert block.raw_score_label == HAYSTACK_SCORE_LABEL and "milvus_haystack" in block.raw_score_label
        assert block.score == pytest.approx(1 - 4 * (1 - block.raw_score) / 2, abs=1e-5)
        assert any(r.startswith("vector:haystack") for r in block.hit_reasons)
    assert {c.path for c in outputs["retriever"]["candidates"]} == {"haystack"}


def test_auto_mode_prefers_haystack(by_mode):
    result, _ = by_mode["auto"]
    assert result.retrieval_trace.vector_store_mode == "auto"
    (attempt,) = result.retrieval_trace.attempts
    assert attempt.path == "haystack" and attempt.error is None


def test_same_chunk_has_the_same_similarity_on_both_paths(by_mode):
    sdk = _candidates(by_mode["sdk"][1])
    haystack = _candidates(by_mode["haystack"][1])
    assert set(sdk) == set(haystack) and len(sdk) >= 3  # FLAT index: the same exact neighbours
    for key, candidate in sdk.items():
        assert haystack[key].similarity == pytest.approx(candidate.similarity, abs=1e-4)
        assert haystack[key].raw_score != pytest.approx(candidate.raw_score, abs=1e-3)  # raw scores differ in meaning
    sdk_result, haystack_result = by_mode["sdk"][0], by_mode["haystack"][0]
    assert [b.evidence_key for b in sdk_result.evidence_blocks] == [
        b.evidence_key for b in haystack_result.evidence_blocks
    ]


@pytest.fixture(scope="module")
def hybrid_by_mode(topics_cfg):
    """As `by_mode`, with a dense top_k small enough that the BM25 leg brings chunks of its own."""
    return {
        mode: lookup_with(topics_cfg, QUERY, f"retrieval.vector_store_mode={mode}", "retrieval.top_k=2", include=STAGES)
        for mode in ("sdk", "haystack")
    }


def test_the_hybrid_legs_give_the_same_candidates_and_scores_on_both_paths(hybrid_by_mode, topics_cfg):
    by_mode = hybrid_by_mode
    assert topics_cfg.milvus.full_text and topics_cfg.retrieval.bm25_top_k > 0  # the hybrid is on
    sdk = _candidates(by_mode["sdk"][1])
    haystack = _candidates(by_mode["haystack"][1])
    assert set(sdk) == set(haystack)
    for mode in ("sdk", "haystack"):
        trace = by_mode[mode][0].retrieval_trace
        assert trace.legs == ["dense", "bm25"] and trace.bm25_skipped is None
        assert trace.attempts[0].bm25_count > 0
    found_by_bm25 = {key for key, c in sdk.items() if c.bm25_rank is not None}
    assert found_by_bm25 == {key for key, c in haystack.items() if c.bm25_rank is not None} and found_by_bm25
    only_bm25 = [key for key in found_by_bm25 if not any(r.startswith("vector:") for r in sdk[key].hit_reasons)]
    assert only_bm25, "the test query should bring chunks only the BM25 leg found"
    for key in found_by_bm25:
        assert (haystack[key].bm25_rank, haystack[key].bm25_score) == (sdk[key].bm25_rank, sdk[key].bm25_score)
        assert haystack[key].bm25_score > 0
        assert haystack[key].similarity == pytest.approx(sdk[key].similarity, abs=1e-6)  # BM25-only ones too
        assert haystack[key].raw_score == pytest.approx(1 - sdk[key].raw_score / 4, abs=1e-6)  # 1 - d/4 of the same d
    sdk_blocks = [(b.evidence_key, b.bm25_rank) for b in by_mode["sdk"][0].evidence_blocks]
    assert sdk_blocks == [(b.evidence_key, b.bm25_rank) for b in by_mode["haystack"][0].evidence_blocks]


def test_haystack_path_reads_the_existing_fields(by_mode, topics_cfg):
    rows = {row["id"]: row for row in collection_rows(topics_cfg)}
    sdk = _candidates(by_mode["sdk"][1])
    for key, candidate in _candidates(by_mode["haystack"][1]).items():
        row = rows[key]  # the evidence key is the primary key "id"
        assert candidate.content == row["content"] == sdk[key].content
        meta = row["metadata"]
        assert (candidate.source, candidate.title, candidate.breadcrumb) == (
            meta["source"],
            meta["title"],
            meta["breadcrumb"],
        )
        assert candidate.category == row["category"] == sdk[key].category
        assert candidate.chunk_index == sdk[key].chunk_index and candidate.keywords == sdk[key].keywords


def test_auto_mode_falls_back_to_sdk_when_haystack_fails(by_mode, topics_cfg):
    _, outputs = by_mode["sdk"]
    retriever = FallbackRetriever(
        store=KnowledgeStore(uri=topics_cfg.milvus.uri, collection=topics_cfg.milvus.collection),
        vector_store_mode="auto",
    )
    # A haystack path that fails for real: milvus-haystack pointed at a collection that does not exist.
    retriever._searches["haystack"] = HaystackVectorSearch(
        KnowledgeStore(uri=topics_cfg.milvus.uri, collection="no_such_collection")
    )
    out = retriever.run(
        query_transform=outputs["query_transformer"]["query_transform"],
        hints=outputs["l0_hints"]["hints"],
        query_embedding=outputs["query_embedder"]["query_embedding"],
    )
    (attempt,) = out["retrieval_trace"].attempts
    assert attempt.path == "sdk" and attempt.outcome == "selected"
    assert attempt.error.startswith("haystack path failed, used sdk: LookupError")
    assert "no_such_collection" in attempt.error
    assert out["retrieval_trace"].to_dict()["attempts"][0]["error"] == attempt.error
    assert out["candidates"] and {c.path for c in out["candidates"]} == {"sdk"}
    assert {c.evidence_key for c in out["candidates"]} == set(_candidates(outputs))  # the sdk mode's chunks


# sidecar -------------------------------------------------------------------------------------


def _main(result) -> dict:
    data = result.to_dict()
    data.pop("sidecar", None)
    data.pop("invocationId", None)
    return data


@pytest.fixture(scope="module")
def sidecar_off(topics_cfg):
    return LookupService(derived_config(topics_cfg)).lookup(UNFILTERED_QUERY)


def test_sidecar_disabled_by_default(topics_cfg, sidecar_off):
    assert topics_cfg.sidecar.enabled is False
    assert sidecar_off.sidecar.status == "disabled"
    assert sidecar_off.to_dict()["sidecar"]["status"] == "disabled"
    assert sidecar_off.found and sidecar_off.retrieval_trace.attempts[0].path == "sdk"


def test_sidecar_enabled_reports_comparable_results(topics_cfg, sidecar_off):
    result = LookupService(derived_config(topics_cfg, "sidecar.enabled=true")).lookup(UNFILTERED_QUERY)
    assert _main(result) == _main(sidecar_off)  # the main result does not depend on the sidecar
    report = result.sidecar
    assert report.status == "ok" and report.path == "haystack" and report.main_path == "sdk"
    assert report.results
    for rank, row in enumerate(report.results, start=1):
        assert row["rank"] == rank
        for key in (
            "source",
            "title",
            "breadcrumb",
            "category",
            "content_preview",
            "score_label",
            "score_value",
            "evidence_key",
        ):
            assert row[key] not in (None, ""), key
        assert row["path"] == "haystack" and row["score_label"] == HAYSTACK_SCORE_LABEL
        assert len(row["content_preview"]) <= 160
    comparison = report.comparison
    assert comparison["score_semantics"]["main"] == SDK_SCORE_LABEL
    assert comparison["score_semantics"]["sidecar"] == HAYSTACK_SCORE_LABEL
    assert comparison["overlap_ratio"] == 1.0 and comparison["same_top1"] is True
    assert comparison["max_similarity_gap"] < 1e-4
    assert result.retrieval_details(200)["sidecar"]["status"] == "ok"


def test_sidecar_compares_with_the_path_the_main_lookup_did_not_use(topics_cfg):
    cfg = derived_config(topics_cfg, "sidecar.enabled=true", "retrieval.vector_store_mode=haystack")
    report = LookupService(cfg).lookup(UNFILTERED_QUERY).sidecar
    assert (report.status, report.main_path, report.path) == ("ok", "haystack", "sdk")
    assert report.comparison["score_semantics"]["sidecar"] == SDK_SCORE_LABEL


def test_sidecar_failure_does_not_break_main_retrieval(topics_cfg, sidecar_off):
    cfg = derived_config(topics_cfg, "sidecar.enabled=true")
    pipeline = build_lookup_pipeline(cfg)
    sidecar = pipeline.get_component("sidecar")
    sidecar.store = dataclasses.replace(sidecar.store, collection="no_such_collection")  # cannot query
    result = LookupService(cfg, pipeline).lookup(UNFILTERED_QUERY)
    assert result.found and _main(result) == _main(sidecar_off)
    report = result.to_dict()["sidecar"]
    assert report["status"] == "error" and "no_such_collection" in report["error"]
    assert report["results"] == []
