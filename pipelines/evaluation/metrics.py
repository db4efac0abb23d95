"""
The metrics of an evaluation and their table. Metrics are document level: a ranking is the order
in which sources first appear. hit@k, MRR@10, nDCG@10 (binary relevance) and recall@10 are over
answerable queries; a query answered with found=false scores 0. The answer rate (answerable
queries) and the no-evidence rate (off-topic queries) say how often a system answers at all.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from components.common.stats import percentile

RECALL_DEPTH = 10


@dataclass
class EvalQuery:
    query: str
    relevant: set[str]
    kind: str
    id: str = ""
    style: str = ""

    @property
    def answerable(self) -> bool:
        return self.kind != "off_topic"


@dataclass
class Ranked:
    """One system's answer to one query: document ranking and whether it answered."""

    sources: list[str]
    answered: bool
    details: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None


def first_hit(sources: list[str], relevant: set[str], depth: int) -> int | None:
    """Rank (1-based) of the first relevant source within `depth`, or None."""
    for rank, source in enumerate(sources[:depth], start=1):
        if source in relevant:
            return rank
    return None


def ndcg(sources: list[str], relevant: set[str], depth: int) -> float:
    """Binary-relevance nDCG@depth: DCG over the ideal DCG of min(|relevant|, depth) hits at the top."""
    gains = sum(1.0 / math.log2(rank + 1) for rank, s in enumerate(sources[:depth], start=1) if s in relevant)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), depth) + 1))
    return gains / ideal if ideal else 0.0


def recall(sources: list[str], relevant: set[str], depth: int) -> float:
    return len(relevant & set(sources[:depth])) / len(relevant) if relevant else 0.0


def score(queries: list[EvalQuery], answers: list[Ranked]) -> dict[str, Any]:
    pairs = list(zip(queries, answers, strict=True))
    answerable = [(q, a) for q, a in pairs if q.answerable]
    off_topic = [(q, a) for q, a in pairs if not q.answerable]
    ranks = [first_hit(a.sources, q.relevant, 10) for q, a in answerable]
    metrics: dict[str, Any] = {"answerable": len(answerable), "off_topic": len(off_topic)}
    metrics.update(_ranking_metrics(answerable, ranks))
    metrics.update(_answer_rates(answerable, off_topic))
    metrics.update(_latency(answers))
    metrics.update(_fallback_rates(answers))
    metrics.update(_hit_at_1_by_style(answerable, ranks))
    return metrics


def _ranking_metrics(answerable: list[tuple[EvalQuery, Ranked]], ranks: list[int | None]) -> dict[str, Any]:
    return {
        "hit@1": _hit_rate(ranks, 1),
        "hit@5": _hit_rate(ranks, 5),
        "mrr@10": _mean([1.0 / r if r else 0.0 for r in ranks]),
        "ndcg@10": _mean([ndcg(a.sources, q.relevant, 10) for q, a in answerable]),
        f"recall@{RECALL_DEPTH}": _mean([recall(a.sources, q.relevant, RECALL_DEPTH) for q, a in answerable]),
    }


def _hit_rate(ranks: list[int | None], depth: int) -> float | None:
    return _mean([1.0 if r is not None and r <= depth else 0.0 for r in ranks])


def _answer_rates(answerable: list[tuple[EvalQuery, Ranked]], off_topic: list[tuple[EvalQuery, Ranked]]) -> dict:
    return {
        "answer_rate": _mean([1.0 if a.answered else 0.0 for _, a in answerable]),
        "no_evidence_rate": _mean([0.0 if a.answered else 1.0 for _, a in off_topic]),
    }


def _fallback_rates(answers: list[Ranked]) -> dict[str, Any]:
    """Only for a system whose answers record their fallback: the pipeline, not the baselines."""
    reasons = Counter(a.details.get("fallback") for a in answers if "fallback" in a.details)
    if not reasons:
        return {}
    return {
        "fallback_rate": _mean([1.0 if a.details.get("fallback") else 0.0 for a in answers]),
        "fallback_rate_by_reason": {
            reason: round(reasons[reason] / len(answers), 4) for reason in sorted(filter(None, reasons))
        },
    }


def _hit_at_1_by_style(answerable: list[tuple[EvalQuery, Ranked]], ranks: list[int | None]) -> dict[str, Any]:
    styles = sorted({q.style for q, _ in answerable if q.style})
    if len(styles) <= 1:
        return {}
    style_of = [q.style for q, _ in answerable]
    return {
        "hit@1_by_style": {
            style: _hit_rate([r for s, r in zip(style_of, ranks, strict=True) if s == style], 1) for style in styles
        }
    }


def _latency(answers: list[Ranked]) -> dict[str, float]:
    timed = [a.latency_ms for a in answers if a.latency_ms is not None]
    if not timed:
        return {}
    return {"latency_p50_ms": round(percentile(timed, 0.5), 2), "latency_p95_ms": round(percentile(timed, 0.95), 2)}


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def filter_report(queries: list[EvalQuery], answers: dict[str, list[Ranked]], l0_index_path: str) -> dict[str, Any]:
    """
    The L0 domain filter on the answerable queries it applied to: how often its category holds a
    relevant document (filter precision), and hit@1 of those queries with the filter (`pipeline`)
    and without it (`unfiltered`).
    """
    from components.stores.l0_index_file import load_l0_index

    category_of = {entry.source: entry.category for entry in load_l0_index(l0_index_path).entries}
    filtered = [
        (position, query, answer.details["filter"])
        for position, (query, answer) in enumerate(zip(queries, answers["pipeline"], strict=True))
        if query.answerable and answer.details.get("filter")
    ]
    report: dict[str, Any] = {"filtered_queries": len(filtered)}
    if not filtered:
        return report
    report["filter_precision"] = _filter_precision(filtered, category_of)
    report.update(_hit_at_1_with_and_without_filter(filtered, answers))
    return report


def _filter_precision(filtered: list[tuple[int, EvalQuery, str]], category_of: dict[str, str]) -> float | None:
    return _mean(
        [1.0 if category in {category_of.get(s) for s in query.relevant} else 0.0 for _, query, category in filtered]
    )


def _hit_at_1_with_and_without_filter(
    filtered: list[tuple[int, EvalQuery, str]], answers: dict[str, list[Ranked]]
) -> dict[str, float | None]:
    report = {}
    for system, key in (("pipeline", "hit@1_filtered"), ("unfiltered", "hit@1_unfiltered")):
        if system in answers:
            hits = [first_hit(answers[system][position].sources, query.relevant, 1) for position, query, _ in filtered]
            report[key] = _mean([1.0 if hit else 0.0 for hit in hits])
    return report


def format_metrics(report: dict[str, Any]) -> str:
    systems = report["systems"]
    first = next(iter(systems.values()))
    lines = [
        f"{report['queries']}: {first['answerable']} answerable, {first['off_topic']} off-topic queries "
        f"(evidence threshold {report['evidence_threshold']})",
        *_system_table(systems),
        *_style_lines(systems, first.get("hit@1_by_style") or {}),
        *_domain_filter_lines(report.get("domain_filter") or {}),
        *_gain_lines(systems),
    ]
    return "\n".join(lines)


def _system_table(systems: dict[str, dict[str, Any]]) -> list[str]:
    columns = ["hit@1", "hit@5", "mrr@10", "answer_rate", "no_evidence_rate"]
    header = f"{'system':<10}" + "".join(f"{c:>18}" for c in columns)
    return [header] + [
        f"{name:<10}" + "".join(f"{_fmt(metrics.get(c)):>18}" for c in columns) for name, metrics in systems.items()
    ]


def _style_lines(systems: dict[str, dict[str, Any]], styles: dict[str, Any]) -> list[str]:
    if not styles:
        return []
    lines = ["hit@1 by style of query (the `style` field):"]
    for style in styles:
        cells = "".join(f"{name} {_fmt(metrics['hit@1_by_style'][style])}  " for name, metrics in systems.items())
        lines.append(f"  {style:<12}{cells.rstrip()}")
    return lines


def _domain_filter_lines(domain_filter: dict[str, Any]) -> list[str]:
    if not domain_filter.get("filtered_queries"):
        return []
    line = (
        f"domain filter: {domain_filter['filtered_queries']} answerable queries filtered, "
        f"filter precision {_fmt(domain_filter.get('filter_precision'))}"
    )
    if "hit@1_unfiltered" in domain_filter:
        line += (
            f", hit@1 on them {_fmt(domain_filter.get('hit@1_filtered'))} filtered vs "
            f"{_fmt(domain_filter['hit@1_unfiltered'])} unfiltered"
        )
    return [line]


def _gain_lines(systems: dict[str, dict[str, Any]]) -> list[str]:
    if "dense" not in systems or "hybrid" not in systems:
        return []
    pipeline = systems["pipeline"]["hit@1"] or 0.0
    return [
        f"hit@1 gain of the pipeline: {100 * (pipeline - (systems['dense']['hit@1'] or 0)):+.1f} points over dense, "
        f"{100 * (pipeline - (systems['hybrid']['hit@1'] or 0)):+.1f} over hybrid"
    ]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
