"""
EvidenceDeduper, one test per rule (in the style of haystack's test_document_joiner.py): the evidence
bar, one block per evidenceKey with hit reasons merged, the per-document and total caps, the
competitor's block, the leader's needed section, the retrieval layer, the rerank trace and counts;
init validation, serialization and empty input.
"""

import copy

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.common.evidence import EvidenceBar
from components.common.scoring import SIMILARITY_LABEL
from components.contracts import Competition, EvidenceBlock, QueryTransform
from components.lookup.evidence_deduper import EvidenceDeduper
from components.lookup.query_intents import needed_section_kinds
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips, candidate

# The bar the retriever hands on when the query names nothing the knowledge base lacks.
BAR = EvidenceBar(configured=0.35, applied=0.35)
TYPE = "components.lookup.evidence_deduper.EvidenceDeduper"


def keys(out) -> list[str]:
    return [block.evidence_key for block in out["evidence_blocks"]]


def query(text: str) -> QueryTransform:
    return QueryTransform(raw=text, normalized=text, variants=[text], needed_sections=needed_section_kinds(text))


def sections(*kinds_by_key: tuple[str, str, float]):
    return [candidate(key, "ops/a.md", similarity, section_kind=kind) for key, kind, similarity in kinds_by_key]


class TestEvidenceDeduper:
    def test_init_defaults(self):
        deduper = EvidenceDeduper()
        assert (deduper.per_document_cap, deduper.max_evidence) == (2, 5)

    def test_init_with_custom_parameters(self):
        deduper = EvidenceDeduper(per_document_cap=3, max_evidence=7)
        assert (deduper.per_document_cap, deduper.max_evidence) == (3, 7)

    @pytest.mark.parametrize(
        ("params", "message"),
        [
            ({"per_document_cap": 0}, "per_document_cap=0 must be at least 1"),
            ({"max_evidence": -2}, "max_evidence=-2 must be at least 1"),
        ],
    )
    def test_init_refuses_caps_under_one_by_name(self, params, message):
        with pytest.raises(ValueError, match=message):
            EvidenceDeduper(**params)

    def test_to_dict(self):
        data = component_to_dict(EvidenceDeduper(per_document_cap=3), "deduper")
        assert data == {"type": TYPE, "init_parameters": {"per_document_cap": 3, "max_evidence": 5}}

    def test_from_dict(self):
        data = {"type": TYPE, "init_parameters": {"per_document_cap": 4, "max_evidence": 9}}
        deduper = component_from_dict(EvidenceDeduper, data, "deduper")
        assert (deduper.per_document_cap, deduper.max_evidence) == (4, 9)

    def test_round_trips(self):
        assert_round_trips(EvidenceDeduper(per_document_cap=3, max_evidence=7))

    def test_no_candidates_give_no_blocks(self):
        out = EvidenceDeduper().run(candidates=[], evidence_bar=BAR, query_transform=query("disk full"))
        assert out["evidence_blocks"] == [] and out["rerank_trace"] == []
        stats = out["dedup"]
        assert (stats.candidate_count, stats.final_count, stats.merged, stats.capped) == (0, 0, 0, 0)

    def test_only_candidates_at_or_above_the_applied_bar_are_evidence(self):
        cands = [candidate("a", "ops/a.md", 0.62), candidate("b", "ops/b.md", 0.44), candidate("c", "ops/c.md", 0.2)]
        deduper = EvidenceDeduper(max_evidence=5)
        assert keys(deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR)) == ["a", "b"]
        # A raised bar (the query names something the KB never mentions) holds here too; `configured` is not read.
        raised = deduper.run(candidates=copy.deepcopy(cands), evidence_bar=EvidenceBar(configured=0.35, applied=0.5))
        assert keys(raised) == ["a"]
        assert raised["dedup"].candidate_count == 3 and raised["dedup"].final_count == 1

    def test_one_block_per_evidence_key_with_the_hit_reasons_of_both(self):
        filtered = candidate("k1", "ops/a.md", 0.8, "vector:sdk attempt 0 (category='ops')", "l0_domain: ops")
        unfiltered = candidate("k1", "ops/a.md", 0.8, "vector:sdk attempt 1 (unfiltered)", "l0_domain: ops")
        other = candidate("k2", "ops/b.md", 0.7, "vector:sdk attempt 1 (unfiltered)")
        out = EvidenceDeduper().run(candidates=[filtered, unfiltered, other], evidence_bar=BAR)
        assert keys(out) == ["k1", "k2"]
        assert out["evidence_blocks"][0].hit_reasons == [
            "vector:sdk attempt 0 (category='ops')",
            "l0_domain: ops",
            "vector:sdk attempt 1 (unfiltered)",
        ]
        assert out["dedup"].merged == 1

    def test_a_merged_block_takes_the_bm25_score_only_the_other_candidate_has(self):
        dense = candidate("k", "a.md", 0.8, "vector:haystack attempt 0 (unfiltered)")
        lexical = candidate("k", "a.md", 0.8, "bm25:sdk attempt 1", bm25_score=3.0, bm25_rank=1)
        block = EvidenceDeduper().run(candidates=[dense, lexical], evidence_bar=BAR)["evidence_blocks"][0]
        assert (block.bm25_score, block.bm25_rank) == (3.0, 1)

    def test_distinct_chunks_of_one_source_stay_up_to_the_per_document_cap(self):
        cands = [candidate(key, "ops/a.md", 0.9 - i / 10) for i, key in enumerate("abc")]
        assert keys(EvidenceDeduper(per_document_cap=3).run(candidates=copy.deepcopy(cands), evidence_bar=BAR)) == [
            "a",
            "b",
            "c",
        ]
        capped = EvidenceDeduper(per_document_cap=2).run(candidates=copy.deepcopy(cands), evidence_bar=BAR)
        assert keys(capped) == ["a", "b"]
        assert capped["dedup"].capped == 1 and capped["dedup"].final_count == 2

    def test_at_most_max_evidence_blocks_in_all(self):
        cands = [candidate(f"k{i}", f"ops/{i}.md", 0.9 - i / 20) for i in range(8)]
        out = EvidenceDeduper(max_evidence=5).run(candidates=cands, evidence_bar=BAR)
        assert keys(out) == ["k0", "k1", "k2", "k3", "k4"]
        assert out["dedup"].candidate_count == 8 and out["dedup"].capped == 0

    def test_the_competitor_block_takes_the_place_of_a_third_documents_last_block(self):
        cands = [
            candidate("a0", "ops/a.md", 0.9),
            candidate("a1", "ops/a.md", 0.85),
            candidate("b0", "ops/b.md", 0.8),
            candidate("c0", "ops/c.md", 0.7),
        ]
        deduper = EvidenceDeduper(max_evidence=3, per_document_cap=2)
        assert keys(deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR)) == ["a0", "a1", "b0"]
        competition = Competition("ops/a.md", "ops/c.md", 0.02, ["score margin 0.020 < 0.05"], evidence_key="c0")
        kept = deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR, competition=competition)
        assert keys(kept) == ["a0", "a1", "c0"]

    def test_the_competitor_block_takes_the_place_of_the_leaders_last_block_when_no_third_document(self):
        cands = [candidate("a0", "ops/a.md", 0.9), candidate("a1", "ops/a.md", 0.85), candidate("b0", "ops/b.md", 0.8)]
        deduper = EvidenceDeduper(max_evidence=2)
        assert keys(deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR)) == ["a0", "a1"]
        competition = Competition("ops/a.md", "ops/b.md", 0.02, ["score margin 0.020 < 0.05"], evidence_key="b0")
        assert keys(deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR, competition=competition)) == [
            "a0",
            "b0",
        ]

    def test_the_leaders_needed_section_takes_the_place_of_its_later_block(self):
        cands = sections(("meaning", "overview", 0.9), ("impact", "impact", 0.85), ("fix", "mitigation", 0.6))
        cands.append(candidate("b0", "ops/b.md", 0.8))
        deduper = EvidenceDeduper(per_document_cap=2)
        assert keys(deduper.run(candidates=copy.deepcopy(cands), evidence_bar=BAR)) == ["meaning", "impact", "b0"]
        # An alert text needs the mitigation: it replaces the impact, never the first block.
        alert = deduper.run(
            candidates=copy.deepcopy(cands), evidence_bar=BAR, query_transform=query("disk full on node-1")
        )
        assert keys(alert) == ["meaning", "b0", "fix"]
        # A question about the impact needs the impact, which is already there.
        impact = deduper.run(
            candidates=copy.deepcopy(cands), evidence_bar=BAR, query_transform=query("what is the impact")
        )
        assert keys(impact) == ["meaning", "impact", "b0"]

    def test_the_needed_sections_are_those_the_query_transform_carries(self):
        cands = sections(("meaning", "overview", 0.9), ("fix", "mitigation", 0.85), ("why", "diagnosis", 0.6))
        cands.append(candidate("b0", "ops/b.md", 0.8))
        # "disk full" alone would need the mitigation: the kinds come from the transform, not the text.
        transform = QueryTransform("disk full", "disk full", ["disk full"], needed_sections=frozenset({"diagnosis"}))
        out = EvidenceDeduper(per_document_cap=2).run(candidates=cands, evidence_bar=BAR, query_transform=transform)
        assert keys(out) == ["meaning", "b0", "why"]

    def test_a_block_with_an_l0_hit_reason_is_layer_l0_l1(self):
        hinted = candidate("a", "ops/a.md", 0.8, "vector:sdk attempt 0 (unfiltered)", "l0_keyword: disk space")
        plain = candidate("b", "ops/b.md", 0.7, "vector:sdk attempt 0 (unfiltered)")
        blocks = EvidenceDeduper().run(candidates=[hinted, plain], evidence_bar=BAR)["evidence_blocks"]
        assert [b.retrieval_layer for b in blocks] == ["L0+L1", "L1"]

    def test_the_rerank_trace_gives_each_final_block_its_rank_scores_and_boosts(self):
        boosted = candidate("a", "ops/a.md", 0.6, final_score=0.75, boosts={"keyword_match": 0.15})
        plain = candidate("b", "ops/b.md", 0.7, final_score=0.7)
        trace = EvidenceDeduper().run(candidates=[boosted, plain], evidence_bar=BAR)["rerank_trace"]
        assert [(e.rank, e.evidence_key, e.base_score, e.final_score, e.boosts) for e in trace] == [
            (1, "a", 0.6, 0.75, {"keyword_match": 0.15}),
            (2, "b", 0.7, 0.7, {}),
        ]

    def test_run_leaves_the_candidates_it_merges_unchanged(self):
        dense = candidate("k", "a.md", 0.8, "vector:haystack attempt 0 (unfiltered)")
        lexical = candidate("k", "a.md", 0.8, "bm25:sdk attempt 1", bm25_score=3.0, bm25_rank=1)
        given = [dense, lexical]
        before = copy.deepcopy(given)
        out = EvidenceDeduper().run(candidates=given, evidence_bar=BAR)
        assert given == before
        assert out["evidence_blocks"][0].hit_reasons == ["vector:haystack attempt 0 (unfiltered)", "bm25:sdk attempt 1"]

    def test_a_merged_block_keeps_its_own_bm25_score(self):
        first = candidate("k", "a.md", 0.8, bm25_score=5.0, bm25_rank=1)
        second = candidate("k", "a.md", 0.8, bm25_score=3.0, bm25_rank=2)
        block = EvidenceDeduper().run(candidates=[first, second], evidence_bar=BAR)["evidence_blocks"][0]
        assert (block.bm25_score, block.bm25_rank) == (5.0, 1)

    def test_a_competitor_block_already_among_the_blocks_is_not_added_again(self):
        cands = [candidate("a0", "ops/a.md", 0.9), candidate("b0", "ops/b.md", 0.8)]
        competition = Competition("ops/a.md", "ops/b.md", 0.1, ["score margin 0.100 < 0.2"], evidence_key="b0")
        assert keys(EvidenceDeduper().run(candidates=cands, evidence_bar=BAR, competition=competition)) == [
            "a0",
            "b0",
        ]

    def test_the_competitor_block_takes_the_place_of_a_third_document_ranked_above_the_leaders_last(self):
        cands = [candidate("a0", "ops/a.md", 0.9), candidate("c0", "ops/c.md", 0.85), candidate("a1", "ops/a.md", 0.8)]
        cands.append(candidate("b0", "ops/b.md", 0.7))
        competition = Competition("ops/a.md", "ops/b.md", 0.1, ["score margin 0.100 < 0.2"], evidence_key="b0")
        out = EvidenceDeduper(max_evidence=3).run(candidates=cands, evidence_bar=BAR, competition=competition)
        assert keys(out) == ["a0", "a1", "b0"]

    def test_the_competitor_block_ranks_after_an_equal_score_of_higher_similarity(self):
        cands = [candidate("a0", "ops/a.md", 0.9), candidate("c0", "ops/c.md", 0.75, final_score=0.72)]
        cands += [candidate("a1", "ops/a.md", 0.8, final_score=0.7), candidate("b0", "ops/b.md", 0.6, final_score=0.7)]
        competition = Competition("ops/a.md", "ops/b.md", 0.2, ["named"], evidence_key="b0")
        out = EvidenceDeduper(max_evidence=3).run(candidates=cands, evidence_bar=BAR, competition=competition)
        assert keys(out) == ["a0", "a1", "b0"]

    def test_the_needed_section_is_the_leaders_whatever_document_ranks_second(self):
        meaning, why, fix = sections(
            ("meaning", "overview", 0.9), ("why", "diagnosis", 0.85), ("fix", "mitigation", 0.6)
        )
        cands = [meaning, candidate("b0", "ops/b.md", 0.88), why, fix]
        out = EvidenceDeduper().run(candidates=cands, evidence_bar=BAR, query_transform=query("disk full"))
        assert keys(out) == ["meaning", "b0", "fix"]

    def test_a_needed_section_without_a_spare_block_of_the_leader_changes_nothing(self):
        cands = [*sections(("meaning", "overview", 0.9)), candidate("b0", "ops/b.md", 0.8)]
        cands.append(*sections(("fix", "mitigation", 0.6)))
        out = EvidenceDeduper(per_document_cap=1).run(candidates=cands, evidence_bar=BAR, query_transform=query("x"))
        assert keys(out) == ["meaning", "b0"]

    def test_only_the_leaders_own_candidates_of_a_needed_kind_take_a_place(self):
        cands = sections(("meaning", "overview", 0.9), ("why", "diagnosis", 0.85))
        cands += [candidate("b0", "ops/b.md", 0.8), candidate("c0", "ops/c.md", 0.7)]
        out = EvidenceDeduper(max_evidence=3).run(candidates=cands, evidence_bar=BAR, query_transform=query("x"))
        assert keys(out) == ["meaning", "why", "b0"]

    def test_one_block_of_each_needed_kind_takes_a_place(self):
        cands = sections(
            ("meaning", "overview", 0.9),
            ("impact", "impact", 0.85),
            ("more", "impact", 0.8),
            ("fix", "mitigation", 0.6),
        )
        cands.append(*sections(("fix2", "mitigation", 0.55)))
        out = EvidenceDeduper(per_document_cap=3).run(candidates=cands, evidence_bar=BAR, query_transform=query("x"))
        assert keys(out) == ["meaning", "impact", "fix"]

    def test_a_needed_section_ranks_after_an_equal_score_of_higher_similarity(self):
        cands = [*sections(("meaning", "overview", 0.9), ("impact", "impact", 0.85))]
        cands.append(candidate("b0", "ops/b.md", 0.8, final_score=0.5))
        cands.append(candidate("fix", "ops/a.md", 0.6, section_kind="mitigation", final_score=0.5))
        out = EvidenceDeduper(per_document_cap=2).run(candidates=cands, evidence_bar=BAR, query_transform=query("x"))
        assert keys(out) == ["meaning", "b0", "fix"]

    def test_a_block_carries_every_field_of_its_candidate(self):
        chunk = candidate(
            "k", "ops/a.md", 0.8, "semantic", category="disk", tokens=42, final_score=0.9, bm25_score=2.0, bm25_rank=3
        )
        block = EvidenceDeduper().run(candidates=[chunk], evidence_bar=BAR)["evidence_blocks"][0]
        assert block == EvidenceBlock(
            evidence_key="k",
            source="ops/a.md",
            content="content of k",
            retrieval_layer="L1",
            score=0.8,
            score_label=SIMILARITY_LABEL,
            raw_score=chunk.raw_score,
            raw_score_label="l2_squared_distance",
            rerank_score=0.9,
            hit_reasons=["semantic"],
            title="Title of ops/a.md",
            breadcrumb="Title of ops/a.md > Section k",
            category="disk",
            tokens=42,
            bm25_score=2.0,
            bm25_rank=3,
        )


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("per_document_cap", 0, "at least 1"),
    ("max_evidence", -3, "at least 1"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: EvidenceDeduper(**{**{}, **changed}), parameter, value, rule)
