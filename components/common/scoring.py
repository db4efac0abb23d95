"""
Score semantics, explicit per vector-store path: one normalized similarity, clamp(1 - d/2, 0, 1)
for a squared L2 distance d between unit vectors, whichever path returned the candidate
(docs/milvus.md).
"""

SIMILARITY_LABEL = "normalized_similarity (1 - d/2, d = L2 squared distance)"
SDK_SCORE_LABEL = "l2_squared_distance"
HAYSTACK_SCORE_LABEL = "milvus_haystack_l2_score (1 - d/4)"


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


def similarity_from_l2(distance: float) -> float:
    """Normalized similarity from a squared L2 distance between unit vectors."""
    return _clamp(1.0 - distance / 2.0)


def l2_from_haystack_score(score: float) -> float:
    """The squared L2 distance behind milvus-haystack's `1 - d/4` score."""
    return 4.0 * (1.0 - score)


def similarity_from_haystack_score(score: float) -> float:
    return similarity_from_l2(l2_from_haystack_score(score))
