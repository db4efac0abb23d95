"""
Query side, post-retrieval: evidence blocks, deduplication, context packing and the rule rerank
(spec: "structured evidence blocks", "deduplicate evidence blocks", "pack evidence context",
"rerank evidence with traceable rule signals").
"""

import copy

import pytest

from components.common.choices import DEFAULT_RERANK_WEIGHTS
from components.common.embedding_models import count_tokens
from components.common.evidence import EvidenceBar
from components.contracts import L0Hints, QueryTransform, RetrievalAttempt, RetrievalTrace
from components.lookup.context_packer import ContextPacker
from components.lookup.result_assembler import ResultAssembler
from components.lookup.rule_reranker import RuleReranker
from components.stores.l0_index_file import load_l0_index
from tests.helpers import MODEL, candidate, lookup_with

DISK_QUERY = "disk almost full on a worker node"
TOMATO_QUERY = "how much should I water tomato plants in the garden"
PAGER_QUERY = "how do I hand over the on-call pager"
BM25_KEYS = {"bm25Score", "bm25Rank"}
BLOCK_KEYS = {
    "evidenceKey",
    "source",
    "title",
    "breadcrumb",
    "category",
    "retrievalLayer",
    "score",
    "scoreLabel",
    "rawScore",
    "rawScoreLabel",
    "rerankScore",
    "content",
    "hitReasons",
}

BAR = EvidenceBar(configured=0.35, applied=0.35)


def all_keys(value) -> set[str]:
    """Every dict key anywhere in a JSON-like value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


@pytest.fixture(scope="module")
def disk(sample_service):
    return sample_service.lookup(DISK_QUERY)


# evidence blocks -----------------------------------------------------------------------------


def test_evidence_block_contains_source_metadata(disk):
    data = disk.to_dict()
    assert data["found"] and data["evidenceBlocks"]
    for block in data["evidenceBlocks"]:
        # The BM25 leg's score and rank only on the blocks it found, both or neither.
        assert set(block) - BM25_KEYS == BLOCK_KEYS and len(BM25_KEYS & set(block)) in (0, 2)
        assert block["source"].startswith("disk/") and block["source"].endswith(".md")
        assert block["title"] and block["breadcrumb"] and block["category"] == "disk"
        assert block["breadcrumb"].startswith(block["title"])
        assert block["retrievalLayer"] in ("L0+L1", "L1")
        assert block["content"].strip()
        assert block["hitReasons"] and any(r.startswith(("vector:sdk", "bm25:sdk")) for r in block["hitReasons"])
        assert 0.0 <= block["score"] <= 1.0 and block["scoreLabel"].startswith("normalized_similarity")
    assert data["evidenceBlocks"][0]["title"] == "Disk Full"


def test_result_has_no_legacy_primary_or_supplement_fields(disk):
    keys = all_keys(disk.to_dict()) | all_keys(disk.retrieval_details(200))
    legacy = {k for k in keys if "primary" in k.lower() or "supplement" in k.lower()}
    assert not legacy


def test_evidence_result_contains_context_and_traces(disk):
    data = disk.to_dict()
    for key in ("evidenceBlocks", "contextPack", "retrievalTrace", "rerankTrace", "relevanceLevel", "completenessHint"):
        assert data[key], key
    assert data["evidenceStatus"] == "evidence" and "message" not in data
    assert data["relevanceLevel"] in ("high", "medium", "low")
    assert data["completenessHint"].startswith("complete:")
    assert data["contextPack"]["text"] and data["retrievalTrace"]["attempts"]
    # The agent-facing context is derived from the evidence blocks.
    for block in data["evidenceBlocks"]:
        assert f"source: {block['source']}" in data["contextPack"]["text"]
    details = disk.retrieval_details(200)
    for key in ("query_transform", "retrieval_trace", "context_pack_summary", "rerank_trace", "evidence_blocks"):
        assert details[key], key
    assert all(len(b["content_preview"]) <= 200 and "content" not in b for b in details["evidence_blocks"])


def test_no_evidence_result_keeps_traceability(sample_service):
    result = sample_service.lookup("how do I bake sourdough bread")
    data = result.to_dict()
    assert data["found"] is False and data["evidenceStatus"] == "no_evidence"
    assert "No knowledge evidence found" in data["message"]
    assert data["evidenceBlocks"] == [] and data["relevanceLevel"] == "none"
    assert data["completenessHint"].startswith("none:")
    (attempt,) = data["retrievalTrace"]["attempts"]
    assert attempt["candidateCount"] > 0 and attempt["usableCount"] == 0 and attempt["outcome"] == "selected"
    details = result.retrieval_details(200)
    assert details["retrieval_trace"]["attempts"] and details["evidence_blocks"] == []


# deduplication -------------------------------------------------------------------------------


def test_dedup_in_the_pipeline_merges_attempts_and_records_counts(topics_cfg):
    # A filtered attempt below the reference threshold is retried unfiltered; chunks found by both
    # attempts become one block each, carrying the vector reasons of both.
    result, outputs = lookup_with(topics_cfg, TOMATO_QUERY, "retrieval.reference_threshold=0.95", include=("reranker",))
    assert result.retrieval_trace.fallback_reason == "filtered_vector_low_quality"
    keys = [b.evidence_key for b in result.evidence_blocks]
    assert len(keys) == len(set(keys))
    both = [
        b
        for b in result.evidence_blocks
        if "vector:sdk attempt 0 (category='gardening')" in b.hit_reasons
        and "vector:sdk attempt 1 (unfiltered)" in b.hit_reasons
    ]
    assert both and both[0].source == "gardening/watering-tomatoes.md"
    candidates = outputs["reranker"]["candidates"]
    assert result.dedup.candidate_count == len(candidates) > len({c.evidence_key for c in candidates})
    assert result.dedup.merged == len(candidates) - len({c.evidence_key for c in candidates})
    assert result.dedup.final_count == len(result.evidence_blocks)
    details = result.retrieval_details(200)
    assert details["candidate_count"] == len(candidates)
    assert details["final_evidence_count"] == len(result.evidence_blocks)


def test_per_document_cap_in_the_pipeline(sample_cfg, disk):
    by_source = [b.source for b in disk.evidence_blocks]
    assert by_source.count("disk/disk-full.md") == 2  # distinct chunks of one source stay separate
    capped, _ = lookup_with(sample_cfg, DISK_QUERY, "retrieval.per_document_cap=1")
    sources = [b.source for b in capped.evidence_blocks]
    assert len(sources) == len(set(sources)) and "disk/disk-full.md" in sources
    assert capped.dedup.capped > 0


# context pack --------------------------------------------------------------------------------


def test_context_pack_preserves_source_metadata(disk):
    pack = disk.to_dict()["contextPack"]
    assert pack["truncated"] is False and pack["omittedSources"] == []
    assert pack["includedSources"] == list(dict.fromkeys(b.source for b in disk.evidence_blocks))
    assert [b["evidenceKey"] for b in pack["blocks"]] == [b.evidence_key for b in disk.evidence_blocks]
    for packed, block in zip(pack["blocks"], disk.evidence_blocks, strict=True):
        assert (packed["source"], packed["title"], packed["breadcrumb"], packed["hitReasons"]) == (
            block.source,
            block.title,
            block.breadcrumb,
            block.hit_reasons,
        )
        assert f"source: {block.source}" in pack["text"]
        assert block.title in pack["text"] and block.breadcrumb.split(" > ")[-1] in pack["text"]
        assert "; ".join(block.hit_reasons) in pack["text"]
        assert block.content in pack["text"]  # within budget: whole content


def test_context_pack_respects_budget(sample_cfg):
    budget = 120
    result, _ = lookup_with(sample_cfg, DISK_QUERY, f"context.budget_tokens={budget}")
    pack = result.to_dict()["contextPack"]
    assert pack["budgetTokens"] == budget
    assert pack["usedTokens"] <= budget and count_tokens(MODEL, pack["text"]) <= budget
    assert pack["truncated"] is True
    assert pack["includedSources"] and pack["omittedSources"]
    assert not set(pack["includedSources"]) & set(pack["omittedSources"])
    assert set(pack["includedSources"]) | set(pack["omittedSources"]) == {b.source for b in result.evidence_blocks}
    packed_keys = [b["evidenceKey"] for b in pack["blocks"]]
    assert sorted(packed_keys + pack["omittedEvidenceKeys"]) == sorted(b.evidence_key for b in result.evidence_blocks)
    # Headers (metadata) are whole; content is what got cut.
    for packed in pack["blocks"]:
        assert f"source: {packed['source']}" in pack["text"]
        assert "why: " + "; ".join(packed["hitReasons"]) in pack["text"]
    assert any(p["truncated"] for p in pack["blocks"]) and "[…]" in pack["text"]
    assert result.completeness_hint.startswith("partial:")
    summary = result.retrieval_details(200)["context_pack_summary"]
    assert summary["omitted_sources"] == pack["omittedSources"] and summary["truncated"] is True


def test_context_packer_trusts_index_token_counts(disk, monkeypatch):
    """Blocks carry their token count from the index, so content that fits is not encoded again."""
    blocks = disk.evidence_blocks
    assert blocks and all(b.tokens == count_tokens(MODEL, b.content) for b in blocks)
    packer = ContextPacker(budget_tokens=4000)
    packer.warm_up()
    encoded: list[str] = []
    original = packer._encode
    monkeypatch.setattr(packer, "_encode", lambda text: encoded.append(text) or original(text))
    pack = packer.run(evidence_blocks=blocks)["context_pack"]
    assert not {b.content for b in blocks} & set(encoded)  # headers only
    uncounted = [copy.copy(b) for b in blocks]
    for block in uncounted:
        block.tokens = None
    assert ContextPacker(budget_tokens=4000).run(evidence_blocks=uncounted)["context_pack"] == pack


# rerank --------------------------------------------------------------------------------------


def test_rerank_trace_records_score_contributions(disk):
    trace = disk.to_dict()["rerankTrace"]
    blocks = disk.to_dict()["evidenceBlocks"]
    assert [e["rank"] for e in trace] == list(range(1, len(blocks) + 1))
    for entry, block in zip(trace, blocks, strict=True):
        assert set(entry) == {"rank", "source", "evidenceKey", "baseScore", "finalScore", "boosts"}
        assert (entry["source"], entry["evidenceKey"]) == (block["source"], block["evidenceKey"])
        assert entry["baseScore"] == block["score"] and entry["finalScore"] == block["rerankScore"]
        assert entry["boosts"] and set(entry["boosts"]) <= set(DEFAULT_RERANK_WEIGHTS) - {"similarity"}
        assert entry["finalScore"] == pytest.approx(
            DEFAULT_RERANK_WEIGHTS["similarity"] * entry["baseScore"] + sum(entry["boosts"].values()), abs=1e-3
        )
    finals = [e["finalScore"] for e in trace]
    assert finals == sorted(finals, reverse=True)
    assert disk.retrieval_details(200)["rerank_trace"][0]["base_score"] == trace[0]["baseScore"]


def test_query_hints_influence_rerank_without_becoming_evidence(topics_cfg):
    result, _ = lookup_with(topics_cfg, TOMATO_QUERY)
    top = result.evidence_blocks[0]
    assert top.source == "gardening/watering-tomatoes.md"
    for reason in (
        "l0_title: Watering Tomato Plants",
        "l0_keyword: tomato watering",
        "l0_entity: Tomato",
        "l0_domain: gardening",
    ):
        assert reason in top.hit_reasons
    boosts = result.rerank_trace[0].boosts
    for signal in ("title_match", "keyword_match", "entity_match", "domain_match"):
        assert boosts[signal] > 0
    # Every block is a retrieved chunk (a vector reason), never the L0 entry itself.
    for block in result.evidence_blocks:
        assert any(r.startswith("vector:") for r in block.hit_reasons)
    # A gardening block the hints do not match gets no hint reason.
    roses = [b for b in result.evidence_blocks if b.source == "gardening/pruning-roses.md"]
    assert all(not any(r.startswith(("l0_title", "l0_keyword", "l0_entity")) for r in b.hit_reasons) for b in roses)


def _only(**weights: float) -> list[str]:
    return [f"rerank.weights.{name}={weights.get(name, 0.0)}" for name in DEFAULT_RERANK_WEIGHTS]


def test_rerank_weights_from_config_change_the_order(topics_cfg):
    by_similarity, _ = lookup_with(topics_cfg, PAGER_QUERY, *_only(similarity=1.0))
    by_lexical, _ = lookup_with(topics_cfg, PAGER_QUERY, *_only(similarity=0.01, lexical_overlap=1.0))
    scores = [b.score for b in by_similarity.evidence_blocks]
    assert scores == sorted(scores, reverse=True)
    assert by_similarity.evidence_blocks[0].source == "support/pager-escalation.md"
    assert by_lexical.evidence_blocks[0].source == "itops/pager-rotation.md"  # shares "hand over" with the query
    assert by_lexical.rerank_trace[0].boosts["lexical_overlap"] > by_lexical.rerank_trace[1].boosts.get(
        "lexical_overlap", 0
    )


def test_a_document_named_in_the_query_is_boosted_with_a_hit_reason(sample_cfg):
    """`name_match`: the runbook whose name a notification quotes beats a closer sibling chunk."""
    qt = QueryTransform(raw="q", normalized="[FIRING:1] KubeQuotaAlmostFull", variants=["q"])
    named = candidate("n", "k8s/KubeQuotaAlmostFull.md", 0.55, content="quota text", title="Kube Quota Almost Full")
    sibling = candidate("s", "k8s/KubeQuotaFullyUsed.md", 0.95, content="quota text", title="Kube Quota Fully Used")
    hints = L0Hints(matched_titles=["Kube Quota Almost Full"], named_sources=["k8s/KubeQuotaAlmostFull.md"])
    index = load_l0_index(sample_cfg.l0.index_path)
    reranker = RuleReranker()
    ranked = reranker.run(
        query_transform=qt,
        hints=hints,
        candidates=copy.deepcopy([sibling, named]),
        query_embedding=[0.0] * 384,
        evidence_bar=BAR,
        l0_index=index,
    )["candidates"]
    assert [c.evidence_key for c in ranked] == ["n", "s"]
    assert ranked[0].boosts["name_match"] == DEFAULT_RERANK_WEIGHTS["name_match"]
    assert "l0_name: KubeQuotaAlmostFull" in ranked[0].hit_reasons
    assert not any(r.startswith("l0_name") for r in ranked[1].hit_reasons)
    off = RuleReranker(weights={"name_match": 0.0}).run(
        query_transform=qt,
        hints=hints,
        candidates=copy.deepcopy([sibling, named]),
        query_embedding=[0.0] * 384,
        evidence_bar=BAR,
        l0_index=index,
    )["candidates"]
    assert [c.evidence_key for c in off] == ["s", "n"]


def test_rerank_is_deterministic_in_the_pipeline(sample_service):
    first = sample_service.lookup(DISK_QUERY).to_dict()
    second = sample_service.lookup(DISK_QUERY).to_dict()
    assert first["rerankTrace"] == second["rerankTrace"]
    assert first["evidenceBlocks"] == second["evidenceBlocks"]


def test_no_evidence_message_tells_unknown_words_from_alert_names_no_document_has():
    attempt = RetrievalAttempt(
        0, None, None, "q", "sdk", candidate_count=20, usable_count=0, top_similarity=0.455, outcome="selected"
    )
    trace = RetrievalTrace(attempts=[attempt], selected_attempt=0, evidence_threshold=0.5)
    hints = L0Hints(uncovered_terms=["backlog", "CassandraCompactionBacklog"])
    bar = EvidenceBar(configured=0.35, applied=0.5)
    message = ResultAssembler()._no_evidence_message(trace, hints, bar)
    assert "never mentions 'backlog' and has no document named 'CassandraCompactionBacklog'" in message
    assert "at least 0.5" in message and "reached 0.455" in message
