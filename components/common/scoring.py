"""
Score semantics, explicit per vector-store path and per collection metric (L2, IP, COSINE): every
score maps onto one normalized similarity, the cosine with negatives clipped to 0 (docs/milvus.md).
"""

import numpy as np

METRICS = ("L2", "IP", "COSINE")

SIMILARITY_LABEL = "normalized_similarity (1 - d/2, d = L2 squared distance)"
SDK_SCORE_LABEL = "l2_squared_distance"
HAYSTACK_SCORE_LABEL = "milvus_haystack_l2_score (1 - d/4)"

_SDK_LABELS = {"L2": SDK_SCORE_LABEL, "IP": "ip_score", "COSINE": "cosine_score"}
_HAYSTACK_LABELS = {
    "L2": HAYSTACK_SCORE_LABEL,
    "IP": "milvus_haystack_ip_score ((s+1)/2)",
    "COSINE": "milvus_haystack_cosine_score ((s+1)/2)",
}


BM25_SCORE_LABEL = "milvus_bm25_score"


def bm25_score(raw: float) -> float:
    """
    Milvus's BM25 score from the `distance` its full-text search returns: Milvus Lite gives it
    negated (-1.84 for the best hit), servers positive; a BM25 score is never negative.
    """
    return abs(float(raw))


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unsupported metric {metric!r}; one of {', '.join(METRICS)}")
    return metric


def similarity_from_l2(distance: float) -> float:
    """Normalized similarity from a squared L2 distance between unit vectors."""
    return _clamp(1.0 - distance / 2.0)


def l2_from_haystack_score(score: float) -> float:
    """The squared L2 distance behind milvus-haystack's `1 - d/4` score."""
    return 4.0 * (1.0 - score)


def similarity_from_haystack_score(score: float) -> float:
    return similarity_from_l2(l2_from_haystack_score(score))


def sdk_score_label(metric: str = "L2") -> str:
    """What the SDK path's raw score is, for a collection of this metric."""
    return _SDK_LABELS[_check_metric(metric)]


def haystack_score_label(metric: str = "L2") -> str:
    """What milvus-haystack's `Document.score` is, for a collection of this metric."""
    return _HAYSTACK_LABELS[_check_metric(metric)]


def similarity_from_sdk(raw: float, metric: str = "L2") -> float:
    """Normalized similarity from what `MilvusClient.search` returned for this metric."""
    if _check_metric(metric) == "L2":
        return similarity_from_l2(raw)
    return _clamp(raw)


def similarity_from_haystack(score: float, metric: str = "L2") -> float:
    """Normalized similarity from milvus-haystack's score for this metric."""
    if _check_metric(metric) == "L2":
        return similarity_from_haystack_score(score)
    return _clamp(2.0 * score - 1.0)


def sdk_raw_score(query, vector, metric: str = "L2") -> float:
    """
    What `MilvusClient.search` returns for this stored vector, computed here (float32, as Milvus
    does): the score of a chunk another leg found, without a second search.
    """
    q = np.asarray(query, dtype=np.float32)
    v = np.asarray(vector, dtype=np.float32)
    if _check_metric(metric) == "L2":
        difference = q - v
        return float(np.dot(difference, difference))
    if metric == "IP":
        return float(np.dot(q, v))
    return float(np.dot(q, v) / (np.linalg.norm(q) * np.linalg.norm(v)))


def haystack_raw_score(query, vector, metric: str = "L2") -> float:
    """milvus-haystack's `Document.score` for this stored vector (its mapping of `sdk_raw_score`)."""
    raw = sdk_raw_score(query, vector, metric)
    return 1.0 - raw / 4.0 if metric == "L2" else (raw + 1.0) / 2.0
