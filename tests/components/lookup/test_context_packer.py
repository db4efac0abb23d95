"""ContextPacker with small budgets: the top-ranked block is always packed, cut to what fits."""

from components.common.embedding_models import count_tokens
from components.contracts import EvidenceBlock
from components.lookup.context_packer import ContextPacker
from tests.helpers import MODEL


def block(key: str, words: int, title: str, reasons: list[str]) -> EvidenceBlock:
    return EvidenceBlock(
        evidence_key=key,
        source=f"ops/{key}.md",
        content="word " * words,
        retrieval_layer="L1",
        score=0.8,
        score_label="s",
        raw_score=0.4,
        raw_score_label="l2_squared_distance",
        rerank_score=0.8,
        hit_reasons=reasons,
        title=title,
        breadcrumb=f"{title} > Fix",
    )


LONG_HEADER = block(
    "top",
    200,
    "Rotating the application logs of every worker node before the disk fills up",
    ["vector:sdk attempt 0 (category='ops')", "l0_keyword: log rotation", "l0_title: rotating logs"],
)
SHORT_HEADER = block("second", 200, "Disk", ["vector:sdk attempt 0 (unfiltered)"])


def test_the_top_block_is_packed_before_a_lower_one_with_a_shorter_header():
    pack = ContextPacker(budget_tokens=100).run(evidence_blocks=[LONG_HEADER, SHORT_HEADER])["context_pack"]
    assert [b.evidence_key for b in pack.blocks][:1] == ["top"]
    assert pack.used_tokens <= 100 and count_tokens(MODEL, pack.text) <= 100
    assert pack.truncated and "[…]" in pack.text


def test_a_budget_smaller_than_a_header_still_packs_the_top_block_within_it():
    for budget in (8, 30):
        pack = ContextPacker(budget_tokens=budget).run(evidence_blocks=[LONG_HEADER, SHORT_HEADER])["context_pack"]
        assert [b.evidence_key for b in pack.blocks] == ["top"]
        assert pack.text and pack.truncated and pack.included_sources == ["ops/top.md"]
        assert pack.used_tokens == count_tokens(MODEL, pack.text) <= budget
        assert pack.omitted_evidence_keys == ["second"]
