"""
When a filtered attempt stands and when it is retried without the filter: a pure rule over what the
attempts found (counts and similarities), with no store and no model, so that every rule and its
boundaries can be tested as a table (docs/architecture.md, "The fallback policy").
"""

from dataclasses import dataclass

from components.common.choices import check_unit_interval
from components.contracts import FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE, FALLBACK_OUTSCORED

# Similarities are rounded to 6 digits: a difference exactly at the margin counts as reaching it.
MARGIN_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FilteredFacts:
    """What a filtered attempt found: its usable candidates (at the evidence bar) and its best similarity."""

    usable_count: int
    top_similarity: float | None


@dataclass(frozen=True)
class FallbackPolicy:
    """
    The filtered -> unfiltered decision, in this order: no usable candidate
    (`filtered_vector_no_evidence`), a top similarity under `reference_threshold`
    (`filtered_vector_low_quality`), an unfiltered best that beats the filtered top by
    `outscored_margin` or more (`filtered_vector_outscored`; only checked when the filtered top is
    under `outscored_check_below`, and never when the margin is 1 or more). None: the attempt stands.
    """

    reference_threshold: float = 0.5
    outscored_margin: float = 0.05
    outscored_check_below: float = 1.0

    def __post_init__(self) -> None:
        check_unit_interval(
            reference_threshold=self.reference_threshold,
            outscored_margin=self.outscored_margin,
            outscored_check_below=self.outscored_check_below,
        )

    def needs_unfiltered_top(self, facts: FilteredFacts) -> bool:
        """Whether the decision depends on the best unfiltered similarity (the outscored check runs)."""
        return self._quality_reason(facts) is None and self._checks_outscored(facts)

    def reason(self, facts: FilteredFacts, unfiltered_top: float | None = None) -> str | None:
        """
        Why the filtered attempt is retried unfiltered, or None when it stands. `unfiltered_top` is
        the best unfiltered similarity, needed only when `needs_unfiltered_top`.
        """
        quality = self._quality_reason(facts)
        if quality is not None or not self._checks_outscored(facts):
            return quality
        if unfiltered_top is None:
            raise ValueError("the outscored check needs the best unfiltered similarity")
        top = facts.top_similarity or 0.0
        return FALLBACK_OUTSCORED if unfiltered_top - top >= self.outscored_margin - MARGIN_TOLERANCE else None

    def _quality_reason(self, facts: FilteredFacts) -> str | None:
        if facts.usable_count == 0:
            return FALLBACK_NO_EVIDENCE
        if (facts.top_similarity or 0.0) < self.reference_threshold:
            return FALLBACK_LOW_QUALITY
        return None

    def _checks_outscored(self, facts: FilteredFacts) -> bool:
        return self.outscored_margin < 1.0 and (facts.top_similarity or 0.0) < self.outscored_check_below


def view_covers(hits_in_view: int, needed: int, scan_exhausted: bool) -> bool:
    """
    Whether a category's hits within an unfiltered scan of an exact index are the whole filtered
    search: it holds the `needed` best of them, or the scan returned everything there was to return.
    """
    return scan_exhausted or hits_in_view >= needed
