"""CompetitionDetector's name rule: which document names are one family, and the stem it reports."""

import re

import pytest

from components.lookup.competition_detector import CompetitionDetector, shared_name_stem


@pytest.mark.parametrize(
    ("leader", "competitor", "stem"),
    [
        ("node/NodeFilesystemSpaceFillingUp.md", "node/NodeFilesystemFilesFillingUp.md", "NodeFilesystem…FillingUp"),
        ("node/NodeRAIDDiskFailure.md", "node/NodeRAIDDegraded.md", "NodeRAID…"),
        ("x/node-disk-space-filling-up.md", "x/node-disk-inodes-filling-up.md", "node-disk…filling-up"),
        ("k/KubeletDown.md", "k/KubeSchedulerDown.md", None),  # one word in common is no family
        ("k/KubeQuotaAlmostFull.md", "k/KubeQuotaAlmostFullSoon.md", "KubeQuotaAlmostFull"),
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
        CompetitionDetector(l0_index_path="kb.l0.json", **params)


def test_init_accepts_the_bounds():
    detector = CompetitionDetector(l0_index_path="kb.l0.json", margin=0, sibling_margin=0, sibling_similarity=1.0)
    assert (detector.margin, detector.sibling_margin, detector.sibling_similarity) == (0, 0, 1.0)
