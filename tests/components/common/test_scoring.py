"""Scores of every metric and path map onto the one normalized similarity (the clipped cosine)."""

import numpy as np
import pytest

from components.common.scoring import (
    haystack_raw_score,
    haystack_score_label,
    sdk_raw_score,
    sdk_score_label,
    similarity_from_haystack,
    similarity_from_sdk,
)


@pytest.mark.parametrize("cosine", [1.0, 0.8, 0.35, 0.0])
def test_every_metric_and_path_gives_the_cosine(cosine):
    l2_distance = 2.0 - 2.0 * cosine
    assert similarity_from_sdk(l2_distance, "L2") == pytest.approx(cosine)
    assert similarity_from_sdk(cosine, "IP") == pytest.approx(cosine)
    assert similarity_from_sdk(cosine, "COSINE") == pytest.approx(cosine)
    assert similarity_from_haystack(1.0 - l2_distance / 4.0, "L2") == pytest.approx(cosine)
    assert similarity_from_haystack((cosine + 1.0) / 2.0, "IP") == pytest.approx(cosine)
    assert similarity_from_haystack((cosine + 1.0) / 2.0, "COSINE") == pytest.approx(cosine)


def test_negative_cosine_is_clipped_to_zero():
    assert similarity_from_sdk(-0.4, "COSINE") == 0.0
    assert similarity_from_haystack(0.3, "IP") == 0.0


def test_labels_name_the_metric():
    assert sdk_score_label("L2") == "l2_squared_distance"
    assert sdk_score_label("IP") == "ip_score" and sdk_score_label("COSINE") == "cosine_score"
    assert "cosine" in haystack_score_label("COSINE") and "ip" in haystack_score_label("IP")
    with pytest.raises(ValueError, match="unsupported metric 'HAMMING'"):
        sdk_score_label("HAMMING")


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_a_raw_score_computed_from_a_stored_vector_maps_to_the_cosine(metric):
    rng = np.random.default_rng(7)
    query, stored = (v / np.linalg.norm(v) for v in rng.normal(size=(2, 384)).astype(np.float32))
    cosine = max(0.0, float(np.dot(query, stored)))
    assert similarity_from_sdk(sdk_raw_score(query, stored, metric), metric) == pytest.approx(cosine, abs=1e-6)
    assert similarity_from_haystack(haystack_raw_score(query, stored, metric), metric) == pytest.approx(
        cosine, abs=1e-6
    )


def test_raw_scores_of_a_stored_vector_are_those_milvus_gives():
    query, stored = np.array([0.6, 0.8], dtype=np.float32), np.array([1.0, 0.0], dtype=np.float32)
    assert sdk_raw_score(query, stored, "L2") == pytest.approx(0.4**2 + 0.8**2)  # squared L2 distance
    assert sdk_raw_score(query, stored, "IP") == pytest.approx(0.6)
    assert sdk_raw_score(2 * query, stored, "COSINE") == pytest.approx(0.6)  # normalised
    assert haystack_raw_score(query, stored, "L2") == pytest.approx(1 - 0.8 / 4)
    assert haystack_raw_score(query, stored, "IP") == pytest.approx(0.8)
