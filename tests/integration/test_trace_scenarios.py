"""
The spec's scenarios for tool_invocation.retrieval_details, on a real SQLite file and a real
PostgreSQL: every lookup goes through the full pipeline over the session's sample index, and
the row is read back from the database by the invocation id the result returned.
"""

import json

import pytest

from components.contracts import FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE, LAYER_L0_L1
from pipelines.config.settings import load_config
from tests.conftest import sample_overrides, state_overrides

SPEC_KEYS = {
    "l0_hints",
    "query_transform",
    "retrieval_layer",
    "retrieval_trace",
    "fallback_reason",
    "rerank_trace",
    "context_pack_summary",
    "evidence_blocks",
    "candidate_count",
    "final_evidence_count",
}
ALL_HINTS_QUERY = "inode exhaustion df -i"  # L0 matches a title, keywords, a domain and an entity
OFF_TOPIC_QUERY = "how to bake sourdough bread"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lookup_with(request, sample_cfg, tmp_path_factory):
    """lookup_with(*overrides)(query) -> (result, row), one service per override set, one database per backend."""
    from pipelines.lookup import LookupService

    state = tmp_path_factory.mktemp(f"scenarios-{request.param}")
    db_url = (
        f"sqlite:///{state}/traces.db" if request.param == "sqlite" else request.getfixturevalue("pg_module_schema_url")
    )
    services: dict[tuple[str, ...], LookupService] = {}

    def factory(*overrides: str):
        key = tuple(overrides)
        if key not in services:
            cfg = load_config(
                state_overrides(state, *sample_overrides(sample_cfg, f"trace.db_url='{db_url}'", *overrides))
            )
            services[key] = LookupService(cfg)

        def lookup(query: str):
            service = services[key]
            result = service.lookup(query)
            assert result.trace_status == "recorded"
            row = service.trace_writer.store.get(result.invocation_id)
            assert row is not None, "the invocation id returned must lead to its row"
            return result, row

        return lookup

    return factory


def test_retrieval_details_include_l0_hints(lookup_with):
    result, row = lookup_with()(ALL_HINTS_QUERY)
    hints = row["retrieval_details"]["l0_hints"]
    assert hints["matched_titles"] == result.l0_hints.matched_titles == ["Inode Exhaustion"]
    assert "inode exhaustion" in hints["matched_keywords"]
    assert hints["domains"] == ["disk"]
    assert hints["entities"] == result.l0_hints.entities and hints["entities"]


def test_retrieval_layer_reflects_cooperating_retrieval(lookup_with):
    result, row = lookup_with()(ALL_HINTS_QUERY)
    assert result.l0_hints.has_matches and result.dedup.candidate_count > 0
    assert row["retrieval_layer"] == LAYER_L0_L1
    assert row["retrieval_details"]["retrieval_layer"] == LAYER_L0_L1
    assert row["found"] is True and row["status"] == "ok"


def test_evidence_summaries_are_persisted(lookup_with):
    result, row = lookup_with()("postgres replication lag on the replica")
    summaries = row["retrieval_details"]["evidence_blocks"]
    assert len(summaries) == len(result.evidence_blocks) > 0
    for summary, block in zip(summaries, result.evidence_blocks, strict=False):
        assert summary["source"] == block.source
        assert summary["title"] == block.title
        assert summary["retrieval_layer"] == block.retrieval_layer
        assert summary["score"] == pytest.approx(block.score)
        assert summary["hit_reasons"] == block.hit_reasons and summary["hit_reasons"]
    details = row["retrieval_details"]
    assert details["candidate_count"] == result.dedup.candidate_count
    assert details["final_evidence_count"] == len(result.evidence_blocks)


def test_full_content_is_not_duplicated_into_retrieval_details(lookup_with):
    result, row = lookup_with()("postgres replication lag on the replica")
    stored = json.dumps(row["retrieval_details"], ensure_ascii=False)
    long_blocks = [b for b in result.evidence_blocks if len(b.content) > 200]
    assert long_blocks, "the check needs evidence longer than trace.summary_chars"
    for block in long_blocks:
        assert block.content not in stored
    for summary in row["retrieval_details"]["evidence_blocks"]:
        assert len(summary["content_preview"]) <= 200
        assert summary["content_chars"] >= len(summary["content_preview"])
    assert result.context_pack.text not in stored


def test_content_can_be_omitted_entirely(lookup_with):
    result, row = lookup_with("trace.summary_chars=0")("postgres replication lag on the replica")
    assert result.evidence_blocks
    assert all("content_preview" not in s for s in row["retrieval_details"]["evidence_blocks"])


def test_evidence_lookup_persists_modular_detail_keys(lookup_with):
    result, row = lookup_with()("certificate expiry")
    assert result.found
    details = row["retrieval_details"]
    assert set(details) >= SPEC_KEYS
    assert details["retrieval_trace"]["attempts"] and details["retrieval_trace"]["selected_attempt"] == 0
    assert details["rerank_trace"] and {"rank", "source", "base_score", "boosts"} <= set(details["rerank_trace"][0])
    assert details["context_pack_summary"]["included_sources"] == result.context_pack.included_sources
    assert details["query_transform"]["normalized"] == "certificate expiry"


def test_fallback_lookup_persists_fallback_reason(lookup_with):
    result, row = lookup_with("retrieval.reference_threshold=0.95")("postgres replication lag on the replica")
    trace = row["retrieval_details"]["retrieval_trace"]
    assert row["retrieval_details"]["fallback_reason"] == FALLBACK_LOW_QUALITY
    assert trace["fallback_reason"] == FALLBACK_LOW_QUALITY
    assert trace["selected_attempt"] == 1
    assert [a["outcome"] for a in trace["attempts"]] == [f"retried: {FALLBACK_LOW_QUALITY}", "selected"]
    assert trace["attempts"][0]["category_filter"] == "database" and trace["attempts"][1]["category_filter"] is None


def test_no_evidence_lookup_still_preserves_trace(lookup_with):
    result, row = lookup_with()(OFF_TOPIC_QUERY)
    assert not result.found and row["found"] is False and row["status"] == "ok"
    details = row["retrieval_details"]
    assert details["evidence_status"] == "no_evidence"
    assert details["retrieval_trace"]["attempts"], "the attempted retrieval paths are recorded"
    assert details["evidence_blocks"] == [] and details["final_evidence_count"] == 0
    assert "content_preview" not in json.dumps(details)


def test_filtered_and_retry_both_empty_records_attempts_and_no_l0_evidence(lookup_with):
    result, row = lookup_with("retrieval.evidence_threshold=0.97", "retrieval.reference_threshold=0.97")(
        ALL_HINTS_QUERY
    )
    details = row["retrieval_details"]
    assert not result.found and details["fallback_reason"] == FALLBACK_NO_EVIDENCE
    assert len(details["retrieval_trace"]["attempts"]) == 2
    assert details["evidence_blocks"] == []
    assert details["l0_hints"]["matched_titles"] == ["Inode Exhaustion"]  # hints recorded, never evidence


def test_records_stay_under_16_kb_at_default_top_k(lookup_with):
    for query in (
        ALL_HINTS_QUERY,
        "postgres replication lag on the replica",
        "certificate expiry",
        OFF_TOPIC_QUERY,
        "disk " * 600,
    ):
        result, row = lookup_with()(query)
        size = len(json.dumps(row["retrieval_details"], ensure_ascii=False).encode("utf-8"))
        assert size < 16 * 1024, f"{size} bytes for {query[:40]!r}"
