"""The evidence rule shared by retrieval and post-processing."""

from components.common.evidence import usable
from tests.helpers import candidate


def test_usable_keeps_candidates_at_or_above_the_threshold_in_their_order():
    candidates = [candidate(key, "ops/a.md", similarity) for key, similarity in [("a", 0.4), ("b", 0.7), ("c", 0.5)]]
    assert [c.evidence_key for c in usable(candidates, 0.5)] == ["b", "c"]
    assert usable(candidates, 0.71) == []
