"""Small statistics that components, pipelines and benchmarks share."""

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], share: float) -> float:
    """Linear-interpolation percentile (`share` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * share
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
