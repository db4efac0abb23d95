"""ResultAssembler: found / no-evidence results, layers, relevance levels and completeness hints."""

import re

import pytest
from haystack.core.serialization import component_to_dict

from components.common.evidence import EvidenceBar
from components.contracts import (
    STATUS_EVIDENCE,
    STATUS_NO_EVIDENCE,
    Competition,
    ContextPack,
    DedupStats,
    EvidenceBlock,
    L0Hints,
    PackedBlock,
    QueryTransform,
    RetrievalAttempt,
    RetrievalTrace,
    SidecarReport,
)
from components.lookup.query_intents import needed_section_kinds
from components.lookup.result_assembler import (
    ResultAssembler,
    completeness_hint,
    relevance_level,
    retrieval_layer,
    sections_left_out,
)
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips


def block(key: str, source: str, score: float) -> EvidenceBlock:
    return EvidenceBlock(
        evidence_key=key,
        source=source,
        content=f"content of {key}",
        retrieval_layer="L1",
        score=score,
        score_label="normalized_similarity",
        raw_score=round(2 - 2 * score, 6),
        raw_score_label="l2_squared_distance",
        rerank_score=score,
        hit_reasons=["semantic"],
    )


def attempt(candidates: int, top: float | None = None) -> RetrievalAttempt:
    return RetrievalAttempt(0, None, None, "disk full", "sdk", candidates, candidates, top, "evidence")


def pack(**fields) -> ContextPack:
    return ContextPack(
        text="…",
        budget_tokens=500,
        used_tokens=100,
        included_sources=["a.md"],
        omitted_sources=fields.pop("omitted_sources", []),
        truncated=fields.pop("truncated", False),
        **fields,
    )


def assemble(blocks, trace, hints=None, assembler=None, bar=None, why=False, **inputs):
    text = "why is the lag growing" if why else "disk full"
    inputs.setdefault("context_pack", pack())
    return (assembler or ResultAssembler()).run(
        query_transform=QueryTransform(
            raw=text, normalized=text, variants=[text], needed_sections=needed_section_kinds(text)
        ),
        hints=hints or L0Hints(),
        retrieval_trace=trace,
        evidence_bar=bar or EvidenceBar(configured=0.35, applied=0.35),
        rerank_trace=[],
        evidence_blocks=blocks,
        dedup=DedupStats(candidate_count=3, final_count=len(blocks), merged=0, capped=0),
        **inputs,
    )["result"]


def test_evidence_gives_a_found_result():
    result = assemble([block("a#0", "a.md", 0.72), block("b#0", "b.md", 0.5)], RetrievalTrace([attempt(2, 0.72)]))
    assert result.found and result.evidence_status == STATUS_EVIDENCE and result.message is None
    assert result.relevance_level == "high"
    assert result.completeness_hint == "complete: 2 evidence block(s) from 2 source(s), all within the context budget"
    assert result.sidecar == SidecarReport(status="disabled")
    data = result.to_dict()
    assert data["found"] is True and [b["evidenceKey"] for b in data["evidenceBlocks"]] == ["a#0", "b#0"]


def test_no_evidence_gives_found_false_with_a_message_naming_the_threshold():
    result = assemble(
        [],
        RetrievalTrace([attempt(0), attempt(0)]),
        bar=EvidenceBar(configured=0.3, applied=0.3),
    )
    assert not result.found and result.evidence_status == STATUS_NO_EVIDENCE
    assert result.relevance_level == "none" and result.completeness_hint.startswith("none:")
    assert "2 retrieval attempt(s) returned no chunk with a similarity of at least 0.3" in result.message


def test_no_evidence_with_l1_disabled_says_l0_hints_are_never_evidence():
    hints = L0Hints(matched_titles=["Disk Full"])
    result = assemble([], RetrievalTrace(l1_enabled=False), hints=hints)
    assert result.retrieval_layer == "L0" and not result.found
    assert "L1) retrieval is disabled" in result.message and "never evidence" in result.message


def test_no_evidence_over_uncovered_terms_names_them_and_the_raised_bar():
    hints = L0Hints(uncovered_terms=["redis", "RedisMemoryHigh"])
    trace = RetrievalTrace([attempt(3, 0.41)], evidence_threshold=0.5)
    message = assemble([], trace, hints=hints, bar=EvidenceBar(configured=0.35, applied=0.5)).message
    assert "never mentions 'redis'" in message and "has no document named 'RedisMemoryHigh'" in message
    assert "at least 0.5" in message and "reached 0.410" in message


def test_a_given_sidecar_report_is_kept():
    report = SidecarReport(status="ok", path="haystack", main_path="sdk")
    assert assemble([], RetrievalTrace([attempt(0)]), sidecar=report).sidecar is report


@pytest.mark.parametrize(
    ("has_hints", "candidates", "layer"),
    [(True, 2, "L0+L1"), (False, 2, "L1"), (True, 0, "L0"), (False, 0, "none")],
)
def test_retrieval_layer(has_hints, candidates, layer):
    hints = L0Hints(domains=["disk"]) if has_hints else L0Hints()
    assert retrieval_layer(hints, RetrievalTrace([attempt(candidates)])) == layer


@pytest.mark.parametrize(("best", "level"), [(0.6, "high"), (0.59, "medium"), (0.5, "medium"), (0.49, "low")])
def test_relevance_level_from_the_best_block(best, level):
    assert relevance_level([block("x#1", "x.md", 0.1), block("x#0", "x.md", best)], high=0.6, medium=0.5) == level
    assert relevance_level([], high=0.6, medium=0.5) == "none"


@pytest.mark.parametrize(
    ("margin", "competing", "level"),
    [(None, False, "high"), (0.15, False, "high"), (0.14, False, "medium"), (0.5, True, "medium")],
)
def test_high_needs_a_clear_lead_over_the_runner_up(margin, competing, level):
    blocks = [block("x#0", "x.md", 0.8)]
    assert relevance_level(blocks, 0.6, 0.5, runner_up_margin=margin, high_margin=0.15, competing=competing) == level


@pytest.mark.parametrize(("disagrees", "level"), [(False, "high"), (True, "medium")])
def test_high_needs_the_similarity_order_to_agree_on_the_leader(disagrees, level):
    blocks = [block("x#0", "x.md", 0.8)]
    assert (
        relevance_level(blocks, 0.6, 0.5, runner_up_margin=0.3, high_margin=0.1, similarity_disagrees=disagrees)
        == level
    )


@pytest.mark.parametrize(("needs_agreement", "level"), [(True, "medium"), (False, "high")])
def test_the_assembler_reads_the_agreement_only_when_told_to(needs_agreement, level):
    assembler = ResultAssembler(high_needs_agreement=needs_agreement)
    blocks = [block("a#0", "a.md", 0.72)]
    result = assemble(blocks, RetrievalTrace([attempt(1, 0.72)]), assembler=assembler, similarity_agrees=False)
    assert result.relevance_level == level


def test_competing_documents_lead_the_hint():
    blocks = [block("a#0", "ops/NodeDiskSpaceFillingUp.md", 0.7), block("b#0", "ops/NodeDiskInodesFillingUp.md", 0.6)]
    competition = Competition("ops/NodeDiskSpaceFillingUp.md", "ops/NodeDiskInodesFillingUp.md", 0.05, ["score margin"])
    packed = [packed_block(b.source, "Meaning") for b in blocks]
    hint = completeness_hint(blocks, pack(blocks=packed), "medium", competition)
    assert hint.startswith("ambiguous: NodeDiskSpaceFillingUp vs NodeDiskInodesFillingUp; both included; 2 evidence")
    # Only the leader packed (a budget under two headers): both are still cited.
    assert "; both cited;" in completeness_hint(blocks, pack(blocks=packed[:1]), "medium", competition)
    # What the budget cut is still said.
    cut = completeness_hint(blocks, pack(blocks=packed, omitted_sources=["c.md"]), "medium", competition)
    assert cut.startswith("ambiguous: ") and "; the context budget cut some of it (1 source(s) omitted)" in cut


def packed_block(source: str, section: str) -> PackedBlock:
    return PackedBlock("k", source, "T", f"Name > {section}", [], 10, False)


HEADINGS = ["NodeDiskSpaceFillingUp", "Meaning", "Impact", "Diagnosis", "Mitigation"]


@pytest.mark.parametrize(
    ("query", "headings", "packed", "left_out"),
    [
        ("disk on worker-3 is full", HEADINGS, ["Meaning", "Diagnosis"], ["Mitigation"]),  # an alert needs the fix
        ("disk on worker-3 is full", HEADINGS, ["Meaning", "Mitigation"], []),
        ("why is the disk on worker-3 full", HEADINGS, ["Meaning", "Mitigation"], ["Diagnosis"]),
        ("why is it full and how do I fix it", HEADINGS, ["Meaning"], ["Diagnosis", "Mitigation"]),
        ("disk on worker-3 is full", ["NodeDiskSpaceFillingUp", "Meaning"], ["Meaning"], []),  # no such section
    ],
)
def test_sections_left_out(query, headings, packed, left_out):
    needed = needed_section_kinds(query)
    assert sections_left_out(needed, headings, [packed_block("a.md", s) for s in packed]) == left_out


def test_the_left_out_sections_are_those_the_query_transform_carries(l0_index):
    # "disk full" alone would need the mitigation: the kinds come from the transform, not the text.
    transform = QueryTransform("disk full", "disk full", ["disk full"], needed_sections=frozenset({"diagnosis"}))
    blocks = [block("a#0", "database/replication-lag.md", 0.6)]
    result = ResultAssembler().run(
        query_transform=transform,
        hints=L0Hints(),
        retrieval_trace=RetrievalTrace(attempts=[attempt(1, 0.6)]),
        evidence_bar=EvidenceBar(configured=0.35, applied=0.35),
        rerank_trace=[],
        evidence_blocks=blocks,
        dedup=DedupStats(1, 1, 0, 0),
        context_pack=pack(blocks=[packed_block("database/replication-lag.md", "Overview")]),
        l0_index=l0_index,
    )["result"]
    assert "not in the context: Diagnosis of replication-lag" in result.completeness_hint


def test_a_left_out_section_makes_a_complete_pack_partial():
    blocks = [block("a#0", "ops/NodeDiskSpaceFillingUp.md", 0.7)]
    hint = completeness_hint(blocks, pack(), "high", left_out=["Mitigation"])
    assert hint == (
        "partial: 1 evidence block(s) from 1 source(s); not in the context: Mitigation of NodeDiskSpaceFillingUp; "
        "read the source"
    )


def test_completeness_hint_says_what_the_budget_cut():
    blocks = [block("a#0", "a.md", 0.7)]
    assert "(1 source(s) omitted)" in completeness_hint(blocks, pack(omitted_sources=["b.md"]), "high")
    assert "(2 block(s) omitted)" in completeness_hint(blocks, pack(omitted_evidence_keys=["a#1", "a#2"]), "high")
    assert "(content truncated)" in completeness_hint(blocks, pack(truncated=True), "high")
    assert completeness_hint(blocks, pack(), "low").startswith("weak: ")


def test_round_trips():
    assert_round_trips(ResultAssembler(high_relevance=0.7, reference_threshold=0.45))
    assert_round_trips(ResultAssembler(high_margin=0.2, high_needs_agreement=False))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"high_relevance": 1.2}, "high_relevance=1.2 must lie in [0, 1]"),
        ({"reference_threshold": -0.1}, "reference_threshold=-0.1 must lie in [0, 1]"),
        ({"high_margin": -0.01}, "high_margin=-0.01 must be at least 0"),
    ],
)
def test_init_refuses_values_out_of_range_by_name(params, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ResultAssembler(**params)


LAG = "database/replication-lag.md"  # headings: the title, then Diagnosis (tests/components/lookup/conftest.py)


class TestResultAssembler:
    def test_init_defaults(self):
        component = ResultAssembler()
        assert (component.high_relevance, component.reference_threshold) == (0.5, 0.5)
        assert (component.high_margin, component.high_needs_agreement) == (0.1, True)

    def test_to_dict(self):
        data = component_to_dict(ResultAssembler(high_margin=0.2), "assembler")
        assert data["init_parameters"] == {
            "high_relevance": 0.5,
            "reference_threshold": 0.5,
            "high_margin": 0.2,
            "high_needs_agreement": True,
        }

    def test_run_names_the_leaders_needed_section_the_pack_lacks(self, l0_index):
        blocks = [block("lag#0", LAG, 0.72), block("x#0", "x/other.md", 0.6)]
        result = assemble(blocks, RetrievalTrace([attempt(2, 0.72)]), l0_index=l0_index, why=True)
        assert result.completeness_hint == (
            "partial: 2 evidence block(s) from 2 source(s); not in the context: Diagnosis of replication-lag; "
            "read the source"
        )

    def test_run_counts_only_the_leaders_packed_blocks_as_its_sections(self, l0_index):
        blocks = [block("lag#0", LAG, 0.72)]
        packed = pack(blocks=[PackedBlock("lag#1", LAG, "T", "PostgreSQL Replication Lag > Diagnosis", [], 10, False)])
        result = assemble(blocks, RetrievalTrace([attempt(1, 0.72)]), l0_index=l0_index, why=True, context_pack=packed)
        assert (
            result.completeness_hint == "complete: 1 evidence block(s) from 1 source(s), all within the context budget"
        )

    def test_run_leaves_sections_out_of_the_hint_for_a_leader_the_l0_index_lacks(self, l0_index):
        blocks = [block("x#0", "x/other.md", 0.72), block("lag#0", LAG, 0.6)]
        result = assemble(blocks, RetrievalTrace([attempt(2, 0.72)]), l0_index=l0_index, why=True)
        assert result.completeness_hint.startswith("complete: ")

    def test_run_with_l1_disabled_says_so_in_its_message(self):
        result = assemble([], RetrievalTrace(l1_enabled=False))
        assert result.message == (
            "No knowledge evidence found: semantic (L1) retrieval is disabled, and L0 hints are never evidence."
        )

    def test_run_quotes_the_deciding_models_best_similarity_when_it_refused_the_evidence(self):
        trace = RetrievalTrace([attempt(3, 0.61)], gate_similarity=0.2)
        assert assemble([], trace, bar=EvidenceBar(configured=0.3, applied=0.3)).message == (
            "No knowledge evidence found: the deciding model's best similarity to any chunk is 0.200, under the 0.3 "
            "a chunk needs to count as evidence. The knowledge base does not seem to cover this query."
        )

    def test_run_names_uncovered_terms_only_when_they_raised_the_bar(self):
        hints = L0Hints(uncovered_terms=["redis"])
        message = assemble([], RetrievalTrace([attempt(3, 0.2)]), hints=hints).message
        assert message == (
            "No knowledge evidence found: 1 retrieval attempt(s) returned no chunk with a similarity of at least 0.35. "
            "The knowledge base does not seem to cover this query."
        )

    @pytest.mark.parametrize("attempts", [[], [attempt(0, None)]], ids=["no-attempt", "attempt-without-similarity"])
    def test_run_reports_a_best_similarity_of_zero_without_one(self, attempts):
        hints = L0Hints(uncovered_terms=["redis", "memcached", "RedisMemoryHigh", "RedisDown"])
        message = assemble(
            [], RetrievalTrace(attempts), hints=hints, bar=EvidenceBar(configured=0.35, applied=0.5)
        ).message
        assert message == (
            "No knowledge evidence found: the knowledge base never mentions 'redis', 'memcached' and has no document "
            f"named 'RedisMemoryHigh', 'RedisDown', so a chunk needed a similarity of at least 0.5 to count as "
            f"evidence; the best of {len(attempts)} retrieval attempt(s) reached 0.000. The knowledge base does not "
            "seem to cover this query."
        )

    def test_an_attempt_with_one_candidate_takes_part(self):
        assert retrieval_layer(L0Hints(), RetrievalTrace([attempt(1)])) == "L1"

    def test_relevance_level_needs_no_margin_by_default(self):
        assert relevance_level([block("x#0", "x.md", 0.8)], 0.6, 0.5, runner_up_margin=0.01) == "high"

    @pytest.mark.parametrize(
        ("breadcrumb", "left_out"),
        [
            ("NodeDiskSpaceFillingUp > Meaning > Mitigation", []),  # the nearest heading decides
            ("NodeDiskSpaceFillingUp > Impact mitigation", ["Mitigation"]),  # a heading's kind is the whole heading's
        ],
    )
    def test_sections_left_out_reads_the_kind_of_the_nearest_heading(self, breadcrumb, left_out):
        packed = [PackedBlock("k", "a.md", "T", breadcrumb, [], 10, False)]
        assert sections_left_out(needed_section_kinds("disk on worker-3 is full"), HEADINGS, packed) == left_out

    def test_sections_left_out_counts_the_first_section_after_the_title(self):
        assert sections_left_out(
            needed_section_kinds("disk is full"), ["NodeDiskSpaceFillingUp", "Mitigation"], []
        ) == ["Mitigation"]

    def test_completeness_hint_names_every_left_out_section(self):
        blocks = [block("a#0", "ops/NodeDiskSpaceFillingUp.md", 0.7)]
        assert completeness_hint(blocks, pack(), "high", left_out=["Diagnosis", "Mitigation"]) == (
            "partial: 1 evidence block(s) from 1 source(s); not in the context: Diagnosis, Mitigation of "
            "NodeDiskSpaceFillingUp; read the source"
        )

    def test_completeness_hint_of_a_cut_pack_sends_the_agent_to_the_sources(self):
        assert completeness_hint([block("a#0", "a.md", 0.7)], pack(truncated=True), "high") == (
            "partial: 1 evidence block(s) from 1 source(s); the context budget cut some of it (content truncated); "
            "read the sources for details"
        )

    def test_completeness_hint_of_low_relevance_asks_to_verify(self):
        assert completeness_hint([block("a#0", "a.md", 0.3)], pack(), "low") == (
            "weak: 1 evidence block(s) from 1 source(s), all of low relevance; verify before relying on it"
        )


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("high_relevance", 1.2, "[0, 1]"),
    ("reference_threshold", -0.1, "[0, 1]"),
    ("high_margin", -0.01, "at least 0"),
    ("high_needs_agreement", "no", "true or false"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: ResultAssembler(**changed), parameter, value, rule)
