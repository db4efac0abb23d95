"""
Query side, the L0-filtered attempt and its unfiltered retry (spec: "retry without L0 filter when
filtered L1 is low quality", "persist fallback reason"), on the two-topic KB: a query that names
the gardening category but asks about database replication makes the filtered attempt weak.
"""

import pytest

from components.contracts import FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE, FALLBACK_OUTSCORED
from tests.helpers import lookup_with

TOMATO_QUERY = "how much should I water tomato plants in the garden"
# Names the gardening category; asks about PostgreSQL (alias "pg") replication. With domains
# taken from category names only, gardening is the single domain and the entity alias expands.
MISDIRECTED_QUERY = "gardening: why is the pg replica lagging behind the primary"
CATEGORY_NAMES_ONLY = "l0.domain_from_matches=false"


def test_filtered_retrieval_succeeds(topics_cfg):
    result, _ = lookup_with(topics_cfg, TOMATO_QUERY)
    trace = result.retrieval_trace
    (attempt,) = trace.attempts
    assert attempt.category_filter == "gardening" and attempt.outcome == "selected"
    assert attempt.top_similarity >= topics_cfg.retrieval.reference_threshold and attempt.usable_count > 0
    assert trace.selected_attempt == 0 and trace.fallback_reason is None
    data = result.to_dict()["retrievalTrace"]
    assert "fallbackReason" not in data and data["selectedAttempt"] == 0
    assert result.retrieval_details(200)["fallback_reason"] is None
    assert {b.category for b in result.evidence_blocks} == {"gardening"}


@pytest.fixture(scope="module")
def misdirected(topics_cfg):
    return lookup_with(topics_cfg, MISDIRECTED_QUERY, CATEGORY_NAMES_ONLY)[0]


def test_filtered_retrieval_returns_no_evidence(misdirected):
    result = misdirected
    qt = result.query_transform
    assert result.l0_hints.domains == ["gardening"] and qt.expansions == ["PostgreSQL"]
    first, retry = result.retrieval_trace.attempts
    assert first.category_filter == "gardening" and first.usable_count == 0
    assert first.query == qt.retrieval_query == f"{MISDIRECTED_QUERY} (PostgreSQL)"
    assert first.outcome == f"retried: {FALLBACK_NO_EVIDENCE}"
    # The retry: raw (normalised, unexpanded) query, no L0-derived filter.
    assert retry.category_filter is None and retry.filter_expression is None
    assert retry.query == qt.normalized == MISDIRECTED_QUERY
    assert retry.outcome == "selected" and retry.usable_count > 0
    trace = result.retrieval_trace
    assert (
        trace.selected_attempt == 1 and trace.fallback_reason == FALLBACK_NO_EVIDENCE == "filtered_vector_no_evidence"
    )
    data = result.to_dict()["retrievalTrace"]
    assert data["fallbackReason"] == "filtered_vector_no_evidence" and data["selectedAttempt"] == 1
    details = result.retrieval_details(200)
    assert details["fallback_reason"] == "filtered_vector_no_evidence"
    assert details["retrieval_trace"]["selected_attempt"] == 1
    assert result.found and result.evidence_blocks[0].source == "databases/replica-lag.md"
    # The first attempt's candidates, none usable, do not go on to reranking.
    assert first.candidate_count > 0 and result.dedup.candidate_count == retry.candidate_count


def test_filtered_retrieval_is_below_reference_quality(topics_cfg):
    result, _ = lookup_with(topics_cfg, TOMATO_QUERY, "retrieval.reference_threshold=0.95")
    first, retry = result.retrieval_trace.attempts
    assert first.category_filter == "gardening"
    assert first.usable_count > 0 and first.top_similarity < 0.95  # usable, but under the reference
    assert first.outcome == f"retried: {FALLBACK_LOW_QUALITY}"
    assert retry.category_filter is None and retry.query == result.query_transform.normalized
    assert result.retrieval_trace.fallback_reason == "filtered_vector_low_quality"
    assert result.to_dict()["retrievalTrace"]["fallbackReason"] == "filtered_vector_low_quality"
    assert result.retrieval_details(200)["fallback_reason"] == "filtered_vector_low_quality"
    assert result.found
    # Both attempts' usable candidates go on, and only those of the first.
    assert first.usable_count < first.candidate_count
    assert result.dedup.candidate_count == retry.candidate_count + first.usable_count


def test_both_retrieval_attempts_fail(topics_cfg):
    result, _ = lookup_with(topics_cfg, MISDIRECTED_QUERY, CATEGORY_NAMES_ONLY, "retrieval.evidence_threshold=0.99")
    assert result.found is False and result.evidence_status == "no_evidence"
    assert result.evidence_blocks == [] and result.relevance_level == "none"
    data = result.to_dict()
    assert data["evidenceStatus"] == "no_evidence"
    assert "no knowledge evidence" in data["message"].lower()
    attempts = data["retrievalTrace"]["attempts"]
    assert [(a["category"], a["usableCount"]) for a in attempts] == [("gardening", 0), (None, 0)]
    assert all(a["candidateCount"] > 0 for a in attempts)
    assert data["retrievalTrace"]["fallbackReason"] == "filtered_vector_no_evidence"
    # The L0 matches (the databases documents) are not returned as evidence.
    assert result.l0_hints.matched_sources
    assert data["evidenceBlocks"] == [] and data["contextPack"]["includedSources"] == []
    details = result.retrieval_details(200)
    assert len(details["retrieval_trace"]["attempts"]) == 2 and details["evidence_blocks"] == []


def test_a_filtered_attempt_outscored_unfiltered_is_retried_and_the_reason_persisted(topics_cfg):
    from pipelines.lookup import LookupService
    from tests.helpers import derived_config

    # Thresholds so low that the gardening attempt stands by the spec's two rules: only the
    # unfiltered check can tell that its best chunk is far from the query.
    cfg = derived_config(
        topics_cfg,
        CATEGORY_NAMES_ONLY,
        "retrieval.evidence_threshold=0.01",
        "retrieval.uncovered_evidence_threshold=0.01",
        "retrieval.reference_threshold=0.01",
        "retrieval.outscored_margin=0.1",
    )
    service = LookupService(cfg)
    result = service.lookup(MISDIRECTED_QUERY)
    first, retry = result.retrieval_trace.attempts
    assert first.category_filter == "gardening" and first.usable_count > 0
    assert first.unfiltered_top_similarity - first.top_similarity >= 0.1
    assert first.outcome == f"retried: {FALLBACK_OUTSCORED}" and retry.outcome == "selected"
    assert result.to_dict()["retrievalTrace"]["fallbackReason"] == "filtered_vector_outscored"
    assert (
        result.to_dict()["retrievalTrace"]["attempts"][0]["unfilteredTopSimilarity"] == first.unfiltered_top_similarity
    )
    assert result.evidence_blocks[0].source == "databases/replica-lag.md"
    row = service.trace_writer.store.get(result.invocation_id)
    details = row["retrieval_details"]
    assert details["fallback_reason"] == "filtered_vector_outscored"
    assert details["retrieval_trace"]["fallback_reason"] == "filtered_vector_outscored"
    stored_first = details["retrieval_trace"]["attempts"][0]
    assert stored_first["unfiltered_top_similarity"] == first.unfiltered_top_similarity
    assert details["retrieval_trace"]["legs"] == ["dense", "bm25"]
