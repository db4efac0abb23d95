"""
The metrics a sweep or a search ranks by and a constraint may bound, apart from both: the
sweep, the guards and the recommendation all read them without importing one another.
"""

from pipelines.config.settings import ConfigError
from pipelines.tuning.runs import metric_name

RANKABLE = (
    "hit@1",
    "hit@5",
    "mrr@10",
    "ndcg@10",
    "recall@10",
    "answer_rate",
    "no_evidence_rate",
    "fallback_rate",
    "latency_p50_ms",
    "latency_p95_ms",
)
LOWER_IS_BETTER = ("fallback_rate", "latency_p50_ms", "latency_p95_ms")


def rankable(metric: str) -> str:
    """The report name of a metric to rank by (`hit_at_1` -> `hit@1`); a `ConfigError` for any other name."""
    by_name = {name: name for name in RANKABLE} | {metric_name(name): name for name in RANKABLE}
    if metric not in by_name:
        raise ConfigError(f"--rank-by {metric!r} is not one of {', '.join(RANKABLE)}")
    return by_name[metric]
