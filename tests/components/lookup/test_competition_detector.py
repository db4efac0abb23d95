"""CompetitionDetector's name rule: which document names are one family, and the stem it reports."""

import re
from dataclasses import replace

import numpy as np
import pytest
from haystack.core.serialization import component_to_dict

from components.common.evidence import EvidenceBar
from components.contracts import Candidate
from components.lookup.competition_detector import CompetitionDetector, shared_name_stem, similarity_leader
from components.stores.l0_index import L0Entry, L0Index
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips


@pytest.mark.parametrize(
    ("leader", "competitor", "stem"),
    [
        ("node/NodeFilesystemSpaceFillingUp.md", "node/NodeFilesystemFilesFillingUp.md", "NodeFilesystem…FillingUp"),
        ("node/NodeRAIDDiskFailure.md", "node/NodeRAIDDegraded.md", "NodeRAID…"),
        ("x/node-disk-space-filling-up.md", "x/node-disk-inodes-filling-up.md", "node-disk…filling-up"),
        ("k/KubeletDown.md", "k/KubeSchedulerDown.md", None),  # one word in common is no family
        ("k/KubeQuotaAlmostFull.md", "k/KubeQuotaAlmostFullSoon.md", "KubeQuotaAlmostFull"),
        ("x/AlphaBetaGamma.md", "x/DeltaBetaGamma.md", None),  # later words in common are no family
        ("k/KubeQuotaAlmostFull.md", "k/KubeQuotaAlmostExceeded.md", "KubeQuotaAlmost…"),
        ("node/NodeRAIDDiskFailure.md", "node/NodeRAIDArrayFailure.md", "NodeRAID…Failure"),
        ("x/NodeDiskDiskFull.md", "x/NodeDiskFull.md", "NodeDisk…Full"),  # the tail never reaches into the head
    ],
)
def test_shared_name_stem(leader, competitor, stem):
    assert shared_name_stem(leader, competitor) == stem


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"margin": -0.1}, "margin=-0.1 must be at least 0"),
        ({"sibling_margin": -0.5}, "sibling_margin=-0.5 must be at least 0"),
        ({"sibling_similarity": 1.5}, "sibling_similarity=1.5 must lie in [0, 1]"),
        ({"sibling_similarity": float("nan")}, "sibling_similarity=nan must lie in [0, 1]"),
    ],
)
def test_init_refuses_bad_values(params, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CompetitionDetector(**params)


def test_init_accepts_the_bounds():
    detector = CompetitionDetector(margin=0, sibling_margin=0, sibling_similarity=1.0)
    assert (detector.margin, detector.sibling_margin, detector.sibling_similarity) == (0, 0, 1.0)


def candidate(source: str, similarity: float, final_score: float) -> Candidate:
    return Candidate(
        evidence_key=f"{source}#0",
        source=source,
        content="text",
        similarity=similarity,
        raw_score=similarity,
        raw_score_label="similarity",
        path=source,
        final_score=final_score,
    )


BAR = EvidenceBar(configured=0.35, applied=0.35)


@pytest.mark.parametrize(
    ("lag_similarity", "agrees"),
    [(0.70, True), (0.60, False)],
    ids=["leader-also-first-by-similarity", "rerank-overturned-similarity"],
)
def test_similarity_agrees_says_whether_the_leader_is_also_first_by_similarity(l0_index, lag_similarity, agrees):
    ranked = [
        candidate("database/replication-lag.md", lag_similarity, final_score=1.5),
        candidate("disk/DiskAlmostFull.md", 0.65, final_score=1.0),
    ]
    out = CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)
    assert out["competition"] is None and out["runner_up_margin"] == 0.5
    assert out["similarity_agrees"] is agrees


def test_similarity_agreement_counts_only_usable_candidates(l0_index):
    ranked = [
        candidate("database/replication-lag.md", 0.5, final_score=1.5),
        candidate("disk/DiskAlmostFull.md", 0.9, final_score=1.0),
    ]
    out = CompetitionDetector().run(
        candidates=ranked, evidence_bar=EvidenceBar(configured=0.35, applied=0.95), l0_index=l0_index
    )
    assert out["similarity_agrees"] is None  # nothing usable at the applied bar


def test_one_document_agrees_with_itself(l0_index):
    out = CompetitionDetector().run(
        candidates=[candidate("disk/DiskAlmostFull.md", 0.6, final_score=1.0)], evidence_bar=BAR, l0_index=l0_index
    )
    assert out == {"competition": None, "runner_up_margin": None, "similarity_agrees": True}


SPACE, FILES = "node/NodeFilesystemSpaceFillingUp.md", "node/NodeFilesystemFilesFillingUp.md"


def ranked_pair(leader_text: str) -> list[Candidate]:
    """The inode runbook leading the space runbook by 0.3, beyond the sibling margin."""
    leader = replace(candidate(FILES, 0.7, final_score=2.0), content=leader_text)
    return [leader, candidate(SPACE, 0.66, final_score=1.7)]


def test_a_runner_up_the_leaders_best_block_names_competes_beyond_the_margins(l0_index):
    text = "This alert is similar to the NodeFilesystemSpaceFillingUp alert, but predicts inodes running out."
    out = CompetitionDetector().run(candidates=ranked_pair(text), evidence_bar=BAR, l0_index=l0_index)
    assert out["competition"].competitor == SPACE and out["runner_up_margin"] == 0.3
    assert out["competition"].reasons[0] == "the leader's best block names NodeFilesystemSpaceFillingUp (margin 0.300)"


def test_a_runner_up_further_down_that_the_leaders_best_block_names_competes(l0_index):
    text = "This alert is similar to the NodeFilesystemSpaceFillingUp alert, but predicts inodes running out."
    other = "general/Watchdog.md"  # not a sibling, and beyond the margin
    ranked = [ranked_pair(text)[0], candidate(other, 0.68, final_score=1.9), candidate(SPACE, 0.66, final_score=1.6)]
    out = CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)
    assert out["competition"].competitor == SPACE and out["competition"].margin == 0.4
    assert out["competition"].reasons[0] == "the leader's best block names NodeFilesystemSpaceFillingUp (margin 0.400)"
    assert out["runner_up_margin"] == 0.1  # the second document's, as before


@pytest.mark.parametrize(
    "text",
    [
        "The filesystem will run out of inodes within four hours.",  # names nothing
        "See NodeFilesystemSpaceFillingUpSoon for the warning.",  # a longer name is another document
    ],
)
def test_a_runner_up_not_named_beyond_the_margins_does_not_compete(l0_index, text):
    out = CompetitionDetector().run(candidates=ranked_pair(text), evidence_bar=BAR, l0_index=l0_index)
    assert out["competition"] is None and out["runner_up_margin"] == 0.3


def test_cross_reference_off_ignores_the_naming(l0_index):
    text = "See [the space alert](./NodeFilesystemSpaceFillingUp.md)."
    detector = CompetitionDetector(cross_reference=False)
    assert detector.run(candidates=ranked_pair(text), evidence_bar=BAR, l0_index=l0_index)["competition"] is None
    assert CompetitionDetector().run(candidates=ranked_pair(text), evidence_bar=BAR, l0_index=l0_index)["competition"]


class TestSummaryVectorSiblings:
    """Two documents of unrelated names whose summary vectors are alike are siblings all the same."""

    LEADER, RUNNER_UP = "disk/DiskAlmostFull.md", "storage/VolumeNearlyExhausted.md"

    def l0_with_vectors(self, runner_up_vector: list[float]) -> L0Index:
        entries = [L0Entry(source=source, title=source, category="ops") for source in (self.LEADER, self.RUNNER_UP)]
        vectors = np.array([[1.0, 0.0], runner_up_vector], dtype=np.float32)
        return L0Index(entries, summary_vectors=vectors, model="test")

    def run(self, l0_index: L0Index, **params) -> dict:
        # a margin of 0.1: beyond `margin` (0.05), within `sibling_margin` (0.2)
        ranked = [candidate(self.LEADER, 0.8, final_score=0.8), candidate(self.RUNNER_UP, 0.7, final_score=0.7)]
        return CompetitionDetector(**params).run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)

    def test_alike_summary_vectors_make_a_runner_up_within_the_sibling_margin_compete(self):
        out = self.run(self.l0_with_vectors([0.96, 0.28]))  # cosine 0.96 >= 0.85
        assert out["competition"].competitor == self.RUNNER_UP
        assert out["competition"].reasons == ["score margin 0.100 < 0.2", "document similarity 0.960 >= 0.85"]

    def test_a_cosine_exactly_at_sibling_similarity_makes_siblings(self):
        out = self.run(self.l0_with_vectors([1.0, 0.0]), sibling_similarity=1.0)
        assert out["competition"].reasons == ["score margin 0.100 < 0.2", "document similarity 1.000 >= 1.0"]

    def test_a_runner_up_without_a_summary_vector_is_no_sibling_by_vector(self):
        index = self.l0_with_vectors([1.0, 0.0])
        ranked = [candidate(self.LEADER, 0.8, final_score=0.8), candidate("other/Unindexed.md", 0.7, final_score=0.7)]
        assert CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=index)["competition"] is None

    def test_unlike_summary_vectors_leave_the_leader_alone(self):
        out = self.run(self.l0_with_vectors([0.6, 0.8]))  # cosine 0.6 < 0.85
        assert out["competition"] is None


class TestCompetitionDetector:
    def test_to_dict(self):
        data = component_to_dict(CompetitionDetector(margin=0.1, cross_reference=False), "detector")
        assert data["init_parameters"] == {
            "margin": 0.1,
            "sibling_margin": 0.2,
            "sibling_similarity": 0.85,
            "cross_reference": False,
        }

    def test_round_trips(self):
        assert_round_trips(CompetitionDetector(sibling_margin=0.3))

    def test_run_names_the_shared_stem_of_sibling_documents(self, l0_index):
        ranked = [candidate(SPACE, 0.8, final_score=0.8), candidate(FILES, 0.7, final_score=0.7)]
        out = CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)
        assert out["competition"].reasons == ["score margin 0.100 < 0.2", "shared name stem NodeFilesystem…FillingUp"]

    def test_run_finds_a_named_runner_up_whatever_the_case_of_its_name(self, l0_index):
        text = "This alert is similar to the nodefilesystemspacefillingup alert, but predicts inodes running out."
        out = CompetitionDetector().run(candidates=ranked_pair(text), evidence_bar=BAR, l0_index=l0_index)
        assert out["competition"].competitor == SPACE

    def test_run_ranks_documents_by_similarity_when_nothing_reranked(self, l0_index):
        ranked = [candidate("x/a.md", 0.5, final_score=0.0), candidate("x/b.md", 0.8, final_score=0.0)]
        out = CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)
        assert (out["competition"], out["runner_up_margin"]) == (None, 0.3)

    def test_run_keeps_the_first_of_a_documents_equally_scored_chunks(self, l0_index):
        runner_up = [replace(candidate("x/b.md", 0.78, final_score=0.78), evidence_key=f"x/b.md#{n}") for n in (0, 1)]
        ranked = [candidate("x/a.md", 0.8, final_score=0.8), *runner_up]
        out = CompetitionDetector().run(candidates=ranked, evidence_bar=BAR, l0_index=l0_index)
        assert out["competition"].evidence_key == "x/b.md#0"

    def test_similarity_leader_of_no_candidates_is_none(self):
        assert similarity_leader([]) is None


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("margin", -0.1, "at least 0"),
    ("sibling_margin", -1, "at least 0"),
    ("sibling_similarity", 1.5, "[0, 1]"),
    ("cross_reference", "no", "true or false"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: CompetitionDetector(**changed), parameter, value, rule)
