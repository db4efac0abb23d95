"""EvidenceDeduper: one block per evidenceKey, hit reasons merged, caps and counts."""

import copy

import pytest

from components.common.evidence import EvidenceBar
from components.contracts import Competition, QueryTransform
from components.lookup.evidence_deduper import EvidenceDeduper
from tests.helpers import assert_round_trips, candidate

# The bar the retriever hands on when the query names nothing the knowledge base lacks.
BAR = EvidenceBar(configured=0.35, applied=0.35)


def test_chunk_level_dedup_keeps_distinct_chunks_of_one_source():
    candidates = [
        candidate(key, "ops/a.md", 0.9 - i / 10, "vector:sdk attempt 0 (unfiltered)") for i, key in enumerate("abc")
    ]
    out = EvidenceDeduper(per_document_cap=3).run(candidates=copy.deepcopy(candidates), evidence_bar=BAR)
    assert [b.evidence_key for b in out["evidence_blocks"]] == ["a", "b", "c"]
    assert {b.source for b in out["evidence_blocks"]} == {"ops/a.md"}

    capped = EvidenceDeduper(per_document_cap=2).run(candidates=copy.deepcopy(candidates), evidence_bar=BAR)
    assert [b.evidence_key for b in capped["evidence_blocks"]] == ["a", "b"]
    assert capped["dedup"].capped == 1 and capped["dedup"].final_count == 2


def test_same_evidence_key_collapses_and_keeps_hit_reasons_of_both_paths():
    filtered = candidate("k1", "ops/a.md", 0.8, "vector:sdk attempt 0 (category='ops')", "l0_domain: ops", attempt=0)
    unfiltered = candidate("k1", "ops/a.md", 0.8, "vector:sdk attempt 1 (unfiltered)", "l0_domain: ops", attempt=1)
    other = candidate("k2", "ops/b.md", 0.7, "vector:sdk attempt 1 (unfiltered)")
    out = EvidenceDeduper().run(candidates=[filtered, unfiltered, other], evidence_bar=BAR)
    blocks = out["evidence_blocks"]
    assert [b.evidence_key for b in blocks] == ["k1", "k2"]
    assert blocks[0].hit_reasons == [
        "vector:sdk attempt 0 (category='ops')",
        "l0_domain: ops",
        "vector:sdk attempt 1 (unfiltered)",
    ]
    assert blocks[0].retrieval_layer == "L0+L1" and blocks[1].retrieval_layer == "L1"
    stats = out["dedup"]
    assert (stats.candidate_count, stats.final_count, stats.merged) == (3, 2, 1)
    assert [(e.rank, e.evidence_key) for e in out["rerank_trace"]] == [(1, "k1"), (2, "k2")]


def test_dedup_drops_unusable_candidates_and_caps_total():
    candidates = [candidate(f"k{i}", f"ops/{i}.md", 0.9 - i / 20) for i in range(8)] + [
        candidate("low", "ops/x.md", 0.2)
    ]
    out = EvidenceDeduper(max_evidence=5).run(candidates=candidates, evidence_bar=BAR)
    assert [b.evidence_key for b in out["evidence_blocks"]] == ["k0", "k1", "k2", "k3", "k4"]
    assert out["dedup"].candidate_count == 9 and out["dedup"].final_count == 5


def test_dedup_applies_the_evidence_threshold_the_retriever_recorded():
    """A raised bar (the query names something the KB never mentions) holds in post-processing too."""
    cands = [candidate("a", "ops/a.md", 0.62), candidate("b", "ops/b.md", 0.44)]
    deduper = EvidenceDeduper()
    assert [
        b.evidence_key for b in deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR)["evidence_blocks"]
    ] == ["a", "b"]
    raised = deduper.run(candidates=copy.deepcopy(cands), evidence_bar=EvidenceBar(configured=0.35, applied=0.5))
    assert [b.evidence_key for b in raised["evidence_blocks"]] == ["a"]
    assert raised["dedup"].candidate_count == 2 and raised["dedup"].final_count == 1


def test_the_competitor_block_stays_when_the_caps_would_drop_it():
    candidates = [candidate("a0", "ops/a.md", 0.9), candidate("a1", "ops/a.md", 0.85), candidate("b0", "ops/b.md", 0.8)]
    deduper = EvidenceDeduper(max_evidence=2)
    assert [
        b.evidence_key for b in deduper.run(candidates=copy.deepcopy(candidates), evidence_bar=BAR)["evidence_blocks"]
    ] == [
        "a0",
        "a1",
    ]
    competition = Competition("ops/a.md", "ops/b.md", 0.02, ["score margin 0.020 < 0.05"], evidence_key="b0")
    kept = deduper.run(candidates=copy.deepcopy(candidates), evidence_bar=BAR, competition=competition)[
        "evidence_blocks"
    ]
    assert [b.evidence_key for b in kept] == ["a0", "b0"]
    # A third document's block gives way before the leader's second one.
    candidates.append(candidate("c0", "ops/c.md", 0.7))
    competition.evidence_key = "c0"
    competition.competitor = "ops/c.md"
    kept = EvidenceDeduper(max_evidence=3, per_document_cap=2).run(
        candidates=candidates, evidence_bar=BAR, competition=competition
    )
    assert [b.evidence_key for b in kept["evidence_blocks"]] == ["a0", "a1", "c0"]


def sections(*kinds_by_key: tuple[str, str, float]):
    return [candidate(key, "ops/a.md", similarity, section_kind=kind) for key, kind, similarity in kinds_by_key]


def query(text: str) -> QueryTransform:
    return QueryTransform(raw=text, normalized=text, variants=[text])


def test_the_leaders_needed_section_takes_the_place_of_its_later_block():
    candidates = sections(("meaning", "overview", 0.9), ("impact", "impact", 0.85), ("fix", "mitigation", 0.6))
    candidates.append(candidate("b0", "ops/b.md", 0.8))
    deduper = EvidenceDeduper(per_document_cap=2)
    plain = deduper.run(candidates=copy.deepcopy(candidates), evidence_bar=BAR)["evidence_blocks"]
    assert [b.evidence_key for b in plain] == ["meaning", "impact", "b0"]
    # An alert text needs the mitigation: it replaces the impact, never the first block.
    alert = deduper.run(
        candidates=copy.deepcopy(candidates), evidence_bar=BAR, query_transform=query("disk full on node-1")
    )
    assert [b.evidence_key for b in alert["evidence_blocks"]] == ["meaning", "b0", "fix"]
    # A question about the impact needs the impact, which is already there.
    impact = deduper.run(
        candidates=copy.deepcopy(candidates), evidence_bar=BAR, query_transform=query("what is the impact")
    )
    assert [b.evidence_key for b in impact["evidence_blocks"]] == ["meaning", "impact", "b0"]


def test_round_trips():
    assert_round_trips(EvidenceDeduper(per_document_cap=3, max_evidence=7))


def test_run_leaves_the_candidates_it_merges_unchanged():
    dense = candidate("k", "a.md", 0.8, "vector:haystack attempt 0 (unfiltered)")
    lexical = candidate("k", "a.md", 0.8, "bm25:sdk attempt 1", bm25_score=3.0, bm25_rank=1)
    given = [dense, lexical]
    before = copy.deepcopy(given)
    out = EvidenceDeduper().run(candidates=given, evidence_bar=BAR)
    assert given == before
    block = out["evidence_blocks"][0]
    assert block.hit_reasons == ["vector:haystack attempt 0 (unfiltered)", "bm25:sdk attempt 1"]
    assert (block.bm25_score, block.bm25_rank) == (3.0, 1)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"per_document_cap": 0}, "per_document_cap=0 must be at least 1"), ({"max_evidence": -2}, "max_evidence=-2")],
)
def test_init_refuses_caps_under_one(params, message):
    with pytest.raises(ValueError, match=message):
        EvidenceDeduper(**params)
