"""The comparison metrics against values worked out by hand."""

import pytest

from components.lookup.sidecar_comparator import compare, jaccard, overlap_at_k, rank_biased_overlap, top1_agreement
from components.tracing.trace_writer import sidecar_tags


def test_overlap_at_k_counts_shared_keys_in_both_prefixes():
    assert overlap_at_k(["a", "b", "c", "d"], ["b", "x", "a", "y"], 2) == 0.5  # {a,b} & {b,x} = {b}
    assert overlap_at_k(["a", "b", "c", "d"], ["b", "x", "a", "y"], 3) == pytest.approx(2 / 3)
    assert overlap_at_k(["a"], ["a"], 0) == 0.0


def test_jaccard_is_intersection_over_union():
    assert jaccard(["a", "b", "c"], ["b", "c", "d"]) == 0.5  # 2 shared of 4
    assert jaccard([], []) == 1.0
    assert jaccard(["a"], []) == 0.0


def test_rbo_by_hand():
    # Depths 1..3 agreements A = 0, 1, 1: 0.1 * (0 + 0.9 * 1) + 0.9^2 * 1 = 0.9.
    assert rank_biased_overlap(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(0.9)
    # A = 1, 0.5: 0.1 * 1 + 0.9 * 0.5 = 0.55.
    assert rank_biased_overlap(["a", "b"], ["a", "c"]) == pytest.approx(0.55)
    # A = 0, 0, 1/3 at p = 0.5: 0.5 * (0 + 0) + 0.25 / 3.
    assert rank_biased_overlap(["a", "b", "c"], ["c", "d", "e"], p=0.5) == pytest.approx(0.25 / 3)


def test_rbo_of_identical_and_disjoint_lists():
    keys = [f"k{i}" for i in range(20)]
    assert rank_biased_overlap(keys, keys) == pytest.approx(1.0)
    assert rank_biased_overlap(keys, [f"x{i}" for i in range(20)]) == 0.0
    assert rank_biased_overlap([], []) == 1.0
    assert rank_biased_overlap(["a"], []) == 0.0


def test_top1_agreement():
    assert top1_agreement(["a", "b"], ["a", "c"])
    assert not top1_agreement(["a"], ["b", "a"])
    assert not top1_agreement([], [])


def _row(key: str, rank: int, similarity: float) -> dict:
    return {"evidence_key": key, "rank": rank, "similarity": similarity, "score_label": "l"}


def test_compare_carries_the_metrics_and_similarity_gaps():
    main = [_row("a", 1, 0.9), _row("b", 2, 0.8), _row("c", 3, 0.7)]
    side = [_row("b", 1, 0.81), _row("a", 2, 0.9), _row("d", 3, 0.6)]
    result = compare(main, side)
    assert result["overlap"] == 2 and result["overlap_at_k"] == pytest.approx(0.6667)
    assert result["jaccard"] == 0.5
    # A = 0, 1, 2/3: 0.1 * (0 + 0.9) + 0.81 * 2/3 = 0.63.
    assert result["rbo"] == pytest.approx(0.63)
    assert result["same_top1"] is False
    assert result["max_similarity_gap"] == pytest.approx(0.01)
    assert result["mean_similarity_gap"] == pytest.approx(0.005)


def test_sidecar_tags_are_strings_and_absent_when_disabled():
    assert sidecar_tags(None) == {} and sidecar_tags({"status": "disabled"}) == {}
    tags = sidecar_tags(
        {"status": "ok", "path": "haystack", "comparison": {"same_top1": True, "overlap_ratio": 0.5, "rbo": 0.75}}
    )
    assert tags == {
        "sidecar_status": "ok",
        "sidecar_path": "haystack",
        "sidecar_top1_agreement": "true",
        "sidecar_overlap": "0.5000",
        "sidecar_rbo": "0.7500",
    }
    assert sidecar_tags({"status": "error", "path": "sdk", "comparison": {}}) == {
        "sidecar_status": "error",
        "sidecar_path": "sdk",
    }
