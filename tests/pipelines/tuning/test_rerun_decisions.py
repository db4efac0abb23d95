"""What `knowledge traces rerun` counts as a change of a recorded decision."""

from pipelines.tuning.rerun import RerunRow, decision, totals

RECORD = {
    "evidence_blocks": [{"source": "disk/disk-full.md"}],
    "relevance_level": "high",
    "fallback_reason": None,
}


def _row(recorded, current) -> RerunRow:
    return RerunRow("id", "disk full", "2026-12-01T00:00:00+00:00", recorded, current)


def test_a_lost_answer_changes_found_top_source_and_relevance():
    row = _row(decision(True, RECORD), decision(False, {"relevance_level": "none", "fallback_reason": None}))
    assert row.changed == ["found", "top_source", "relevance_level"]
    assert totals([row])["found_lost"] == 1 and totals([row])["found_gained"] == 0


def test_a_key_the_row_was_recorded_without_is_no_change():
    old_record = {"evidence_blocks": [{"source": "disk/disk-full.md"}]}  # before relevance_level was recorded
    row = _row(decision(True, old_record), decision(True, RECORD))
    assert row.changed == []
