"""ContextPacker: token budgets, headers counted exactly, the top-ranked block always packed, omissions recorded."""

import pytest

from components.common.embedding_models import count_tokens
from components.contracts import EvidenceBlock
from components.lookup.context_packer import ContextPacker
from components.lookup.result_assembler import completeness_hint
from tests.helpers import MODEL


def block(
    key: str,
    words: int,
    title: str,
    reasons: list[str],
    source: str | None = None,
    breadcrumb: str | None = None,
    tokens: int | None = None,
) -> EvidenceBlock:
    return EvidenceBlock(
        evidence_key=key,
        source=source or f"ops/{key}.md",
        content="word " * words,
        retrieval_layer="L1",
        score=0.8,
        score_label="s",
        raw_score=0.4,
        raw_score_label="l2_squared_distance",
        rerank_score=0.8,
        hit_reasons=reasons,
        title=title,
        breadcrumb=breadcrumb or f"{title} > Fix",
        tokens=tokens,
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


def test_content_is_truncated_never_the_metadata():
    reasons = ["vector:sdk attempt 0 (category='ops')", "l0_keyword: log rotation"]
    blocks = [
        block(f"k{i}", 400, f"Document {i}", reasons, f"ops/doc-{i}.md", f"Document {i} > Fix > Step {i}")
        for i in range(3)
    ]
    for budget in (80, 150, 400):
        pack = ContextPacker(budget_tokens=budget).run(evidence_blocks=blocks)["context_pack"]
        assert count_tokens(MODEL, pack.text) <= budget and pack.used_tokens <= budget
        assert pack.blocks and pack.truncated and pack.omitted_sources
        for packed in pack.blocks:
            assert packed.breadcrumb in pack.text and f"source: {packed.source}" in pack.text
            assert "; ".join(reasons) in pack.text
        assert pack.included_sources == [b.source for b in pack.blocks]
        assert pack.included_sources + pack.omitted_sources == [b.source for b in blocks]


def test_headers_are_counted_by_word_exactly_and_once(monkeypatch):
    """Header words are counted once per packer; the sums equal the tokenizer's own counts."""
    titles = ["Kube Persistent Volume Filling Up", "磁盘空间不足  处理", "Résumé\tnaïve façade", "x" * 140]
    blocks = [
        block(
            f"k{i}",
            30,
            title,
            [f"vector:sdk attempt 0 (category='ops-{i}')", "l0_keyword: (a)--b"],
            f"ops/{title[:12]}.md",
            f"{title} > Fix\n  step {i}",
            count_tokens(MODEL, "word " * 30),
        )
        for i, title in enumerate(titles)
    ]
    packer = ContextPacker(budget_tokens=4000)
    pack = packer.run(evidence_blocks=blocks)["context_pack"]
    assert len(pack.blocks) == len(blocks)
    for text, packed in zip(pack.text.split("\n\n"), pack.blocks, strict=True):
        assert packed.tokens == count_tokens(MODEL, text)
    assert pack.used_tokens == count_tokens(MODEL, pack.text)
    encoded: list[str] = []
    original = packer._encode
    monkeypatch.setattr(packer, "_encode", lambda text: encoded.append(text) or original(text))
    assert packer.run(evidence_blocks=blocks)["context_pack"] == pack
    assert encoded == []


def test_a_block_omitted_from_an_included_source_is_recorded():
    """Regression: a second block of an included source, cut by the budget, left no trace in the pack."""
    reasons = ["vector:sdk attempt 0 (unfiltered)"]
    blocks = [block("first", 40, "Doc", reasons, "ops/doc.md"), block("second", 100, "Doc", reasons, "ops/doc.md")]
    pack = ContextPacker(budget_tokens=90).run(evidence_blocks=blocks)["context_pack"]
    assert [b.evidence_key for b in pack.blocks] == ["first"] and not pack.truncated
    assert pack.included_sources == ["ops/doc.md"] and pack.omitted_sources == []
    assert pack.omitted_evidence_keys == ["second"]
    assert pack.to_dict()["omittedEvidenceKeys"] == ["second"] and pack.summary()["omitted_evidence_keys"] == ["second"]
    hint = completeness_hint(blocks, pack, "high")
    assert hint.startswith("partial:") and "1 block(s) omitted" in hint


def test_init_refuses_a_budget_of_no_tokens():
    with pytest.raises(ValueError, match=r"budget_tokens=0 must be at least 1"):
        ContextPacker(budget_tokens=0)
