"""
Query side, L0 as a hint provider (spec: "keep L0 as a hint provider", "L0 domain as optional
L1 filter", "persist L0 hints", "retrieval layer reflects cooperating retrieval").

The two-topic KB (tests/lookup_kbs.py) gives exact control over which hints a query produces.
"""

import re

import pytest

from components.contracts import LAYER_L0_L1, LAYER_L1
from tests.helpers import lookup_with
from tests.lookup_kbs import QUOTED_CATEGORY

# Matches a title, a keyword, an entity and (through them) one domain of the two-topic KB.
TOMATO_QUERY = "how much should I water tomato plants in the garden"
# Matches nothing in L0.
PAGER_QUERY = "how do I hand over the on-call pager"
# Names the gardening category and the PostgreSQL entity (alias "pg") of the databases category.
TWO_DOMAIN_QUERY = "gardening: why is the pg replica lagging behind the primary"
TOMATO_SOURCE = "gardening/watering-tomatoes.md"


@pytest.fixture(scope="module")
def tomato(topics_cfg):
    return lookup_with(topics_cfg, TOMATO_QUERY, include=("retriever",))


def test_l0_produces_traceable_hint_data(tomato):
    result, _ = tomato
    hints = result.l0_hints
    assert hints.matched_titles == ["Watering Tomato Plants"]
    assert hints.matched_keywords == ["tomato watering"]
    assert hints.domains == ["gardening"]
    assert hints.entities == ["Tomato"]
    assert hints.matched_sources == [TOMATO_SOURCE]

    recorded = result.retrieval_details(200)["l0_hints"]
    assert recorded == {
        "matched_titles": ["Watering Tomato Plants"],
        "matched_keywords": ["tomato watering"],
        "domains": ["gardening"],
        "entities": ["Tomato"],
        "matched_sources": [TOMATO_SOURCE],
        "named_sources": [],
        "uncovered_terms": [],
        "domain_rules": [],
    }
    # The agent sees the same hint data under camelCase keys.
    assert result.to_dict()["l0Hints"] == {
        "matchedTitles": ["Watering Tomato Plants"],
        "matchedKeywords": ["tomato watering"],
        "domains": ["gardening"],
        "entities": ["Tomato"],
        "matchedSources": [TOMATO_SOURCE],
        "namedSources": [],
        "uncoveredTerms": [],
        "domainRules": [],
    }


def test_l0_does_not_bypass_semantic_retrieval(sample_service):
    query = "disk almost full on a worker node"
    result = sample_service.lookup(query)
    assert result.l0_hints.matched_sources == ["disk/disk-full.md"]  # exactly one L0 match
    attempts = result.retrieval_trace.attempts
    assert len(attempts) >= 1 and attempts[0].candidate_count > 0
    assert result.found
    assert all(any(r.startswith("vector:") for r in b.hit_reasons) for b in result.evidence_blocks)


def test_l0_does_not_bypass_semantic_retrieval_unless_l1_disabled(sample_cfg):
    result, _ = lookup_with(sample_cfg, "disk almost full on a worker node", "retrieval.l1_enabled=false")
    assert result.l0_hints.matched_sources == ["disk/disk-full.md"]
    assert result.retrieval_trace.attempts == []
    assert result.retrieval_trace.l1_enabled is False
    assert result.found is False
    assert result.evidence_blocks == [] and result.context_pack.text == ""
    assert "disabled" in result.message
    data = result.to_dict()
    assert data["evidenceBlocks"] == [] and data["retrievalTrace"]["attempts"] == []


def test_l0_hints_do_not_become_normal_evidence(topics_cfg):
    result, outputs = lookup_with(topics_cfg, TOMATO_QUERY, "retrieval.evidence_threshold=0.99", include=("retriever",))
    assert result.found is False and result.evidence_status == "no_evidence"
    assert result.evidence_blocks == []
    data = result.to_dict()
    assert data["evidenceBlocks"] == []
    pack = data["contextPack"]
    assert pack["text"] == "" and pack["includedSources"] == [] and pack["blocks"] == []
    assert TOMATO_SOURCE not in str(data["evidenceBlocks"]) + str(pack)
    # L1 did run and found the chunks, just none good enough: the L0 match is not promoted.
    assert sum(a.candidate_count for a in result.retrieval_trace.attempts) > 0
    assert all(a.usable_count == 0 for a in result.retrieval_trace.attempts)
    # The hints are still recorded in the result and in the trace record.
    assert result.l0_hints.matched_sources == [TOMATO_SOURCE]
    details = result.retrieval_details(200)
    assert details["l0_hints"]["matched_titles"] == ["Watering Tomato Plants"]
    assert details["evidence_blocks"] == [] and details["final_evidence_count"] == 0


def test_single_domain_filter(tomato):
    result, outputs = tomato
    first = result.retrieval_trace.attempts[0]
    assert first.category_filter == "gardening"
    assert first.filter_expression == 'category == "gardening"'
    assert result.to_dict()["retrievalTrace"]["attempts"][0]["filter"] == 'category == "gardening"'
    filtered = [c for c in outputs["retriever"]["candidates"] if c.attempt == 0]
    assert filtered and {c.category for c in filtered} == {"gardening"}
    assert first.candidate_count == len(filtered)


def test_ambiguous_domain_fallback_with_zero_domains(topics_cfg):
    result, outputs = lookup_with(topics_cfg, PAGER_QUERY, include=("retriever",))
    assert result.l0_hints.domains == []
    (attempt,) = result.retrieval_trace.attempts
    assert attempt.category_filter is None and attempt.filter_expression is None
    assert len({c.category for c in outputs["retriever"]["candidates"]}) > 1  # nothing filtered out


def test_ambiguous_domain_fallback_with_two_domains(topics_cfg):
    result, outputs = lookup_with(topics_cfg, TWO_DOMAIN_QUERY, include=("retriever",))
    assert sorted(result.l0_hints.domains) == ["databases", "gardening"]
    (attempt,) = result.retrieval_trace.attempts
    assert attempt.category_filter is None and attempt.filter_expression is None
    assert attempt.outcome == "selected" and result.retrieval_trace.fallback_reason is None
    categories = {c.category for c in outputs["retriever"]["candidates"]}
    assert {"databases", "gardening", QUOTED_CATEGORY} <= categories


def test_retrieval_layer_reflects_cooperating_retrieval(tomato, topics_cfg):
    result, _ = tomato
    assert result.l0_hints.has_matches and result.retrieval_trace.attempts[0].candidate_count > 0
    assert result.retrieval_layer == LAYER_L0_L1 == "L0+L1"
    assert result.to_dict()["retrievalLayer"] == "L0+L1"
    assert result.retrieval_details(200)["retrieval_layer"] == "L0+L1"
    top = result.evidence_blocks[0]
    assert top.source == TOMATO_SOURCE and top.retrieval_layer == "L0+L1"

    plain, _ = lookup_with(topics_cfg, PAGER_QUERY)
    assert not plain.l0_hints.has_matches and plain.found
    assert plain.retrieval_layer == LAYER_L1 == "L1"
    assert {b.retrieval_layer for b in plain.evidence_blocks} == {"L1"}
    assert plain.retrieval_details(200)["retrieval_layer"] == "L1"


CJK_ALIAS_QUERY = "文件系统变成只读了内核日志里有错误"  # "内核日志" is an alias of the dmesg entity
CJK_KEYWORD_QUERY = "只读文件系统怎么处理"  # "只读文件系统" is a keyword


def test_cjk_query_yields_l0_hints_without_whitespace_tokenisation(sample_service):
    for query in (CJK_ALIAS_QUERY, CJK_KEYWORD_QUERY):
        assert not re.search(r"\s", query)
    alias = sample_service.lookup(CJK_ALIAS_QUERY)
    assert "dmesg" in alias.l0_hints.entities
    assert alias.l0_hints.domains == ["disk"]
    assert "disk/filesystem-read-only-remount.md" in alias.l0_hints.matched_sources

    keyword = sample_service.lookup(CJK_KEYWORD_QUERY)
    assert "只读文件系统" in keyword.l0_hints.matched_keywords
    assert keyword.l0_hints.domains == ["disk"]
    assert keyword.retrieval_trace.attempts[0].category_filter == "disk"
    assert keyword.found and keyword.evidence_blocks[0].source == "disk/filesystem-read-only-remount.md"
    assert any(r == "l0_keyword: 只读文件系统" for r in keyword.evidence_blocks[0].hit_reasons)
