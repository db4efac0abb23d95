"""
How far the pipeline's `relevanceLevel` can be trusted on a labelled query set: per level, the
share of the answerable queries given that level and the hit@1 of those queries (a reliability
table, as for a calibrated classifier); the same for the results marked ambiguous; and how often
the right document is among the cited sources of an answered query. Needs the pipeline's answers
with `level`, `ambiguous` and `cited` in their details (pipelines/evaluation/run.py).
"""

from __future__ import annotations

from typing import Any

from pipelines.evaluation.metrics import EvalQuery, Ranked

LEVELS = ("high", "medium", "low", "none")


def reliability(queries: list[EvalQuery], answers: list[Ranked]) -> dict[str, Any]:
    """
    `{level: {count, share, hit@1}}` over the answerable queries, with `ambiguous` (results naming
    a competing document, whatever their level) and `cited_rate` (answered queries whose right
    document is among the cited sources). hit@1 is None for a level no query got.
    """
    answerable = [(q, a) for q, a in zip(queries, answers, strict=True) if q.answerable]
    table: dict[str, Any] = {"answerable": len(answerable)}
    for name, group in _groups(answerable).items():
        table[name] = _row(group, len(answerable))
    table["cited_rate"] = _cited_rate([(q, a) for q, a in answerable if a.answered])
    return table


def _groups(answerable: list[tuple[EvalQuery, Ranked]]) -> dict[str, list[tuple[EvalQuery, Ranked]]]:
    """One group per level, and the ambiguous results whatever their level."""
    groups = {level: [(q, a) for q, a in answerable if a.details.get("level", "none") == level] for level in LEVELS}
    groups["ambiguous"] = [(q, a) for q, a in answerable if a.details.get("ambiguous")]
    return groups


def _row(group: list[tuple[EvalQuery, Ranked]], answerable: int) -> dict[str, Any]:
    hits = sum(1 for q, a in group if _right_first(q, a))
    return {
        "count": len(group),
        "share": round(len(group) / answerable, 4) if answerable else None,
        "hit@1": round(hits / len(group), 4) if group else None,
    }


def _right_first(query: EvalQuery, answer: Ranked) -> bool:
    return bool(answer.answered and answer.sources[:1] and answer.sources[0] in query.relevant)


def _cited_rate(answered: list[tuple[EvalQuery, Ranked]]) -> float | None:
    cited = sum(1 for q, a in answered if q.relevant & set(a.details.get("cited") or ()))
    return round(cited / len(answered), 4) if answered else None


def format_reliability(table: dict[str, Any]) -> str:
    """The table as `knowledge eval` prints it under the metrics."""
    lines = [f"{'relevanceLevel':<16}{'queries':>9}{'share':>9}{'hit@1':>9}"]
    for name in (*LEVELS, "ambiguous"):
        row = table[name]
        share = "-" if row["share"] is None else f"{row['share']:.3f}"
        hit = "-" if row["hit@1"] is None else f"{row['hit@1']:.3f}"
        lines.append(f"{name:<16}{row['count']:>9}{share:>9}{hit:>9}")
    cited = table.get("cited_rate")
    lines.append(
        f"right document among the cited sources: {'-' if cited is None else f'{cited:.3f}'} of answered queries"
    )
    return "\n".join(lines)
