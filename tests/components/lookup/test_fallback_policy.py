"""The filtered -> unfiltered decision as a table: each rule, its boundaries and its order; no store, no model."""

import pytest

from components.contracts import FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE, FALLBACK_OUTSCORED
from components.lookup.fallback_policy import MARGIN_TOLERANCE, FallbackPolicy, FilteredFacts, view_covers

POLICY = FallbackPolicy(reference_threshold=0.5, outscored_margin=0.05, outscored_check_below=1.0)
STANDS = None


@pytest.mark.parametrize(
    ("usable", "top", "unfiltered_top", "reason"),
    [
        # no evidence: nothing usable, whatever the similarities
        (0, None, None, FALLBACK_NO_EVIDENCE),
        (0, 0.9, None, FALLBACK_NO_EVIDENCE),
        # low quality: under the reference threshold, at it stands
        (3, 0.499999, None, FALLBACK_LOW_QUALITY),
        (3, 0.5, 0.54, STANDS),
        # outscored: the unfiltered best beats the filtered top by the margin or more
        (3, 0.6, 0.65, FALLBACK_OUTSCORED),
        (3, 0.6, 0.649999, STANDS),
        (3, 0.6, 0.6, STANDS),
        (1, 0.589, 0.792, FALLBACK_OUTSCORED),
        # the order of the rules: the first that applies names the reason
        (0, 0.4, 0.9, FALLBACK_NO_EVIDENCE),
        (2, 0.4, 0.9, FALLBACK_LOW_QUALITY),
    ],
)
def test_each_rule_and_its_boundaries(usable, top, unfiltered_top, reason):
    assert POLICY.reason(FilteredFacts(usable, top), unfiltered_top) == reason


@pytest.mark.parametrize(
    ("policy", "top", "checks"),
    [
        (POLICY, 0.99, True),  # checked on every filtered attempt
        (FallbackPolicy(outscored_check_below=0.6), 0.599999, True),
        (FallbackPolicy(outscored_check_below=0.6), 0.6, False),  # at the bar: highly relevant, it stands
        (FallbackPolicy(outscored_margin=1.0), 0.6, False),  # a margin of 1 turns the rule off
        (POLICY, 0.4, False),  # low quality decides without the check
    ],
)
def test_when_the_outscored_check_runs(policy, top, checks):
    facts = FilteredFacts(usable_count=2, top_similarity=top)
    assert policy.needs_unfiltered_top(facts) is checks
    if not checks:  # decided without the unfiltered best
        assert policy.reason(facts) in (None, FALLBACK_LOW_QUALITY)


def test_an_attempt_at_or_above_the_check_bar_stands_whatever_the_unfiltered_best():
    policy = FallbackPolicy(outscored_check_below=0.5)
    assert policy.reason(FilteredFacts(3, 0.589), 0.792) is STANDS


def test_the_check_needs_the_unfiltered_best():
    with pytest.raises(ValueError, match="unfiltered"):
        POLICY.reason(FilteredFacts(3, 0.6))


@pytest.mark.parametrize(
    "arguments",
    [{"reference_threshold": 1.5}, {"outscored_margin": -0.1}, {"outscored_check_below": float("nan")}],
)
def test_bars_outside_the_unit_interval_are_refused(arguments):
    with pytest.raises(ValueError):
        FallbackPolicy(**arguments)


@pytest.mark.parametrize(
    ("in_view", "needed", "exhausted", "covers"),
    [(20, 20, False, True), (19, 20, False, False), (25, 20, False, True), (3, 20, True, True), (0, 20, True, True)],
)
def test_a_view_covers_the_filtered_search_when_full_or_when_the_scan_returned_everything(
    in_view, needed, exhausted, covers
):
    assert view_covers(in_view, needed, exhausted) is covers


def lenient_policy(**bars) -> FallbackPolicy:
    """A policy without the quality bar, so that the outscored rule decides alone."""
    return FallbackPolicy(reference_threshold=0.0, **bars)


class TestFallbackPolicy:
    def test_usable_candidates_without_a_similarity_are_low_quality(self):
        assert POLICY.reason(FilteredFacts(usable_count=2, top_similarity=None)) == FALLBACK_LOW_QUALITY

    def test_a_missing_filtered_similarity_counts_as_zero_in_the_outscored_check(self):
        facts = FilteredFacts(usable_count=2, top_similarity=None)
        assert lenient_policy().needs_unfiltered_top(facts) is True
        assert lenient_policy().reason(facts, unfiltered_top=0.3) == FALLBACK_OUTSCORED

    def test_a_difference_exactly_at_the_margin_outscores(self):
        policy = lenient_policy(outscored_margin=0.05)
        at_margin = policy.outscored_margin - MARGIN_TOLERANCE
        assert policy.reason(FilteredFacts(usable_count=1, top_similarity=0.0), unfiltered_top=at_margin) == (
            FALLBACK_OUTSCORED
        )

    def test_the_missing_unfiltered_best_is_refused_with_its_reason(self):
        with pytest.raises(ValueError, match="^the outscored check needs the best unfiltered similarity$"):
            POLICY.reason(FilteredFacts(3, 0.6))
