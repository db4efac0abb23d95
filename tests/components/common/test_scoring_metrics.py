"""Scores of every metric and path map onto the one normalized similarity (the clipped cosine)."""

import pytest

from components.common.scoring import (
    haystack_score_label,
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
